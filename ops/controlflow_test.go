package ops_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

func runOne(t *testing.T, g *graph.Graph, feeds map[graph.Output]*tensor.Tensor, fetches ...graph.Output) []*tensor.Tensor {
	t.Helper()
	sess, err := session.New(g)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, err := sess.Run(context.Background(), feeds, fetches, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCondIsTraining(t *testing.T) {
	s := graph.NewScope()
	training := ops.Placeholder(s, "is_training", tensor.Bool, tensor.ScalarShape())
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 2))
	// Dropout-like: in training scale by 2, in inference pass through.
	y := ops.Cond(s, training,
		func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Mul(s, x, ops.Const(s, float32(2)))} },
		func(s *graph.Scope) []graph.Output { return []graph.Output{x} })
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := y[0].Shape(); !got.Equal(tensor.MakeShape(-1, 2)) {
		t.Errorf("result shape %v, want [?,2]", got)
	}
	xv := tensor.MustFromSlice([]float32{1, 2, 3, 4}, 2, 2)
	for _, tc := range []struct {
		training bool
		want     []float32
	}{{true, []float32{2, 4, 6, 8}}, {false, []float32{1, 2, 3, 4}}} {
		out := runOne(t, s.Graph(), map[graph.Output]*tensor.Tensor{training: tensor.Scalar(tc.training), x: xv}, y[0])
		if got := out[0].Float32s(); !equal32(got, tc.want) {
			t.Errorf("is_training=%v: got %v, want %v", tc.training, got, tc.want)
		}
	}
}

func equal32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCondErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		then []graph.Output
		els  func(s *graph.Scope) []graph.Output
		want string
	}{
		{"count", nil, func(s *graph.Scope) []graph.Output { return nil }, "returns 1 tensors"},
		{"dtype", nil, func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Const(s, int32(1))} }, "float32 in then_branch and int32"},
		{"nil branch", nil, nil, "branch function is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := graph.NewScope()
			p := ops.Placeholder(s, "p", tensor.Bool, tensor.ScalarShape())
			out := ops.Cond(s, p, func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Const(s, float32(1))} }, tc.els)
			if err := s.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			for _, o := range out {
				if o.Valid() {
					t.Errorf("a result is valid after an error")
				}
			}
		})
	}
}

// TestWhileLoopPower computes x^n by repeated multiplication, with x
// captured from the enclosing graph.
func TestWhileLoopPower(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float64, tensor.MakeShape(3))
	n := ops.Placeholder(s, "n", tensor.Int32, tensor.ScalarShape())
	out := ops.WhileLoop(s,
		func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], n) },
		func(s *graph.Scope, v []graph.Output) []graph.Output {
			return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))), ops.Mul(s, v[1], x)}
		},
		[]graph.Output{ops.Const(s, int32(0)), ops.OnesLike(s, x)})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	xv := tensor.MustFromSlice([]float64{2, -1, 0.5}, 3)
	for _, k := range []int32{0, 1, 5} {
		res := runOne(t, s.Graph(), map[graph.Output]*tensor.Tensor{x: xv, n: tensor.Scalar(k)}, out...)
		if got := res[0].Int32s()[0]; got != k {
			t.Errorf("n=%d: counter %d", k, got)
		}
		for i, v := range xv.Float64s() {
			want := 1.0
			for range k {
				want *= v
			}
			if got := res[1].Float64s()[i]; got != want {
				t.Errorf("n=%d: x[%d]^n = %v, want %v", k, i, got, want)
			}
		}
	}
}

func TestWhileLoopMaximumIterations(t *testing.T) {
	s := graph.NewScope()
	out := ops.WhileLoop(s,
		func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Const(s, true) },
		func(s *graph.Scope, v []graph.Output) []graph.Output {
			return []graph.Output{ops.Add(s, v[0], ops.Const(s, float32(1)))}
		},
		[]graph.Output{ops.Const(s, float32(0))}, ops.MaximumIterations(7))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := runOne(t, s.Graph(), nil, out[0])[0].Float32s()[0]; got != 7 {
		t.Errorf("got %v after a loop bounded to 7 iterations", got)
	}
}

// TestWhileLoopCancelled runs a loop that never ends and checks that
// cancelling the step stops it with an error naming the loop.
func TestWhileLoopCancelled(t *testing.T) {
	s := graph.NewScope()
	out := ops.WhileLoop(s,
		func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Const(s, true) },
		func(s *graph.Scope, v []graph.Output) []graph.Output {
			return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1)))}
		},
		[]graph.Output{ops.Const(s, int32(0))})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = sess.Run(ctx, nil, out, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want an error wrapping context.DeadlineExceeded", err)
	}
}

