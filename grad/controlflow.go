package grad

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Gradients of the functional control-flow ops (If, While).
//
// Nodes are immutable once added, so a gradient cannot make the forward op
// output the intermediates it needs, as TensorFlow 2's cond_v2 does.
// Instead the gradient recomputes: the gradient of If is an If whose
// branches each rerun the forward branch on the same inputs and take its
// gradient; the gradient of While is a While that runs the iterations
// backwards, each rerunning the forward body on the loop variables that
// iteration started with, which the forward loop keeps, stacked, as
// outputs (filled only when a node consumes them: this gradient). It costs
// one more forward pass of a branch or a body, and keeps the loop
// variables of every iteration (not the body's intermediates).

func init() {
	Register("If", ifGrad)
	Register("While", whileGrad)
}

// ifGrad differentiates y = If(pred, x...): dx = If(pred, then', else')(x..., dy...),
// where each branch' reruns its branch and returns the gradient of its
// results with respect to its arguments.
func ifGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	then, _ := n.Attr("then_branch")
	els, _ := n.Attr("else_branch")
	tf, ok1 := then.(*graph.Func)
	ef, ok2 := els.(*graph.Func)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("branches are not functions")
	}
	ins := n.Inputs()[1:]
	var want []int // the inputs that get a gradient
	for i, x := range ins {
		if x.DType().IsFloat() {
			want = append(want, i)
		}
	}
	dx := make([]graph.Output, n.NumInputs())
	if len(want) == 0 {
		return dx, nil
	}
	branch := func(f *graph.Func) func(s *graph.Scope) []graph.Output {
		return func(bs *graph.Scope) []graph.Output {
			args := make([]graph.Output, len(ins))
			for i, x := range ins {
				args[i] = bs.Capture(x)
			}
			grads, err := funcGrad(bs, f, args, dys, want)
			if err != nil {
				bs.SetErr(err)
				return make([]graph.Output, len(want))
			}
			return grads
		}
	}
	out := ops.Cond(s, n.Input(0), branch(tf), branch(ef))
	for k, i := range want {
		dx[1+i] = out[k]
	}
	return dx, s.Err()
}

// funcGrad inlines f on args in s and returns the gradients of its float
// results, weighted by dys (tensors of an enclosing graph, captured), with
// respect to args[i] for each i of want: zeros where none flows.
func funcGrad(s *graph.Scope, f *graph.Func, args, dys []graph.Output, want []int) ([]graph.Output, error) {
	rets, err := graph.Inline(s, f, args)
	if err != nil {
		return nil, err
	}
	var ys, ws []graph.Output
	for i, r := range rets {
		if r.DType().IsFloat() && dys[i].Valid() {
			ys = append(ys, r)
			ws = append(ws, s.Capture(dys[i]))
		}
	}
	xs := make([]graph.Output, len(want))
	for k, i := range want {
		xs[k] = args[i]
	}
	var grads []graph.Output
	if len(ys) > 0 {
		if grads, err = Gradients(s, ys, xs, ws); err != nil {
			return nil, err
		}
	} else {
		grads = make([]graph.Output, len(xs))
	}
	for k, g := range grads {
		if !g.Valid() {
			grads[k] = ops.ZerosLike(s, xs[k])
		}
	}
	return grads, s.Err()
}

// whileGrad differentiates the loop v_final = While(v, c): a second loop
// runs count iterations backwards, each taking the loop variables the
// forward iteration started with from the stacked history, rerunning the
// body on them and the loop invariants c, and taking its gradient: the
// gradient of the loop variables flows from one iteration to the one
// before, and the invariants' gradients add up.
func whileGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	bv, _ := n.Attr("body")
	body, ok := bv.(*graph.Func)
	if !ok {
		return nil, fmt.Errorf("body is not a function")
	}
	nv := len(body.Rets)
	ins := n.Inputs()
	for j := nv + 1; j < len(dys); j++ {
		if d := dys[j]; d.Valid() && d.Node.Op() != "ZerosLike" {
			return nil, fmt.Errorf("output %d, the history of loop variable %d, is differentiated: "+
				"gradients of a loop's gradient (second order) are not supported", j, j-nv-1)
		}
	}
	var fv, fc []int // the loop variables and invariants that get a gradient
	for i, x := range ins {
		if x.DType().IsFloat() {
			if i < nv {
				fv = append(fv, i)
			} else {
				fc = append(fc, i)
			}
		}
	}
	dx := make([]graph.Output, len(ins))
	if len(fv) == 0 {
		return dx, nil // no float tensor leaves the loop: no gradient flows
	}
	count := n.Output(nv)
	hist := make([]graph.Output, nv)
	for j := range hist {
		hist[j] = n.Output(nv + 1 + j)
	}
	// The backward loop's variables: the iteration counter, the gradient
	// of each float loop variable, the accumulated gradient of each float
	// invariant.
	init := []graph.Output{count}
	shapes := []tensor.Shape{tensor.ScalarShape()}
	for _, j := range fv {
		init = append(init, dys[j])
		shapes = append(shapes, body.Args[j].Shape())
	}
	for _, i := range fc {
		init = append(init, ops.ZerosLike(s, ins[i]))
		shapes = append(shapes, ins[i].Shape())
	}
	cond := func(cs *graph.Scope, v []graph.Output) graph.Output {
		return ops.Greater(cs, v[0], ops.Const(cs, int32(0)))
	}
	step := func(bs *graph.Scope, v []graph.Output) []graph.Output {
		k := ops.Sub(bs, v[0], ops.Const(bs, int32(1)))
		args := make([]graph.Output, len(ins))
		for j := range nv {
			args[j] = ops.Gather(bs, hist[j], k, 0)
		}
		for i := nv; i < len(ins); i++ {
			args[i] = bs.Capture(ins[i])
		}
		dv := make([]graph.Output, nv)
		for k, j := range fv {
			dv[j] = v[1+k]
		}
		grads, err := funcGrad(bs, body, args, dv, append(append([]int(nil), fv...), fc...))
		if err != nil {
			bs.SetErr(err)
			return make([]graph.Output, len(v))
		}
		next := []graph.Output{k}
		next = append(next, grads[:len(fv)]...)
		for m := range fc {
			next = append(next, ops.Add(bs, v[1+len(fv)+m], grads[len(fv)+m]))
		}
		return next
	}
	out := ops.WhileLoop(s, cond, step, init, ops.ShapeInvariants(shapes...))
	if err := s.Err(); err != nil {
		return nil, err
	}
	for k, j := range fv {
		dx[j] = out[1+k]
	}
	for m, i := range fc {
		dx[i] = out[1+len(fv)+m]
	}
	return dx, nil
}
