package linalg_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distflow/distflow/internal/race"
	"github.com/distflow/distflow/kernel/linalg"
	"github.com/distflow/distflow/kernel/linalg/linalgtest"
)

// TestPaths runs the conformance suite on every SIMD path this CPU has.
func TestPaths(t *testing.T) { linalgtest.TestPaths(t) }

// TestBackends runs it on the other registered backends (openblas).
func TestBackends(t *testing.T) {
	paths := map[string]bool{}
	for _, p := range linalg.Paths() {
		paths[p.Name] = true
	}
	for _, name := range linalg.List() {
		b, ok := linalg.Get(name)
		if !ok || b.Name() != name {
			t.Fatalf("Get(%q) = %v, %v", name, b, ok)
		}
		if paths[name] {
			continue
		}
		t.Run(name, func(t *testing.T) { linalgtest.TestBackend(t, b) })
	}
}

func TestDefault(t *testing.T) {
	if linalg.Default() == nil {
		t.Fatal("no default backend")
	}
	t.Logf("default backend: %s, path: %s, registered: %v, paths: %+v",
		linalg.Default().Name(), linalg.Path(), linalg.List(), linalg.Paths())
}

func TestRegisterDuplicatePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("duplicate Register did not panic")
		}
	}()
	b, _ := linalg.Get("generic")
	linalg.Register(b)
}

func TestDgemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		ta, tb      bool
		m, n, k     int
		alpha, beta float64
	}{
		{false, false, 1, 1, 1, 1, 0}, {true, false, 7, 9, 13, 2, 0.5}, {false, true, 33, 17, 5, -1, 1},
		{true, true, 65, 70, 129, 0.5, 0}, {false, false, 130, 140, 300, 1, 0}, {true, true, 3, 4, 0, 1, 2},
	} {
		ar, ac := tc.m, tc.k
		if tc.ta {
			ar, ac = ac, ar
		}
		br, bc := tc.k, tc.n
		if tc.tb {
			br, bc = bc, br
		}
		lda, ldb, ldc := ac+1, bc+2, tc.n+3
		a := make([]float64, max(ar*lda, 1))
		b := make([]float64, max(br*ldb, 1))
		c := make([]float64, tc.m*ldc)
		for i := range a {
			a[i] = rng.Float64() - 0.5
		}
		for i := range b {
			b[i] = rng.Float64() - 0.5
		}
		for i := range c {
			c[i] = rng.Float64()
			if tc.beta == 0 {
				c[i] = math.NaN()
			}
		}
		want := append([]float64(nil), c...)
		for i := range tc.m {
			for j := range tc.n {
				var s float64
				for l := range tc.k {
					var x, y float64
					if tc.ta {
						x = a[l*lda+i]
					} else {
						x = a[i*lda+l]
					}
					if tc.tb {
						y = b[j*ldb+l]
					} else {
						y = b[l*ldb+j]
					}
					s += x * y
				}
				w := tc.alpha * s
				if tc.beta != 0 {
					w += tc.beta * want[i*ldc+j]
				}
				want[i*ldc+j] = w
			}
		}
		linalg.Dgemm(tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
		for i := range tc.m {
			for j := range tc.n {
				if d := math.Abs(c[i*ldc+j] - want[i*ldc+j]); !(d <= 1e-12*float64(tc.k+1)) {
					t.Fatalf("%+v: C[%d,%d] = %g, want %g", tc, i, j, c[i*ldc+j], want[i*ldc+j])
				}
			}
		}
	}
}

// TestSgemmSmallNoAlloc checks that a small product in steady state runs
// inline without allocating (packing buffers come from a pool).
func TestSgemmSmallNoAlloc(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	a, b, c := make([]float32, 32*48), make([]float32, 48*40), make([]float32, 32*40)
	for _, name := range linalg.List() {
		be, _ := linalg.Get(name)
		run := func() { be.Sgemm(false, true, 32, 40, 48, 1, a, 48, b, 48, 0.5, c, 40) }
		run()
		if n := testing.AllocsPerRun(50, run); n > 0 {
			t.Errorf("%s: %v allocs per small Sgemm, want 0", name, n)
		}
	}
}
