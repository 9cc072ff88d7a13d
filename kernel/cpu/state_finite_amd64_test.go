//go:build !purego

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestStateMaxBits: the vectorised scan equals the scalar one on every
// length around its blocks, with NaNs, infinities and negatives anywhere.
func TestStateMaxBits(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), -1, float32(math.Copysign(0, -1)), math.MaxFloat32}
	for n := range 70 {
		for trial := range 20 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64()) * float32(math.Pow(10, float64(r.IntN(20)-10)))
			}
			if n > 0 && trial > 0 {
				x[r.IntN(n)] = specials[trial%len(specials)]
			}
			for _, mask := range []uint32{0x7fffffff, 0xffffffff} {
				var want uint32
				for _, f := range x {
					want = max(want, math.Float32bits(f)&mask)
				}
				if got := stateMaxBits(x, mask); got != want {
					t.Fatalf("n=%d mask %#x: %#x, want %#x (%v)", n, mask, got, want, x)
				}
			}
		}
	}
}

// TestAdamBoundedFiniteIsSound: whenever the bound says that an Adam
// update stays finite, computing it (as the kernel does) leaves every
// value finite, over inputs from tiny to near overflow, epsilons down to
// the smallest denormal and learning rates up to 1e30; and the bound
// answers yes for the inputs of a sane model, so that the guard's cheap
// path is the one taken.
func TestAdamBoundedFiniteIsSound(t *testing.T) {
	if !nnHasAVX2 {
		t.Skip("no AVX2: the bound is not used")
	}
	r := rand.New(rand.NewPCG(3, 4))
	scale := func() float32 { return float32(math.Pow(10, float64(r.IntN(78)-40))) }
	accepted, overflowed := 0, 0
	for trial := range 4000 {
		n := 1 + r.IntN(40)
		v, m, vv, g := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		sv, sm, svv, sg := scale(), scale(), scale(), scale()
		for i := range n {
			v[i] = float32(r.NormFloat64()) * sv
			m[i] = float32(r.NormFloat64()) * sm
			vv[i] = float32(math.Abs(r.NormFloat64())) * svv
			g[i] = float32(r.NormFloat64()) * sg
		}
		lrT := scale()
		eps := []float32{1e-8, 1e-45, 1e-30, 1, scale()}[trial%5]
		beta1, beta2 := float32(r.Float64()), float32(r.Float64())
		if trial%3 == 0 {
			beta1, beta2 = 0.9, 0.999
		}
		ok := adamBoundedFinite(v, m, vv, g, lrT, 1-beta1, 1-beta2, eps)
		nv, nm, nvv := append([]float32(nil), v...), append([]float32(nil), m...), append([]float32(nil), vv...)
		stateAdamRangeF32(nv, nm, nvv, g, lrT, beta1, beta2, eps)
		finite := true
		for i := range n {
			for _, x := range []float32{nv[i], nm[i], nvv[i]} {
				if x-x != 0 {
					finite = false
				}
			}
		}
		if ok && !finite {
			t.Fatalf("the bound said finite, the update is not: v %v m %v vv %v g %v lrT %v beta1 %v beta2 %v eps %v -> %v %v %v",
				v, m, vv, g, lrT, beta1, beta2, eps, nv, nm, nvv)
		}
		if ok {
			accepted++
		}
		if !finite {
			overflowed++
		}
	}
	if overflowed == 0 {
		t.Errorf("no draw overflowed: the test shows nothing")
	}

	// A sane model's step: the cheap path answers.
	n := 784 * 128
	v, m, vv, g := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		v[i], m[i], vv[i], g[i] = float32(r.NormFloat64()), float32(r.NormFloat64())*1e-2, float32(r.Float64())*1e-4, float32(r.NormFloat64())*1e-2
	}
	if !adamBoundedFinite(v, m, vv, g, 1e-3, 0.1, 0.001, 1e-8) {
		t.Errorf("the bound cannot tell that a sane step is finite")
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		for _, x := range [][]float32{v, m, vv, g} {
			old := x[n/2]
			x[n/2] = bad
			if adamBoundedFinite(v, m, vv, g, 1e-3, 0.1, 0.001, 1e-8) {
				t.Errorf("the bound passes a step with %v in an input", bad)
			}
			x[n/2] = old
		}
	}
	t.Logf("%d of 4000 draws passed the bound, %d overflowed", accepted, overflowed)
}

// BenchmarkAdamFiniteCheck times, on one core, the two ways the guard
// tells that a float32 Adam step of the reference MLP's largest variable
// (784x128) stays finite: computing the step without storing it
// (adamFiniteAVX), and bounding it from the inputs' largest magnitudes
// (adamBoundedFinite), which the guard tries first.
func BenchmarkAdamFiniteCheck(b *testing.B) {
	if !nnHasAVX2 {
		b.Skip("no AVX2")
	}
	const n = 784 * 128
	r := rand.New(rand.NewPCG(5, 6))
	v, m, vv, g := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		v[i], m[i], vv[i], g[i] = float32(r.NormFloat64()), float32(r.NormFloat64())*1e-2, float32(r.Float64())*1e-4, float32(r.NormFloat64())*1e-2
	}
	b.Run("computed", func(b *testing.B) {
		b.SetBytes(4 * n * 4)
		for b.Loop() {
			if !adamFiniteAVX(&v[0], &m[0], &vv[0], &g[0], n, 1e-3, 0.1, 0.001, 1e-8) {
				b.Fatal("not finite")
			}
		}
	})
	b.Run("bounded", func(b *testing.B) {
		b.SetBytes(4 * n * 4)
		for b.Loop() {
			if !adamBoundedFinite(v, m, vv, g, 1e-3, 0.1, 0.001, 1e-8) {
				b.Fatal("not finite")
			}
		}
	})
}
