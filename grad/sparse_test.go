package grad_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/grad/gradtest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

func TestSparseGradients(t *testing.T) {
	type xs = []graph.Output
	i32 := func(s *graph.Scope, v ...int32) graph.Output { return ops.Const(s, v) }
	cases := []gradtest.Case{
		{Name: "UnsortedSegmentSum", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.UnsortedSegmentSum(s, x[0], i32(s, 2, 0, 2, 1, 0), ops.Const(s, int32(4)))
		}, Inputs: []*tensor.Tensor{gradtest.Random(71, 5, 3)}},
		{Name: "DynamicPartition", Build: func(s *graph.Scope, x xs) graph.Output {
			p := ops.DynamicPartition(s, x[0], i32(s, 1, 0, 1, 1), 3)
			return ops.Add(s, ops.Sum(s, ops.Mul(s, p[0], p[0]), nil, false), ops.Sum(s, ops.Mul(s, p[1], p[1]), nil, false))
		}, Inputs: []*tensor.Tensor{gradtest.Random(72, 4, 2)}},
		{Name: "DynamicStitch", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.DynamicStitch(s, []graph.Output{i32(s, 0, 3), i32(s, 2, 1, 4)}, []graph.Output{x[0], x[1]})
		}, Inputs: []*tensor.Tensor{gradtest.Random(73, 2, 3), gradtest.Random(74, 3, 3)}},
		// The partitioned lookup of ops.EmbeddingLookup, by hand: unique ids,
		// split by shard (mod 2), gathered per shard, stitched back.
		{Name: "PartitionedLookup", Build: func(s *graph.Scope, x xs) graph.Output {
			ids := ops.Const(s, []int64{3, 0, 3, 5, 2})
			uniq, inv := ops.Unique(s, ids)
			shard, local := ops.PartitionIDs(s, uniq, "mod", 2, 0)
			locals := ops.DynamicPartition(s, local, shard, 2)
			pos := ops.DynamicPartition(s, ops.Range(s, ops.Size(s, uniq)), shard, 2)
			rows := []graph.Output{ops.Gather(s, x[0], locals[0], 0), ops.Gather(s, x[1], locals[1], 0)}
			return ops.Gather(s, ops.DynamicStitch(s, pos, rows), inv, 0)
		}, Inputs: []*tensor.Tensor{gradtest.Random(75, 3, 2), gradtest.Random(76, 3, 2)}},
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) { gradtest.Check(t, c) })
	}
}

// TestSparseOfEqualsDense checks that the indexed slices of a table used by
// two lookups (with repeated ids) equal its dense gradient, and that their
// indices are distinct after aggregation.
func TestSparseOfEqualsDense(t *testing.T) {
	s := graph.NewScope()
	table := ops.NewVariable(s, "table", tensor.Float64, []int{6, 3}, ops.ConstantInit(0.5))
	w1 := ops.Const(s, tensor.MustFromSlice([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 4, 3))
	w2 := ops.Const(s, tensor.MustFromSlice([]float64{-1, -2, -3, 0.5, 0.5, 0.5}, 2, 3))
	e1 := ops.Gather(s, table.Value(), ops.Const(s, []int64{4, 1, 4, 0}), 0)
	e2 := ops.Gather(s, table.Value(), ops.Const(s, tensor.MustFromSlice([]int32{1, 5}, 2, 1)), 0)
	loss := ops.Add(s, ops.Sum(s, ops.Mul(s, e1, w1), nil, false),
		ops.Sum(s, ops.Mul(s, ops.ReshapeTo(s, e2, 2, 3), w2), nil, false))
	gs, err := grad.Gradients(s, []graph.Output{loss}, []graph.Output{table.Value()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sl, ok := grad.SparseOf(s, gs[0])
	if !ok {
		t.Fatalf("gradient %v of a gathered table has no sparse form", gs[0])
	}
	dense := sl.Dense(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{table.Initializer()}); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{gs[0], dense, sl.Indices, sl.Values}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, got := out[0].Float64s(), out[1].Float64s()
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("dense form of the slices %v != dense gradient %v", got, want)
		}
	}
	idx := out[2].Int64s()
	seen := map[int64]bool{}
	for _, i := range idx {
		if seen[i] {
			t.Fatalf("indices %v repeat %d after aggregation", idx, i)
		}
		seen[i] = true
	}
	if len(idx) != 4 || out[3].Shape()[0] != 4 {
		t.Errorf("indices %v, values %v: want the 4 distinct rows 4, 1, 0, 5", idx, out[3].Shape())
	}
}

// TestSparseOfDenseMix: a table that also has a dense use has no sparse form.
func TestSparseOfDenseMix(t *testing.T) {
	s := graph.NewScope()
	table := ops.NewVariable(s, "table", tensor.Float64, []int{4, 2}, ops.ConstantInit(1))
	loss := ops.Add(s, ops.Sum(s, ops.Gather(s, table.Value(), ops.Const(s, []int32{1}), 0), nil, false),
		ops.Sum(s, ops.Square(s, table.Value()), nil, false))
	gs, err := grad.Gradients(s, []graph.Output{loss}, []graph.Output{table.Value()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := grad.SparseOf(s, gs[0]); ok {
		t.Fatal("a gradient with a dense part was taken as indexed slices")
	}
}
