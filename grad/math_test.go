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

// mathPositive returns a float64 tensor with values in [0.5, 2.5), for ops
// defined on positive numbers.
func mathPositive(seed int64, shape ...int) *tensor.Tensor {
	t := gradtest.Random(seed, shape...)
	for i, v := range t.Float64s() {
		t.Float64s()[i] = v + 1.5
	}
	return t
}

// mathWellConditioned returns random n x n matrices (batched) plus 3 I.
func mathWellConditioned(seed int64, batch, n int) *tensor.Tensor {
	t := gradtest.Random(seed, batch, n, n)
	for b := 0; b < batch; b++ {
		for i := 0; i < n; i++ {
			t.Float64s()[b*n*n+i*n+i] += 3
		}
	}
	return t
}

// mathDynamic hides the static shape of x so that gradients take their
// run-time shape paths (Shape and Size nodes instead of constants).
func mathDynamic(s *graph.Scope, x graph.Output) graph.Output {
	return ops.Reshape(s, x, ops.Shape(s, x))
}

func TestMathGradients(t *testing.T) {
	type xs = []graph.Output
	rnd := gradtest.Random
	binary := func(f func(*graph.Scope, graph.Output, graph.Output) graph.Output) func(*graph.Scope, xs) graph.Output {
		return func(s *graph.Scope, x xs) graph.Output { return f(s, x[0], x[1]) }
	}
	unary := func(f func(*graph.Scope, graph.Output) graph.Output) func(*graph.Scope, xs) graph.Output {
		return func(s *graph.Scope, x xs) graph.Output { return f(s, x[0]) }
	}
	matmul := func(ta, tb bool) func(*graph.Scope, xs) graph.Output {
		return func(s *graph.Scope, x xs) graph.Output { return ops.MatMul(s, x[0], x[1], ta, tb) }
	}
	sum := func(f func(*graph.Scope, graph.Output, []int, bool) graph.Output, axis []int, keep, dynamic bool) func(*graph.Scope, xs) graph.Output {
		return func(s *graph.Scope, x xs) graph.Output {
			in := x[0]
			if dynamic {
				in = mathDynamic(s, in)
			}
			return f(s, in, axis, keep)
		}
	}
	cases := []gradtest.Case{
		{Name: "AddSame", Build: binary(ops.Add), Inputs: []*tensor.Tensor{rnd(1, 2, 3), rnd(2, 2, 3)}},
		{Name: "AddRow", Build: binary(ops.Add), Inputs: []*tensor.Tensor{rnd(1, 2, 3), rnd(2, 3)}},
		{Name: "AddOuter", Build: binary(ops.Add), Inputs: []*tensor.Tensor{rnd(1, 2, 1), rnd(2, 1, 3)}},
		{Name: "AddScalar", Build: binary(ops.Add), Inputs: []*tensor.Tensor{rnd(1), rnd(2, 2, 3)}},
		{Name: "AddDynamic", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.Add(s, mathDynamic(s, x[0]), x[1])
		}, Inputs: []*tensor.Tensor{rnd(1, 2, 3), rnd(2, 3)}},
		{Name: "Sub", Build: binary(ops.Sub), Inputs: []*tensor.Tensor{rnd(3, 4, 1), rnd(4, 3)}},
		{Name: "Mul", Build: binary(ops.Mul), Inputs: []*tensor.Tensor{rnd(5, 2, 3), rnd(6, 2, 1)}},
		{Name: "Div", Build: binary(ops.Div), Inputs: []*tensor.Tensor{rnd(7, 2, 3), mathPositive(8, 3)}},
		{Name: "Pow", Build: binary(ops.Pow), Inputs: []*tensor.Tensor{mathPositive(9, 2, 3), rnd(10, 3)}},
		{Name: "Maximum", Build: binary(ops.Maximum), Inputs: []*tensor.Tensor{rnd(11, 3, 4), rnd(12, 4)}},
		{Name: "Minimum", Build: binary(ops.Minimum), Inputs: []*tensor.Tensor{rnd(13, 3, 1), rnd(14, 3, 4)}},
		{Name: "SquaredDifference", Build: binary(ops.SquaredDifference), Inputs: []*tensor.Tensor{rnd(15, 2, 3), rnd(16, 3)}},
		{Name: "Neg", Build: unary(ops.Neg), Inputs: []*tensor.Tensor{rnd(17, 2, 3)}},
		{Name: "Abs", Build: unary(ops.Abs), Inputs: []*tensor.Tensor{rnd(18, 2, 3)}},
		{Name: "Exp", Build: unary(ops.Exp), Inputs: []*tensor.Tensor{rnd(19, 2, 3)}},
		{Name: "Log", Build: unary(ops.Log), Inputs: []*tensor.Tensor{mathPositive(20, 2, 3)}},
		{Name: "Square", Build: unary(ops.Square), Inputs: []*tensor.Tensor{rnd(21, 2, 3)}},
		{Name: "Sqrt", Build: unary(ops.Sqrt), Inputs: []*tensor.Tensor{mathPositive(22, 2, 3)}},
		{Name: "Rsqrt", Build: unary(ops.Rsqrt), Inputs: []*tensor.Tensor{mathPositive(23, 2, 3)}},
		{Name: "Reciprocal", Build: unary(ops.Reciprocal), Inputs: []*tensor.Tensor{mathPositive(24, 2, 3)}},
		{Name: "CastToFloat32", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Cast(s, x[0], tensor.Float32) },
			Inputs: []*tensor.Tensor{rnd(25, 2, 3)}, Delta: 1e-2, Tol: 1e-3},
		{Name: "CastToFloat64", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Cast(s, x[0], tensor.Float64) },
			Inputs: []*tensor.Tensor{gradtest.Random32(26, 2, 3)}},
		{Name: "SelectV2", Build: func(s *graph.Scope, x xs) graph.Output {
			cond := ops.Const(s, tensor.MustFromSlice([]bool{true, false}, 2, 1))
			return ops.SelectV2(s, cond, x[0], x[1])
		}, Inputs: []*tensor.Tensor{rnd(27, 2, 3), rnd(28, 3)}},
		{Name: "SelectRows", Build: func(s *graph.Scope, x xs) graph.Output {
			cond := ops.Const(s, []bool{true, false, true})
			return ops.Select(s, cond, x[0], x[1])
		}, Inputs: []*tensor.Tensor{rnd(59, 3, 3), rnd(60, 3, 3)}},
		{Name: "SelectElements", Build: func(s *graph.Scope, x xs) graph.Output {
			cond := ops.Const(s, tensor.MustFromSlice([]bool{true, false, false, true, true, false}, 2, 3))
			return ops.Select(s, cond, x[0], x[1])
		}, Inputs: []*tensor.Tensor{rnd(61, 2, 3), rnd(62, 2, 3)}},
		{Name: "SelectScalar", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.Select(s, ops.Const(s, false), x[0], x[1])
		}, Inputs: []*tensor.Tensor{rnd(63, 2, 3), rnd(64, 2, 3)}},
		{Name: "AddN", Build: func(s *graph.Scope, x xs) graph.Output { return ops.AddN(s, x[0], x[1], x[0]) },
			Inputs: []*tensor.Tensor{rnd(29, 2, 3), rnd(30, 2, 3)}},
		{Name: "SumAxis", Build: sum(ops.Sum, []int{1}, false, false), Inputs: []*tensor.Tensor{rnd(31, 2, 3, 4)}},
		{Name: "SumKeepDims", Build: sum(ops.Sum, []int{0, -1}, true, false), Inputs: []*tensor.Tensor{rnd(32, 2, 3, 4)}},
		{Name: "SumAll", Build: sum(ops.Sum, nil, false, false), Inputs: []*tensor.Tensor{rnd(33, 2, 3)}},
		{Name: "SumDynamic", Build: sum(ops.Sum, []int{0, 2}, false, true), Inputs: []*tensor.Tensor{rnd(34, 2, 3, 4)}},
		{Name: "MeanAxis", Build: sum(ops.Mean, []int{0}, false, false), Inputs: []*tensor.Tensor{rnd(35, 3, 4)}},
		{Name: "MeanAll", Build: sum(ops.Mean, nil, false, false), Inputs: []*tensor.Tensor{rnd(36, 3, 4)}},
		{Name: "MeanDynamic", Build: sum(ops.Mean, []int{1}, true, true), Inputs: []*tensor.Tensor{rnd(37, 3, 4)}},
		{Name: "MaxAxis", Build: sum(ops.Max, []int{1}, false, false), Inputs: []*tensor.Tensor{rnd(38, 3, 4)}},
		{Name: "MinAll", Build: sum(ops.Min, nil, false, false), Inputs: []*tensor.Tensor{rnd(39, 3, 4)}},
		{Name: "MaxDynamic", Build: sum(ops.Max, []int{0}, false, true), Inputs: []*tensor.Tensor{rnd(40, 3, 4)}},
		{Name: "Prod", Build: sum(ops.Prod, []int{1}, false, false), Inputs: []*tensor.Tensor{rnd(41, 3, 4)}},
		{Name: "ProdAll", Build: sum(ops.Prod, nil, true, false), Inputs: []*tensor.Tensor{rnd(65, 2, 3)}},
		{Name: "MaxAllKeepDims", Build: sum(ops.Max, nil, true, false), Inputs: []*tensor.Tensor{rnd(66, 2, 3)}},
		// An empty axis list reduces nothing, as TensorFlow's axis=[].
		{Name: "SumNoAxes", Build: sum(ops.Sum, []int{}, false, false), Inputs: []*tensor.Tensor{rnd(67, 2, 3)}},
		{Name: "MeanNoAxes", Build: sum(ops.Mean, []int{}, true, true), Inputs: []*tensor.Tensor{rnd(68, 2, 3)}},
		{Name: "MaxNoAxes", Build: sum(ops.Max, []int{}, false, false), Inputs: []*tensor.Tensor{rnd(69, 2, 3)}},
		{Name: "ProdNoAxes", Build: sum(ops.Prod, []int{}, false, false), Inputs: []*tensor.Tensor{rnd(70, 2, 3)}},
		{Name: "ProdZeros", Build: sum(ops.Prod, []int{1}, true, false),
			Inputs: []*tensor.Tensor{tensor.MustFromSlice([]float64{0, 2, 3, 0, 0, 5, 1, 2, 3}, 3, 3)}},
		{Name: "MatMul", Build: matmul(false, false), Inputs: []*tensor.Tensor{rnd(42, 2, 3), rnd(43, 3, 4)}},
		{Name: "MatMulTA", Build: matmul(true, false), Inputs: []*tensor.Tensor{rnd(44, 3, 2), rnd(45, 3, 4)}},
		{Name: "MatMulTB", Build: matmul(false, true), Inputs: []*tensor.Tensor{rnd(46, 2, 3), rnd(47, 4, 3)}},
		{Name: "MatMulTATB", Build: matmul(true, true), Inputs: []*tensor.Tensor{rnd(48, 3, 2), rnd(49, 4, 3)}},
		{Name: "MatMulBatch", Build: matmul(false, true), Inputs: []*tensor.Tensor{rnd(50, 2, 2, 3), rnd(51, 2, 4, 3)}},
		{Name: "MatMulFloat32", Build: matmul(false, false), Inputs: []*tensor.Tensor{gradtest.Random32(52, 2, 3), gradtest.Random32(53, 3, 2)}},
		{Name: "MatrixInverse", Build: unary(ops.MatrixInverse), Inputs: []*tensor.Tensor{mathWellConditioned(54, 2, 3)}},
		{Name: "MatrixDeterminant", Build: unary(ops.MatrixDeterminant), Inputs: []*tensor.Tensor{mathWellConditioned(55, 2, 3)}},
		{Name: "MatrixDeterminant2D", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.MatrixDeterminant(s, ops.ReshapeTo(s, x[0], 3, 3))
		}, Inputs: []*tensor.Tensor{mathWellConditioned(56, 1, 3)}},
		{Name: "BroadcastTo", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.BroadcastTo(s, x[0], ops.Const(s, []int{2, 3, 4}))
		}, Inputs: []*tensor.Tensor{rnd(57, 3, 1)}},
		{Name: "SumToShape", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.SumToShape(s, x[0], ops.Const(s, []int{3, 1}))
		}, Inputs: []*tensor.Tensor{rnd(58, 2, 3, 4)}},
	}
	for _, c := range cases {
		gradtest.Check(t, c)
	}
}

