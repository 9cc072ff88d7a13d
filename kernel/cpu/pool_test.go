package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMaxPool2x2MatchesGeneric checks the vectorised 2x2 max pooling and
// its gradient against the generic loops, bit for bit, on inputs full of
// ties, signed zeros and NaNs, where the choice of maximum shows.
func TestMaxPool2x2MatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		name       string
		n, h, w, c int
	}{
		{"one window", 1, 2, 2, 8},
		{"CNN layer 2 shape", 3, 14, 14, 64},
		{"odd output width", 2, 6, 10, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := nnPool{N: tc.n, H: tc.h, W: tc.w, C: tc.c, KH: 2, KW: 2, SH: 2, SW: 2, OH: tc.h / 2, OW: tc.w / 2}
			if !p.tiles2x2() {
				t.Skip("no vectorised path on this CPU")
			}
			specials := []float32{0, float32(math.Copysign(0, -1)), 1, 1, -1, float32(math.NaN()), 2}
			x := make([]float32, tc.n*tc.h*tc.w*tc.c)
			for i := range x {
				if rng.IntN(3) == 0 {
					x[i] = specials[rng.IntN(len(specials))]
				} else {
					x[i] = float32(rng.IntN(5))
				}
			}
			dy := make([]float32, tc.n*p.OH*p.OW*tc.c)
			for i := range dy {
				dy[i] = float32(i + 1)
			}
			y, want := make([]float32, len(dy)), make([]float32, len(dy))
			nnMaxPool2x2(p, x, y)
			nnMaxPoolT(p, x, want)
			bitsEqual(t, "MaxPool", y, want)
			dx, wantDx := make([]float32, len(x)), make([]float32, len(x))
			for i := range dx {
				dx[i] = float32(math.NaN()) // every element must be written
			}
			nnMaxPoolGrad2x2(p, x, dy, dx)
			nnMaxPoolGradT(p, x, dy, wantDx)
			bitsEqual(t, "MaxPoolGrad", dx, wantDx)
		})
	}
}

func bitsEqual(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, generic loop gives %v", what, i, got[i], want[i])
		}
	}
}

// BenchmarkMaxPool2x2 times the vectorised 2x2 max pooling and its gradient
// against the generic loops at the reference CNN's two pooling layers.
func BenchmarkMaxPool2x2(b *testing.B) {
	for _, s := range []struct{ n, h, w, c int }{{50, 28, 28, 32}, {50, 14, 14, 64}} {
		p := nnPool{N: s.n, H: s.h, W: s.w, C: s.c, KH: 2, KW: 2, SH: 2, SW: 2, OH: s.h / 2, OW: s.w / 2}
		if !p.tiles2x2() {
			b.Skip("no vectorised path on this CPU")
		}
		x := make([]float32, s.n*s.h*s.w*s.c)
		for i := range x {
			x[i] = float32(i%101) - 50
		}
		y, dx := make([]float32, s.n*p.OH*p.OW*s.c), make([]float32, len(x))
		name := fmt.Sprintf("%dx%dx%dx%d", s.n, s.h, s.w, s.c)
		for _, c := range []struct {
			name string
			run  func()
		}{
			{"MaxPool/vectorised", func() { nnMaxPool2x2(p, x, y) }},
			{"MaxPool/generic", func() { nnMaxPoolT(p, x, y) }},
			{"MaxPoolGrad/vectorised", func() { nnMaxPoolGrad2x2(p, x, y, dx) }},
			{"MaxPoolGrad/generic", func() { clear(dx); nnMaxPoolGradT(p, x, y, dx) }},
		} {
			b.Run(c.name+"/"+name, func(b *testing.B) {
				for b.Loop() {
					c.run()
				}
			})
		}
	}
}
