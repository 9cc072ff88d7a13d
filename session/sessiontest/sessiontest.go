// Package sessiontest is the conformance suite of a session's back end
// (its target): every way of running a Session's steps passes it, the
// local one (session.New), an in-process master (session.WithMaster) and
// grpc:// (session.Open through package rpc).
//
//	func TestLocal(t *testing.T) {
//		sessiontest.Test(t, func(t *testing.T, g *graph.Graph) *session.Session {
//			s, err := session.New(g)
//			...
//			return s
//		})
//	}
package sessiontest

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// Open returns a session of g on the back end under test; the suite closes
// it.
type Open func(t *testing.T, g *graph.Graph) *session.Session

// Test runs the suite against open.
func Test(t *testing.T, open Open) {
	ctx := context.Background()
	t.Run("train linear regression", func(t *testing.T) {
		s := graph.NewScope()
		x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 1))
		y := ops.Placeholder(s, "y", tensor.Float32, tensor.MakeShape(-1, 1))
		w := ops.NewVariable(s, "w", tensor.Float32, []int{1, 1}, ops.ZerosInit())
		b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
		loss := ops.Mean(s, ops.Square(s, ops.Sub(s, ops.BiasAdd(s, ops.MatMul(s, x, w.Value(), false, false), b.Value()), y)), nil, false)
		grads, err := grad.Gradients(s, []graph.Output{loss}, []graph.Output{w.Value(), b.Value()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		lr := ops.Const(s, float32(0.1))
		step := ops.Group(s, "step",
			ops.ApplyGradientDescent(s, w.Node().Output(0), lr, grads[0]),
			ops.ApplyGradientDescent(s, b.Node().Output(0), lr, grads[1]))
		init := ops.GlobalVariablesInitializer(s)
		sess := openGraph(t, open, s)
		run(t, sess, nil, nil, []*graph.Node{init})
		xs := tensor.MustFromSlice([]float32{0, 1, 2, 3}, 4, 1)
		ys := tensor.MustFromSlice([]float32{1, 3, 5, 7}, 4, 1)
		first := math.Inf(1)
		var last float32
		for i := range 200 {
			out := run(t, sess, map[graph.Output]*tensor.Tensor{x: xs, y: ys}, []graph.Output{loss}, []*graph.Node{step})
			last = out[0].Float32s()[0]
			if i == 0 {
				first = float64(last)
			}
		}
		if float64(last) > first/100 {
			t.Errorf("loss went from %g to %g in 200 steps", first, last)
		}
		got := run(t, sess, nil, []graph.Output{w.Value(), b.Value()}, nil)
		if wv, bv := got[0].Float32s()[0], got[1].Float32s()[0]; math.Abs(float64(wv)-2) > 0.1 || math.Abs(float64(bv)-1) > 0.2 {
			t.Errorf("w, b = %g, %g; want about 2, 1", wv, bv)
		}
	})
	t.Run("feeds and fetches", func(t *testing.T) {
		s := graph.NewScope()
		x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2))
		sq := ops.Square(s, x)
		sum := ops.Add(s, sq, x)
		sess := openGraph(t, open, s)
		xv := tensor.MustFromSlice([]float32{2, 3}, 2)
		// A fed intermediate cuts the graph: x need not be fed.
		out := run(t, sess, map[graph.Output]*tensor.Tensor{sq: tensor.MustFromSlice([]float32{10, 20}, 2), x: xv}, []graph.Output{sum, sq, sum}, nil)
		if got := out[0].Float32s(); got[0] != 12 || got[1] != 23 {
			t.Errorf("sum = %v, want [12 23]", got)
		}
		if got := out[1].Float32s(); got[0] != 10 || got[1] != 20 {
			t.Errorf("a fetched feed = %v, want the fed value", got)
		}
		if got := out[2].Float32s(); got[0] != 12 {
			t.Errorf("a fetch listed twice = %v", got)
		}
		// Feed maps have no order: the same signature, fed in another order.
		for range 3 {
			out = run(t, sess, map[graph.Output]*tensor.Tensor{x: xv, sq: tensor.MustFromSlice([]float32{1, 1}, 2)}, []graph.Output{sum}, nil)
			if got := out[0].Float32s(); got[0] != 3 || got[1] != 4 {
				t.Fatalf("sum = %v, want [3 4]", got)
			}
		}
	})
	t.Run("fetches are the caller's", func(t *testing.T) {
		// Whatever a fetch is (a feed passed back, a view of one, a
		// result, a variable, a constant), the caller may modify it
		// without changing a feed, the graph's state or another fetch.
		s := graph.NewScope()
		x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2))
		w := ops.NewVariable(s, "fetched_w", tensor.Float32, []int{2}, ops.ConstantInit(5))
		c := ops.Const(s, []float32{7, 8})
		sq := ops.Square(s, x)
		fetches := []graph.Output{x, ops.Identity(s, x), sq, ops.Identity(s, w.Value()), w.Value(), c}
		sess := openGraph(t, open, s)
		run(t, sess, nil, nil, []*graph.Node{ops.GlobalVariablesInitializer(s)})
		want := [][]float32{{2, 3}, {2, 3}, {4, 9}, {5, 5}, {5, 5}, {7, 8}}
		for round := range 2 {
			xv := tensor.MustFromSlice([]float32{2, 3}, 2)
			out := run(t, sess, map[graph.Output]*tensor.Tensor{x: xv}, fetches, nil)
			for i, o := range out {
				if got := o.Float32s(); got[0] != want[i][0] || got[1] != want[i][1] {
					t.Errorf("round %d: fetch %s = %v, want %v", round, fetches[i], got, want[i])
				}
			}
			xv.Float32s()[0] = -1 // the caller's feed, changed after the run
			if got := out[0].Float32s()[0]; got != 2 {
				t.Errorf("round %d: a fetched feed changed with the fed tensor: %v", round, got)
			}
			for _, o := range out {
				o.Float32s()[1] = -100
			}
			if got := xv.Float32s()[1]; got != 3 {
				t.Errorf("round %d: the fed tensor changed with a fetch: %v", round, got)
			}
		}
	})
	t.Run("bad feeds name the node", func(t *testing.T) {
		s := graph.NewScope()
		x := ops.Placeholder(s, "input_x", tensor.Float32, tensor.MakeShape(-1, 2))
		y := ops.Square(s, x)
		sess := openGraph(t, open, s)
		for _, bad := range []*tensor.Tensor{
			tensor.MustFromSlice([]int32{1, 2}, 1, 2),      // dtype
			tensor.MustFromSlice([]float32{1, 2, 3}, 1, 3), // shape
		} {
			_, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: bad}, []graph.Output{y}, nil)
			if err == nil || !strings.Contains(err.Error(), "input_x") {
				t.Errorf("feeding %v: %v, want an error naming input_x", bad, err)
			}
		}
		if _, err := sess.Run(ctx, nil, []graph.Output{y}, nil); err == nil || !strings.Contains(err.Error(), "input_x") {
			t.Errorf("an unfed placeholder: %v, want an error naming input_x", err)
		}
		if _, err := sess.RunNamed(ctx, nil, []string{"nosuch:0"}, nil); err == nil || !strings.Contains(err.Error(), "nosuch") {
			t.Errorf("an unknown fetch: %v, want an error naming it", err)
		}
	})
	t.Run("graph grows between runs", func(t *testing.T) {
		s := graph.NewScope()
		a := ops.Const(s, float32(3))
		sess := openGraph(t, open, s)
		if got := run(t, sess, nil, []graph.Output{a}, nil)[0].Float32s()[0]; got != 3 {
			t.Fatalf("a = %v", got)
		}
		b := ops.Mul(s, a, ops.Const(s, float32(2)))
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if got := run(t, sess, nil, []graph.Output{b}, nil)[0].Float32s()[0]; got != 6 {
			t.Fatalf("b = %v, want 6", got)
		}
	})
	t.Run("concurrent runs", func(t *testing.T) {
		s := graph.NewScope()
		x := ops.Placeholder(s, "x", tensor.Float32, tensor.ScalarShape())
		y := ops.Mul(s, x, x)
		sess := openGraph(t, open, s)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: tensor.Scalar(float32(i))}, []graph.Output{y}, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if got := out[0].Float32s()[0]; got != float32(i*i) {
						t.Errorf("%d squared = %v", i, got)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
	t.Run("closed", func(t *testing.T) {
		s := graph.NewScope()
		a := ops.Const(s, float32(1))
		sess := openGraph(t, open, s)
		run(t, sess, nil, []graph.Output{a}, nil)
		if err := sess.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := sess.Run(ctx, nil, []graph.Output{a}, nil); err == nil {
			t.Error("Run after Close succeeded")
		}
	})
}

func openGraph(t *testing.T, open Open, s *graph.Scope) *session.Session {
	t.Helper()
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess := open(t, s.Graph())
	t.Cleanup(func() { sess.Close() })
	return sess
}

func run(t *testing.T, s *session.Session, feeds map[graph.Output]*tensor.Tensor, fetches []graph.Output, targets []*graph.Node) []*tensor.Tensor {
	t.Helper()
	out, err := s.Run(context.Background(), feeds, fetches, targets)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
