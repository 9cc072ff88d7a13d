package cpu_test

import (
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// stateRandomNode adds a random op producing the given shape.
func stateRandomNode(t testing.TB, op string, dt tensor.DType, seed int, dims ...int) *graph.Node {
	t.Helper()
	s := graph.NewScope()
	d := make([]int32, len(dims))
	for i, v := range dims {
		d[i] = int32(v)
	}
	shape := stateConst(s, tensor.MustFromSlice(d, len(d)))
	n := s.AddNode(op, "", []graph.Output{shape}, map[string]any{"dtype": dt, "seed": seed})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func stateSample(t *testing.T, n *graph.Node, k kernel.Kernel) []float64 {
	t.Helper()
	out, err := stateRunNode(n, k, kernel.NewResources())
	if err != nil {
		t.Fatal(err)
	}
	if !out[0].StaticShape().Equal(n.Output(0).Shape()) || out[0].DType() != n.Output(0).DType() {
		t.Fatalf("output %v%v, inferred %v%v", out[0].DType(), out[0].StaticShape(), n.Output(0).DType(), n.Output(0).Shape())
	}
	return stateValues(out[0])
}

func stateEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRandomStatistics(t *testing.T) {
	const n = 100_000
	cases := []struct {
		op               string
		mean, stddev     float64
		lo, hi           float64 // every sample in [lo, hi)
		meanTol, stddTol float64
	}{
		{"RandomNormal", 0, 1, math.Inf(-1), math.Inf(1), 0.02, 0.02},
		{"TruncatedNormal", 0, 0.8796, -2, 2.0000001, 0.02, 0.02},
		{"RandomUniform", 0.5, math.Sqrt(1.0 / 12), 0, 1, 0.01, 0.01},
	}
	for _, tc := range cases {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
			t.Run(tc.op+"/"+dt.String(), func(t *testing.T) {
				node := stateRandomNode(t, tc.op, dt, 7, 100, n/100)
				xs := stateSample(t, node, stateKernel(t, node))
				var sum, sq float64
				for _, x := range xs {
					if x < tc.lo || x >= tc.hi {
						t.Fatalf("sample %v outside [%v, %v)", x, tc.lo, tc.hi)
					}
					sum += x
				}
				mean := sum / n
				for _, x := range xs {
					sq += (x - mean) * (x - mean)
				}
				stddev := math.Sqrt(sq / n)
				if math.Abs(mean-tc.mean) > tc.meanTol || math.Abs(stddev-tc.stddev) > tc.stddTol {
					t.Errorf("mean %.4f stddev %.4f, want %.4f and %.4f", mean, stddev, tc.mean, tc.stddev)
				}
			})
		}
	}
}

func TestRandomDeterminism(t *testing.T) {
	for _, op := range []string{"RandomNormal", "TruncatedNormal", "RandomUniform"} {
		t.Run(op, func(t *testing.T) {
			// Large enough to be filled by several blocks in parallel.
			n := stateRandomNode(t, op, tensor.Float32, 42, 300, 500)
			k1, k2 := stateKernel(t, n), stateKernel(t, n)
			a1, a2 := stateSample(t, n, k1), stateSample(t, n, k1)
			b1 := stateSample(t, n, k2)
			prev := runtime.GOMAXPROCS(1)
			b2 := stateSample(t, n, k2)
			runtime.GOMAXPROCS(prev)
			if !stateEqual(a1, b1) || !stateEqual(a2, b2) {
				t.Error("two kernels with the same seed differ")
			}
			if stateEqual(a1, a2) {
				t.Error("two steps returned the same samples")
			}
			if stateEqual(a1[:stateBlock], a1[stateBlock:2*stateBlock]) {
				t.Error("two blocks of one output are equal")
			}
			other := stateRandomNode(t, op, tensor.Float32, 43, 300, 500)
			if stateEqual(a1, stateSample(t, other, stateKernel(t, other))) {
				t.Error("seeds 42 and 43 gave the same samples")
			}
			r := stateRandomNode(t, op, tensor.Float32, 0, 10)
			if stateEqual(stateSample(t, r, stateKernel(t, r)), stateSample(t, r, stateKernel(t, r))) {
				t.Error("seed 0 is deterministic")
			}
		})
	}
}

// stateBlock is the kernel's sub-stream length (kept in sync by hand).
const stateBlock = 1 << 14

func TestRandomShapes(t *testing.T) {
	for _, dims := range [][]int{{}, {0}, {3, 0, 2}, {1, 1}} {
		n := stateRandomNode(t, "RandomUniform", tensor.Float64, 1, dims...)
		if got := stateSample(t, n, stateKernel(t, n)); len(got) != tensor.NumElements(dims) {
			t.Errorf("shape %v: %d samples", dims, len(got))
		}
	}
}

func TestRandomRejectsNegativeDimAtRunTime(t *testing.T) {
	s := graph.NewScope()
	p := s.Out("Placeholder", "p", nil, map[string]any{"dtype": tensor.Int32})
	n := s.AddNode("RandomUniform", "", []graph.Output{p}, map[string]any{"seed": 1})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	c := &kernel.Context{Node: n, Inputs: []*tensor.Tensor{tensor.MustFromSlice([]int32{2, -1}, 2)},
		Refs: make([]*kernel.Variable, 1), Outputs: make([]*tensor.Tensor, 1)}
	if err := stateKernel(t, n).Compute(c); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("got %v, want a negative-dimension error", err)
	}
}
