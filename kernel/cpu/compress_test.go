package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/race"
	"github.com/distflow/distflow/internal/topk"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// compressNode is one TopKCompress node over placeholders of unknown shape
// and its CPU kernel, as an executor would build it.
type compressNode struct {
	n *graph.Node
	k kernel.Kernel
}

func newCompressNode(t testing.TB) *compressNode {
	t.Helper()
	s := graph.NewScope()
	g := s.Out("Placeholder", "g", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.UnknownShape()})
	r := s.Out("Placeholder", "r", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.UnknownShape()})
	n := s.AddNode("TopKCompress", "compress", []graph.Output{g, r}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	f, err := kernel.Lookup("TopKCompress", kernel.CPU)
	if err != nil {
		t.Fatal(err)
	}
	k, err := f(n)
	if err != nil {
		t.Fatal(err)
	}
	return &compressNode{n, k}
}

// step runs one step on grad (any shape) at ratio.
func (c *compressNode) step(grad, ratio *tensor.Tensor) ([]int32, []float32, error) {
	kc := &kernel.Context{Ctx: context.Background(), Node: c.n, Inputs: []*tensor.Tensor{grad, ratio}, Outputs: make([]*tensor.Tensor, 2)}
	if err := c.k.Compute(kc); err != nil {
		return nil, nil, err
	}
	if kc.Outputs[0].Rank() != 1 || kc.Outputs[1].Rank() != 1 {
		return nil, nil, nil
	}
	return kc.Outputs[0].Int32s(), kc.Outputs[1].Float32s(), nil
}

// flush returns the residual as a dense vector of n entries: a step of a
// zero gradient at ratio 1 sends all of it, leaving it zero.
func (c *compressNode) flush(t testing.TB, n int) []float32 {
	t.Helper()
	idx, vals, err := c.step(tensor.New(tensor.Float32, n), tensor.Scalar(float32(1)))
	if err != nil {
		t.Fatal(err)
	}
	dense := make([]float32, n)
	compressScatter(dense, idx, vals)
	return dense
}

func compressScatter(dense []float32, idx []int32, vals []float32) {
	for j, i := range idx {
		dense[i] += vals[j]
	}
}

// TestTopKCompressErrorFeedback checks over several steps that what is
// sent plus what is kept is what came in, that each step sends the k
// largest entries of gradient plus residual, and that they leave the
// residual.
func TestTopKCompressErrorFeedback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ratio float32
		draw  func(r *rand.Rand) float32
		exact bool
	}{
		// Small integers add exactly: the invariant holds to the bit.
		{"integers", 0.2, func(r *rand.Rand) float32 { return float32(r.IntN(9) - 4) }, true},
		{"normal", 0.1, func(r *rand.Rand) float32 { return float32(r.NormFloat64()) }, false},
		{"sparse", 0.3, func(r *rand.Rand) float32 { return float32(r.IntN(2) * (r.IntN(5) - 2)) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const rows, cols, steps = 4, 5, 7
			n := rows * cols
			r := rand.New(rand.NewPCG(1, 2))
			c := newCompressNode(t)
			in, sent := make([]float64, n), make([]float32, n)
			shadow := make([]float32, n) // the residual, kept here the obvious way
			for step := range steps {
				g := make([]float32, n)
				for i := range g {
					g[i] = tc.draw(r)
					in[i] += float64(g[i])
					shadow[i] += g[i]
				}
				idx, vals, err := c.step(tensor.MustFromSlice(g, rows, cols), tensor.Scalar(tc.ratio))
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				k := topk.Count(float64(tc.ratio), n)
				nonzero := 0
				for _, x := range shadow {
					if x != 0 {
						nonzero++
					}
				}
				if len(idx) != min(k, nonzero) || len(vals) != len(idx) {
					t.Fatalf("step %d: %d indices, %d values; want min(k=%d, %d non-zeros)", step, len(idx), len(vals), k, nonzero)
				}
				for j, i := range idx {
					if vals[j] != shadow[i] {
						t.Fatalf("step %d: values[%d] = %v, want residual+gradient at %d = %v", step, j, vals[j], i, shadow[i])
					}
				}
				// Nothing left behind is larger than what went.
				smallest := float32(math.Inf(1))
				for _, v := range vals {
					smallest = min(smallest, float32(math.Abs(float64(v))))
				}
				for i, x := range shadow {
					if !slices.Contains(idx, int32(i)) && float32(math.Abs(float64(x))) > smallest {
						t.Fatalf("step %d: kept %v at %d but sent %v", step, x, i, smallest)
					}
				}
				for _, i := range idx {
					shadow[i] = 0
				}
				compressScatter(sent, idx, vals)
			}
			left := c.flush(t, n)
			for i := range n {
				got := float64(sent[i]) + float64(left[i])
				if left[i] != shadow[i] {
					t.Errorf("residual[%d] = %v, want %v", i, left[i], shadow[i])
				}
				if tol := 1e-5 * max(1, math.Abs(in[i])); tc.exact && got != in[i] || math.Abs(got-in[i]) > tol {
					t.Errorf("entry %d: sent %v + kept %v = %v, want the sum of the gradients %v", i, sent[i], left[i], got, in[i])
				}
			}
		})
	}
}

