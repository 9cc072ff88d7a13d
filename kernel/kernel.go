package kernel

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// CPU is the device type every op has a kernel for.
const CPU = "CPU"

// Kernel computes one node. A Kernel is built once per node by its Factory
// (which validates attributes) and then called once per step; Compute may be
// called concurrently for different steps and must keep no per-step state.
type Kernel interface {
	Compute(c *Context) error
}

// Func adapts a function to Kernel.
type Func func(c *Context) error

// Compute calls f.
func (f Func) Compute(c *Context) error { return f(c) }

// Factory builds the kernel of a node, reading and checking its attributes once.
type Factory func(n *graph.Node) (Kernel, error)

// Simple returns a Factory for kernels that need nothing from the node at build time.
func Simple(f func(c *Context) error) Factory {
	k := Func(f)
	return func(*graph.Node) (Kernel, error) { return k, nil }
}

type key struct{ op, device string }

var (
	mu       sync.RWMutex
	registry = map[key]Factory{}
)

// Register adds the kernel factory of op on a device type. It panics on a
// duplicate registration (a programmer error found at init).
func Register(op, device string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	k := key{op, device}
	if _, dup := registry[k]; dup {
		panic(fmt.Sprintf("kernel.Register: %s on %s registered twice", op, device))
	}
	registry[k] = f
}

// Lookup returns the factory of op on device.
func Lookup(op, device string) (Factory, error) {
	mu.RLock()
	defer mu.RUnlock()
	if f, ok := registry[key{op, device}]; ok {
		return f, nil
	}
	return nil, fmt.Errorf("kernel: no %s kernel for op %q", device, op)
}

// List returns the ops that have a kernel on device, sorted.
func List(device string) []string {
	mu.RLock()
	defer mu.RUnlock()
	var ops []string
	for k := range registry {
		if k.device == device {
			ops = append(ops, k.op)
		}
	}
	sort.Strings(ops)
	return ops
}

// Context is what a kernel sees during one step: its inputs, a place for
// its outputs, and the step's shared state.
type Context struct {
	// Ctx is the step's context; long-running kernels check it. It is done
	// when the caller's context is and, in a step with a kernel that may
	// block (executor.Blocking), also on the step's first error, so that a
	// waiting kernel returns.
	Ctx context.Context
	// Node is the node being computed.
	Node *graph.Node
	// Inputs holds the data inputs; the entry of a ref input is nil.
	Inputs []*tensor.Tensor
	// Refs holds the variables of ref inputs (nil for value inputs).
	Refs []*Variable
	// Outputs must be filled by the kernel, one tensor per node output.
	Outputs []*tensor.Tensor
	// Resources holds the state that outlives a step (variables, queues).
	Resources *Resources
	// Step carries per-step services (the rendezvous of distributed steps).
	Step *Step
	// Buffers, set by the executor, has one entry per output (or is nil):
	// the buffers Alloc may reuse and the record of what it allocated.
	Buffers []OutputBuffer
	// InputLeases, set by the executor for an InputLeaser, has one entry
	// per input: a share of the variable buffer the input is (a valid
	// Lease), which the kernel now owns, or the zero Lease.
	InputLeases []Lease
	// Overwritable, set by the executor for an InputOverwriter, has one
	// entry per input: whether the kernel may overwrite it (see
	// InputOverwriter). It is nil for other kernels.
	Overwritable []bool
}

// Step is per-step information shared by all kernels of one step.
type Step struct {
	ID int64
	// Rendezvous moves tensors between partitions; nil in single-device runs.
	Rendezvous Rendezvous
}

// Rendezvous is where a Send kernel leaves a tensor and a Recv kernel picks
// it up, within one step. Package rendezvous implements it (its Rendezvous
// is this type); a worker hands one to each step of its partitions.
type Rendezvous interface {
	// Send makes t available under key. It never blocks. Sending one key
	// twice in a step is an error.
	Send(key string, t *tensor.Tensor) error
	// Recv waits until key is sent and returns the tensor. It fails when ctx
	// ends or the rendezvous is aborted, so a failed step never hangs.
	Recv(ctx context.Context, key string) (*tensor.Tensor, error)
}

// Input returns data input i.
func (c *Context) Input(i int) *tensor.Tensor { return c.Inputs[i] }

// Ref returns the variable behind ref input i.
func (c *Context) Ref(i int) *Variable { return c.Refs[i] }

// SetOutput stores output i.
func (c *Context) SetOutput(i int, t *tensor.Tensor) { c.Outputs[i] = t }

