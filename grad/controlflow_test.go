package grad_test

import (
	"strings"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/grad/gradtest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// condCase builds If(x[0] summed > threshold, then, else) on two inputs,
// so that the branch taken depends on the inputs' values.
func condCase(name string, threshold float64, inputs []*tensor.Tensor) gradtest.Case {
	return gradtest.Case{
		Name: name,
		Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			pred := ops.Greater(s, ops.Sum(s, x[0], []int{0}, false), ops.Const(s, threshold))
			out := ops.Cond(s, pred,
				func(s *graph.Scope) []graph.Output {
					return []graph.Output{ops.Mul(s, ops.Square(s, x[0]), x[1])}
				},
				func(s *graph.Scope) []graph.Output {
					return []graph.Output{ops.Sub(s, ops.Exp(s, x[0]), x[1])}
				})
			return out[0]
		},
		Inputs: inputs,
	}
}

func TestCondGradient(t *testing.T) {
	in := []*tensor.Tensor{gradtest.Random(1, 3), gradtest.Random(2, 3)}
	gradtest.Check(t, condCase("then", -10, in))
	gradtest.Check(t, condCase("else", 10, in))
}

// TestCondGradientPassThrough differentiates a branch that returns an
// input unchanged and one that ignores an input.
func TestCondGradientPassThrough(t *testing.T) {
	for _, take := range []bool{true, false} {
		gradtest.Check(t, gradtest.Case{
			Name: "passthrough",
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				out := ops.Cond(s, ops.Const(s, take),
					func(s *graph.Scope) []graph.Output { return []graph.Output{x[0]} },
					func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Mul(s, x[1], x[1])} })
				return out[0]
			},
			Inputs: []*tensor.Tensor{gradtest.Random(3, 2, 2), gradtest.Random(4, 2, 2)},
		})
	}
}

// TestWhileGradientPower differentiates x^n computed by n multiplications,
// x captured by the body and the accumulator a loop variable.
func TestWhileGradientPower(t *testing.T) {
	for _, n := range []int32{0, 1, 4} {
		gradtest.Check(t, gradtest.Case{
			Name: "power",
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				out := ops.WhileLoop(s,
					func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], ops.Const(s, n)) },
					func(s *graph.Scope, v []graph.Output) []graph.Output {
						return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))), ops.Mul(s, v[1], x[0])}
					},
					[]graph.Output{ops.Const(s, int32(0)), x[1]})
				return out[1]
			},
			Inputs: []*tensor.Tensor{gradtest.Random(5, 4), gradtest.Random(6, 4)},
		})
	}
}

// TestWhileGradientRNN runs a recurrent cell over the rows of a sequence
// sliced by the loop counter: h = tanh(h W + x[i]); the gradient reaches
// the sequence, the weights (captured) and the initial state.
func TestWhileGradientRNN(t *testing.T) {
	gradtest.Check(t, gradtest.Case{
		Name: "rnn",
		Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			seq, w, h0 := x[0], x[1], x[2]
			out := ops.WhileLoop(s,
				func(s *graph.Scope, v []graph.Output) graph.Output {
					return ops.Less(s, v[0], ops.Const(s, int32(4)))
				},
				func(s *graph.Scope, v []graph.Output) []graph.Output {
					xi := ops.Gather(s, seq, v[0], 0)
					h := ops.Tanh(s, ops.Add(s, ops.MatMul(s, v[1], w, false, false), xi))
					return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))), h}
				},
				[]graph.Output{ops.Const(s, int32(0)), h0})
			return out[1]
		},
		Inputs: []*tensor.Tensor{gradtest.Random(7, 4, 1, 3), gradtest.Random(8, 3, 3), gradtest.Random(9, 1, 3)},
	})
}

// TestWhileGradientMaximumIterations bounds a loop whose cond always
// holds: the gradient runs as many iterations as the forward loop.
func TestWhileGradientMaximumIterations(t *testing.T) {
	gradtest.Check(t, gradtest.Case{
		Name: "bounded",
		Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			out := ops.WhileLoop(s,
				func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Const(s, true) },
				func(s *graph.Scope, v []graph.Output) []graph.Output {
					return []graph.Output{ops.Tanh(s, ops.Mul(s, v[0], x[1]))}
				},
				[]graph.Output{x[0]}, ops.MaximumIterations(3))
			return out[0]
		},
		Inputs: []*tensor.Tensor{gradtest.Random(10, 2), gradtest.Random(11, 2)},
	})
}

