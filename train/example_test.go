package train_test

import (
	"context"
	"fmt"
	"log"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// Fit y = 2x + 10 by gradient descent on the squared error.
func ExampleMinimize() {
	s := graph.NewScope()
	x := ops.Const(s, []float32{0, 1, 2, 3})
	y := ops.Const(s, []float32{10, 12, 14, 16})
	w := ops.NewVariable(s, "W", tensor.Float32, []int{}, ops.ZerosInit())
	b := ops.NewVariable(s, "b", tensor.Float32, []int{}, ops.ZerosInit())
	pred := ops.Add(s, ops.Mul(s, x, w.Value()), b.Value())
	loss := ops.Mean(s, ops.SquaredDifference(s, pred, y), nil, false)
	step := train.CreateGlobalStep(s)
	trainOp, err := train.Minimize(s, train.NewGradientDescent(0.1), loss, step)
	if err != nil {
		log.Fatal(err)
	}
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		log.Fatal(err)
	}

	sess, err := session.New(s.Graph())
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		log.Fatal(err)
	}
	for range 500 {
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{trainOp}); err != nil {
			log.Fatal(err)
		}
	}
	out, err := sess.Run(ctx, nil, []graph.Output{w.Value(), b.Value(), step.Value()}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("W=%.2f b=%.2f global_step=%d\n", out[0].Float32s()[0], out[1].Float32s()[0], out[2].Int64s()[0])
	// Output: W=2.00 b=10.00 global_step=500
}
