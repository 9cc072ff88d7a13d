package topk

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/distflow/distflow/internal/race"
)

// reference returns the indices of v in the order Select ranks them:
// decreasing magnitude, then increasing index, zeros left out.
func reference(v []float32) []int32 {
	var idx []int32
	for i, x := range v {
		if x != 0 {
			idx = append(idx, int32(i))
		}
	}
	slices.SortFunc(idx, func(a, b int32) int {
		if c := cmp.Compare(abs32(v[b]), abs32(v[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return idx
}

// vector returns n random entries drawn by kind: "normal", "ties" (few
// distinct magnitudes, both signs), "zeros" (mostly zero), "equal" (one
// magnitude) or "heavy" (a few huge entries among small ones).
func vector(r *rand.Rand, kind string, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch kind {
		case "normal":
			v[i] = float32(r.NormFloat64())
		case "ties":
			v[i] = float32(r.IntN(5)) * float32(1-2*r.IntN(2))
		case "zeros":
			if r.IntN(10) == 0 {
				v[i] = float32(r.NormFloat64())
			}
		case "equal":
			v[i] = float32(1 - 2*r.IntN(2))
		case "heavy":
			v[i] = float32(r.NormFloat64() * 1e-3)
			if r.IntN(1000) == 0 {
				v[i] = float32(r.NormFloat64() * 1e3)
			}
		}
	}
	return v
}

// check verifies Select's contract against the reference order: sorted
// indices, the first len(got) of the ranking, at most k, and exactly
// min(k, non-zeros) when the selection is exact.
func check(t *testing.T, what string, v []float32, k int, got []int32) {
	t.Helper()
	ref := reference(v)
	kk := min(max(k, 1), len(v))
	if len(got) > kk {
		t.Fatalf("%s: %d indices, want at most k=%d", what, len(got), kk)
	}
	if !slices.IsSorted(got) {
		t.Fatalf("%s: indices not in ascending order", what)
	}
	want := slices.Clone(ref[:len(got)])
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: selected %v..., want the first %d of the ranking %v...", what, got[:min(len(got), 8)], len(got), want[:min(len(want), 8)])
	}
	if len(v) <= 2*sampleSize && len(got) != min(kk, len(ref)) {
		t.Fatalf("%s: %d indices, want min(k=%d, %d non-zeros)", what, len(got), kk, len(ref))
	}
}

func TestSelectMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s Selector
	var dst []int32
	for _, n := range []int{1, 2, 3, 7, 100, 1000, 2 * sampleSize, 2*sampleSize + 1, 200_000} {
		for _, kind := range []string{"normal", "ties", "zeros", "equal", "heavy"} {
			v := vector(r, kind, n)
			for _, k := range []int{-1, 0, 1, 2, n / 100, n / 10, n / 2, n - 1, n, n + 5} {
				dst = s.Select(dst, v, k)
				check(t, fmt.Sprintf("n %d %s k %d", n, kind, k), v, k, dst)
			}
		}
	}
}

// TestSelectLargeSendsAboutK checks that the sampled threshold of a large
// vector seldom overshoots: nearly k entries come back.
func TestSelectLargeSendsAboutK(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var s Selector
	for _, kind := range []string{"normal", "heavy"} {
		for _, n := range []int{2*sampleSize + 1, 1 << 20} {
			v := vector(r, kind, n)
			for _, k := range []int{1, n / 1000, n / 100, n / 10} {
				got := s.Select(nil, v, k)
				check(t, fmt.Sprintf("n %d %s k %d", n, kind, k), v, k, got)
				if k > 100 && len(got) < k*9/10 {
					t.Errorf("n %d %s k %d: %d selected, want at least 90%% of k", n, kind, k, len(got))
				}
			}
		}
	}
}

func TestSelectEdges(t *testing.T) {
	var s Selector
	if got := s.Select([]int32{7, 8}, nil, 3); len(got) != 0 {
		t.Errorf("empty v: %v, want nothing", got)
	}
	if got := s.Select(nil, []float32{0, 0, 0}, 2); len(got) != 0 {
		t.Errorf("all zeros: %v, want nothing", got)
	}
	if got := s.Select(nil, []float32{0, -3, 0, 2}, 3); !slices.Equal(got, []int32{1, 3}) {
		t.Errorf("two non-zeros, k 3: %v, want [1 3]", got)
	}
	if got := s.Select(nil, []float32{1, -2, 2, 1, -2}, 2); !slices.Equal(got, []int32{1, 2}) {
		t.Errorf("ties: %v, want the lowest indices of the largest magnitude [1 2]", got)
	}
	if got := s.Select(nil, []float32{-0.0, 1, float32(math.Inf(-1))}, 1); !slices.Equal(got, []int32{2}) {
		t.Errorf("-0 and -Inf, k 1: %v, want [2]", got)
	}
	nan := float32(math.NaN())
	for _, n := range []int{5, 3 * sampleSize} {
		v := vector(rand.New(rand.NewPCG(5, 6)), "normal", n)
		v[0], v[n/2], v[n-1] = nan, nan, nan
		for _, k := range []int{1, 2, n / 3} {
			for _, i := range s.Select(nil, v, k) {
				if i < 0 || int(i) >= n {
					t.Fatalf("NaN in v: index %d out of range", i)
				}
			}
		}
	}
}

func TestKthLargest(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 2, 3, 10, 1000} {
		for _, kind := range []string{"normal", "ties", "equal"} {
			v := vector(r, kind, n)
			sorted := slices.Clone(v)
			slices.SortFunc(sorted, func(a, b float32) int { return cmp.Compare(b, a) })
			for k := 1; k <= n; k += max(1, n/17) {
				if got := kthLargest(slices.Clone(v), k); got != sorted[k-1] {
					t.Errorf("n %d %s: kthLargest(k=%d) = %v, want %v", n, kind, k, got, sorted[k-1])
				}
			}
		}
	}
}

func TestSelectAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts do not hold under the race detector")
	}
	for _, n := range []int{10_000, 1 << 20} {
		v := vector(rand.New(rand.NewPCG(11, 12)), "normal", n)
		var s Selector
		dst := s.Select(nil, v, n/100)
		if a := testing.AllocsPerRun(5, func() { dst = s.Select(dst, v, n/100) }); a != 0 {
			t.Errorf("n %d: %v allocations per Select once warm, want 0", n, a)
		}
	}
}