// TestMathNonDifferentiable checks that every math op without a gradient
// says why.
func TestMathNonDifferentiable(t *testing.T) {
	for _, name := range []string{"Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual",
		"LogicalAnd", "LogicalOr", "LogicalNot", "ArgMax", "ArgMin", "Sign"} {
		fn, ok := grad.Lookup(name)
		if !ok || fn != nil || grad.NoneReason(name) == "" {
			t.Errorf("%s: want a registered absence of gradient with a reason", name)
		}
	}
}

// TestMathGradientSkipsSumToShape checks that operands of one known shape
// get the incoming gradient as is, without a reduction node.
func TestMathGradientSkipsSumToShape(t *testing.T) {
	s := graph.NewScope()
	a := ops.Placeholder(s, "a", tensor.Float32, tensor.MakeShape(2, 3))
	b := ops.Placeholder(s, "b", tensor.Float32, tensor.MakeShape(2, 3))
	c := ops.Placeholder(s, "c", tensor.Float32, tensor.MakeShape(3))
	y := ops.Add(s, ops.Mul(s, a, b), c)
	if _, err := grad.Gradients(s, []graph.Output{y}, []graph.Output{a, b, c}, nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, node := range s.Graph().Nodes() {
		if node.Op() == "SumToShape" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("got %d SumToShape nodes, want 1 (for c only)", n)
	}
}

// TestMathReduceNoAxesGradient checks that a reduction over an empty axis
// list, which reduces nothing as TensorFlow's axis=[], passes the incoming
// gradient through element by element: d/dx sum(w * Sum(x, [])) is w, not
// sum(w) everywhere as it would be were every axis reduced.
func TestMathReduceNoAxesGradient(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float64, tensor.MakeShape(-1, 3))
	wv := tensor.MustFromSlice([]float64{1, 2, 3, 4, 5, 6}, 2, 3)
	type reduce func(*graph.Scope, graph.Output, []int, bool) graph.Output
	var losses []graph.Output
	for _, f := range []reduce{ops.Sum, ops.Mean, ops.Max, ops.Min, ops.Prod} {
		y := f(s, x, []int{}, true)
		losses = append(losses, ops.Sum(s, ops.Mul(s, y, ops.Const(s, wv)), nil, false))
	}
	var grads []graph.Output
	for _, l := range losses {
		g, err := grad.Gradients(s, []graph.Output{l}, []graph.Output{x}, nil)
		if err != nil {
			t.Fatal(err)
		}
		grads = append(grads, g[0])
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	got, err := sess.Run(context.Background(), map[graph.Output]*tensor.Tensor{x: gradtest.Random(80, 2, 3)}, grads, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if !tensor.Equal(g, wv) {
			t.Errorf("reduction %d: gradient %v, want %v", i, g, wv)
		}
	}
}
