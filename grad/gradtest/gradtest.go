// Package gradtest checks registered gradients against central finite
// differences. Every differentiable op has a case in its family's tests:
//
//	gradtest.Check(t, gradtest.Case{
//		Name:   "MatMul",
//		Build:  func(s *graph.Scope, x []graph.Output) graph.Output { return ops.MatMul(s, x[0], x[1], false, false) },
//		Inputs: []*tensor.Tensor{gradtest.Random(1, 2, 3), gradtest.Random(2, 3, 4)},
//	})
//
// A case whose Build creates variables (a layer's kernel) sets Variables to
// check the gradients with respect to them too.
package gradtest

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// Case is one gradient check.
type Case struct {
	Name string
	// Build returns the tensor to differentiate from placeholders holding Inputs.
	Build func(s *graph.Scope, xs []graph.Output) graph.Output
	// Inputs are the values at which the gradient is checked. Float64 inputs
	// give the tightest check; float32 inputs use looser default tolerances.
	Inputs []*tensor.Tensor
	// Shapes, when set, are the placeholders' static shapes, one per input
	// (a zero Shape is unknown): an unknown batch dimension, for example,
	// so that Build and the gradients take their run-time shape paths. By
	// default each placeholder has its input's shape.
	Shapes []tensor.Shape
	// Wrt lists the inputs to check (default: every floating-point input).
	Wrt []int
	// Delta is the finite-difference step (default 1e-6 for float64, 1e-2 for float32).
	Delta float64
	// Tol is the tolerance, relative to max(1, |numeric|) (default 1e-5 for float64, 2e-2 for float32).
	Tol float64
	// Variables also checks the gradients with respect to the trainable
	// variables Build creates (a layer's kernel and bias): they are
	// initialised by their initializers, and perturbed by assignment.
	Variables bool
}

// Random returns a float64 tensor of the given shape with values in [-1, 1),
// deterministic for a seed.
func Random(seed int64, shape ...int) *tensor.Tensor {
	r := rand.New(rand.NewSource(seed))
	t := tensor.New(tensor.Float64, shape...)
	for i := range t.Float64s() {
		t.Float64s()[i] = 2*r.Float64() - 1
	}
	return t
}

// Random32 is Random as float32.
func Random32(seed int64, shape ...int) *tensor.Tensor {
	r := rand.New(rand.NewSource(seed))
	t := tensor.New(tensor.Float32, shape...)
	for i := range t.Float32s() {
		t.Float32s()[i] = float32(2*r.Float64() - 1)
	}
	return t
}