// TestWhileLoopShapeInvariants grows a vector by one element per
// iteration, which needs an invariant with an unknown dimension.
func TestWhileLoopShapeInvariants(t *testing.T) {
	build := func(opts ...ops.WhileOption) (*graph.Scope, []graph.Output) {
		s := graph.NewScope()
		out := ops.WhileLoop(s,
			func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], ops.Const(s, int32(4))) },
			func(s *graph.Scope, v []graph.Output) []graph.Output {
				return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))),
					ops.Concat(s, 0, v[1], ops.Reshape(s, ops.Cast(s, v[0], tensor.Float32), ops.Const(s, []int32{1})))}
			},
			[]graph.Output{ops.Const(s, int32(0)), ops.Const(s, []float32{9})}, opts...)
		return s, out
	}
	s, _ := build()
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "shape invariant") {
		t.Fatalf("a loop variable that grows without an invariant: error %v", err)
	}
	s, out := build(ops.ShapeInvariants(tensor.ScalarShape(), tensor.MakeShape(-1)))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := out[1].Shape(); !got.Equal(tensor.MakeShape(-1)) {
		t.Errorf("shape %v, want [?]", got)
	}
	res := runOne(t, s.Graph(), nil, out[1])
	if got, want := res[0].Float32s(), []float32{9, 0, 1, 2, 3}; !equal32(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestNestedControlFlow runs a loop whose body holds a conditional and a
// loop, each capturing tensors of the outermost graph.
func TestNestedControlFlow(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.ScalarShape())
	// for i in 0..3: acc += (i even ? x : 1) * (x^i by an inner loop)
	out := ops.WhileLoop(s,
		func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], ops.Const(s, int32(4))) },
		func(s *graph.Scope, v []graph.Output) []graph.Output {
			i, acc := v[0], v[1]
			even := ops.Equal(s, ops.Sub(s, i, ops.Mul(s, ops.Div(s, i, ops.Const(s, int32(2))), ops.Const(s, int32(2)))), ops.Const(s, int32(0)))
			f := ops.Cond(s, even,
				func(s *graph.Scope) []graph.Output { return []graph.Output{x} },
				func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Const(s, float32(1))} })
			pw := ops.WhileLoop(s,
				func(s *graph.Scope, w []graph.Output) graph.Output { return ops.Less(s, w[0], i) },
				func(s *graph.Scope, w []graph.Output) []graph.Output {
					return []graph.Output{ops.Add(s, w[0], ops.Const(s, int32(1))), ops.Mul(s, w[1], x)}
				},
				[]graph.Output{ops.Const(s, int32(0)), ops.Const(s, float32(1))})
			return []graph.Output{ops.Add(s, i, ops.Const(s, int32(1))), ops.Add(s, acc, ops.Mul(s, f[0], pw[1]))}
		},
		[]graph.Output{ops.Const(s, int32(0)), ops.Const(s, float32(0))})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	res := runOne(t, s.Graph(), map[graph.Output]*tensor.Tensor{x: tensor.Scalar(float32(2))}, out[1])
	// i=0: 2*1, i=1: 1*2, i=2: 2*4, i=3: 1*8
	if got := res[0].Float32s()[0]; got != 20 {
		t.Errorf("got %v, want 20", got)
	}
}

// TestControlFlowSerialised marshals a graph with control flow, decodes it
// and runs both: the results agree.
func TestControlFlowSerialised(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2))
	p := ops.Placeholder(s, "p", tensor.Bool, tensor.ScalarShape())
	w := ops.WhileLoop(s,
		func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], ops.Const(s, int32(3))) },
		func(s *graph.Scope, v []graph.Output) []graph.Output {
			return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))), ops.Add(s, ops.Mul(s, v[1], x), x)}
		},
		[]graph.Output{ops.Const(s, int32(0)), x})
	y := ops.Cond(s, p,
		func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Neg(s, w[1])} },
		func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Square(s, w[1])} })
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	b, err := s.Graph().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	g2, err := graph.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := g2.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(b2) {
		t.Errorf("the graph's encoding changed through a decode")
	}
	lookup := func(o graph.Output) graph.Output {
		r, err := g2.Output(o.Name())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	xv := tensor.MustFromSlice([]float32{0.5, -2}, 2)
	for _, pv := range []bool{true, false} {
		a := runOne(t, s.Graph(), map[graph.Output]*tensor.Tensor{x: xv, p: tensor.Scalar(pv)}, y[0])
		c := runOne(t, g2, map[graph.Output]*tensor.Tensor{lookup(x): xv, lookup(p): tensor.Scalar(pv)}, lookup(y[0]))
		if !tensor.Equal(a[0], c[0]) {
			t.Errorf("p=%v: original %v, decoded %v", pv, a[0], c[0])
		}
	}
}

