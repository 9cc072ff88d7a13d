package ops_test

import (
	"context"
	"slices"
	"strings"
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

// TestBuildersNeverPanic checks that bad shapes and dtypes given to
// builders are errors on the scope, and that what the builders return
// after an error (a nil *Variable, zero Outputs) can be used without
// panicking: the scope keeps the first error.
func TestBuildersNeverPanic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(s *graph.Scope)
		want  string
	}{
		{"variable with an invalid dtype", func(s *graph.Scope) {
			v := ops.NewVariable(s, "v", tensor.Invalid, []int{2}, ops.ZerosInit())
			ops.Add(s, v.Value(), v.Value())
			_ = v.Name() + v.String() + v.DType().String() + v.Shape().String()
			if v.Node() != nil || v.Initializer() != nil {
				t.Error("a nil Variable has a node")
			}
		}, "invalid dtype"},
		{"variable with a negative dimension", func(s *graph.Scope) {
			v := ops.NewVariable(s, "v", tensor.Float32, []int{2, -3}, ops.ZerosInit())
			ops.MatMul(s, v.Value(), v.Value(), false, false)
			ops.GlobalVariablesInitializer(s)
		}, "must be fully defined"},
		{"variable of 2^64 elements", func(s *graph.Scope) {
			v := ops.NewVariable(s, "v", tensor.Float32, []int{65536, 65536, 65536, 65536}, ops.GlorotUniformInit(1))
			ops.VariablesInitializer(s, v)
		}, "overflows"},
		{"variable without initializer", func(s *graph.Scope) {
			ops.Identity(s, ops.NewVariable(s, "v", tensor.Float32, []int{2}, nil).Value())
		}, "no initializer"},
		{"reused variable that does not exist", func(s *graph.Scope) {
			ops.Identity(s, ops.NewVariable(s.ReuseVariables(), "nope", tensor.Float32, []int{2}, ops.ZerosInit()).Value())
		}, "does not exist"},
		{"scalar of an invalid dtype", func(s *graph.Scope) {
			ops.Zeros(s, tensor.Invalid, 2, 3)
		}, "invalid dtype"},
		{"split that does not divide", func(s *graph.Scope) {
			p := ops.Split(s, ops.Const(s, []float32{1, 2, 3}), 0, 2)
			ops.Add(s, p[0], p[1])
		}, "not divisible by num_split 2"},
		{"dropout of a missing input", func(s *graph.Scope) {
			ops.Dropout(s, graph.Output{}, 0.5, 1)
		}, "input is missing"},
	} {
		s := graph.NewScope()
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic: %v", tc.name, r)
				}
			}()
			tc.build(s)
		}()
		if err := s.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: scope error %v, want one containing %q", tc.name, err, tc.want)
		}
	}

	// Variable reuse keeps working around a failed build.
	s := graph.NewScope()
	ds := s.SubScope("dense")
	w := ops.NewVariable(ds, "W", tensor.Float32, []int{2, 2}, ops.ZerosInit())
	again := ops.NewVariable(ds.ReuseVariables(), "W", tensor.Float32, []int{2, 2}, ops.ZerosInit())
	if s.Err() != nil || again.Node() != w.Node() {
		t.Errorf("reuse: got %v (err %v), want %v", again, s.Err(), w)
	}
}

// TestLargeDimsNotTruncated checks that dimensions beyond int32 are kept
// (as int64 constants, as TensorFlow converts Python ints), never
// truncated: [2^32, 0] has zero elements and can be built and run.
func TestLargeDimsNotTruncated(t *testing.T) {
	var z graph.Output
	got := fidelityRun(t, func(s *graph.Scope) []graph.Output {
		z = ops.Zeros(s, tensor.Float32, 1<<32, 0)
		return []graph.Output{z, ops.Const(s, []int{1 << 40, 1})}
	})
	if !z.Shape().Equal(tensor.MakeShape(1<<32, 0)) || !slices.Equal(got[0].Shape(), []int{1 << 32, 0}) {
		t.Errorf("Zeros(2^32, 0) has shape %v at build time, %v at run time", z.Shape(), got[0].Shape())
	}
	if want := tensor.MustFromSlice([]int64{1 << 40, 1}, 2); !tensor.Equal(got[1], want) {
		t.Errorf("Const([]int{2^40, 1}) = %v, want %v", got[1], want)
	}
}

// TestReduceAxes checks the reductions' axis lists as TensorFlow 1.x reads
// them: nil reduces every axis, an empty list none (x itself, keepDims or
// not), a list the axes it names.
func TestReduceAxes(t *testing.T) {
	xv := tensor.MustFromSlice([]float64{1, -2, 3, 4, 5, -6}, 2, 3)
	type reduce func(*graph.Scope, graph.Output, []int, bool) graph.Output
	cases := []struct {
		name string
		f    reduce
		axis []int
		keep bool
		want *tensor.Tensor
	}{
		{"SumNil", ops.Sum, nil, false, tensor.Scalar(5.0)},
		{"SumNilKeepDims", ops.Sum, nil, true, tensor.MustFromSlice([]float64{5}, 1, 1)},
		{"SumEmpty", ops.Sum, []int{}, false, xv},
		{"SumEmptyKeepDims", ops.Sum, []int{}, true, xv},
		{"SumAxis", ops.Sum, []int{-1}, false, tensor.MustFromSlice([]float64{2, 3}, 2)},
		{"MeanNil", ops.Mean, nil, false, tensor.Scalar(5.0 / 6)},
		{"MeanEmpty", ops.Mean, []int{}, false, xv},
		{"MaxEmpty", ops.Max, []int{}, false, xv},
		{"MinEmpty", ops.Min, []int{}, false, xv},
		{"ProdEmpty", ops.Prod, []int{}, false, xv},
		{"ProdNil", ops.Prod, nil, false, tensor.Scalar(720.0)},
	}
	var outs []graph.Output
	got := fidelityRun(t, func(s *graph.Scope) []graph.Output {
		x := ops.Const(s, xv)
		for _, c := range cases {
			outs = append(outs, c.f(s, x, c.axis, c.keep))
		}
		return outs
	})
	for i, c := range cases {
		if !tensor.Equal(got[i], c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got[i], c.want)
		}
		if !outs[i].Shape().IsCompatibleWith(c.want.StaticShape()) {
			t.Errorf("%s: static shape %v, value shape %v", c.name, outs[i].Shape(), c.want.Shape())
		}
	}
}