// TestNestedGradient differentiates a loop whose body holds a conditional
// and an inner loop.
func TestNestedGradient(t *testing.T) {
	gradtest.Check(t, gradtest.Case{
		Name: "nested",
		Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			out := ops.WhileLoop(s,
				func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], ops.Const(s, int32(3))) },
				func(s *graph.Scope, v []graph.Output) []graph.Output {
					i, acc := v[0], v[1]
					big := ops.Greater(s, i, ops.Const(s, int32(0)))
					f := ops.Cond(s, big,
						func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Mul(s, acc, x[0])} },
						func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Add(s, acc, x[0])} })
					pw := ops.WhileLoop(s,
						func(s *graph.Scope, w []graph.Output) graph.Output { return ops.Less(s, w[0], i) },
						func(s *graph.Scope, w []graph.Output) []graph.Output {
							return []graph.Output{ops.Add(s, w[0], ops.Const(s, int32(1))), ops.Mul(s, w[1], x[1])}
						},
						[]graph.Output{ops.Const(s, int32(0)), f[0]})
					return []graph.Output{ops.Add(s, i, ops.Const(s, int32(1))), pw[1]}
				},
				[]graph.Output{ops.Const(s, int32(0)), x[0]})
			return out[1]
		},
		Inputs: []*tensor.Tensor{gradtest.Random(12, 3), gradtest.Random(13, 3)},
	})
}

// TestWhileGradientVariable differentiates a loop that reads a trainable
// variable (captured) with respect to the variable and to the loop's
// initial value: y = x * w^3 by three multiplications.
func TestWhileGradientVariable(t *testing.T) {
	gradtest.Check(t, gradtest.Case{
		Name: "variable",
		Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			w := ops.NewVariable(s, "w", tensor.Float64, []int{3}, ops.RandomUniformInit(0.5, 1.5, 7))
			out := ops.WhileLoop(s,
				func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], ops.Const(s, int32(3))) },
				func(s *graph.Scope, v []graph.Output) []graph.Output {
					return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))), ops.Mul(s, v[1], w.Value())}
				},
				[]graph.Output{ops.Const(s, int32(0)), x[0]})
			return out[1]
		},
		Inputs:    []*tensor.Tensor{gradtest.Random(14, 3)},
		Variables: true,
	})
}

// TestWhileGradientVariableInBody differentiates with respect to a
// variable that the loop body itself creates (a cell's weights).
func TestWhileGradientVariableInBody(t *testing.T) {
	gradtest.Check(t, gradtest.Case{
		Name: "cell",
		Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			out := ops.WhileLoop(s,
				func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], ops.Const(s, int32(3))) },
				func(s *graph.Scope, v []graph.Output) []graph.Output {
					w := ops.NewVariable(s, "w", tensor.Float64, []int{2, 2}, ops.RandomUniformInit(-1, 1, 3))
					h := ops.Tanh(s, ops.MatMul(s, v[1], w.Value(), false, false))
					return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))), h}
				},
				[]graph.Output{ops.Const(s, int32(0)), x[0]})
			return out[1]
		},
		Inputs:    []*tensor.Tensor{gradtest.Random(15, 1, 2)},
		Variables: true,
	})
}

// TestWhileSecondOrderRefused: the gradient of a loop's gradient would
// need the gradient of the kept history, which is not supported: an
// error, not a wrong result.
func TestWhileSecondOrderRefused(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float64, tensor.ScalarShape())
	out := ops.WhileLoop(s,
		func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], ops.Const(s, int32(3))) },
		func(s *graph.Scope, v []graph.Output) []graph.Output {
			return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))), ops.Mul(s, v[1], v[1])}
		},
		[]graph.Output{ops.Const(s, int32(0)), x})
	g1, err := grad.Gradients(s, out[1:], []graph.Output{x}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = grad.Gradients(s, g1, []graph.Output{x}, nil)
	if err == nil || !strings.Contains(err.Error(), "second order") {
		t.Fatalf("second-order gradient through a loop: error %v, want one saying it is not supported", err)
	}
}