// Alloc returns a zeroed tensor of dtype dt and the given shape, stored as
// output i. The tensor may be a buffer recycled from an earlier step of the
// same executor (see OutputBuffer); it belongs to the step like any output.
// A tensor larger than the Resources' Policy.MaxTensorBytes is not
// allocated: Alloc panics with a value that the executor recovers as the
// node's error, wrapping ErrOverBudget (see RecoveredError).
func (c *Context) Alloc(i int, dt tensor.DType, shape ...int) *tensor.Tensor {
	t, reused := c.alloc(i, dt, shape)
	if reused {
		clearData(t.Data())
	}
	return t
}

// AllocUninit is Alloc without the zeroing: the contents are unspecified
// (possibly a previous step's values) and the kernel must write every element.
func (c *Context) AllocUninit(i int, dt tensor.DType, shape ...int) *tensor.Tensor {
	t, _ := c.alloc(i, dt, shape)
	return t
}

func (c *Context) alloc(i int, dt tensor.DType, shape []int) (t *tensor.Tensor, reused bool) {
	if c.Resources != nil && c.Resources.maxTensorBytes.Load() > 0 {
		c.checkBudget(i, dt, shape)
	}
	if i < len(c.Buffers) {
		b := &c.Buffers[i]
		if s := b.Spare; s != nil && s.DType() == dt && slices.Equal(s.Shape(), shape) {
			b.Spare, t, reused = nil, s, true
		}
		if t == nil {
			t = newTensor(dt, shape)
		}
		b.Allocated = t
	} else {
		t = newTensor(dt, shape)
	}
	c.Outputs[i] = t
	return t, reused
}

// checkBudget panics with a budgetPanic, which the executor recovers as
// the node's error, when output i would exceed the task's budget.
func (c *Context) checkBudget(i int, dt tensor.DType, shape []int) {
	limit := c.Resources.maxTensorBytes.Load()
	if n, ok := tensorBytes(dt, shape); ok && n <= limit {
		return // the common case allocates nothing, and shape does not escape
	}
	err := overBudget(fmt.Sprintf("output %d", i), dt, slices.Clone(shape), limit)
	panic(budgetPanic{&NodeError{Node: c.Node, Err: err}})
}

// OutputBuffer is the executor's side of Alloc for one output of the node
// being computed. The executor offers in Spare a tensor recycled from an
// earlier step, which no one else holds any more; Alloc takes it (setting
// Spare to nil) when its dtype and shape match the request. Alloc records
// in Allocated the tensor it returned, so that the executor knows which
// outputs it created and may recycle once the step no longer needs them.
//
// A kernel whose output is a variable's own buffer (see Variable.Share)
// records its share in Lease with ShareOutput; the executor releases it
// once no tensor of the step aliases the buffer any more, unless the tensor
// escapes the step (a fetch, a Send), and then never.
type OutputBuffer struct {
	Spare, Allocated *tensor.Tensor
	Lease            Lease
	// Own is set by SetOwnOutput: the output, not Allocated, is the
	// step's own all the same. It is not recycled.
	Own bool
}

// ShareOutput stores as output i a variable's buffer t shared under l. If
// the executor tracks buffers, it releases l when the step no longer holds
// t; otherwise l is never released, which is safe: the variable copies on
// its next update.
func (c *Context) ShareOutput(i int, t *tensor.Tensor, l Lease) {
	c.Outputs[i] = t
	if i < len(c.Buffers) {
		c.Buffers[i].Lease = l
	}
}

// SetOwnOutput stores as output i a tensor that no one outside the step
// holds, though Alloc did not make it: one decoded off the wire. A later
// kernel may then overwrite it (see InputOverwriter).
func (c *Context) SetOwnOutput(i int, t *tensor.Tensor) {
	c.Outputs[i] = t
	if i < len(c.Buffers) {
		c.Buffers[i].Own = true
	}
}

// newTensor is tensor.New through a copy of the dims, so that shape does
// not escape (tensor.New's may, into its panic message) and kernels can
// pass dims built on their stack to Alloc without allocating when a spare
// is reused.
func newTensor(dt tensor.DType, shape []int) *tensor.Tensor {
	if len(shape) > 8 {
		return tensor.New(dt, append([]int(nil), shape...)...)
	}
	var dims [8]int
	n := copy(dims[:], shape)
	return tensor.New(dt, dims[:n]...)
}

