// Package linalgtest is the conformance suite every linalg.Backend runs:
// TestBackend compares Sgemm against a float64 triple-loop reference over a
// table of shapes, transposes, scalars and strides; TestPaths runs it on
// every built-in SIMD path this CPU has and skips, naming the missing
// feature, those it lacks.
package linalgtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distflow/distflow/internal/race"
	"github.com/distflow/distflow/kernel/linalg"
)

// Case is one Sgemm call of the table.
type Case struct {
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float32
	// PadA, PadB, PadC are added to the minimal row stride; the padding is
	// filled with sentinels that must be neither read (A, B) nor written (C).
	PadA, PadB, PadC int
}

func (c Case) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s/m=%d,n=%d,k=%d/alpha=%g,beta=%g/pad=%d,%d,%d",
		t(c.TransA), t(c.TransB), c.M, c.N, c.K, c.Alpha, c.Beta, c.PadA, c.PadB, c.PadC)
}

// Cases returns the conformance table; large shapes are left out when short
// is set (used under the race detector).
func Cases(short bool) []Case {
	type shape struct{ m, n, k int }
	small := []shape{
		{1, 1, 1}, {1, 7, 3}, {7, 1, 5}, {3, 5, 1}, {2, 3, 4}, {4, 4, 4}, {5, 7, 9},
		{6, 16, 8}, {7, 17, 11}, {8, 8, 8}, {9, 15, 13}, {12, 32, 3}, {13, 11, 17},
		{16, 16, 16}, {17, 17, 17}, {17, 1, 17}, {1, 17, 17}, {33, 33, 33}, {64, 64, 64},
		{65, 31, 129}, {100, 10, 784}, {100, 784, 10}, {10, 100, 784},
		// Around the tiles of every path (2x4, 6x16, 6x8 halves, up to
		// 14x32 and its 14x16 halves): one short of a tile, a tile, one
		// past, and halves of each width.
		{10, 32, 5}, {11, 31, 6}, {12, 33, 7}, {14, 32, 9}, {13, 48, 10}, {15, 47, 3},
		{28, 64, 4}, {29, 16, 11}, {27, 80, 2}, {42, 96, 19}, {43, 20, 1},
	}
	// Past every blocking (kc, mc, nc) of every path, with edges.
	large := []shape{{255, 255, 255}, {100, 784, 100}, {513, 513, 513}, {300, 5000, 7}, {7, 300, 5000},
		{451, 97, 777}, {29, 4200, 300}}
	scalars := []struct{ alpha, beta float32 }{{1, 0}, {1, 1}, {-1.5, 0.5}, {0, 2}, {0.5, 0}}
	var cs []Case
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		for _, s := range small {
			for _, sc := range scalars {
				cs = append(cs, Case{TransA: tr[0], TransB: tr[1], M: s.m, N: s.n, K: s.k, Alpha: sc.alpha, Beta: sc.beta})
			}
			cs = append(cs, Case{TransA: tr[0], TransB: tr[1], M: s.m, N: s.n, K: s.k, Alpha: 1.25, Beta: 0.5, PadA: 3, PadB: 5, PadC: 2})
			cs = append(cs, Case{TransA: tr[0], TransB: tr[1], M: s.m, N: s.n, K: s.k, Alpha: 1, Beta: 0, PadA: 17, PadB: 1, PadC: 16})
		}
		// Just above the parallel threshold (2^23 multiply-adds), so the
		// goroutine split runs under -race too.
		cs = append(cs, Case{TransA: tr[0], TransB: tr[1], M: 256, N: 256, K: 128, Alpha: 1, Beta: 0.5, PadA: 1, PadB: 2, PadC: 3})
		// Few rows, many columns: computed as C^T (swapOperands), split,
		// over more than one kc block.
		cs = append(cs, Case{TransA: tr[0], TransB: tr[1], M: 50, N: 1024, K: 300, Alpha: 1, Beta: 0.5, PadA: 1, PadB: 2, PadC: 3})
		// The same with k past the longer kc blocks of such a product,
		// and with more rows than two slivers.
		cs = append(cs, Case{TransA: tr[0], TransB: tr[1], M: 21, N: 700, K: 1500, Alpha: 1, Beta: 0.5, PadA: 2, PadB: 1, PadC: 5})
		cs = append(cs, Case{TransA: tr[0], TransB: tr[1], M: 97, N: 600, K: 700, Alpha: 1, Beta: 0, PadA: 0, PadB: 3, PadC: 1})
		if short {
			continue
		}
		for _, s := range large {
			cs = append(cs, Case{TransA: tr[0], TransB: tr[1], M: s.m, N: s.n, K: s.k, Alpha: 1, Beta: 0})
			cs = append(cs, Case{TransA: tr[0], TransB: tr[1], M: s.m, N: s.n, K: s.k, Alpha: -0.75, Beta: 0.5, PadA: 7, PadB: 9, PadC: 3})
		}
	}
	// Degenerate sizes must be accepted and touch nothing they should not.
	cs = append(cs, Case{M: 0, N: 5, K: 3, Alpha: 1}, Case{M: 5, N: 0, K: 3, Alpha: 1}, Case{M: 4, N: 5, K: 0, Alpha: 1, Beta: 0.5})
	return cs
}

