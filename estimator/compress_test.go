package estimator

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
)

func TestParseCompression(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{"none", "none", ""},
		{"fp16", "fp16", ""},
		{"bf16", "bf16", ""},
		{"topk", "topk:0.01", ""},
		{"topk:0.1", "topk:0.1", ""},
		{"topk:1", "topk:1", ""},
		{"topk:0", "", "want 0 < ratio <= 1"},
		{"topk:1.5", "", "want 0 < ratio <= 1"},
		{"topk:NaN", "", "want 0 < ratio <= 1"},
		{"topk:x", "", "not a number"},
		{"fp16:0.1", "", "only topk takes a ratio"},
		{"topk:0.1,warmup=100", "topk:0.1,warmup=100", ""},
		{"topk,warmup=5", "topk:0.01,warmup=5", ""},
		{"topk:0.1,warmup=0", "topk:0.1", ""},
		{"topk:0.1,warmup=-1", "", "want warmup=STEPS"},
		{"topk:0.1,warm=3", "", "want warmup=STEPS"},
		{"fp16,warmup=5", "", "only topk takes a ratio or a warm-up"},
		{"fp8", "", "want none, fp16, bf16, topk"},
	} {
		c, err := ParseCompression(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseCompression(%q) = %v, %v; want an error containing %q", tc.in, c, err, tc.err)
			}
			continue
		}
		if err != nil || c.String() != tc.want {
			t.Errorf("ParseCompression(%q) = %v, %v; want %s", tc.in, c, err, tc.want)
		}
	}
	if err := (Compression{Kind: TopK}).validateFor(InGraph{}); err == nil || !strings.Contains(err.Error(), "does not compress") {
		t.Errorf("topk with InGraph{}: %v; want it refused", err)
	}
	if err := (Compression{Kind: FP16}).validateFor(InGraph{}); err == nil || !strings.Contains(err.Error(), "does not compress") {
		t.Errorf("fp16 with InGraph{}: %v; want it refused", err)
	}
	for _, s := range []Strategy{nil, Async{}, Sync{}, Staleness{Bound: 2}} {
		if err := (Compression{Kind: BF16}).validateFor(s); err != nil {
			t.Errorf("bf16 with %v: %v", s, err)
		}
		if err := (Compression{Kind: TopK, Ratio: 0.1}).validateFor(s); err != nil {
			t.Errorf("topk with %v: %v", s, err)
		}
	}
	if err := (Compression{Kind: TopK}).validateFor(AllReduce{}); err != nil {
		t.Errorf("topk with AllReduce{}: %v", err)
	}
}

// TestPullCompressionIsChecked: the pull takes none, fp16 or bf16, with the
// strategies that keep the variables on the ps tasks only.
func TestPullCompressionIsChecked(t *testing.T) {
	for in, want := range map[string]CompressionKind{"": NoCompression, "none": NoCompression, "fp16": FP16, "bf16": BF16} {
		if k, err := ParsePullCompression(in); err != nil || k != want {
			t.Errorf("ParsePullCompression(%q) = %v, %v; want %v", in, k, err, want)
		}
	}
	for _, in := range []string{"topk", "fp8", "FP16"} {
		if k, err := ParsePullCompression(in); err == nil || !strings.Contains(err.Error(), "want none, fp16 or bf16") {
			t.Errorf("ParsePullCompression(%q) = %v, %v; want it refused", in, k, err)
		}
	}
	for _, s := range []Strategy{nil, Async{}, Sync{}, Staleness{Bound: 2}, InGraph{}} {
		if err := validatePull(FP16, s); err != nil {
			t.Errorf("fp16 pulls with %v: %v", s, err)
		}
	}
	if err := validatePull(BF16, AllReduce{}); err == nil || !strings.Contains(err.Error(), "pulls nothing") {
		t.Errorf("bf16 pulls with AllReduce{}: %v; want it refused", err)
	}
	if err := validatePull(TopK, Async{}); err == nil || !strings.Contains(err.Error(), "want fp16 or bf16") {
		t.Errorf("top-k pulls: %v; want it refused", err)
	}
}

// TestTopKWarmup: the share sent falls geometrically from everything at
// step 0 to the ratio at the end of the warm-up, and stays there.
func TestTopKWarmup(t *testing.T) {
	c := Compression{Kind: TopK, Ratio: 0.01, Warmup: 100}
	for _, tc := range []struct {
		step int64
		want float64
	}{{0, 1}, {50, 0.1}, {100, 0.01}, {1000, 0.01}} {
		if got := c.ratioAt(tc.step); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("step %d: ratio %v, want %v", tc.step, got, tc.want)
		}
	}
	if got := (Compression{Kind: TopK, Ratio: 0.1}).ratioAt(0); got != 0.1 {
		t.Errorf("no warm-up: ratio %v at step 0, want 0.1", got)
	}
}

