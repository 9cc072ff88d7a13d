package ops

import (
	"math"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// Builders of the array family. Axis arguments may be negative (counted
// from the end); shape-valued tensors are 1-D int32.

// Reshape returns x with the dimensions held by shape (1-D int32). One
// dimension may be -1: it is computed so that the element count is kept.
// When shape is a constant the output shape is known at build time.
func Reshape(s *graph.Scope, x, shape graph.Output) graph.Output {
	return s.Out("Reshape", "Reshape", []graph.Output{x, shape}, nil)
}

// ReshapeTo is Reshape to constant dims (one may be -1).
func ReshapeTo(s *graph.Scope, x graph.Output, dims ...int) graph.Output {
	return Reshape(s, x, Const(s, arrayInts(dims)))
}

// Shape returns the dimensions of x as a 1-D int32 tensor.
func Shape(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("Shape", "Shape", []graph.Output{x}, nil)
}

// Rank returns the number of dimensions of x (int32 scalar).
func Rank(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("Rank", "Rank", []graph.Output{x}, nil)
}

// Size returns the number of elements of x (int32 scalar).
func Size(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("Size", "Size", []graph.Output{x}, nil)
}

// ExpandDims inserts a dimension of size 1 at axis, in [-rank-1, rank].
func ExpandDims(s *graph.Scope, x graph.Output, axis int) graph.Output {
	return s.Out("ExpandDims", "ExpandDims", []graph.Output{x}, map[string]any{"axis": axis})
}

// Squeeze removes the given dimensions, which must have size 1; with no
// axes it removes every dimension of size 1.
func Squeeze(s *graph.Scope, x graph.Output, axes ...int) graph.Output {
	return s.Out("Squeeze", "Squeeze", []graph.Output{x}, map[string]any{"axes": append([]int{}, axes...)})
}

// Transpose permutes the dimensions of x: output dimension i is input
// dimension perm[i]. A nil perm reverses the dimensions.
func Transpose(s *graph.Scope, x graph.Output, perm []int) graph.Output {
	return s.Out("Transpose", "Transpose", []graph.Output{x}, map[string]any{"perm": append([]int{}, perm...)})
}

// Concat joins values (at least one, same dtype and rank, equal dimensions
// except on axis) along axis.
func Concat(s *graph.Scope, axis int, values ...graph.Output) graph.Output {
	return s.Out("Concat", "Concat", values, map[string]any{"axis": axis})
}

// Slice returns the box of x starting at begin with extent size; a size of
// -1 extends to the end of that dimension.
func Slice(s *graph.Scope, x graph.Output, begin, size []int) graph.Output {
	return s.Out("Slice", "Slice", []graph.Output{x},
		map[string]any{"begin": append([]int{}, begin...), "size": append([]int{}, size...)})
}

// Split cuts x along axis into num equal parts. After a build error it
// returns num zero Outputs (none if num < 1), so that indexing the parts
// is safe; the scope holds the error.
func Split(s *graph.Scope, x graph.Output, axis, num int) []graph.Output {
	n := s.AddNode("Split", "Split", []graph.Output{x}, map[string]any{"axis": axis, "num_split": num})
	if n == nil {
		return make([]graph.Output, max(num, 0))
	}
	outs := make([]graph.Output, n.NumOutputs())
	for i := range outs {
		outs[i] = n.Output(i)
	}
	return outs
}

// Gather picks the slices of params at indices (int32 or int64) along
// axis; the result has shape params[:axis] + indices + params[axis+1:].
// An index out of range is a run-time error naming it.
func Gather(s *graph.Scope, params, indices graph.Output, axis int) graph.Output {
	return s.Out("Gather", "Gather", []graph.Output{params, indices}, map[string]any{"axis": axis})
}

// GatherGrad is the adjoint of Gather: a zero tensor of paramsShape (1-D
// int32) to which the slices of dy are added at indices along axis.
// Repeated indices accumulate.
func GatherGrad(s *graph.Scope, dy, indices, paramsShape graph.Output, axis int) graph.Output {
	return s.Out("GatherGrad", "GatherGrad", []graph.Output{dy, indices, paramsShape}, map[string]any{"axis": axis})
}

// OneHot adds a dimension of size depth to indices (int32 or int64),
// holding on where the index matches and off elsewhere, as dtype dt.
// Indices outside [0, depth) give rows of off. The new dimension is the
// last one unless OneHotAxis says otherwise (tf.one_hot's axis).
func OneHot(s *graph.Scope, indices graph.Output, depth int, on, off float32, dt tensor.DType, opts ...OneHotOption) graph.Output {
	attrs := map[string]any{"depth": depth, "on_value": on, "off_value": off, "dtype": dt}
	for _, o := range opts {
		o(attrs)
	}
	return s.Out("OneHot", "OneHot", []graph.Output{indices}, attrs)
}

// OneHotOption sets an optional attribute of OneHot.
type OneHotOption func(attrs map[string]any)

// OneHotAxis puts the new dimension at axis: -1 (the default) appends it,
// and for indices [batch, features], 1 gives [batch, depth, features] and
// 0 gives [depth, batch, features], as TensorFlow's axis.
func OneHotAxis(axis int) OneHotOption {
	return func(attrs map[string]any) { attrs["axis"] = axis }
}

// Fill returns a tensor of shape dims (1-D int32) holding the scalar value
// everywhere, with value's dtype.
func Fill(s *graph.Scope, dims, value graph.Output) graph.Output {
	return s.Out("Fill", "Fill", []graph.Output{dims, value}, nil)
}

// ZerosLike returns zeros with x's dtype and shape.
func ZerosLike(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("ZerosLike", "ZerosLike", []graph.Output{x}, nil)
}

// OnesLike returns ones (true for bool) with x's dtype and shape.
func OnesLike(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("OnesLike", "OnesLike", []graph.Output{x}, nil)
}

// Zeros returns a zero tensor of dtype dt and the given dimensions.
func Zeros(s *graph.Scope, dt tensor.DType, dims ...int) graph.Output {
	return Fill(s, Const(s, arrayInts(dims)), Scalar(s, dt, 0))
}

// Tile repeats x multiples[i] times along dimension i.
func Tile(s *graph.Scope, x graph.Output, multiples []int) graph.Output {
	return s.Out("Tile", "Tile", []graph.Output{x}, map[string]any{"multiples": append([]int{}, multiples...)})
}

// Pad surrounds x with zeros: paddings[i] = {before, after} for dimension i.
func Pad(s *graph.Scope, x graph.Output, paddings [][2]int) graph.Output {
	p := make([]int, 0, 2*len(paddings))
	for _, b := range paddings {
		p = append(p, b[0], b[1])
	}
	return s.Out("Pad", "Pad", []graph.Output{x}, map[string]any{"paddings": p})
}

// arrayInts converts dims to a 1-D constant's data: int32 as TensorFlow
// makes a list of Python ints, int64 if a value does not fit int32 (never
// truncated), and never nil, so that an empty list is a 1-D tensor of
// length 0.
func arrayInts(dims []int) any {
	d := make([]int32, len(dims))
	for i, v := range dims {
		if v < math.MinInt32 || v > math.MaxInt32 {
			d64 := make([]int64, len(dims))
			for j, v := range dims {
				d64[j] = int64(v)
			}
			return d64
		}
		d[i] = int32(v)
	}
	return d
}
