package ops

import (
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// Math builders. Binary ops broadcast their operands numpy-style; nodes are
// named after their op. Errors are recorded in the scope (see graph.Scope).

func mathBinary(s *graph.Scope, opName string, a, b graph.Output) graph.Output {
	return s.Out(opName, opName, []graph.Output{a, b}, nil)
}

func mathUnary(s *graph.Scope, opName string, x graph.Output) graph.Output {
	return s.Out(opName, opName, []graph.Output{x}, nil)
}

// Add returns a + b.
func Add(s *graph.Scope, a, b graph.Output) graph.Output { return mathBinary(s, "Add", a, b) }

// Sub returns a - b.
func Sub(s *graph.Scope, a, b graph.Output) graph.Output { return mathBinary(s, "Sub", a, b) }

// Mul returns a * b.
func Mul(s *graph.Scope, a, b graph.Output) graph.Output { return mathBinary(s, "Mul", a, b) }

// Div returns a / b (integer division truncates; an integer zero divisor is a run-time error).
func Div(s *graph.Scope, a, b graph.Output) graph.Output { return mathBinary(s, "Div", a, b) }

// Pow returns a ** b (floats only).
func Pow(s *graph.Scope, a, b graph.Output) graph.Output { return mathBinary(s, "Pow", a, b) }

// Maximum returns max(a, b) element-wise.
func Maximum(s *graph.Scope, a, b graph.Output) graph.Output { return mathBinary(s, "Maximum", a, b) }

// Minimum returns min(a, b) element-wise.
func Minimum(s *graph.Scope, a, b graph.Output) graph.Output { return mathBinary(s, "Minimum", a, b) }

// SquaredDifference returns (a - b)^2.
func SquaredDifference(s *graph.Scope, a, b graph.Output) graph.Output {
	return mathBinary(s, "SquaredDifference", a, b)
}

// Greater returns a > b as a bool tensor.
func Greater(s *graph.Scope, a, b graph.Output) graph.Output { return mathBinary(s, "Greater", a, b) }

// GreaterEqual returns a >= b as a bool tensor.
func GreaterEqual(s *graph.Scope, a, b graph.Output) graph.Output {
	return mathBinary(s, "GreaterEqual", a, b)
}

// Less returns a < b as a bool tensor.
func Less(s *graph.Scope, a, b graph.Output) graph.Output { return mathBinary(s, "Less", a, b) }

// LessEqual returns a <= b as a bool tensor.
func LessEqual(s *graph.Scope, a, b graph.Output) graph.Output {
	return mathBinary(s, "LessEqual", a, b)
}

// Equal returns a == b as a bool tensor.
func Equal(s *graph.Scope, a, b graph.Output) graph.Output { return mathBinary(s, "Equal", a, b) }

// NotEqual returns a != b as a bool tensor.
func NotEqual(s *graph.Scope, a, b graph.Output) graph.Output { return mathBinary(s, "NotEqual", a, b) }

// LogicalAnd returns a && b for bool tensors.
func LogicalAnd(s *graph.Scope, a, b graph.Output) graph.Output {
	return mathBinary(s, "LogicalAnd", a, b)
}

// LogicalOr returns a || b for bool tensors.
func LogicalOr(s *graph.Scope, a, b graph.Output) graph.Output {
	return mathBinary(s, "LogicalOr", a, b)
}

// Neg returns -x.
func Neg(s *graph.Scope, x graph.Output) graph.Output { return mathUnary(s, "Neg", x) }

// Abs returns |x|.
func Abs(s *graph.Scope, x graph.Output) graph.Output { return mathUnary(s, "Abs", x) }

// Sign returns -1, 0 or 1 by the sign of x.
func Sign(s *graph.Scope, x graph.Output) graph.Output { return mathUnary(s, "Sign", x) }

// Exp returns e^x.
func Exp(s *graph.Scope, x graph.Output) graph.Output { return mathUnary(s, "Exp", x) }

// Log returns the natural logarithm of x.
func Log(s *graph.Scope, x graph.Output) graph.Output { return mathUnary(s, "Log", x) }

// Square returns x^2.
func Square(s *graph.Scope, x graph.Output) graph.Output { return mathUnary(s, "Square", x) }

// Sqrt returns the square root of x.
func Sqrt(s *graph.Scope, x graph.Output) graph.Output { return mathUnary(s, "Sqrt", x) }

// Rsqrt returns 1/sqrt(x).
func Rsqrt(s *graph.Scope, x graph.Output) graph.Output { return mathUnary(s, "Rsqrt", x) }

// Reciprocal returns 1/x.
func Reciprocal(s *graph.Scope, x graph.Output) graph.Output { return mathUnary(s, "Reciprocal", x) }

// LogicalNot returns !x for a bool tensor.
func LogicalNot(s *graph.Scope, x graph.Output) graph.Output { return mathUnary(s, "LogicalNot", x) }

// Cast converts x to dt.
func Cast(s *graph.Scope, x graph.Output, dt tensor.DType) graph.Output {
	return s.Out("Cast", "Cast", []graph.Output{x}, map[string]any{"dtype": dt})
}

// Select is TensorFlow 1's tf.where(cond, t, e) (the Select op): t and e
// have one shape, and cond (bool) is either
//   - a scalar, which picks all of t or all of e;
//   - a vector whose length is t's first dimension, which picks whole rows
//     (cond[i] ? t[i, ...] : e[i, ...]) when t has rank > 1;
//   - of t's shape, which picks element-wise.
//
// It never broadcasts: for numpy broadcasting of the three inputs (TF 2's
// tf.where) use SelectV2. Other shapes are a build (or run) error naming
// the node and the shapes.
func Select(s *graph.Scope, cond, t, e graph.Output) graph.Output {
	return s.Out("Select", "Select", []graph.Output{cond, t, e}, nil)
}

// SelectV2 returns cond ? t : e element-wise, with cond (bool), t and e
// broadcast together numpy-style (TensorFlow's SelectV2, TF 2's tf.where).
func SelectV2(s *graph.Scope, cond, t, e graph.Output) graph.Output {
	return s.Out("SelectV2", "SelectV2", []graph.Output{cond, t, e}, nil)
}

// AddN returns the sum of one or more tensors of one shape and dtype.
func AddN(s *graph.Scope, xs ...graph.Output) graph.Output {
	return s.Out("AddN", "AddN", xs, nil)
}

// Reductions take their axes as TensorFlow 1.x's reduction_indices: a nil
// axis reduces every axis, and an empty, non-nil one (TensorFlow's
// axis=[]) reduces none, returning x unchanged whatever keepDims says.
// Negative axes count from the end. A list built by appending to a nil
// slice stays nil when nothing is appended, and so reduces every axis;
// start it from make([]int, 0) where finding no axis means no reduction.
//
// On the graph, the reduction ops' axis attribute cannot tell nil from
// empty once serialised, and there an empty list means every axis; so a
// reduction over no axes is built as an Identity node named after the
// reduction, and a nil axis as the empty attribute.
func mathReduce(s *graph.Scope, opName string, x graph.Output, axis []int, keepDims bool) graph.Output {
	if axis != nil && len(axis) == 0 {
		return s.Out("Identity", opName, []graph.Output{x}, nil)
	}
	if axis == nil {
		axis = []int{}
	}
	return s.Out(opName, opName, []graph.Output{x}, map[string]any{"axis": axis, "keep_dims": keepDims})
}

// Sum returns the sum of x over axis (every axis if nil, none if empty);
// keepDims keeps the reduced axes with size 1.
func Sum(s *graph.Scope, x graph.Output, axis []int, keepDims bool) graph.Output {
	return mathReduce(s, "Sum", x, axis, keepDims)
}

// Mean returns the mean of x over axis (every axis if nil, none if empty);
// integer means truncate.
func Mean(s *graph.Scope, x graph.Output, axis []int, keepDims bool) graph.Output {
	return mathReduce(s, "Mean", x, axis, keepDims)
}

// Max returns the maximum of x over axis (every axis if nil, none if empty).
func Max(s *graph.Scope, x graph.Output, axis []int, keepDims bool) graph.Output {
	return mathReduce(s, "Max", x, axis, keepDims)
}

// Min returns the minimum of x over axis (every axis if nil, none if empty).
func Min(s *graph.Scope, x graph.Output, axis []int, keepDims bool) graph.Output {
	return mathReduce(s, "Min", x, axis, keepDims)
}

// Prod returns the product of x over axis (every axis if nil, none if empty).
func Prod(s *graph.Scope, x graph.Output, axis []int, keepDims bool) graph.Output {
	return mathReduce(s, "Prod", x, axis, keepDims)
}

// ArgMax returns the index of the largest element of x along axis (the
// first one on ties), as int64 unless ArgOutputType asks for int32.
func ArgMax(s *graph.Scope, x graph.Output, axis int, opts ...ArgOption) graph.Output {
	return s.Out("ArgMax", "ArgMax", []graph.Output{x}, mathArgAttrs(axis, opts))
}

// ArgMin returns the index of the smallest element of x along axis (the
// first one on ties), as int64 unless ArgOutputType asks for int32.
func ArgMin(s *graph.Scope, x graph.Output, axis int, opts ...ArgOption) graph.Output {
	return s.Out("ArgMin", "ArgMin", []graph.Output{x}, mathArgAttrs(axis, opts))
}

// ArgOption sets an optional attribute of ArgMax and ArgMin.
type ArgOption func(attrs map[string]any)

// ArgOutputType sets the dtype of the indices: tensor.Int64 (the default,
// as TensorFlow's) or tensor.Int32; others are a build error.
func ArgOutputType(dt tensor.DType) ArgOption {
	return func(attrs map[string]any) { attrs["output_type"] = dt }
}

func mathArgAttrs(axis int, opts []ArgOption) map[string]any {
	attrs := map[string]any{"axis": axis}
	for _, o := range opts {
		o(attrs)
	}
	return attrs
}

// MatMul returns op(a) x op(b), where op transposes when asked. Operands of
// rank > 2 are batches of matrices with identical leading dimensions.
func MatMul(s *graph.Scope, a, b graph.Output, transposeA, transposeB bool) graph.Output {
	return s.Out("MatMul", "MatMul", []graph.Output{a, b},
		map[string]any{"transpose_a": transposeA, "transpose_b": transposeB})
}

// MatrixInverse returns the inverse of each square matrix of x [..., n, n].
func MatrixInverse(s *graph.Scope, x graph.Output) graph.Output {
	return mathUnary(s, "MatrixInverse", x)
}

// MatrixDeterminant returns the determinant of each square matrix of x [..., n, n].
func MatrixDeterminant(s *graph.Scope, x graph.Output) graph.Output {
	return mathUnary(s, "MatrixDeterminant", x)
}

// BroadcastTo broadcasts x to shape (a 1-D int32 or int64 tensor).
func BroadcastTo(s *graph.Scope, x, shape graph.Output) graph.Output {
	return s.Out("BroadcastTo", "BroadcastTo", []graph.Output{x, shape}, nil)
}

// SumToShape sums x over the axes that broadcasting added or stretched so
// that the result has the given shape: the adjoint of BroadcastTo.
func SumToShape(s *graph.Scope, x, shape graph.Output) graph.Output {
	return s.Out("SumToShape", "SumToShape", []graph.Output{x, shape}, nil)
}
