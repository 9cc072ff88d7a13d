package session_test

import (
	"context"
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// Example computes y = x*W + b for a batch of three inputs.
func Example() {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 1))
	w := ops.NewVariable(s, "W", tensor.Float32, []int{1, 1}, ops.ConstantInit(2))
	b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ConstantInit(10))
	y := ops.Add(s, ops.MatMul(s, x, w.Value(), false, false), b.Value())
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		fmt.Println(err)
		return
	}

	sess, err := session.New(s.Graph())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sess.Close()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		fmt.Println(err)
		return
	}
	out, err := sess.Run(ctx,
		map[graph.Output]*tensor.Tensor{x: tensor.MustFromSlice([]float32{1, 2, 3}, 3, 1)},
		[]graph.Output{y}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out[0].Float32s())
	// Output: [12 14 16]
}
