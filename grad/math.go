package grad

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/ops"
)

// Gradients of the math family, composed from math and array builders.
// Binary ops broadcast, so the gradient of each operand is summed back to
// its shape (mathSumTo); reductions broadcast the incoming gradient back.

// mathSumTo reduces the gradient g of a broadcast result to the shape of the
// operand x; it is the identity when both shapes are known and equal.
func mathSumTo(s *graph.Scope, g, x graph.Output) graph.Output {
	if xs, gs := x.Shape(), g.Shape(); xs.FullyDefined() && gs.FullyDefined() && xs.Equal(gs) {
		return g
	}
	return ops.SumToShape(s, g, shapeOf(s, x))
}

// mathScalar is a constant of x's dtype.
func mathScalar(s *graph.Scope, x graph.Output, v float64) graph.Output {
	return ops.Scalar(s, x.DType(), v)
}

func mathBinaryGrad(f func(s *graph.Scope, a, b, y, dy graph.Output) (da, db graph.Output)) Func {
	return func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		a, b := n.Input(0), n.Input(1)
		da, db := f(s, a, b, n.Output(0), dys[0])
		return []graph.Output{mathSumTo(s, da, a), mathSumTo(s, db, b)}, nil
	}
}

func mathUnaryGrad(f func(s *graph.Scope, x, y, dy graph.Output) graph.Output) Func {
	return func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		return []graph.Output{f(s, n.Input(0), n.Output(0), dys[0])}, nil
	}
}

// mathReduceInfo returns the normalized reduction axes of node n, or nil for
// "every axis" when x's rank is unknown.
func mathReduceInfo(n *graph.Node) (x graph.Output, axes []int, err error) {
	x = n.Input(0)
	attr := n.AttrInts("axis")
	if !x.Shape().KnownRank() {
		if len(attr) != 0 {
			return x, nil, fmt.Errorf("reducing over axes %v needs the rank of the input, which is unknown", attr)
		}
		return x, nil, nil
	}
	axes, err = op.MathNormalizeAxes(attr, x.Shape().Rank())
	return x, axes, err
}

// mathAxisAttr returns the axes of reduction node n in the form the ops
// builders take: the node's empty attribute means every axis, which the
// builders spell nil (an empty list there reduces none).
func mathAxisAttr(n *graph.Node) []int {
	attr := n.AttrInts("axis")
	if len(attr) == 0 {
		return nil
	}
	return attr
}

// mathKeepDims reshapes the result r of a reduction of x over axes (nil: all
// axes of an input of unknown rank) into its keep-dims form, which
// broadcasts against x.
func mathKeepDims(s *graph.Scope, n *graph.Node, r graph.Output, axes []int) graph.Output {
	if n.AttrBool("keep_dims") || axes == nil || r.Shape().Rank() == 0 {
		return r // already keep-dims, or a scalar that broadcasts anywhere
	}
	x := n.Input(0)
	if ks := op.MathReducedShape(x.Shape(), axes, true); ks.FullyDefined() {
		return ops.ReshapeTo(s, r, ks.Dims()...)
	}
	for _, a := range axes {
		r = ops.ExpandDims(s, r, a)
	}
	return r
}

// mathReduceCount returns the number of elements each output of the
// reduction of x averages, as a scalar of x's dtype.
func mathReduceCount(s *graph.Scope, x, y graph.Output, axes []int) graph.Output {
	if axes != nil {
		count, known := 1, true
		for _, a := range axes {
			d := x.Shape().Dim(a)
			known = known && d >= 0
			count *= d
		}
		if known {
			return mathScalar(s, x, float64(count))
		}
	}
	return ops.Div(s, ops.Cast(s, ops.Size(s, x), x.DType()), ops.Cast(s, ops.Size(s, y), x.DType()))
}

func mathSumGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	x, axes, err := mathReduceInfo(n)
	if err != nil {
		return nil, err
	}
	return []graph.Output{ops.BroadcastTo(s, mathKeepDims(s, n, dys[0], axes), shapeOf(s, x))}, nil
}

func mathMeanGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	x, axes, err := mathReduceInfo(n)
	if err != nil {
		return nil, err
	}
	g := ops.Div(s, dys[0], mathReduceCount(s, x, n.Output(0), axes))
	return []graph.Output{ops.BroadcastTo(s, mathKeepDims(s, n, g, axes), shapeOf(s, x))}, nil
}

// mathExtremeGrad is the gradient of Max and Min: it flows to the elements
// equal to the extreme, shared equally between ties.
func mathExtremeGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	x, axes, err := mathReduceInfo(n)
	if err != nil {
		return nil, err
	}
	yk := mathKeepDims(s, n, n.Output(0), axes)
	dyk := mathKeepDims(s, n, dys[0], axes)
	mask := ops.Cast(s, ops.Equal(s, x, yk), x.DType())
	ties := ops.Sum(s, mask, mathAxisAttr(n), true)
	return []graph.Output{ops.Div(s, ops.Mul(s, mask, dyk), ties)}, nil
}

// mathProdGrad gives each element the product of the others: y/x where x
// is not zero; where it is, the product of the non-zero elements if it is
// the only zero of its slice, else 0. This stays exact with zeros.
func mathProdGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	x, axes, err := mathReduceInfo(n)
	if err != nil {
		return nil, err
	}
	attr := mathAxisAttr(n)
	zero, one := mathScalar(s, x, 0), mathScalar(s, x, 1)
	isZero := ops.Equal(s, x, zero)
	safe := ops.SelectV2(s, isZero, one, x)
	zeros := ops.Sum(s, ops.Cast(s, isZero, x.DType()), attr, true)
	nonZeroProd := ops.Prod(s, safe, attr, true)
	atZero := ops.SelectV2(s, ops.Equal(s, zeros, one), nonZeroProd, zero)
	others := ops.SelectV2(s, isZero, atZero, ops.Div(s, mathKeepDims(s, n, n.Output(0), axes), safe))
	return []graph.Output{ops.Mul(s, others, mathKeepDims(s, n, dys[0], axes))}, nil
}

func mathMatMulGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	a, b, dc := n.Input(0), n.Input(1), dys[0]
	var da, db graph.Output
	switch ta, tb := n.AttrBool("transpose_a"), n.AttrBool("transpose_b"); {
	case !ta && !tb: // C = A B
		da, db = ops.MatMul(s, dc, b, false, true), ops.MatMul(s, a, dc, true, false)
	case ta && !tb: // C = A^T B
		da, db = ops.MatMul(s, b, dc, false, true), ops.MatMul(s, a, dc, false, false)
	case !ta && tb: // C = A B^T
		da, db = ops.MatMul(s, dc, b, false, false), ops.MatMul(s, dc, a, true, false)
	default: // C = A^T B^T
		da, db = ops.MatMul(s, b, dc, true, true), ops.MatMul(s, dc, a, true, true)
	}
	return []graph.Output{da, db}, nil
}

// mathTransposeLast swaps the last two axes of x, whose rank must be known.
func mathTransposeLast(s *graph.Scope, x graph.Output) (graph.Output, error) {
	r := x.Shape().Rank()
	if r < 2 {
		return graph.Output{}, fmt.Errorf("needs a batch of matrices of known rank, got shape %v", x.Shape())
	}
	perm := make([]int, r)
	for i := range perm {
		perm[i] = i
	}
	perm[r-2], perm[r-1] = r-1, r-2
	return ops.Transpose(s, x, perm), nil
}