func TestWhileLoopErrors(t *testing.T) {
	var variable *ops.Variable
	cond := func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Const(s, true) }
	for _, tc := range []struct {
		name string
		body func(s *graph.Scope, v []graph.Output) []graph.Output
		init func(s *graph.Scope) []graph.Output
		opts []ops.WhileOption
		want string
	}{
		{"nil body", nil, func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Const(s, float32(0))} }, nil, "cond or body is nil"},
		{"no vars", func(s *graph.Scope, v []graph.Output) []graph.Output { return nil },
			func(s *graph.Scope) []graph.Output { return nil }, nil, "no loop variables"},
		{"count", func(s *graph.Scope, v []graph.Output) []graph.Output { return nil },
			func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Const(s, float32(0))} }, nil, "body returns 0 tensors"},
		{"dtype", func(s *graph.Scope, v []graph.Output) []graph.Output { return []graph.Output{ops.Const(s, int32(1))} },
			func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Const(s, float32(0))} }, nil, "leaves the body as int32"},
		{"invariants", func(s *graph.Scope, v []graph.Output) []graph.Output { return v },
			func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Const(s, float32(0))} },
			[]ops.WhileOption{ops.ShapeInvariants(tensor.MakeShape(2))}, "does not allow"},
		{"missing init", func(s *graph.Scope, v []graph.Output) []graph.Output { return v },
			func(s *graph.Scope) []graph.Output {
				return []graph.Output{ops.Const(s, float32(0)), {}}
			}, nil, "initial value 1 is missing"},
		{"assign", func(s *graph.Scope, v []graph.Output) []graph.Output {
			ops.Assign(s, variable.Value(), v[0])
			return v
		}, func(s *graph.Scope) []graph.Output {
			variable = ops.NewVariable(s, "v", tensor.Float32, nil, ops.ZerosInit())
			return []graph.Output{ops.Const(s, float32(0))}
		}, nil, "cannot update them"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := graph.NewScope()
			ops.WhileLoop(s, cond, tc.body, tc.init(s), tc.opts...)
			if err := s.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestWhileLoopForeignGraph uses, in a loop body, a tensor of a graph
// that does not enclose the loop: an error, not a panic.
func TestWhileLoopForeignGraph(t *testing.T) {
	other := graph.NewScope()
	y := ops.Placeholder(other, "y", tensor.Float32, tensor.ScalarShape())
	s := graph.NewScope()
	ops.WhileLoop(s,
		func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Const(s, false) },
		func(s *graph.Scope, v []graph.Output) []graph.Output { return []graph.Output{ops.Add(s, v[0], y)} },
		[]graph.Output{ops.Const(s, float32(0))})
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "does not enclose") {
		t.Fatalf("error %v, want one saying the tensor's graph does not enclose the loop", err)
	}
}

// TestVariableInLoopBody creates a variable inside a loop body, as a
// recurrent cell's layer would: it lives in the enclosing graph, named in
// the variable scope the body was built in, is initialised with the
// others, and the body reads it.
func TestVariableInLoopBody(t *testing.T) {
	s := graph.NewScope()
	cell := s.VariableScope("rnn")
	out := ops.WhileLoop(cell,
		func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], ops.Const(s, int32(3))) },
		func(s *graph.Scope, v []graph.Output) []graph.Output {
			w := ops.NewVariable(s.VariableScope("cell"), "w", tensor.Float32, []int{2}, ops.ConstantInit(2))
			return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))), ops.Mul(s, v[1], w.Value())}
		},
		[]graph.Output{ops.Const(s, int32(0)), ops.Const(s, []float32{1, -1})})
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	vars := ops.GlobalVariables(s.Graph())
	if len(vars) != 1 || vars[0].Name() != "rnn/cell/w" {
		t.Fatalf("variables of the enclosing graph %v, want [rnn/cell/w]", vars)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	res, err := sess.Run(ctx, nil, out[1:], nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res[0].Float32s(), []float32{8, -8}; !equal32(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
