package executor

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// The kernels of the functional control-flow ops (package op: If, While).
// They live here because running a function is running a graph: each
// function runs on a nested Executor, on the same device, with the same
// resources and step as the node, its arguments fed and its results
// fetched. The executor of a function is built once per resource
// container (a session's or a worker's) and kept by the kernel.

func init() {
	kernel.Register("If", kernel.CPU, newIfKernel)
	kernel.Register("While", kernel.CPU, newWhileKernel)
}

// funcRunner runs one function, building its executor on first use for
// each resource container.
type funcRunner struct {
	node  *graph.Node
	what  string // "then_branch", "body", ... for errors
	f     *graph.Func
	execs sync.Map // *kernel.Resources -> *Executor
}

func newFuncRunner(n *graph.Node, attr string) (*funcRunner, error) {
	v, _ := n.Attr(attr)
	f, ok := v.(*graph.Func)
	if !ok || f == nil {
		return nil, fmt.Errorf("attribute %s is not a function", attr)
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("attribute %s: %w", attr, err)
	}
	return &funcRunner{node: n, what: attr, f: f}, nil
}

func (r *funcRunner) executor(res *kernel.Resources) (*Executor, error) {
	if e, ok := r.execs.Load(res); ok {
		return e.(*Executor), nil
	}
	e, err := New(r.f.Graph, graph.Signature{Feeds: r.f.Args, Fetches: r.f.Rets}, res)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.what, err)
	}
	got, _ := r.execs.LoadOrStore(res, e)
	return got.(*Executor), nil
}

// run runs the function on args and returns its results, which belong to
// the caller.
func (r *funcRunner) run(c *kernel.Context, args []*tensor.Tensor) ([]*tensor.Tensor, error) {
	e, err := r.executor(c.Resources)
	if err != nil {
		return nil, err
	}
	return e.RunStep(c.Ctx, c.Step, args)
}

// borrowsInputs reports whether running fs keeps no reference to their
// arguments beyond the call: no node of theirs, nested functions
// included, is of a stateful op (which may keep its inputs: a queue's
// enqueue) other than the control-flow ops, which are judged by their own
// functions. Then the kernel is a kernel.InputBorrower, and the executor
// may hand a variable's buffer that a loop reads back to the variable
// once the step is done with it, instead of copying it on the next update.
func borrowsInputs(fs ...*graph.Func) bool {
	stateful := errors.New("stateful")
	for _, f := range fs {
		err := graph.Walk(f.Graph, func(n *graph.Node) error {
			if n.Def().Stateful && n.Op() != "If" && n.Op() != "While" {
				return stateful
			}
			return nil
		})
		if err != nil {
			return false
		}
	}
	return true
}

// ifKernel runs one branch.
type ifKernel struct {
	then, els *funcRunner
	borrows   bool
}

// BorrowsInputs is true when the branches keep no input (kernel.InputBorrower).
func (k *ifKernel) BorrowsInputs() bool { return k.borrows }

func newIfKernel(n *graph.Node) (kernel.Kernel, error) {
	then, err := newFuncRunner(n, "then_branch")
	if err != nil {
		return nil, err
	}
	els, err := newFuncRunner(n, "else_branch")
	if err != nil {
		return nil, err
	}
	return &ifKernel{then: then, els: els, borrows: borrowsInputs(then.f, els.f)}, nil
}

// MayBlock is true: a branch may hold kernels that wait (a queue, a
// loop), so an If runs on a goroutine of its own with a context that the
// step's first error cancels.
func (k *ifKernel) MayBlock() bool { return true }

func (k *ifKernel) Compute(c *kernel.Context) error {
	p := c.Inputs[0].Bools()
	if len(p) != 1 {
		return fmt.Errorf("cond must be one bool, got shape %v", c.Inputs[0].Shape())
	}
	b := k.els
	if p[0] {
		b = k.then
	}
	out, err := b.run(c, c.Inputs[1:])
	if err != nil {
		return fmt.Errorf("%s: %w", b.what, err)
	}
	copy(c.Outputs, out)
	return nil
}

