package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// Functional control flow, in the manner of TensorFlow 2's If and While:
// each op carries its branches or its body as function attributes
// (AttrFunc) and runs them whole on its own device. The tensors a function
// captures from the enclosing graph are explicit inputs of the op.

func init() {
	Register(Def{
		Name:   "If",
		Remote: true,
		Inputs: []Arg{{Name: "cond"}, {Name: "input", Variadic: true}},
		Attrs: []Attr{
			{Name: "then_branch", Type: AttrFunc},
			{Name: "else_branch", Type: AttrFunc},
		},
		// A branch may hold stateful ops (a random draw): the node must
		// be neither folded nor deduplicated.
		Stateful: true,
		Summary:  "Runs then_branch(input...) if cond is true, else else_branch(input...).",
		Infer:    inferIf,
	})
	Register(Def{
		Name:   "While",
		Remote: true,
		Inputs: []Arg{{Name: "input", Variadic: true}},
		Attrs: []Attr{
			{Name: "cond", Type: AttrFunc},
			{Name: "body", Type: AttrFunc},
			{Name: "maximum_iterations", Type: AttrInt, Default: -1},
		},
		Stateful: true,
		Summary: "Loop variables v (the first len(body results) inputs) and loop invariants c (the rest): " +
			"while cond(v, c) and fewer than maximum_iterations (if >= 0) iterations ran, v = body(v, c). " +
			"Outputs: the final v, the number of iterations (int32), and for each loop variable " +
			"its value at the start of every iteration, stacked (filled only when a node consumes it: the gradient).",
		Infer: inferWhile,
	})
}

// inferIf checks the branches' signatures against the inputs and each
// other; an output's shape is the most specific shape both branches'
// results have.
func inferIf(c *InferContext) error {
	if dt := c.InputDType(0); dt != tensor.Bool {
		return fmt.Errorf("cond must be bool, got %v", dt)
	}
	if s := c.InputShape(0); s.KnownRank() && s.Rank() != 0 {
		return fmt.Errorf("cond must be a scalar, got shape %v", s)
	}
	then, els := c.Func("then_branch"), c.Func("else_branch")
	if then == nil || els == nil {
		return fmt.Errorf("then_branch and else_branch must be functions")
	}
	ins := c.Inputs[1:]
	for _, b := range []struct {
		name string
		f    Func
	}{{"then_branch", then}, {"else_branch", els}} {
		if err := checkArgs(b.name, b.f.ArgTypes(), ins); err != nil {
			return err
		}
	}
	tr, er := then.RetTypes(), els.RetTypes()
	if len(tr) != len(er) {
		return fmt.Errorf("then_branch returns %d tensors, else_branch %d", len(tr), len(er))
	}
	for i := range tr {
		if tr[i].DType != er[i].DType {
			return fmt.Errorf("result %d is %v in then_branch and %v in else_branch", i, tr[i].DType, er[i].DType)
		}
		c.SetOutput(i, tr[i].DType, RelaxShapes(tr[i].Shape, er[i].Shape))
	}
	return nil
}

// inferWhile checks cond and body against the loop's inputs: cond returns
// one bool scalar, body one result per loop variable, of its dtype and of
// a shape its argument (the loop variable's shape invariant) accepts.
func inferWhile(c *InferContext) error {
	cond, body := c.Func("cond"), c.Func("body")
	if cond == nil || body == nil {
		return fmt.Errorf("cond and body must be functions")
	}
	if err := checkArgs("cond", cond.ArgTypes(), c.Inputs); err != nil {
		return err
	}
	args := body.ArgTypes()
	if err := checkArgs("body", args, c.Inputs); err != nil {
		return err
	}
	cr := cond.RetTypes()
	if len(cr) != 1 || cr[0].DType != tensor.Bool || cr[0].Shape.KnownRank() && cr[0].Shape.Rank() != 0 {
		return fmt.Errorf("cond must return one bool scalar, got %v", cr)
	}
	rets := body.RetTypes()
	if len(rets) == 0 {
		return fmt.Errorf("body returns no loop variables")
	}
	if len(rets) > len(args) {
		return fmt.Errorf("body returns %d tensors for %d inputs", len(rets), len(args))
	}
	for i, r := range rets {
		a := args[i]
		if r.DType != a.DType {
			return fmt.Errorf("loop variable %d enters the loop as %v and leaves the body as %v", i, a.DType, r.DType)
		}
		if !a.Shape.IsCompatibleWith(r.Shape) {
			return fmt.Errorf("loop variable %d has shape %v on entry and %v after an iteration: "+
				"give a shape invariant that allows both to let its shape change", i, a.Shape, r.Shape)
		}
	}
	n := len(rets)
	for i, a := range args[:n] {
		c.SetOutput(i, a.DType, a.Shape)
	}
	c.SetOutput(n, tensor.Int32, tensor.ScalarShape())
	for i, a := range args[:n] {
		hist := tensor.UnknownShape()
		if a.Shape.KnownRank() {
			hist = tensor.MakeShape(append([]int{-1}, a.Shape.Dims()...)...)
		}
		c.SetOutput(n+1+i, a.DType, hist)
	}
	return nil
}

// checkArgs checks a function's arguments against the tensors passed to
// it: as many, of the same dtypes, of shapes its arguments accept.
func checkArgs(name string, args []TensorInfo, ins []TensorInfo) error {
	if len(args) != len(ins) {
		return fmt.Errorf("%s takes %d arguments, the op passes %d", name, len(args), len(ins))
	}
	for i, a := range args {
		if a.DType != ins[i].DType {
			return fmt.Errorf("%s argument %d is %v, the op passes %v", name, i, a.DType, ins[i].DType)
		}
		if !a.Shape.IsCompatibleWith(ins[i].Shape) {
			return fmt.Errorf("%s argument %d has shape %v, the op passes %v", name, i, a.Shape, ins[i].Shape)
		}
	}
	return nil
}

// RelaxShapes returns the most specific shape that both a and b have: the
// common rank with the dimensions on which they agree, unknown elsewhere.
func RelaxShapes(a, b tensor.Shape) tensor.Shape {
	if !a.KnownRank() || !b.KnownRank() || a.Rank() != b.Rank() {
		return tensor.UnknownShape()
	}
	d := make([]int, a.Rank())
	for i := range d {
		d[i] = a.Dim(i)
		if b.Dim(i) != d[i] {
			d[i] = -1
		}
	}
	return tensor.MakeShape(d...)
}
