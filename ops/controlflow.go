package ops

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// Control flow: Cond and WhileLoop, as tf.cond and tf.while_loop, built on
// the functional ops If and While (package op). A branch or a loop body is
// a Go function that builds its part of the graph in a scope of its own;
// the tensors of the enclosing graph it uses are captured and passed to the
// op as explicit inputs (graph.FuncBuilder), so that the node is an
// ordinary node of the enclosing graph: placed, partitioned, pruned and
// serialised as any other, and run whole on its device.

// Cond returns the results of then if pred (a bool scalar) is true at run
// time, else those of els. Only the branch taken runs. Both branches must
// return as many tensors, of the same dtypes; a result's shape is what
// both branches agree on. Each branch builds in the scope it is given and
// may use any tensor of the enclosing graph (a placeholder, a variable's
// value); variables must be created outside, and are read, not updated,
// inside. The branch taken runs whole on the node's device (devices
// requested inside are ignored).
//
// It returns one Output per result; the zero Outputs after an error,
// which is recorded on s.
func Cond(s *graph.Scope, pred graph.Output, then, els func(s *graph.Scope) []graph.Output) []graph.Output {
	if then == nil || els == nil {
		s.SetErr(fmt.Errorf("ops: Cond: a branch function is nil"))
		return nil
	}
	tb := graph.NewFuncBuilder(s, "then")
	eb := graph.NewFuncBuilder(s, "else")
	tr := captureAll(tb.Scope(), then(tb.Scope()))
	er := captureAll(eb.Scope(), els(eb.Scope()))
	out := make([]graph.Output, len(tr))
	if len(tr) != len(er) {
		s.SetErr(fmt.Errorf("ops: Cond: the true branch returns %d tensors, the false branch %d", len(tr), len(er)))
		return out
	}
	caps := unionCaptures(tb.Captures(), eb.Captures())
	tf := tb.Finish(tr, caps)
	ef := eb.Finish(er, caps)
	if tf == nil || ef == nil {
		return out
	}
	n := s.AddNode("If", "cond", append([]graph.Output{pred}, caps...), map[string]any{"then_branch": tf, "else_branch": ef})
	if n == nil {
		return out
	}
	for i := range out {
		out[i] = n.Output(i)
	}
	return out
}

// WhileOption sets an optional argument of WhileLoop.
type WhileOption func(*whileOptions)

type whileOptions struct {
	maxIters   int
	invariants []tensor.Shape
}

// MaximumIterations stops the loop after n iterations even if cond still
// holds (tf.while_loop's maximum_iterations): the loop's results are then
// the loop variables after n iterations. n must be >= 0.
func MaximumIterations(n int) WhileOption {
	return func(o *whileOptions) { o.maxIters = n }
}

// ShapeInvariants gives the shape each loop variable keeps through the
// loop, one per variable, as tf.while_loop's shape_invariants: a loop
// variable whose shape changes from one iteration to the next (a sequence
// that grows) needs a shape with those dimensions unknown. By default each
// keeps its initial value's shape. The gradient of a loop needs every
// iteration's value of a variable to have one shape at run time.
func ShapeInvariants(shapes ...tensor.Shape) WhileOption {
	return func(o *whileOptions) { o.invariants = shapes }
}

// WhileLoop runs body on the loop variables while cond holds, as
// tf.while_loop: vars start as init; cond returns a bool scalar; body
// returns the next value of every variable, of the same dtype and of a
// shape its invariant allows. Both build in the scope they are given and
// may use any tensor of the enclosing graph, which the loop then takes as
// an input that does not change across iterations. It returns the loop
// variables' final values; the zero Outputs after an error, which is
// recorded on s.
//
// The loop runs whole, on one device, within one node (devices requested
// inside cond or body are ignored); it stops with an error when the step
// is cancelled. Gradients flow through it to init and
// to the captured tensors (package grad).
func WhileLoop(s *graph.Scope, cond func(s *graph.Scope, vars []graph.Output) graph.Output,
	body func(s *graph.Scope, vars []graph.Output) []graph.Output, init []graph.Output, opts ...WhileOption) []graph.Output {
	o := whileOptions{maxIters: -1}
	for _, f := range opts {
		f(&o)
	}
	out := make([]graph.Output, len(init))
	switch {
	case cond == nil || body == nil:
		s.SetErr(fmt.Errorf("ops: WhileLoop: cond or body is nil"))
		return out
	case len(init) == 0:
		s.SetErr(fmt.Errorf("ops: WhileLoop: no loop variables"))
		return out
	case o.invariants != nil && len(o.invariants) != len(init):
		s.SetErr(fmt.Errorf("ops: WhileLoop: %d shape invariants for %d loop variables", len(o.invariants), len(init)))
		return out
	case o.maxIters < -1:
		s.SetErr(fmt.Errorf("ops: WhileLoop: maximum iterations %d is negative", o.maxIters))
		return out
	}
	if s.Err() != nil {
		return out
	}
	cb := graph.NewFuncBuilder(s, "cond")
	bb := graph.NewFuncBuilder(s, "body")
	cv := make([]graph.Output, len(init))
	bv := make([]graph.Output, len(init))
	for i, x := range init {
		if !x.Valid() {
			s.SetErr(fmt.Errorf("ops: WhileLoop: initial value %d is missing", i))
			return out
		}
		info := op.TensorInfo{DType: x.DType(), Shape: x.Shape()}
		if o.invariants != nil {
			if !o.invariants[i].IsCompatibleWith(x.Shape()) {
				s.SetErr(fmt.Errorf("ops: WhileLoop: loop variable %d (%s) has shape %v, which its shape invariant %v does not allow", i, x, x.Shape(), o.invariants[i]))
				return out
			}
			info.Shape = o.invariants[i]
		}
		cv[i], bv[i] = cb.Arg(info), bb.Arg(info)
	}
	p := cb.Scope().Capture(cond(cb.Scope(), cv))
	next := captureAll(bb.Scope(), body(bb.Scope(), bv))
	if s.Err() != nil {
		return out
	}
	if len(next) != len(init) {
		s.SetErr(fmt.Errorf("ops: WhileLoop: body returns %d tensors for %d loop variables", len(next), len(init)))
		return out
	}
	caps := unionCaptures(bb.Captures(), cb.Captures())
	cf := cb.Finish([]graph.Output{p}, caps)
	bf := bb.Finish(next, caps)
	if cf == nil || bf == nil {
		return out
	}
	n := s.AddNode("While", "while", append(append([]graph.Output(nil), init...), caps...),
		map[string]any{"cond": cf, "body": bf, "maximum_iterations": o.maxIters})
	if n == nil {
		return out
	}
	for i := range out {
		out[i] = n.Output(i)
	}
	return out
}

// captureAll returns the stand-ins in s's function of a function's results,
// which may be tensors of an enclosing graph (a branch that returns x).
// Missing results stay missing.
func captureAll(s *graph.Scope, rets []graph.Output) []graph.Output {
	out := make([]graph.Output, len(rets))
	for i, r := range rets {
		if r.Valid() {
			out[i] = s.Capture(r)
		}
	}
	return out
}

// unionCaptures returns a's tensors, then b's that a lacks.
func unionCaptures(a, b []graph.Output) []graph.Output {
	seen := map[graph.Output]bool{}
	var out []graph.Output
	for _, l := range [][]graph.Output{a, b} {
		for _, o := range l {
			if !seen[o] {
				seen[o] = true
				out = append(out, o)
			}
		}
	}
	return out
}