func TestTopKCompressRatioOneSendsAll(t *testing.T) {
	c := newCompressNode(t)
	g := []float32{3, 0, -1, 2.5, 0, -7}
	for step := range 3 {
		idx, vals, err := c.step(tensor.MustFromSlice(g, 2, 3), tensor.Scalar(float32(1)))
		if err != nil {
			t.Fatal(err)
		}
		if want := []int32{0, 2, 3, 5}; !slices.Equal(idx, want) || !slices.Equal(vals, []float32{3, -1, 2.5, -7}) {
			t.Fatalf("step %d: sent %v %v, want every non-zero entry %v", step, idx, vals, want)
		}
	}
	if left := c.flush(t, len(g)); slices.ContainsFunc(left, func(x float32) bool { return x != 0 }) {
		t.Errorf("residual after ratio 1: %v, want zeros", left)
	}
}

func TestTopKCompressCount(t *testing.T) {
	c := newCompressNode(t)
	idx, _, err := c.step(tensor.MustFromSlice([]float32{1, 2, 3}, 3), tensor.Scalar(float32(1e-6)))
	if err != nil || !slices.Equal(idx, []int32{2}) {
		t.Errorf("tiny ratio: sent %v (%v), want at least one entry [2]", idx, err)
	}
	idx, _, err = c.step(tensor.New(tensor.Float32, 0), tensor.Scalar(float32(0.5)))
	if err == nil || !strings.Contains(err.Error(), "0 elements, the residual of the earlier steps 3") {
		t.Errorf("a gradient of another size: %v, want an error naming both sizes", err)
	}
	c = newCompressNode(t)
	if idx, _, err = c.step(tensor.New(tensor.Float32, 0, 4), tensor.Scalar(float32(0.5))); err != nil || len(idx) != 0 {
		t.Errorf("empty gradient: sent %v (%v), want nothing", idx, err)
	}
}

func TestTopKCompressErrors(t *testing.T) {
	grad := tensor.MustFromSlice([]float32{1, -2, 3, -4}, 4)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name        string
		grad, ratio *tensor.Tensor
		want        string
	}{
		{"zero ratio", grad, tensor.Scalar(float32(0)), "ratio 0: want 0 < ratio <= 1"},
		{"negative ratio", grad, tensor.Scalar(float32(-0.5)), "ratio -0.5: want"},
		{"ratio above 1", grad, tensor.Scalar(float32(1.5)), "ratio 1.5: want"},
		{"NaN ratio", grad, tensor.Scalar(nan), "ratio NaN: want"},
		{"infinite ratio", grad, tensor.Scalar(inf), "ratio +Inf: want"},
		{"vector ratio", grad, tensor.MustFromSlice([]float32{0.5}, 1), "ratio must be a float32 scalar, got float32[1]"},
		{"float64 ratio", grad, tensor.Scalar(0.5), "ratio must be a float32 scalar, got float64[]"},
		{"float64 gradient", tensor.MustFromSlice([]float64{1, 2}, 2), tensor.Scalar(float32(0.5)), "gradient must be float32, got float64"},
		{"NaN gradient", tensor.MustFromSlice([]float32{1, 2, nan, 4}, 2, 2), tensor.Scalar(float32(0.5)), "gradient[2] (flattened, of [2,2]) is NaN"},
		{"infinite gradient", tensor.MustFromSlice([]float32{1, 2, 3, -inf}, 4), tensor.Scalar(float32(0.5)), "gradient[3] (flattened, of [4]) is -Inf"},
		{"overflow", tensor.MustFromSlice([]float32{1, 2, 3, 3e38}, 4), tensor.Scalar(float32(0.5)), "residual[3] + gradient[3] = 3e+38 + 3e+38 overflows float32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCompressNode(t)
			before := c.restore(t, []float32{0, 0.5, -2, 3e38})
			_, _, err := c.step(tc.grad, tc.ratio)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "node compress") {
				t.Fatalf("error %v, want one naming the node and saying %q", err, tc.want)
			}
			if after := c.flush(t, 4); !slices.Equal(after, before) {
				t.Errorf("residual after a failed step: %v, want it unchanged %v", after, before)
			}
		})
	}
}

