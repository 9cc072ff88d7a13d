package session_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// linearRegression builds the reference workload's step: y = x*W + b, squared
// loss, one gradient-descent update of W and b (batch 1).
func linearRegression(tb testing.TB) (sess *session.Session, x, y, loss graph.Output, train *graph.Node) {
	tb.Helper()
	s := graph.NewScope()
	x = ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(1, 1))
	y = ops.Placeholder(s, "y", tensor.Float32, tensor.MakeShape(1, 1))
	w := ops.NewVariable(s, "W", tensor.Float32, []int{1, 1}, ops.ZerosInit())
	b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
	pred := ops.Add(s, ops.MatMul(s, x, w.Value(), false, false), b.Value())
	loss = ops.Mean(s, ops.Square(s, ops.Sub(s, pred, y)), nil, false)
	grads, err := grad.Gradients(s, []graph.Output{loss}, []graph.Output{w.Value(), b.Value()}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	lr := ops.Scalar(s, tensor.Float32, 0.01)
	train = ops.Group(s, "train",
		ops.ApplyGradientDescent(s, w.Value(), lr, grads[0]),
		ops.ApplyGradientDescent(s, b.Value(), lr, grads[1]))
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		tb.Fatal(err)
	}
	sess, err = session.New(s.Graph())
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := sess.Run(context.Background(), nil, nil, []*graph.Node{init}); err != nil {
		tb.Fatal(err)
	}
	return sess, x, y, loss, train
}

// TestLinearRegressionConverges trains y = 2x + 10 (the reference workload,
// without noise) and checks that W and b approach 2 and 10.
func TestLinearRegressionConverges(t *testing.T) {
	sess, x, y, _, train := linearRegression(t)
	ctx := context.Background()
	xv, yv := tensor.New(tensor.Float32, 1, 1), tensor.New(tensor.Float32, 1, 1)
	for i := range 3000 {
		v := float32(i%10) / 10
		xv.Float32s()[0], yv.Float32s()[0] = v, 2*v+10
		if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: xv, y: yv}, nil, []*graph.Node{train}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := sess.RunNamed(ctx, nil, []string{"W", "b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, b := out[0].Float32s()[0], out[1].Float32s()[0]
	if w < 1.8 || w > 2.2 || b < 9.8 || b > 10.2 {
		t.Errorf("W = %v, b = %v, want about 2 and 10", w, b)
	}
}

// BenchmarkLinearRegressionStep measures one training step of the reference
// linear regression (batch 1): dominated by per-node overhead.
func BenchmarkLinearRegressionStep(b *testing.B) {
	sess, x, y, loss, train := linearRegression(b)
	ctx := context.Background()
	feeds := map[graph.Output]*tensor.Tensor{
		x: tensor.MustFromSlice([]float32{0.5}, 1, 1),
		y: tensor.MustFromSlice([]float32{11}, 1, 1),
	}
	fetches, targets := []graph.Output{loss}, []*graph.Node{train}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sess.Run(ctx, feeds, fetches, targets); err != nil {
			b.Fatal(err)
		}
	}
}
