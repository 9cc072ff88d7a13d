package executor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/executor"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// counterLoop builds i = 0; while i < n: i++, acc = acc*x + 1 and returns
// the feeds and the While node.
func counterLoop(t testing.TB, s *graph.Scope) (n, x graph.Output, loop *graph.Node) {
	n = ops.Placeholder(s, "n", tensor.Int32, tensor.ScalarShape())
	x = ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2))
	out := ops.WhileLoop(s,
		func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], n) },
		func(s *graph.Scope, v []graph.Output) []graph.Output {
			return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))),
				ops.Add(s, ops.Mul(s, v[1], x), ops.Const(s, float32(1)))}
		},
		[]graph.Output{ops.Const(s, int32(0)), ops.Zeros(s, tensor.Float32, 2)})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return n, x, out[0].Node
}

// TestWhileHistory: the loop keeps each iteration's loop variables only
// when a node consumes them, stacked in iteration order.
func TestWhileHistory(t *testing.T) {
	for _, consumed := range []bool{false, true} {
		s := graph.NewScope()
		n, x, loop := counterLoop(t, s)
		hist := loop.Output(4) // the history of acc
		fetch := hist
		if consumed {
			fetch = ops.Identity(s, hist)
		}
		e, err := executor.New(s.Graph(), graph.Signature{Feeds: []graph.Output{n, x}, Fetches: []graph.Output{loop.Output(2), fetch}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.Run(context.Background(), []*tensor.Tensor{tensor.Scalar(int32(3)), tensor.MustFromSlice([]float32{2, -1}, 2)})
		if err != nil {
			t.Fatal(err)
		}
		if got := out[0].Int32s()[0]; got != 3 {
			t.Errorf("iterations %d, want 3", got)
		}
		want := []float32{0, 0, 1, 1, 3, 0} // acc before iterations 0, 1, 2
		if !consumed {
			want = nil
		}
		if got := out[1].Float32s(); len(got) != len(want) || out[1].Shape()[0] != len(want)/2 {
			t.Errorf("consumed=%v: history %v, want %v", consumed, out[1], want)
		} else {
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("consumed=%v: history %v, want %v", consumed, got, want)
					break
				}
			}
		}
	}
}

// TestWhileHistoryNeedsOneShape: a loop variable whose shape changes
// cannot be stacked for the gradient, and says so.
func TestWhileHistoryNeedsOneShape(t *testing.T) {
	s := graph.NewScope()
	out := ops.WhileLoop(s,
		func(s *graph.Scope, v []graph.Output) graph.Output {
			return ops.Less(s, ops.Size(s, v[0]), ops.Const(s, int32(3)))
		},
		func(s *graph.Scope, v []graph.Output) []graph.Output {
			return []graph.Output{ops.Concat(s, 0, v[0], ops.Const(s, []float32{1}))}
		},
		[]graph.Output{ops.Const(s, []float32{0})}, ops.ShapeInvariants(tensor.MakeShape(-1)))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	hist := ops.Identity(s, out[0].Node.Output(2))
	e, err := executor.New(s.Graph(), graph.Signature{Fetches: []graph.Output{out[0], hist}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Run(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "shape changed from [1] to [2]") {
		t.Fatalf("error %v, want one saying the loop variable's shape changed", err)
	}
}

// TestWhileStopsWithTheStep: a loop that does not end stops when another
// node of its step fails, and the step reports that failure.
func TestWhileStopsWithTheStep(t *testing.T) {
	s := graph.NewScope()
	out := ops.WhileLoop(s,
		func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Const(s, true) },
		func(s *graph.Scope, v []graph.Output) []graph.Output {
			return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1)))}
		},
		[]graph.Output{ops.Const(s, int32(0))})
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.UnknownShape())
	bad := ops.ReshapeTo(s, x, 3)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	e, err := executor.New(s.Graph(), graph.Signature{Feeds: []graph.Output{x}, Fetches: []graph.Output{out[0], bad}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = e.Run(ctx, []*tensor.Tensor{tensor.New(tensor.Float32, 2)})
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Reshape") {
		t.Fatalf("error %v, want the Reshape's", err)
	}
}

// BenchmarkWhileIteration measures the cost of one iteration of a small
// loop: a cond and a body of two ops each, on nested executors.
func BenchmarkWhileIteration(b *testing.B) {
	s := graph.NewScope()
	n, x, loop := counterLoop(b, s)
	e, err := executor.New(s.Graph(), graph.Signature{Feeds: []graph.Output{n, x}, Fetches: []graph.Output{loop.Output(1)}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	const iters = 1000
	feeds := []*tensor.Tensor{tensor.Scalar(int32(iters)), tensor.MustFromSlice([]float32{0.5, 0.25}, 2)}
	b.ResetTimer()
	for range b.N {
		if _, err := e.Run(context.Background(), feeds); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*iters), "ns/iteration")
}
