package checkpoint_test

import (
	"context"
	"fmt"
	"os"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// A Saver over a local session: save, overwrite the variable, restore the
// newest checkpoint.
func Example() {
	dir, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	s := graph.NewScope()
	w := ops.NewVariable(s, "W", tensor.Float32, []int{2}, ops.ConstantInit(3))
	init := ops.GlobalVariablesInitializer(s)
	zero := ops.Assign(s, w.Value(), ops.Const(s, []float32{0, 0}))
	sv, err := checkpoint.NewSaver(s, nil, checkpoint.SaverConfig{Dir: dir, Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	sess, _ := session.New(s.Graph())
	defer sess.Close()

	sess.Run(ctx, nil, nil, []*graph.Node{init})
	prefix, err := sv.Save(ctx, sess, 100)
	fmt.Println(prefix, err)

	sess.Run(ctx, nil, nil, []*graph.Node{zero.Node})
	step, ok, err := sv.RestoreLatest(ctx, sess)
	out, _ := sess.Run(ctx, nil, []graph.Output{w.Value()}, nil)
	fmt.Println(step, ok, err, out[0].Float32s())
	// Output:
	// model.ckpt-100 <nil>
	// 100 true <nil> [3 3]
}
