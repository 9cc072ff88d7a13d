package ops_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// Local variables stay out of the global ones, are never reused, and
// start over each time their initializer runs.
func TestLocalVariables(t *testing.T) {
	s := graph.NewScope()
	ops.NewVariable(s, "w", tensor.Float32, []int{2}, ops.ZerosInit())
	ms := s.SubScope("metric")
	a := ops.NewLocalVariable(ms, "count", tensor.Float64, []int{}, ops.ZerosInit())
	b := ops.NewLocalVariable(ms.ReuseVariables(), "count", tensor.Float64, []int{}, ops.ZerosInit())
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if a.Name() != "metric/count" || b.Name() != "metric/count_1" {
		t.Errorf("local variables %q and %q; want metric/count and a new metric/count_1", a.Name(), b.Name())
	}
	if g := ops.GlobalVariables(s.Graph()); len(g) != 1 || g[0].Name() != "w" {
		t.Errorf("global variables %v; want only w", g)
	}
	if l := ops.LocalVariables(s.Graph()); len(l) != 2 || l[0].Initializer() == nil {
		t.Errorf("local variables %v; want the two, with initializers", l)
	}
	add := ops.AssignAdd(s, a.Value(), ops.Scalar(s, tensor.Float64, 1)).Node
	init := ops.LocalVariablesInitializer(s)
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	for round := 0; round < 2; round++ {
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if _, err := sess.Run(ctx, nil, nil, []*graph.Node{add}); err != nil {
				t.Fatal(err)
			}
		}
		out, err := sess.Run(ctx, nil, []graph.Output{a.Value()}, nil)
		if err != nil || out[0].Float64At(0) != 3 {
			t.Fatalf("round %d: count %v, %v; want 3", round, out, err)
		}
	}
}
