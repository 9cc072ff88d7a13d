package op_test

import (
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// arrayIn builds one input of a shape-inference case (see infer_test.go).
type arrayIn = inferIn

// cst is a constant input (1-D int32 from ints, or any tensor).
func cst(v any) arrayIn {
	return func(s *graph.Scope) graph.Output {
		t, ok := v.(*tensor.Tensor)
		if !ok {
			ints := v.([]int)
			d := make([]int32, len(ints))
			for i, x := range ints {
				d[i] = int32(x)
			}
			t = tensor.MustFromSlice(d, len(d))
		}
		return s.Out("Const", "c", nil, map[string]any{"value": t})
	}
}

// TestArrayInfer checks shape inference in the compact form
// "dtype[dims]" per output (joined by ";"), or an error substring.
func TestArrayInfer(t *testing.T) {
	cases := []inferCase{
		{"Reshape", []arrayIn{ph("float32[2,3,4]"), cst([]int{-1, 4})}, nil, "float32[6,4]"},
		{"Reshape", []arrayIn{ph("float32[?,3]"), cst([]int{-1, 4})}, nil, "float32[?,4]"},
		{"Reshape", []arrayIn{ph("int64[2,3]"), cst([]int{3, 2})}, nil, "int64[3,2]"},
		{"Reshape", []arrayIn{ph("float32[0,3]"), cst([]int{-1, 0})}, nil, "float32[0,0]"},
		{"Reshape", []arrayIn{ph("float32[2,3]"), ph("int32[3]")}, nil, "float32[?,?,?]"},
		{"Reshape", []arrayIn{ph("float32[2,3]"), ph("int32<unknown>")}, nil, "float32<unknown>"},
		{"Reshape", []arrayIn{ph("float32[2,3]"), cst([]int{4, -1})}, nil, "error: cannot reshape [2,3] to [4 -1]"},
		{"Reshape", []arrayIn{ph("float32[2,3]"), cst([]int{5})}, nil, "error: 6 elements do not fit 5"},
		{"Reshape", []arrayIn{ph("float32[2,3]"), cst([]int{-1, -1})}, nil, "error: only one dimension may be -1"},
		{"Reshape", []arrayIn{ph("float32[2,3]"), ph("float32[2]")}, nil, "error: shape must be int32 or int64"},
		{"Shape", []arrayIn{ph("float32[?,3]")}, nil, "int32[2]"},
		{"Shape", []arrayIn{ph("float32<unknown>")}, nil, "int32[?]"},
		{"Rank", []arrayIn{ph("bool[4]")}, nil, "int32[]"},
		{"Size", []arrayIn{ph("uint8[4]")}, nil, "int32[]"},
		{"ExpandDims", []arrayIn{ph("float32[2,3]")}, map[string]any{"axis": 0}, "float32[1,2,3]"},
		{"ExpandDims", []arrayIn{ph("float32[2,3]")}, map[string]any{"axis": -1}, "float32[2,3,1]"},
		{"ExpandDims", []arrayIn{ph("float32[2,3]")}, map[string]any{"axis": 3}, "error: axis 3 is out of range [-3, 2] for shape [2,3]"},
		{"Squeeze", []arrayIn{ph("float32[1,2,1,3]")}, nil, "float32[2,3]"},
		{"Squeeze", []arrayIn{ph("float32[1,2,1,3]")}, map[string]any{"axes": []int{-2}}, "float32[1,2,3]"},
		{"Squeeze", []arrayIn{ph("float32[1,?,3]")}, nil, "float32<unknown>"},
		{"Squeeze", []arrayIn{ph("float32[1,2]")}, map[string]any{"axes": []int{1}}, "error: cannot squeeze dimension 1 of shape [1,2]"},
		{"Transpose", []arrayIn{ph("float32[2,3,4]")}, map[string]any{"perm": []int{2, 0, 1}}, "float32[4,2,3]"},
		{"Transpose", []arrayIn{ph("float32[2,?]")}, nil, "float32[?,2]"},
		{"Transpose", []arrayIn{ph("float32[2,3]")}, map[string]any{"perm": []int{0, 0}}, "error: perm [0 0] is not a permutation"},
		{"Concat", []arrayIn{ph("float32[2,3]"), ph("float32[2,5]")}, map[string]any{"axis": 1}, "float32[2,8]"},
		{"Concat", []arrayIn{ph("float32[?,3]"), ph("float32[2,?]")}, map[string]any{"axis": -1}, "float32[2,?]"},
		{"Concat", []arrayIn{ph("float32<unknown>"), ph("float32[2,5]")}, map[string]any{"axis": 0}, "float32[?,5]"},
		{"Concat", []arrayIn{ph("float32[2,3]"), ph("float32[4,5]")}, map[string]any{"axis": 1}, "error: input 1 has shape [4,5], other inputs have dimension 0 = 2"},
		{"Concat", []arrayIn{ph("float32[2,3]"), ph("float32[2]")}, map[string]any{"axis": 0}, "error: ranks differ"},
		{"Concat", []arrayIn{ph("float32[2,3]"), ph("int32[2,3]")}, map[string]any{"axis": 0}, "error: different dtypes"},
		{"Concat", nil, map[string]any{"axis": 0}, "error: needs at least one input"},
		{"Slice", []arrayIn{ph("float32[4,5]")}, map[string]any{"begin": []int{1, 2}, "size": []int{2, -1}}, "float32[2,3]"},
		{"Slice", []arrayIn{ph("float32[?,5]")}, map[string]any{"begin": []int{1, 0}, "size": []int{-1, 5}}, "float32[?,5]"},
		{"Slice", []arrayIn{ph("float32[4,5]")}, map[string]any{"begin": []int{3, 0}, "size": []int{2, 1}}, "error: out of bounds of shape [4,5]"},
		{"Split", []arrayIn{ph("float32[4,6]")}, map[string]any{"axis": 1, "num_split": 3}, "float32[4,2];float32[4,2];float32[4,2]"},
		{"Split", []arrayIn{ph("float32[4,6]")}, map[string]any{"axis": 0, "num_split": 3}, "error: dimension 0 of shape [4,6] (4) is not divisible by num_split 3"},
		{"Gather", []arrayIn{ph("float32[10,3]"), ph("int32[4]")}, nil, "float32[4,3]"},
		{"Gather", []arrayIn{ph("float32[10,3,2]"), ph("int64[4,5]")}, map[string]any{"axis": 1}, "float32[10,4,5,2]"},
		{"Gather", []arrayIn{ph("float32[10,3]"), ph("int32[]")}, map[string]any{"axis": -1}, "float32[10]"},
		{"Gather", []arrayIn{ph("float32[10,3]"), ph("float32[4]")}, nil, "error: indices must be int32 or int64"},
		{"GatherGrad", []arrayIn{ph("float32[4,3]"), ph("int32[4]"), cst([]int{10, 3})}, nil, "float32[10,3]"},
		{"GatherGrad", []arrayIn{ph("float32[4,3]"), ph("int32[4]"), ph("int32[2]")}, nil, "float32[?,?]"},
		{"OneHot", []arrayIn{ph("int64[?]")}, map[string]any{"depth": 10}, "float32[?,10]"},
		{"OneHot", []arrayIn{ph("int32[2,3]")}, map[string]any{"depth": 4, "dtype": tensor.Int32}, "int32[2,3,4]"},
		{"OneHot", []arrayIn{ph("float32[2]")}, map[string]any{"depth": 4}, "error: indices must be int32 or int64"},
		{"OneHot", []arrayIn{ph("int32[2,3]")}, map[string]any{"depth": 4, "axis": 1}, "float32[2,4,3]"},
		{"OneHot", []arrayIn{ph("int32[2,3]")}, map[string]any{"depth": 4, "axis": 0}, "float32[4,2,3]"},
		{"OneHot", []arrayIn{ph("int32[2,3]")}, map[string]any{"depth": 4, "axis": 2}, "float32[2,3,4]"},
		{"OneHot", []arrayIn{ph("int32[]")}, map[string]any{"depth": 4, "axis": 0}, "float32[4]"},
		{"OneHot", []arrayIn{ph("int32[2,3]")}, map[string]any{"depth": 4, "axis": 3}, "error: axis 3 is out of range [-1, 2]"},
		{"OneHot", []arrayIn{ph("int32[2,3]")}, map[string]any{"depth": 4, "axis": -2}, "error: axis must be -1 or in [0, rank]"},
		{"Fill", []arrayIn{cst([]int{2, 3}), ph("float64[]")}, nil, "float64[2,3]"},
		{"Fill", []arrayIn{ph("int32[3]"), ph("int32[]")}, nil, "int32[?,?,?]"},
		{"Fill", []arrayIn{cst([]int{2}), ph("float32[2]")}, nil, "error: value must be a scalar, got shape [2]"},
		{"ZerosLike", []arrayIn{ph("float32[?,3]")}, nil, "float32[?,3]"},
		{"OnesLike", []arrayIn{ph("bool[2]")}, nil, "bool[2]"},
		{"Tile", []arrayIn{ph("float32[2,?]")}, map[string]any{"multiples": []int{3, 2}}, "float32[6,?]"},
		{"Tile", []arrayIn{ph("float32[2,3]")}, map[string]any{"multiples": []int{3}}, "error: multiples [3] has 1 entries for shape [2,3]"},
		{"Pad", []arrayIn{ph("float32[2,3]")}, map[string]any{"paddings": []int{1, 1, 0, 2}}, "float32[4,5]"},
		{"Pad", []arrayIn{ph("float32[2,3]")}, map[string]any{"paddings": []int{1, 1}}, "error: paddings [1 1] must hold 2 values per dimension of shape [2,3]"},
		// StridedSlice: x[:, ::2] keeps an unknown first dimension; x[1]
		// drops it; non-constant subscripts leave the sizes unknown.
		{"StridedSlice", []arrayIn{ph("float32[?,5,4]"), cst([]int{0, 0}), cst([]int{0, 0}), cst([]int{1, 2})},
			map[string]any{"begin_mask": 3, "end_mask": 3}, "float32[?,3,4]"},
		{"StridedSlice", []arrayIn{ph("float32[?,5,4]"), cst([]int{1}), cst([]int{2}), cst([]int{1})},
			map[string]any{"shrink_axis_mask": 1}, "float32[5,4]"},
		{"StridedSlice", []arrayIn{ph("float32[?,5,4]"), cst([]int{0, 0, 0}), cst([]int{0, 0, 0}), cst([]int{1, 1, 1})},
			map[string]any{"ellipsis_mask": 1, "new_axis_mask": 2, "shrink_axis_mask": 4}, "float32[?,5,1]"},
		{"StridedSlice", []arrayIn{ph("int64[6,5]"), ph("int32[2]"), ph("int32[2]"), cst([]int{1, -1})},
			map[string]any{"end_mask": 2}, "int64[?,?]"},
		{"StridedSlice", []arrayIn{ph("int64[6,5]"), ph("int32[2]"), ph("int32[2]"), ph("int32[2]")},
			map[string]any{"begin_mask": 2, "end_mask": 2, "shrink_axis_mask": 1}, "int64[?]"},
		{"StridedSlice", []arrayIn{ph("bool[6,5]"), ph("int32<unknown>"), ph("int32<unknown>"), ph("int32<unknown>")}, nil, "bool[?,?]"},
		{"StridedSlice", []arrayIn{ph("bool<unknown>"), cst([]int{1}), cst([]int{2}), cst([]int{1})}, nil, "bool<unknown>"},
		{"StridedSlice", []arrayIn{ph("float32[6]"), cst([]int{1}), cst([]int{2}), ph("float32[1]")}, nil, "error: strides must be int32 or int64"},
		{"StridedSlice", []arrayIn{ph("float32[6]"), cst([]int{9}), cst([]int{10}), cst([]int{1})},
			map[string]any{"shrink_axis_mask": 1}, "error: index 9 of subscript 0 is out of range for dimension 0 of size 6"},
		{"StridedSliceGrad", []arrayIn{cst([]int{6, 5}), cst([]int{1}), cst([]int{2}), cst([]int{1}), ph("float64[5]")},
			map[string]any{"shrink_axis_mask": 1}, "float64[6,5]"},
		{"StridedSliceGrad", []arrayIn{cst([]int{6, 5}), cst([]int{1}), cst([]int{2}), cst([]int{1}), ph("float64[4]")},
			map[string]any{"shrink_axis_mask": 1}, "error: dy has shape [4], but slicing shape [6,5] gives [5]"},
		{"StridedSliceGrad", []arrayIn{ph("int32[2]"), cst([]int{1}), cst([]int{2}), cst([]int{1}), ph("float32[5]")}, nil, "float32[?,?]"},
	}
	checkInfer(t, cases)
}

// shapeOf is the shape of a placeholder of spec cut and joined as build
// does: the shape-valued input of a Reshape written as
// tf.concat([tf.shape(x)[:2], [3]], 0), for instance.
func shapeOf(spec string, build func(s *graph.Scope, shape graph.Output) graph.Output) arrayIn {
	return func(s *graph.Scope) graph.Output {
		return build(s, s.Out("Shape", "shape", []graph.Output{ph(spec)(s)}, nil))
	}
}

// TestArrayInferShapeValues: a shape computed in the graph from another
// tensor's Shape (sliced, cast, joined with constants) gives Reshape and
// Fill the dimensions it knows at build time, as TensorFlow's shape
// inference does, rather than none (a Dense layer over [batch, time,
// features] lost its output's last dimension, and the next layer refused
// it).
func TestArrayInferShapeValues(t *testing.T) {
	slice := func(begin, size int) func(s *graph.Scope, sh graph.Output) graph.Output {
		return func(s *graph.Scope, sh graph.Output) graph.Output {
			return s.Out("Slice", "slice", []graph.Output{sh}, map[string]any{"begin": []int{begin}, "size": []int{size}})
		}
	}
	join := func(first func(s *graph.Scope, sh graph.Output) graph.Output, last ...int) func(s *graph.Scope, sh graph.Output) graph.Output {
		return func(s *graph.Scope, sh graph.Output) graph.Output {
			return s.Out("Concat", "concat", []graph.Output{first(s, sh), cst(last)(s)}, map[string]any{"axis": 0})
		}
	}
	strided := func(begin, end int) func(s *graph.Scope, sh graph.Output) graph.Output {
		return func(s *graph.Scope, sh graph.Output) graph.Output {
			return s.Out("StridedSlice", "strided", []graph.Output{sh, cst([]int{begin})(s), cst([]int{end})(s), cst([]int{1})(s)}, nil)
		}
	}
	cast := func(s *graph.Scope, sh graph.Output) graph.Output {
		return s.Out("Cast", "cast", []graph.Output{sh}, map[string]any{"dtype": tensor.Int64})
	}
	whole := func(s *graph.Scope, sh graph.Output) graph.Output { return sh }
	checkInfer(t, []inferCase{
		{"Reshape", []arrayIn{ph("float32[?,3]"), shapeOf("float32[?,5,2]", join(slice(0, 2), 3))}, nil, "float32[?,5,3]"},
		{"Reshape", []arrayIn{ph("float32[?,3]"), shapeOf("float32[?,?,2]", join(slice(0, 2), 3))}, nil, "float32[?,?,3]"},
		{"Reshape", []arrayIn{ph("float32[?,3]"), shapeOf("float32[?,5,2]", join(strided(0, -1), 3))}, nil, "float32[?,5,3]"},
		{"Reshape", []arrayIn{ph("float32[?,3]"), shapeOf("float32[?,5,2]", func(s *graph.Scope, sh graph.Output) graph.Output { return cast(s, join(slice(0, 2), 3)(s, sh)) })}, nil, "float32[?,5,3]"},
		{"Reshape", []arrayIn{ph("float32[4,6]"), shapeOf("float32[?,2]", join(slice(1, 1), -1))}, nil, "float32[2,12]"},
		{"Reshape", []arrayIn{ph("float32[4,6]"), shapeOf("float32[2,?]", join(slice(0, 1), 5))}, nil, "error: 24 elements do not fit 10"},
		{"Reshape", []arrayIn{ph("float32[4,6]"), shapeOf("float32[3,8]", whole)}, nil, "float32[3,8]"},
		{"Reshape", []arrayIn{ph("float32[?,6]"), shapeOf("float32<unknown>", whole)}, nil, "float32<unknown>"},
		{"Fill", []arrayIn{shapeOf("float32[?,7]", whole), ph("float32[]")}, nil, "float32[?,7]"},
		{"Fill", []arrayIn{shapeOf("float32[?,7]", join(slice(1, 1), 2)), ph("float32[]")}, nil, "float32[7,2]"},
	})
}