// whileKernel runs a loop.
type whileKernel struct {
	cond, body *funcRunner
	numVars    int
	maxIters   int
	// accumulate is set when a node of the graph consumes the loop's
	// per-iteration values (the gradient's loop): only then are they kept.
	accumulate bool
	borrows    bool
}

// BorrowsInputs is true when cond and body keep no input (kernel.InputBorrower).
func (k *whileKernel) BorrowsInputs() bool { return k.borrows }

func newWhileKernel(n *graph.Node) (kernel.Kernel, error) {
	cond, err := newFuncRunner(n, "cond")
	if err != nil {
		return nil, err
	}
	body, err := newFuncRunner(n, "body")
	if err != nil {
		return nil, err
	}
	k := &whileKernel{cond: cond, body: body, numVars: len(body.f.Rets), maxIters: n.AttrInt("maximum_iterations"),
		borrows: borrowsInputs(cond.f, body.f)}
	for _, m := range n.Graph().Consumers()[n.ID()] {
		for _, in := range m.Inputs() {
			if in.Node == n && in.Index > k.numVars {
				k.accumulate = true
			}
		}
	}
	return k, nil
}

// MayBlock is true: a loop may run long, or hold kernels that wait, so it
// runs on a goroutine of its own with a context that the step's first
// error cancels; it checks that context before every iteration.
func (k *whileKernel) MayBlock() bool { return true }

func (k *whileKernel) Compute(c *kernel.Context) error {
	n := k.numVars
	args := slices.Clone(c.Inputs)
	var hist [][]*tensor.Tensor
	if k.accumulate {
		hist = make([][]*tensor.Tensor, n)
	}
	iters := 0
	for ; k.maxIters < 0 || iters < k.maxIters; iters++ {
		if err := c.Ctx.Err(); err != nil {
			return fmt.Errorf("while loop stopped after %d iterations: %w", iters, err)
		}
		out, err := k.cond.run(c, args)
		if err != nil {
			return fmt.Errorf("cond, iteration %d: %w", iters, err)
		}
		if p := out[0].Bools(); len(p) != 1 || !p[0] {
			break
		}
		if iters == math.MaxInt32 {
			return fmt.Errorf("while loop ran %d iterations, the most its counter holds", iters)
		}
		for j := range hist {
			hist[j] = append(hist[j], args[j])
		}
		out, err = k.body.run(c, args)
		if err != nil {
			return fmt.Errorf("body, iteration %d: %w", iters, err)
		}
		copy(args, out)
	}
	copy(c.Outputs, args[:n])
	c.Outputs[n] = tensor.Scalar(int32(iters))
	for j := 0; j < n; j++ {
		var vals []*tensor.Tensor
		if hist != nil {
			vals = hist[j]
		}
		if err := stack(c, n+1+j, c.Inputs[j], vals, hist != nil); err != nil {
			return fmt.Errorf("loop variable %d: %w", j, err)
		}
	}
	return nil
}

// stack sets output o to the values of loop variable j at the start of
// each iteration, stacked along a new first dimension (no values when the
// loop does not accumulate them).
func stack(c *kernel.Context, o int, init *tensor.Tensor, vals []*tensor.Tensor, accumulate bool) error {
	if !accumulate {
		c.Outputs[o] = tensor.New(init.DType(), append([]int{0}, init.Shape()...)...)
		return nil
	}
	shape := init.Shape()
	if len(vals) > 0 {
		shape = vals[0].Shape()
	}
	for i, v := range vals {
		if !slices.Equal(v.Shape(), shape) {
			return fmt.Errorf("its shape changed from %v to %v at iteration %d: the gradient of a loop keeps each iteration's values stacked, which needs one shape for all", shape, v.Shape(), i)
		}
	}
	out := c.AllocUninit(o, init.DType(), append([]int{len(vals)}, shape...)...)
	dst := out.RawBytes()
	off := 0
	for _, v := range vals {
		off += copy(dst[off:], v.RawBytes())
	}
	return nil
}
