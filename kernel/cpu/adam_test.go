package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAdamF32MatchesScalar checks that the vectorised float32 Adam update
// gives bit for bit the scalar loop's results, tails included.
func TestAdamF32MatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 64, 1001, 3*stateChunk + 5, 1 << 18} {
		vals := make([][]float32, 4)
		for i := range vals {
			vals[i] = make([]float32, n)
			for j := range vals[i] {
				vals[i][j] = float32(rng.NormFloat64())
			}
		}
		vals[2] = vals[2][:0]
		for range n {
			vals[2] = append(vals[2], float32(rng.Float64())) // second moments are >= 0
		}
		want := make([][]float32, 4)
		for i := range want {
			want[i] = append([]float32(nil), vals[i]...)
		}
		const lrT, beta1, beta2, eps = 0.001, 0.9, 0.999, 1e-8
		stateAdamRange(want[0], want[1], want[2], want[3], lrT, beta1, beta2, eps)
		// In place, and moving: the variable's old value is read from
		// another buffer and the new one (garbage before) written.
		for _, moving := range []bool{false, true} {
			got := make([][]float32, 4)
			for i := range got {
				got[i] = append([]float32(nil), vals[i]...)
			}
			var src []float32
			if moving {
				src = got[0]
				got[0] = make([]float32, n)
				for j := range got[0] {
					got[0][j] = float32(math.NaN())
				}
			}
			stateAdamF32(got[0], src, got[1], got[2], got[3], lrT, beta1, beta2, eps)
			for i, name := range []string{"var", "m", "v"} {
				for j := range n {
					if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
						t.Fatalf("n=%d moving=%v: %s[%d] = %v, scalar loop gives %v", n, moving, name, j, got[i][j], want[i][j])
					}
				}
			}
			if moving && n > 0 && math.Float32bits(src[0]) != math.Float32bits(vals[0][0]) {
				t.Fatalf("n=%d: the old value changed", n)
			}
		}
	}
}

// BenchmarkAdamF32 times the float32 Adam update of the reference CNN's
// fc1 weight (3136x1024), vectorised and as the scalar loop, on one core
// and on all of them.
func BenchmarkAdamF32(b *testing.B) {
	const n = 3136 * 1024
	v, m, vv, g := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range g {
		g[i] = float32(i%97)/97 - 0.5
	}
	for _, c := range []struct {
		name string
		run  func()
	}{
		{"vectorised", func() { stateAdamF32(v, nil, m, vv, g, 1e-4, 0.9, 0.999, 1e-8) }},
		{"scalar", func() { stateAdam(v, m, vv, g, 1e-4, 0.9, 0.999, 1e-8) }},
	} {
		b.Run(c.name+"/fc1", func(b *testing.B) {
			b.SetBytes(7 * 4 * n) // four streams read, three written
			for b.Loop() {
				c.run()
			}
		})
	}
}
