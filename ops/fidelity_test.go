package ops_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// fidelityRun builds with build, runs its outputs and returns them.
func fidelityRun(t *testing.T, build func(s *graph.Scope) []graph.Output) []*tensor.Tensor {
	t.Helper()
	s := graph.NewScope()
	outs := build(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess := stateSession(t, s.Graph())
	got, err := sess.Run(context.Background(), nil, outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestArgOutputType checks ArgMax's and ArgMin's output_type: int64 by
// default, as TensorFlow's, int32 when asked.
func TestArgOutputType(t *testing.T) {
	var def, i32, min32 graph.Output
	got := fidelityRun(t, func(s *graph.Scope) []graph.Output {
		x := ops.Const(s, tensor.MustFromSlice([]float32{1, 5, 3, 7, 2, 0}, 2, 3))
		def = ops.ArgMax(s, x, 1)
		i32 = ops.ArgMax(s, x, 1, ops.ArgOutputType(tensor.Int32))
		min32 = ops.ArgMin(s, x, 0, ops.ArgOutputType(tensor.Int32))
		return []graph.Output{def, i32, min32}
	})
	if def.DType() != tensor.Int64 || i32.DType() != tensor.Int32 || min32.DType() != tensor.Int32 {
		t.Errorf("dtypes %v, %v, %v; want int64, int32, int32", def.DType(), i32.DType(), min32.DType())
	}
	// Rows [1 5 3] and [7 2 0]: argmax 1 and 0; columns: argmin 0, 1, 1.
	for i, want := range []*tensor.Tensor{
		tensor.MustFromSlice([]int64{1, 0}, 2),
		tensor.MustFromSlice([]int32{1, 0}, 2),
		tensor.MustFromSlice([]int32{0, 1, 1}, 3),
	} {
		if !tensor.Equal(got[i], want) {
			t.Errorf("output %d = %v, want %v", i, got[i], want)
		}
	}
	s := graph.NewScope()
	ops.ArgMax(s, ops.Const(s, []float32{1, 2}), 0, ops.ArgOutputType(tensor.Float32))
	if s.Err() == nil {
		t.Error("ArgMax with output_type float32: no error")
	}
}

// TestOneHotAxis checks tf.one_hot's documented example through the
// builder: indices [0, 2, -1, 1], depth 3, on 5, off 0, axis 0 gives
// [[5 0 0 0] [0 0 0 5] [0 5 0 0]].
func TestOneHotAxis(t *testing.T) {
	got := fidelityRun(t, func(s *graph.Scope) []graph.Output {
		idx := ops.Const(s, []int32{0, 2, -1, 1})
		return []graph.Output{
			ops.OneHot(s, idx, 3, 5, 0, tensor.Float32, ops.OneHotAxis(0)),
			ops.OneHot(s, idx, 3, 5, 0, tensor.Float32),
		}
	})
	want0 := tensor.MustFromSlice([]float32{5, 0, 0, 0, 0, 0, 0, 5, 0, 5, 0, 0}, 3, 4)
	wantLast := tensor.MustFromSlice([]float32{5, 0, 0, 0, 0, 5, 0, 0, 0, 0, 5, 0}, 4, 3)
	if !tensor.Equal(got[0], want0) || !tensor.Equal(got[1], wantLast) {
		t.Errorf("OneHot axis 0 = %v, axis -1 = %v; want %v and %v", got[0], got[1], want0, wantLast)
	}
}