const (
	sentinelAB = float32(-1e30) // would swamp any result it leaked into
	sentinelC  = float32(-7777)
)

// matrix returns a rows x cols matrix with stride cols+pad, exactly as long
// as needed, padding filled with sentinel.
func matrix(rng *rand.Rand, rows, cols, pad int, sentinel float32, fill func() float32) ([]float32, int) {
	ld := max(1, cols+pad)
	if rows == 0 || cols == 0 {
		return nil, ld
	}
	x := make([]float32, (rows-1)*ld+cols)
	for i := range x {
		x[i] = sentinel
	}
	for i := range rows {
		for j := range cols {
			x[i*ld+j] = fill()
		}
	}
	return x, ld
}

// Run performs one case against b and reports mismatches on t.
func Run(t testing.TB, b linalg.Backend, c Case) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(c.M*1e6+c.N*1e3+c.K), 7))
	uni := func() float32 { return float32(rng.Float64()*2 - 1) }
	ar, ac := c.M, c.K
	if c.TransA {
		ar, ac = ac, ar
	}
	br, bc := c.K, c.N
	if c.TransB {
		br, bc = bc, br
	}
	a, lda := matrix(rng, ar, ac, c.PadA, sentinelAB, uni)
	bm, ldb := matrix(rng, br, bc, c.PadB, sentinelAB, uni)
	cfill := uni
	if c.Beta == 0 {
		cfill = func() float32 { return float32(math.NaN()) }
	}
	cm, ldc := matrix(rng, c.M, c.N, c.PadC, sentinelC, cfill)
	a0 := append([]float32(nil), a...)
	b0 := append([]float32(nil), bm...)
	c0 := append([]float32(nil), cm...)

	b.Sgemm(c.TransA, c.TransB, c.M, c.N, c.K, c.Alpha, a, lda, bm, ldb, c.Beta, cm, ldc)

	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(a0[i]) {
			t.Fatalf("%v: A modified at %d", c, i)
		}
	}
	for i := range bm {
		if math.Float32bits(bm[i]) != math.Float32bits(b0[i]) {
			t.Fatalf("%v: B modified at %d", c, i)
		}
	}
	opA := func(i, l int) float64 {
		if c.TransA {
			return float64(a[l*lda+i])
		}
		return float64(a[i*lda+l])
	}
	opB := func(l, j int) float64 {
		if c.TransB {
			return float64(bm[j*ldb+l])
		}
		return float64(bm[l*ldb+j])
	}
	bad := 0
	for i := range c.M {
		for j := range c.N {
			var sum, mag float64
			if c.Alpha != 0 {
				for l := range c.K {
					p := opA(i, l) * opB(l, j)
					sum += p
					mag += math.Abs(p)
				}
			}
			want := float64(c.Alpha) * sum
			mag *= math.Abs(float64(c.Alpha))
			if c.Beta != 0 {
				want += float64(c.Beta) * float64(c0[i*ldc+j])
				mag += math.Abs(float64(c.Beta) * float64(c0[i*ldc+j]))
			}
			got := float64(cm[i*ldc+j])
			// float32 accumulation error grows at most linearly in k.
			tol := 2 * float64(c.K+2) * 0x1p-24 * mag
			if math.IsNaN(got) || math.Abs(got-want) > tol+1e-30 {
				if bad < 5 {
					t.Errorf("%v: C[%d,%d] = %g, want %g (tol %g)", c, i, j, got, want, tol)
				}
				bad++
			}
		}
		for j := c.N; c.N > 0 && j < ldc && i < c.M-1; j++ {
			if cm[i*ldc+j] != sentinelC {
				t.Fatalf("%v: C padding [%d,%d] overwritten with %g", c, i, j, cm[i*ldc+j])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%v: %d of %d elements wrong", c, bad, c.M*c.N)
	}
}

// TestBackend runs the conformance table against b.
func TestBackend(t *testing.T, b linalg.Backend) {
	for _, c := range Cases(testing.Short() || race.Enabled) {
		t.Run(c.String(), func(t *testing.T) { Run(t, b, c) })
	}
}

// TestPaths runs the conformance table against the backend of every
// built-in SIMD path (linalg.Paths); a path this CPU or build lacks is
// skipped with a message naming what it lacks.
func TestPaths(t *testing.T) {
	for _, p := range linalg.Paths() {
		t.Run(p.Name, func(t *testing.T) {
			if p.Missing != "" {
				t.Skipf("%s path skipped: needs %s, which this CPU or build lacks", p.Name, p.Missing)
			}
			b, ok := linalg.Get(p.Name)
			if !ok {
				t.Fatalf("path %s is usable but no backend is registered under its name", p.Name)
			}
			TestBackend(t, b)
		})
	}
}