// Check compares the symbolic gradient of sum(w * Build(xs)), for a fixed
// random w (so that every output element matters differently), with central
// differences at c.Inputs, and reports mismatches as test errors.
func Check(t *testing.T, c Case) {
	t.Helper()
	ctx := context.Background()
	s := graph.NewScope()
	xs := make([]graph.Output, len(c.Inputs))
	if c.Shapes != nil && len(c.Shapes) != len(c.Inputs) {
		t.Fatalf("%s: %d Shapes for %d Inputs", c.Name, len(c.Shapes), len(c.Inputs))
	}
	for i, in := range c.Inputs {
		sh := in.StaticShape()
		if c.Shapes != nil {
			sh = c.Shapes[i]
			if !sh.AcceptsDims(in.Shape()) {
				t.Fatalf("%s: input %d has shape %v, which placeholder shape %v does not accept", c.Name, i, in.Shape(), sh)
			}
		}
		xs[i] = ops.Placeholder(s, "x", in.DType(), sh)
	}
	y := c.Build(s.SubScope(c.Name), xs)
	if err := s.Err(); err != nil {
		t.Fatalf("%s: building: %v", c.Name, err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	defer sess.Close()
	feeds := map[graph.Output]*tensor.Tensor{}
	for i, in := range c.Inputs {
		feeds[xs[i]] = in
	}
	var vars []*ops.Variable
	if c.Variables {
		vars = ops.TrainableVariables(s.Graph())
		if len(vars) == 0 {
			t.Fatalf("%s: Variables is set, and Build created no trainable variable", c.Name)
		}
		init := ops.GlobalVariablesInitializer(s)
		if err := s.Err(); err != nil {
			t.Fatalf("%s: building the initializer: %v", c.Name, err)
		}
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
			t.Fatalf("%s: initialising the variables: %v", c.Name, err)
		}
	}
	yv, err := sess.Run(ctx, feeds, []graph.Output{y}, nil)
	if err != nil {
		t.Fatalf("%s: running the forward graph: %v", c.Name, err)
	}
	w := tensor.New(y.DType(), yv[0].Shape()...)
	r := rand.New(rand.NewSource(42))
	for i := 0; i < w.NumElements(); i++ {
		w.SetFloat64At(i, 0.5+r.Float64())
	}
	loss := ops.Sum(s, ops.Mul(s, y, ops.Const(s, w)), nil, false)

	wrt := c.Wrt
	if wrt == nil {
		for i, in := range c.Inputs {
			if in.DType().IsFloat() {
				wrt = append(wrt, i)
			}
		}
	}
	wrtXs := make([]graph.Output, len(wrt))
	for j, i := range wrt {
		wrtXs[j] = xs[i]
	}
	for _, v := range vars {
		wrtXs = append(wrtXs, v.Value())
	}
	grads, err := grad.Gradients(s, []graph.Output{loss}, wrtXs, nil)
	if err != nil {
		t.Fatalf("%s: Gradients: %v", c.Name, err)
	}
	for j, g := range grads {
		if !g.Valid() && j < len(wrt) {
			t.Fatalf("%s: no gradient with respect to input %d", c.Name, wrt[j])
		}
		if !g.Valid() {
			t.Fatalf("%s: no gradient with respect to variable %s", c.Name, vars[j-len(wrt)].Name())
		}
	}
	symbolic, err := sess.Run(ctx, feeds, grads, nil)
	if err != nil {
		t.Fatalf("%s: running the gradient graph: %v", c.Name, err)
	}

	lossAt := func() float64 {
		out, err := sess.Run(ctx, feeds, []graph.Output{loss}, nil)
		if err != nil {
			t.Fatalf("%s: running the loss: %v", c.Name, err)
		}
		return out[0].Float64At(0)
	}
	for j, i := range wrt {
		in := c.Inputs[i]
		delta, tol := c.Delta, c.Tol
		if delta == 0 {
			delta = map[bool]float64{true: 1e-6, false: 1e-2}[in.DType() == tensor.Float64]
		}
		if tol == 0 {
			tol = map[bool]float64{true: 1e-5, false: 2e-2}[in.DType() == tensor.Float64]
		}
		if !symbolic[j].StaticShape().Equal(in.StaticShape()) {
			t.Errorf("%s: gradient of input %d has shape %v, input has %v", c.Name, i, symbolic[j].Shape(), in.Shape())
			continue
		}
		x := in.Clone()
		feeds[xs[i]] = x
		for k := 0; k < x.NumElements(); k++ {
			orig := x.Float64At(k)
			x.SetFloat64At(k, orig+delta)
			up := lossAt()
			x.SetFloat64At(k, orig-delta)
			down := lossAt()
			x.SetFloat64At(k, orig)
			numeric := (up - down) / (2 * delta)
			got := symbolic[j].Float64At(k)
			if math.Abs(numeric-got) > tol*math.Max(1, math.Abs(numeric)) || math.IsNaN(got) {
				t.Errorf("%s: d/dx%d[%d]: symbolic %.6g, numeric %.6g", c.Name, i, k, got, numeric)
			}
		}
		feeds[xs[i]] = in
	}
	for j, v := range vars {
		checkVariable(t, c, sess, feeds, s, v, symbolic[len(wrt)+j], lossAt)
	}
}

// checkVariable compares the gradient of the loss with respect to variable
// v with central differences, setting v by assignment.
func checkVariable(t *testing.T, c Case, sess *session.Session, feeds map[graph.Output]*tensor.Tensor, s *graph.Scope, v *ops.Variable, symbolic *tensor.Tensor, lossAt func() float64) {
	t.Helper()
	ctx := context.Background()
	ph := ops.Placeholder(s, "set_"+v.Name(), v.DType(), v.Shape())
	set := ops.Assign(s, v.Value(), ph).Node
	if err := s.Err(); err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{v.Value()}, nil)
	if err != nil {
		t.Fatalf("%s: reading %s: %v", c.Name, v.Name(), err)
	}
	x := out[0].Clone()
	assign := func() {
		if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{ph: x}, nil, []*graph.Node{set}); err != nil {
			t.Fatalf("%s: setting %s: %v", c.Name, v.Name(), err)
		}
	}
	delta, tol := c.Delta, c.Tol
	if delta == 0 {
		delta = map[bool]float64{true: 1e-6, false: 1e-2}[x.DType() == tensor.Float64]
	}
	if tol == 0 {
		tol = map[bool]float64{true: 1e-5, false: 2e-2}[x.DType() == tensor.Float64]
	}
	if !symbolic.StaticShape().Equal(x.StaticShape()) {
		t.Errorf("%s: gradient of %s has shape %v, the variable has %v", c.Name, v.Name(), symbolic.Shape(), x.Shape())
		return
	}
	for k := 0; k < x.NumElements(); k++ {
		orig := x.Float64At(k)
		x.SetFloat64At(k, orig+delta)
		assign()
		up := lossAt()
		x.SetFloat64At(k, orig-delta)
		assign()
		down := lossAt()
		x.SetFloat64At(k, orig)
		assign()
		numeric := (up - down) / (2 * delta)
		got := symbolic.Float64At(k)
		if math.Abs(numeric-got) > tol*math.Max(1, math.Abs(numeric)) || math.IsNaN(got) {
			t.Errorf("%s: d/d%s[%d]: symbolic %.6g, numeric %.6g", c.Name, v.Name(), k, got, numeric)
		}
	}
}
