package layers_test

import (
	"math"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/grad/gradtest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

func TestDynamicGradients(t *testing.T) {
	unknown := []tensor.Shape{tensor.MakeShape(-1, -1, 2)}
	for _, c := range []gradtest.Case{
		{Name: "LSTMDynamic", Inputs: []*tensor.Tensor{gradtest.Random(40, 2, 3, 2)}, Shapes: unknown,
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.LSTM{Units: 2, Dynamic: true, BiasInit: smallUniform}.Apply(s, x[0], true)
			}},
		{Name: "GRUDynamicSequences", Inputs: []*tensor.Tensor{gradtest.Random(41, 2, 3, 2)}, Shapes: unknown,
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.GRU{Units: 2, Dynamic: true, ReturnSequences: true, BiasInit: smallUniform}.Apply(s, x[0], true)
			}},
	} {
		c.Variables = true
		t.Run(c.Name, func(t *testing.T) { gradtest.Check(t, c) })
	}
}

// TestDynamicMatchesUnroll builds each layer once over a graph loop, for
// sequences of any length, and unrolled for lengths 1 and 4 on the same
// variables, and checks that the outputs and the gradients with respect to
// the input and every variable agree, at both lengths.
func TestDynamicMatchesUnroll(t *testing.T) {
	type build func(s *graph.Scope, x graph.Output, dynamic bool) graph.Output
	for name, f := range map[string]build{
		"LSTM": func(s *graph.Scope, x graph.Output, dynamic bool) graph.Output {
			return layers.LSTM{Units: 3, Name: "rnn", Dynamic: dynamic, BiasInit: smallUniform}.Apply(s, x, true)
		},
		"LSTMSequences": func(s *graph.Scope, x graph.Output, dynamic bool) graph.Output {
			return layers.LSTM{Units: 3, Name: "rnn", Dynamic: dynamic, ReturnSequences: true}.Apply(s, x, true)
		},
		"GRU": func(s *graph.Scope, x graph.Output, dynamic bool) graph.Output {
			return layers.GRU{Units: 3, Name: "rnn", Dynamic: dynamic, BiasInit: smallUniform}.Apply(s, x, true)
		},
		"GRUResetAfterSequences": func(s *graph.Scope, x graph.Output, dynamic bool) graph.Output {
			return layers.GRU{Units: 3, Name: "rnn", Dynamic: dynamic, ResetAfter: true, ReturnSequences: true, BiasInit: smallUniform}.Apply(s, x, true)
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := graph.NewScope()
			xd := ops.Placeholder(s, "x", tensor.Float64, tensor.MakeShape(-1, -1, 2))
			yd := f(s, xd, true)
			vars := ops.TrainableVariables(s.Graph())
			loss := func(y graph.Output) graph.Output { return ops.Sum(s, ops.Square(s, y), nil, false) }
			wrt := []graph.Output{xd}
			for _, v := range vars {
				wrt = append(wrt, v.Value())
			}
			gd, err := grad.Gradients(s, []graph.Output{loss(yd)}, wrt, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, steps := range []int{1, 4} {
				xs := ops.Placeholder(s, "xs", tensor.Float64, tensor.MakeShape(-1, steps, 2))
				ys := f(s.ReuseVariables(), xs, false)
				gs, err := grad.Gradients(s, []graph.Output{loss(ys)}, append([]graph.Output{xs}, wrt[1:]...), nil)
				if err != nil {
					t.Fatal(err)
				}
				xv := gradtest.Random(int64(50+steps), 2, steps, 2)
				out := run(t, s, map[graph.Output]*tensor.Tensor{xd: xv, xs: xv}, append(append([]graph.Output{yd, ys}, gd...), gs...))
				n := 1 + len(vars)
				pairs := [][2]*tensor.Tensor{{out[0], out[1]}}
				for i := 0; i < n; i++ {
					pairs = append(pairs, [2]*tensor.Tensor{out[2+i], out[2+n+i]})
				}
				for i, p := range pairs {
					if !p[0].StaticShape().Equal(p[1].StaticShape()) {
						t.Fatalf("%d steps, value %d: dynamic shape %v, unrolled %v", steps, i, p[0].Shape(), p[1].Shape())
					}
					for k := range p[0].Float64s() {
						if d := math.Abs(p[0].Float64s()[k] - p[1].Float64s()[k]); d > 1e-12 {
							t.Fatalf("%d steps, value %d (0: output, 1: d/dx, then the variables): dynamic %v, unrolled %v", steps, i, p[0], p[1])
						}
					}
				}
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDynamicNoSteps runs a dynamic LSTM on sequences of no time steps: its
// last output is zeros, and its stacked outputs are empty.
func TestDynamicNoSteps(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, -1, 2))
	last := layers.LSTM{Units: 3, Dynamic: true, Name: "rnn"}.Apply(s, x, true)
	seq := layers.LSTM{Units: 3, Dynamic: true, Name: "rnn", ReturnSequences: true}.Apply(s.ReuseVariables(), x, true)
	if !last.Shape().Equal(tensor.MakeShape(-1, 3)) || !seq.Shape().Equal(tensor.MakeShape(-1, -1, 3)) {
		t.Errorf("static shapes %v and %v, want [?,3] and [?,?,3]", last.Shape(), seq.Shape())
	}
	out := run(t, s, map[graph.Output]*tensor.Tensor{x: tensor.New(tensor.Float32, 2, 0, 2)}, []graph.Output{last, seq})
	if !tensor.Equal(out[0], tensor.New(tensor.Float32, 2, 3)) || !tensor.Equal(out[1], tensor.New(tensor.Float32, 2, 0, 3)) {
		t.Errorf("no time steps: last output %v, outputs %v; want zeros [2 3] and [2 0 3]", out[0], out[1])
	}
}