// restore sets the residual of c, zero before, to residual, which must
// have a zero entry: a step of residual with the largest float32 at that
// entry sends exactly that entry (k = 1) and keeps the others.
func (c *compressNode) restore(t testing.TB, residual []float32) []float32 {
	t.Helper()
	free := slices.Index(residual, 0)
	if free < 0 {
		t.Fatalf("restore %v: needs a zero entry", residual)
	}
	g := slices.Clone(residual)
	g[free] = math.MaxFloat32
	idx, _, err := c.step(tensor.MustFromSlice(g, len(g)), tensor.Scalar(float32(1e-9)))
	if err != nil || !slices.Equal(idx, []int32{int32(free)}) {
		t.Fatalf("restore %v: sent %v (%v), want [%d]", residual, idx, err, free)
	}
	return residual
}

// TestTopKCompressConcurrentSteps runs steps of one kernel from several
// goroutines, as concurrent steps of one executor do: they take turns on
// the residual, and nothing is lost or sent twice.
func TestTopKCompressConcurrentSteps(t *testing.T) {
	const n, workers, steps = 300, 8, 25
	c := newCompressNode(t)
	var mu sync.Mutex
	in, sent := make([]float32, n), make([]float32, n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 3))
			g, mine, out := make([]float32, n), make([]float32, n), make([]float32, n)
			for range steps {
				for i := range g {
					g[i] = float32(r.IntN(9) - 4) // integers: every sum is exact
					mine[i] += g[i]
				}
				idx, vals, err := c.step(tensor.MustFromSlice(g, n), tensor.Scalar(float32(0.05)))
				if err != nil {
					t.Error(err)
					return
				}
				compressScatter(out, idx, vals)
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range n {
				in[i] += mine[i]
				sent[i] += out[i]
			}
		})
	}
	wg.Wait()
	left := c.flush(t, n)
	for i := range n {
		if sent[i]+left[i] != in[i] {
			t.Fatalf("entry %d: sent %v + kept %v, want the sum of the gradients %v", i, sent[i], left[i], in[i])
		}
	}
}

// TestTopKCompressAllocs checks that a step allocates nothing once warm
// when the executor offers last step's outputs for reuse.
func TestTopKCompressAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts do not hold under the race detector")
	}
	for _, n := range []int{10_000, 1 << 18} {
		c := newCompressNode(t)
		g := make([]float32, n)
		r := rand.New(rand.NewPCG(4, 5))
		for i := range g {
			g[i] = float32(r.NormFloat64())
		}
		grad, ratio := tensor.MustFromSlice(g, n), tensor.Scalar(float32(0.01))
		kc := &kernel.Context{Ctx: context.Background(), Node: c.n, Inputs: []*tensor.Tensor{grad, ratio},
			Outputs: make([]*tensor.Tensor, 2), Buffers: make([]kernel.OutputBuffer, 2)}
		var err error
		run := func() {
			for i, b := range kc.Buffers {
				kc.Buffers[i] = kernel.OutputBuffer{Spare: b.Allocated}
			}
			if e := c.k.Compute(kc); e != nil {
				err = e
			}
		}
		run()
		allocs := testing.AllocsPerRun(20, run)
		if err != nil {
			t.Fatal(err)
		}
		// Past 2*32768 elements, the sampled threshold may select a few
		// fewer than k, and the outputs then change shape.
		if want := 0.0; n <= 1<<16 && allocs != want || allocs > 2 {
			t.Errorf("n %d: %v allocations per step once warm, want %v", n, allocs, want)
		}
	}
}

func BenchmarkTopKCompress(b *testing.B) {
	for _, n := range []int{10_000, 1 << 20} {
		b.Run(fmt.Sprintf("n=%d/ratio=0.01", n), func(b *testing.B) {
			c := newCompressNode(b)
			g := make([]float32, n)
			r := rand.New(rand.NewPCG(6, 7))
			for i := range g {
				g[i] = float32(r.NormFloat64())
			}
			kc := &kernel.Context{Ctx: context.Background(), Node: c.n,
				Inputs:  []*tensor.Tensor{tensor.MustFromSlice(g, n), tensor.Scalar(float32(0.01))},
				Outputs: make([]*tensor.Tensor, 2), Buffers: make([]kernel.OutputBuffer, 2)}
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				for i, ob := range kc.Buffers {
					kc.Buffers[i] = kernel.OutputBuffer{Spare: ob.Allocated}
				}
				if err := c.k.Compute(kc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