// LockValue takes v's exclusive lock and returns its value, to be updated
// in place until UnlockValue. If readers share the value's buffer, the
// variable first moves to a copy (see Variable). It fails, without holding
// the lock, if v is not initialized. Update is the same with a callback; hot
// kernels use this form because a callback capturing their state is a heap
// allocation.
func (v *Variable) LockValue() (*tensor.Tensor, error) {
	v.mu.Lock()
	if v.value == nil {
		v.mu.Unlock()
		return nil, v.uninitialized()
	}
	v.own(true)
	return v.value.t, nil
}

// LockValueMoving is LockValue for a kernel that writes every element of
// the value as a function of the old one: if readers share the value's
// buffer, the variable moves to another buffer without a copy, dst, whose
// contents are unspecified, and the old value is src, to be read only;
// otherwise src is dst and the update runs in place. The kernel must not
// fail once it holds the lock, since dst may be garbage until it is done.
func (v *Variable) LockValueMoving() (dst, src *tensor.Tensor, err error) {
	v.mu.Lock()
	if v.value == nil {
		v.mu.Unlock()
		return nil, nil, v.uninitialized()
	}
	src = v.own(false)
	return v.value.t, src, nil
}

// UnlockValue releases the lock LockValue took.
func (v *Variable) UnlockValue() { v.mu.Unlock() }

func clearData(d any) {
	switch s := d.(type) {
	case []float32:
		clear(s)
	case []float64:
		clear(s)
	case []int32:
		clear(s)
	case []int64:
		clear(s)
	case []bool:
		clear(s)
	case []uint8:
		clear(s)
	}
}

// InputBorrower is implemented by kernels of stateful ops that read their
// inputs only during Compute and keep no reference to them afterwards (the
// optimizers' update rules, assignments that copy). The executor recycles
// the buffer of a tensor across steps only if every consumer of it is a
// stateless op or an InputBorrower: a stateful kernel that keeps an input
// (sends it, enqueues it) needs nothing, since by default the executor
// assumes it may keep it.
type InputBorrower interface {
	BorrowsInputs() bool
}

// Borrowing wraps a factory so that its kernels implement InputBorrower.
func Borrowing(f Factory) Factory {
	return func(n *graph.Node) (Kernel, error) {
		k, err := f(n)
		if err != nil || k == nil {
			return k, err
		}
		return borrowing{k}, nil
	}
}

type borrowing struct{ Kernel }

func (borrowing) BorrowsInputs() bool { return true }

// InputLeaser is implemented by kernels of stateful ops that keep an input
// beyond Compute (Send hands it to the rendezvous) and can say when they
// are done with it. An input that is a variable's shared buffer (see
// Variable.Share) then comes with a share of its own in
// Context.InputLeases, released by the kernel, or whoever it gives the
// tensor to, once no one reads it; the executor hands back the step's
// share as for a stateless consumer, and the variable can be updated in
// place again without copying. A share never released is safe: the
// variable copies on its next update.
type InputLeaser interface {
	LeasesInputs() bool
}

// InputOverwriter is implemented by kernels that can make use of an
// input they may overwrite (an assignment that takes the input's storage
// rather than copying it, see Variable.Exchange). The executor tells such
// a kernel, in Context.Overwritable, which inputs are the step's own
// (allocated in the step, or received off the wire: see SetOwnOutput),
// read by no later node, through no view, and escaping nowhere (not
// fetched, kept or sent). The kernel may overwrite those, or exchange
// their storage, during Compute; the tensors stay the step's, and the
// kernel must not keep them.
type InputOverwriter interface {
	OverwritesInputs() bool
}

// Errorf returns an error naming the node and its op. Like fmt.Errorf, it
// wraps the operands of %w verbs, so that callers can test the sentinels of
// kernels' errors (cpu.ErrQueueClosed, tensor.ErrShapeOverflow) with errors.Is.
func (c *Context) Errorf(format string, args ...any) error {
	return &NodeError{Node: c.Node, Err: fmt.Errorf(format, args...)}
}

// Wrap returns err as an error of the node being computed (nil stays nil).
func (c *Context) Wrap(err error) error {
	if err == nil {
		return nil
	}
	return &NodeError{Node: c.Node, Err: err}
}

// NodeError is the error of a kernel that names its node, as Errorf and
// Wrap make: "kernel: node NAME (OP): detail". The executor adds the node to
// any other error.
type NodeError struct {
	Node *graph.Node
	Err  error
}

func (e *NodeError) Error() string { return fmt.Sprintf("kernel: node %s: %v", e.Node, e.Err) }

// Unwrap returns the detail.
func (e *NodeError) Unwrap() error { return e.Err }
