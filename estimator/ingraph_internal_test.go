package estimator

import (
	"context"
	"math"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// TestAveragedUpdateKeepsSparseGradients: the towers of in-graph
// replication (and of several GPUs) average an embedding table's gradient
// as indexed slices, so that the update is sparse, as in one process and
// under the other strategies: lazy Adam moves only the rows a step looked
// up. The average was taken densely, so that each tower computed the
// whole table's gradient and Adam moved every row with momentum; a model
// trained in-graph ended elsewhere than the same model trained with sync.
func TestAveragedUpdateKeepsSparseGradients(t *testing.T) {
	// build returns the table and a training step over towers losses of
	// lookups of ids (one tower per slice), averaged by averagedUpdate, or
	// (single) minimising the mean of the towers' losses in one graph.
	build := func(single bool) (*graph.Graph, *ops.Variable, *graph.Node, *graph.Node, []graph.Output) {
		s := graph.NewScope()
		table := ops.NewVariable(s, "table", tensor.Float32, []int{6, 2}, ops.ConstantInit(0.5))
		step := train.CreateGlobalStep(s)
		var ids, losses []graph.Output
		for i := range 2 {
			id := ops.Placeholder(s, "ids", tensor.Int32, tensor.MakeShape(-1))
			rows := ops.Gather(s, table.Value(), id, 0)
			ids, losses = append(ids, id), append(losses, ops.Mean(s, ops.Square(s, ops.Sub(s, rows, ops.Scalar(s, tensor.Float32, float64(i)))), nil, false))
		}
		opt := train.NewAdam(0.1, 0.9, 0.999, 1e-7)
		var update *graph.Node
		var err error
		if single {
			mean := ops.Mul(s, ops.AddN(s, losses...), ops.Scalar(s, tensor.Float32, 0.5))
			update, err = train.Minimize(s, opt, mean, step)
		} else {
			update, err = averagedUpdate(s, opt, losses, []*ops.Variable{table}, step)
		}
		init := ops.GlobalVariablesInitializer(s)
		if err != nil || s.Err() != nil {
			t.Fatal(err, s.Err())
		}
		return s.Graph(), table, init, update, ids
	}
	run := func(single bool) []float32 {
		g, table, init, update, ids := build(single)
		sess, err := session.New(g)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		ctx := context.Background()
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
			t.Fatal(err)
		}
		// Step 1 looks up rows 0 to 3, step 2 rows 4 and 5 only: lazy
		// Adam leaves rows 0 to 3 as step 1 left them.
		for _, batch := range [][2][]int32{{{0, 1}, {2, 3}}, {{4}, {5}}} {
			feeds := map[graph.Output]*tensor.Tensor{}
			for i, b := range batch {
				feeds[ids[i]] = tensor.MustFromSlice(b, len(b))
			}
			if _, err := sess.Run(ctx, feeds, nil, []*graph.Node{update}); err != nil {
				t.Fatal(err)
			}
		}
		out, err := sess.Run(ctx, nil, []graph.Output{table.Value()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out[0].Float32s()
	}
	want, got := run(true), run(false)
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-6 {
			t.Fatalf("table after two in-graph steps %v; want %v, as one graph minimising the towers' mean loss (lazy Adam: rows 0 to 3 untouched by step 2)", got, want)
		}
	}
}

// TestAveragedUpdateUnusedVariable: a trainable variable that no tower's
// loss reaches (a layer built only for a prediction) is left alone, as
// Minimize leaves it; the towers' gradients were matched to the variables
// by position, so that in-graph training failed ("AddN needs at least one
// input") or, had the shapes agreed, trained one variable with another's
// gradient.
func TestAveragedUpdateUnusedVariable(t *testing.T) {
	s := graph.NewScope()
	unused := ops.NewVariable(s, "aux", tensor.Float32, []int{2}, ops.ConstantInit(1))
	used := ops.NewVariable(s, "main", tensor.Float32, []int{2}, ops.ConstantInit(1))
	step := train.CreateGlobalStep(s)
	losses := []graph.Output{
		ops.Sum(s, ops.Square(s, used.Value()), nil, false),
		ops.Sum(s, used.Value(), nil, false),
	}
	update, err := averagedUpdate(s, train.NewGradientDescent(0.5), losses, []*ops.Variable{unused, used}, step)
	if err != nil {
		t.Fatal(err)
	}
	init := ops.GlobalVariablesInitializer(s)
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{update}); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{unused.Value(), used.Value()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// main -= 0.5 * mean(2*main, 1) = 1 - 0.5*1.5
	if a, m := out[0].Float32s(), out[1].Float32s(); a[0] != 1 || a[1] != 1 || m[0] != 0.25 || m[1] != 0.25 {
		t.Errorf("after one step aux = %v, main = %v; want aux [1 1] untouched, main [0.25 0.25]", a, m)
	}
}