// TestTopKErrorFeedback: over several steps, each rank sends at most k
// entries, all ranks apply the same update, and nothing is lost: the sum
// of the updates applied equals the mean of the gradients given less the
// mean of the residuals left (error feedback). Small gradients are
// selected exactly; large ones through a sampled threshold, which must
// still send most of k.
func TestTopKErrorFeedback(t *testing.T) {
	for _, n := range []int{200, 100_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) { testTopKErrorFeedback(t, n) })
	}
}

func testTopKErrorFeedback(t *testing.T, n int) {
	const ranks, steps, ratio = 3, 6, 0.05
	k := int(ratio * float64(n))
	rings := inProcessRings(t, ranks, allreduce.InProcessConfig{ChunkBytes: 4096})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	comps := make([]*gradCompressor, ranks)
	for i := range comps {
		comps[i] = newGradCompressor(Compression{Kind: TopK, Ratio: ratio})
	}
	given, applied := make([]float64, n), make([]float64, n)
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range int64(steps) {
		grads := make([][]float32, ranks)
		for r := range grads {
			grads[r] = make([]float32, n)
			for i := range grads[r] {
				grads[r][i] = float32(rng.NormFloat64())
				given[i] += float64(grads[r][i]) / ranks
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, ranks)
		for r := range ranks {
			wg.Go(func() { errs[r] = comps[r].wrap(rings[r]).AllReduceMean(ctx, "grads", step, grads[r]) })
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("step %d rank %d: %v", step, r, err)
			}
		}
		nonzero := 0
		for i := range n {
			for r := 1; r < ranks; r++ {
				if grads[r][i] != grads[0][i] {
					t.Fatalf("step %d element %d: rank %d applies %v, rank 0 %v", step, i, r, grads[r][i], grads[0][i])
				}
			}
			if grads[0][i] != 0 {
				nonzero++
			}
			applied[i] += float64(grads[0][i])
		}
		for r, c := range comps {
			if sent := len(c.cand); sent > k || sent < k*3/4 {
				t.Errorf("step %d rank %d: sent %d entries, want %d (at least 3/4 of it)", step, r, sent, k)
			}
		}
		if nonzero > ranks*k || nonzero < k*3/4 {
			t.Errorf("step %d: %d entries updated, want %d to %d", step, nonzero, k*3/4, ranks*k)
		}
	}
	for i := range n {
		owed := 0.0
		for _, c := range comps {
			owed += float64(c.residual[i]) / ranks
		}
		if d := math.Abs(applied[i] + owed - given[i]); d > 1e-4 {
			t.Fatalf("element %d: applied %v + residuals %v != given %v", i, applied[i], owed, given[i])
		}
	}
}

// inProcessRings is n ranks of one in-process ring, closed when t ends.
func inProcessRings(t *testing.T, n int, cfg allreduce.InProcessConfig) []*allreduce.Ring {
	t.Helper()
	rings, err := allreduce.NewInProcess(n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range rings {
			r.Close()
		}
	})
	return rings
}

// TestFP16MeanIsTheMean: the fp16 wrapper takes the mean, within half
// precision, on every rank alike.
func TestFP16MeanIsTheMean(t *testing.T) {
	rings := inProcessRings(t, 2, allreduce.InProcessConfig{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	data := [][]float32{{1, 60000, -3}, {3, 60000, 0.001}} // the sum of the 60000s would overflow fp16, not their mean
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() {
			errs[r] = newGradCompressor(Compression{Kind: FP16}).wrap(rings[r]).AllReduceMean(ctx, "g", 1, data[r])
		})
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	// 60000 is a binary16 value; (-3+0.001)/2 rounds.
	want := []float32{2, 60000, -1.4995}
	for i, v := range data[0] {
		if data[1][i] != v || math.Abs(float64(v-want[i])) > 1e-3*math.Abs(float64(want[i])) {
			t.Errorf("element %d: ranks hold %v and %v, want %v", i, v, data[1][i], want[i])
		}
	}
}

// BenchmarkTopKSelect: the local work of a top-k step (residual, threshold,
// selection) for the wide mlp's 1.59M gradient elements, on a 1-rank ring.
func BenchmarkTopKSelect(b *testing.B) {
	rings, err := allreduce.NewInProcess(1, allreduce.InProcessConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer rings[0].Close()
	rng := rand.New(rand.NewPCG(5, 6))
	grad := make([]float32, 784*2000+2000*10)
	for i := range grad {
		grad[i] = float32(rng.NormFloat64())
	}
	data := make([]float32, len(grad))
	ring := newGradCompressor(Compression{Kind: TopK}).wrap(rings[0])
	b.SetBytes(int64(4 * len(grad)))
	round := int64(0)
	for b.Loop() {
		copy(data, grad)
		round++
		if err := ring.AllReduceMean(b.Context(), "g", round, data); err != nil {
			b.Fatal(err)
		}
	}
}