func init() {
	Register("Add", mathBinaryGrad(func(s *graph.Scope, a, b, y, dy graph.Output) (graph.Output, graph.Output) {
		return dy, dy
	}))
	Register("Sub", mathBinaryGrad(func(s *graph.Scope, a, b, y, dy graph.Output) (graph.Output, graph.Output) {
		return dy, ops.Neg(s, dy)
	}))
	Register("Mul", mathBinaryGrad(func(s *graph.Scope, a, b, y, dy graph.Output) (graph.Output, graph.Output) {
		return ops.Mul(s, dy, b), ops.Mul(s, a, dy)
	}))
	Register("Div", mathBinaryGrad(func(s *graph.Scope, a, b, y, dy graph.Output) (graph.Output, graph.Output) {
		// d(a/b)/db = -a/b^2 = -y/b.
		return ops.Div(s, dy, b), ops.Neg(s, ops.Div(s, ops.Mul(s, dy, y), b))
	}))
	Register("Pow", mathBinaryGrad(func(s *graph.Scope, a, b, y, dy graph.Output) (graph.Output, graph.Output) {
		// dy/da = b a^(b-1); dy/db = y log(a), taken as 0 where a <= 0
		// (log is undefined there; the masked log avoids NaNs).
		da := ops.Mul(s, dy, ops.Mul(s, b, ops.Pow(s, a, ops.Sub(s, b, mathScalar(s, b, 1)))))
		pos := ops.Greater(s, a, mathScalar(s, a, 0))
		logA := ops.SelectV2(s, pos, ops.Log(s, ops.SelectV2(s, pos, a, mathScalar(s, a, 1))), mathScalar(s, a, 0))
		return da, ops.Mul(s, dy, ops.Mul(s, y, logA))
	}))
	// Ties go to a, as in TensorFlow.
	Register("Maximum", mathBinaryGrad(func(s *graph.Scope, a, b, y, dy graph.Output) (graph.Output, graph.Output) {
		mask, zero := ops.GreaterEqual(s, a, b), mathScalar(s, dy, 0)
		return ops.SelectV2(s, mask, dy, zero), ops.SelectV2(s, mask, zero, dy)
	}))
	Register("Minimum", mathBinaryGrad(func(s *graph.Scope, a, b, y, dy graph.Output) (graph.Output, graph.Output) {
		mask, zero := ops.LessEqual(s, a, b), mathScalar(s, dy, 0)
		return ops.SelectV2(s, mask, dy, zero), ops.SelectV2(s, mask, zero, dy)
	}))
	Register("SquaredDifference", mathBinaryGrad(func(s *graph.Scope, a, b, y, dy graph.Output) (graph.Output, graph.Output) {
		d := ops.Mul(s, mathScalar(s, dy, 2), ops.Mul(s, dy, ops.Sub(s, a, b)))
		return d, ops.Neg(s, d)
	}))

	Register("Neg", mathUnaryGrad(func(s *graph.Scope, x, y, dy graph.Output) graph.Output { return ops.Neg(s, dy) }))
	Register("Abs", mathUnaryGrad(func(s *graph.Scope, x, y, dy graph.Output) graph.Output {
		return ops.Mul(s, dy, ops.Sign(s, x))
	}))
	Register("Exp", mathUnaryGrad(func(s *graph.Scope, x, y, dy graph.Output) graph.Output { return ops.Mul(s, dy, y) }))
	Register("Log", mathUnaryGrad(func(s *graph.Scope, x, y, dy graph.Output) graph.Output { return ops.Div(s, dy, x) }))
	Register("Square", mathUnaryGrad(func(s *graph.Scope, x, y, dy graph.Output) graph.Output {
		return ops.Mul(s, dy, ops.Mul(s, mathScalar(s, x, 2), x))
	}))
	Register("Sqrt", mathUnaryGrad(func(s *graph.Scope, x, y, dy graph.Output) graph.Output {
		return ops.Div(s, ops.Mul(s, dy, mathScalar(s, y, 0.5)), y)
	}))
	Register("Rsqrt", mathUnaryGrad(func(s *graph.Scope, x, y, dy graph.Output) graph.Output {
		// d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3.
		return ops.Mul(s, dy, ops.Mul(s, mathScalar(s, y, -0.5), ops.Mul(s, y, ops.Square(s, y))))
	}))
	Register("Reciprocal", mathUnaryGrad(func(s *graph.Scope, x, y, dy graph.Output) graph.Output {
		return ops.Neg(s, ops.Mul(s, dy, ops.Square(s, y)))
	}))

	Register("Cast", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		from, to := n.Input(0).DType(), n.Output(0).DType()
		if !from.IsFloat() || !to.IsFloat() {
			return []graph.Output{{}}, nil // integers and bools carry no gradient
		}
		if from == to {
			return []graph.Output{dys[0]}, nil
		}
		return []graph.Output{ops.Cast(s, dys[0], from)}, nil
	})
	// Select's dy has the shape of t and e, and the same cond picks it
	// apart (TensorFlow's _SelectGrad).
	Register("Select", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		cond, dy := n.Input(0), dys[0]
		zeros := ops.ZerosLike(s, dy)
		return []graph.Output{{}, ops.Select(s, cond, dy, zeros), ops.Select(s, cond, zeros, dy)}, nil
	})
	// SelectV2 broadcasts: each branch's gradient is summed back to its
	// shape (TensorFlow's _SelectGradV2).
	Register("SelectV2", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		cond, t, e, dy := n.Input(0), n.Input(1), n.Input(2), dys[0]
		zero := mathScalar(s, dy, 0)
		dt := mathSumTo(s, ops.SelectV2(s, cond, dy, zero), t)
		de := mathSumTo(s, ops.SelectV2(s, cond, zero, dy), e)
		return []graph.Output{{}, dt, de}, nil
	})
	Register("AddN", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		out := make([]graph.Output, n.NumInputs())
		for i := range out {
			out[i] = dys[0]
		}
		return out, nil
	})

	Register("Sum", mathSumGrad)
	Register("Mean", mathMeanGrad)
	Register("Max", mathExtremeGrad)
	Register("Min", mathExtremeGrad)
	Register("Prod", mathProdGrad)

	Register("MatMul", mathMatMulGrad)
	Register("MatrixInverse", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		// d(A^-1) = -A^-1 dA A^-1, so dA = -Y^T dY Y^T.
		y := n.Output(0)
		return []graph.Output{ops.Neg(s, ops.MatMul(s, ops.MatMul(s, y, dys[0], true, false), y, false, true))}, nil
	})
	Register("MatrixDeterminant", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		// Jacobi's formula: d det(A) = det(A) tr(A^-1 dA), so dA = dY det A^-T.
		// The inverse makes this fail for singular matrices.
		invT, err := mathTransposeLast(s, ops.MatrixInverse(s, n.Input(0)))
		if err != nil {
			return nil, err
		}
		g := ops.Mul(s, dys[0], n.Output(0))
		g = ops.ExpandDims(s, ops.ExpandDims(s, g, -1), -1)
		return []graph.Output{ops.Mul(s, g, invT)}, nil
	})

	Register("BroadcastTo", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		return []graph.Output{mathSumTo(s, dys[0], n.Input(0)), {}}, nil
	})
	Register("SumToShape", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		x := n.Input(0)
		return []graph.Output{ops.BroadcastTo(s, dys[0], shapeOf(s, x)), {}}, nil
	})

	for _, name := range []string{"Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual"} {
		RegisterNone(name, "comparisons are piecewise constant with bool outputs")
	}
	for _, name := range []string{"LogicalAnd", "LogicalOr", "LogicalNot"} {
		RegisterNone(name, "logical ops take and return bools")
	}
	RegisterNone("ArgMax", "the output is an integer index")
	RegisterNone("ArgMin", "the output is an integer index")
	RegisterNone("Sign", "piecewise constant: the gradient is zero almost everywhere")
}
