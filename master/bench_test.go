package master_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// regression is the reference linear regression (batch 1) with W and b on
// the ps and everything else on the session's default device.
func regression(b *testing.B) *graph.Graph {
	s := graph.NewScope()
	pss := s.WithDevice("/job:ps")
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(1, 1))
	y := ops.Placeholder(s, "y", tensor.Float32, tensor.MakeShape(1, 1))
	w := ops.NewVariable(pss, "W", tensor.Float32, []int{1, 1}, ops.ZerosInit())
	bias := ops.NewVariable(pss, "b", tensor.Float32, []int{1}, ops.ZerosInit())
	pred := ops.Add(s, ops.MatMul(s, x, w.Value(), false, false), bias.Value())
	loss := ops.Mean(s, ops.Square(s, ops.Sub(s, pred, y)), nil, false)
	grads, err := grad.Gradients(s, []graph.Output{loss}, []graph.Output{w.Value(), bias.Value()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	lr := ops.Scalar(s, tensor.Float32, 0.01)
	ops.Group(s, "train", ops.ApplyGradientDescent(s, w.Value(), lr, grads[0]), ops.ApplyGradientDescent(s, bias.Value(), lr, grads[1]))
	ops.GlobalVariablesInitializer(s.SubScope("init"))
	if err := s.Err(); err != nil {
		b.Fatal(err)
	}
	return s.Graph()
}

// BenchmarkRegressionStep compares one training step of the linear
// regression through the master (1 ps + 2 workers in memory: planning is
// cached, so this is the per-step overhead of partitioned execution with
// Send/Recv) with the local session.
func BenchmarkRegressionStep(b *testing.B) {
	feeds := map[string]*tensor.Tensor{"x:0": tensor.MustFromSlice([]float32{0.5}, 1, 1), "y:0": tensor.MustFromSlice([]float32{11}, 1, 1)}
	b.Run("local", func(b *testing.B) {
		g := regression(b)
		sess, err := session.New(g)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		if _, err := sess.RunNamed(ctx, nil, nil, []string{initName(g)}); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := sess.RunNamed(ctx, feeds, nil, []string{"train"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("master-inmem", func(b *testing.B) {
		g := regression(b)
		c := open(b, newMaster(cluster(), wk0), g, nil)
		c.mustRun(nil, nil, initName(g))
		for b.Loop() {
			c.mustRun(feeds, nil, "train")
		}
	})
}