// BenchmarkSelect cycles through several vectors: selecting from one
// vector again and again lets the branch predictor learn the quickselect's
// comparisons, and runs several times faster than on fresh data.
func BenchmarkSelect(b *testing.B) {
	for _, n := range []int{10_000, 1 << 20, 1 << 24} {
		r := rand.New(rand.NewPCG(13, 14))
		vs := make([][]float32, max(1, (8<<20)/n)) // at most 32 MiB, at least one vector
		for i := range vs {
			vs[i] = vector(r, "normal", n)
		}
		for _, ratio := range []float64{0.01, 0.001} {
			k := max(int(ratio*float64(n)), 1)
			b.Run(fmt.Sprintf("n=%d/k=%d", n, k), func(b *testing.B) {
				var s Selector
				var dst []int32
				for _, v := range vs {
					dst = s.Select(dst, v, k)
				}
				b.SetBytes(int64(4 * n))
				i := 0
				for b.Loop() {
					dst = s.Select(dst, vs[i%len(vs)], k)
					i++
				}
			})
		}
	}
}

// TestCount: ratio*n entries, at least one, with the rounding of a ratio
// that went through a float32 undone.
func TestCount(t *testing.T) {
	for _, tc := range []struct {
		ratio float32
		n     int
		want  int
	}{
		{1, 10, 10},
		{1e-9, 10, 1},
		{0.5, 3, 1},
		{0.01, 1000, 10},   // float32(0.01) is a little under 0.01
		{0.1, 1000, 100},   // float32(0.1) is a little over
		{0.3, 10, 3},       // float32(0.3) is a little over
		{0.7, 10, 7},       // float32(0.7) is a little under
		{0.999, 1000, 999}, // not rounded up to 1000
		{0.0015, 1000, 1},  // 1.5: truncated, as the estimator does
		{1, 0, 0},
		{float32(1) / 3, 1 << 30, 357913952}, // exactly float32(1/3) * 2^30: no rounding to undo
	} {
		if got := Count(float64(tc.ratio), tc.n); got != tc.want {
			t.Errorf("Count(%v, %d) = %d, want %d", tc.ratio, tc.n, got, tc.want)
		}
	}
}
