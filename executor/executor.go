package executor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/gopool"
	"github.com/distflow/distflow/internal/stepctx"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// Executor runs the minimal subgraph of one graph that a fixed signature
// (feeds, fetches, targets) needs, on the CPU. It is immutable after New and
// safe for concurrent Run calls: every Run has its own state.
type Executor struct {
	res     *kernel.Resources
	nodes   []execNode // the pruned subgraph in topological order
	roots   []int32    // nodes with no pending inputs
	feeds   []graph.Output
	fetches []int32 // value slot of each fetch

	numSlots     int     // node outputs first, then one slot per feed
	feedBase     int     // slot of feed 0
	numInputs    int     // total data inputs of the pruned nodes
	pending      []int32 // initial pending count per node
	consumerRefs []int32 // initial consumer count per slot; pinned slots are never released

	// consts holds the Const values of the pruned graph: a fetch that is one of
	// them is cloned, because the caller owns what Run returns.
	consts map[*tensor.Tensor]bool

	maxWorkers int
	// blocking is set when a kernel of the step may block (Blocking): only
	// then does a step need a context of its own, cancelled on its first
	// error so that the blocked kernel returns.
	blocking bool

	// Buffer recycling (see recycle). escapes marks the slots whose tensor may
	// outlive the step: fetches, and inputs of stateful kernels that may keep
	// them. spare holds, per node output slot, a tensor from an earlier step
	// that no one holds any more, offered to the kernel's next Alloc.
	escapes []bool
	// kept marks the slots read by a stateful kernel that may keep its
	// input: the escapes other than fetches. A fetch of a variable's shared
	// buffer is copied instead (see RunStep), so only these keep the
	// variable's buffer shared beyond the step.
	kept    []bool
	spare   []atomic.Pointer[tensor.Tensor]
	runPool sync.Pool // of *run, reused only after a step whose workers all retired

	runs, executed atomic.Int64
	stepID         atomic.Int64
}

// execNode is one node of the pruned subgraph, with everything a step needs
// precomputed.
type execNode struct {
	node      *graph.Node
	kernel    kernel.Kernel
	inSlots   []int32            // value slot of each data input; -1 for ref inputs
	refs      []*kernel.Variable // variable of each ref input; nil if the node has none
	inBase    int32              // offset of the node's inputs in the per-run input array
	outBase   int32              // slot of output 0
	numOut    int32
	consumers []int32 // distinct successors (data and control) in the pruned subgraph
	mayBlock  bool    // the kernel implements Blocking and may wait
	leases    bool    // the kernel is a kernel.InputLeaser
	overwrite bool    // the kernel is a kernel.InputOverwriter
}

// Blocking is implemented by kernels that may wait for something outside the
// step's dataflow: a tensor from another task (Recv), a queue filled by
// another step. Such a node runs on a goroutine of its own, outside the
// bounded pool, so that waiting kernels cannot starve the nodes that would
// unblock them, and its step's kernel.Context.Ctx is cancelled on the
// step's first error; a kernel that waits on Ctx must implement it. Kernels
// implement it without importing this package.
type Blocking interface {
	MayBlock() bool
}

// pinned is added to the consumer count of feed and fetch slots so that they
// are never released during a step.
const pinned = 1 << 30

// New prepares the execution of g for one signature: fetching sig.Fetches
// and running sig.Targets, with values for sig.Feeds given at each Run in
// that order.
//
// The nodes it runs are graph.NewSubgraph(g, sig).Nodes: fed tensors are
// inputs, and a ref input does not run its Variable node: it is resolved
// to res.Variable(name, dtype, shape) once, here, and handed to the kernel
// in kernel.Context.Refs. Each node's kernel is built once. res holds the
// variables; nil means a private, empty container.
func New(g *graph.Graph, sig graph.Signature, res *kernel.Resources) (*Executor, error) {
	sub, err := graph.NewSubgraph(g, sig)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	if res == nil {
		res = kernel.NewResources()
	}
	feeds, fetches := sub.Feeds, sub.Fetches
	e := &Executor{res: res, feeds: feeds, maxWorkers: max(runtime.GOMAXPROCS(0), 2)}

	// Number the step's nodes (in creation order, which is topological)
	// and give each output a value slot.
	index := make([]int32, g.NumNodes())
	for i := range index {
		index[i] = -1
	}
	for _, n := range sub.Nodes {
		index[n.ID()] = int32(len(e.nodes))
		e.nodes = append(e.nodes, execNode{node: n, outBase: int32(e.numSlots), numOut: int32(n.NumOutputs())})
		e.numSlots += n.NumOutputs()
	}
	e.feedBase = e.numSlots
	e.numSlots += len(feeds)
	e.consumerRefs = make([]int32, e.numSlots)
	e.escapes = make([]bool, e.numSlots)
	e.kept = make([]bool, e.numSlots)
	e.spare = make([]atomic.Pointer[tensor.Tensor], e.numSlots)
	e.pending = make([]int32, len(e.nodes))
	slotOf := func(o graph.Output) int32 {
		if i, ok := sub.FeedIndex(o); ok {
			return int32(e.feedBase + i)
		}
		return e.nodes[index[o.Node.ID()]].outBase + int32(o.Index)
	}

	for i := range e.nodes {
		en := &e.nodes[i]
		n := en.node
		f, err := kernel.Lookup(n.Op(), kernel.CPU)
		if err != nil {
			return nil, fmt.Errorf("executor: node %s: %w", n, err)
		}
		if en.kernel, err = buildKernel(f, n); err != nil {
			return nil, err
		}
		if n.Op() == "Const" {
			if v := n.AttrTensor("value"); v != nil {
				if e.consts == nil {
					e.consts = map[*tensor.Tensor]bool{}
				}
				e.consts[v] = true
			}
		}
		en.inBase = int32(e.numInputs)
		e.numInputs += n.NumInputs()
		en.inSlots = make([]int32, n.NumInputs())
		var preds []int32
		addPred := func(j int32) {
			for _, p := range preds {
				if p == j {
					return
				}
			}
			preds = append(preds, j)
		}
		for k, in := range n.Inputs() {
			if n.IsRefInput(k) {
				v, err := res.Variable(in.Node.Name(), in.DType(), in.Shape())
				if err != nil {
					return nil, fmt.Errorf("executor: node %s: ref input %d: %w", n, k, err)
				}
				if en.refs == nil {
					en.refs = make([]*kernel.Variable, n.NumInputs())
				}
				en.refs[k] = v
				en.inSlots[k] = -1
				continue
			}
			s := slotOf(in)
			en.inSlots[k] = s
			e.consumerRefs[s]++
			if _, ok := sub.FeedIndex(in); !ok {
				addPred(index[in.Node.ID()])
			}
		}
		for _, c := range n.ControlInputs() {
			if j := index[c.ID()]; j >= 0 {
				addPred(j)
			}
		}
		en.overwrite = overwritesInputs(en.kernel)
		if keeps := n.Def() != nil && n.Def().Stateful && !borrows(en.kernel); keeps {
			// A leaser keeps a shared variable buffer under a lease of its
			// own (see exec), so the step's share may go back.
			en.leases = leasesInputs(en.kernel)
			for _, s := range en.inSlots {
				if s >= 0 {
					e.escapes[s] = true
					e.kept[s] = e.kept[s] || !en.leases
				}
			}
		}
		e.pending[i] = int32(len(preds))
		if len(preds) == 0 {
			e.roots = append(e.roots, int32(i))
		}
		// Nodes are numbered in order, so successor lists come out sorted,
		// which keeps inline execution deterministic.
		for _, j := range preds {
			e.nodes[j].consumers = append(e.nodes[j].consumers, int32(i))
		}
		if b, ok := en.kernel.(Blocking); ok && b.MayBlock() {
			en.mayBlock = true
			e.blocking = true
		}
	}
	for i := range feeds {
		e.consumerRefs[e.feedBase+i] += pinned
	}
	for _, f := range fetches {
		s := slotOf(f)
		e.fetches = append(e.fetches, s)
		e.consumerRefs[s] += pinned
		e.escapes[s] = true
	}
	return e, nil
}

// borrows reports whether a stateful kernel declares that it keeps no input.
func borrows(k kernel.Kernel) bool {
	b, ok := k.(kernel.InputBorrower)
	return ok && b.BorrowsInputs()
}

// leasesInputs reports whether a stateful kernel takes leases of its own
// on the variable buffers it keeps.
func leasesInputs(k kernel.Kernel) bool {
	l, ok := k.(kernel.InputLeaser)
	return ok && l.LeasesInputs()
}

// overwritesInputs reports whether a kernel wants to know which inputs it
// may overwrite.
func overwritesInputs(k kernel.Kernel) bool {
	o, ok := k.(kernel.InputOverwriter)
	return ok && o.OverwritesInputs()
}

// buildKernel calls a kernel factory, turning a panic into an error.
func buildKernel(f kernel.Factory, n *graph.Node) (k kernel.Kernel, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("executor: node %s: building the kernel panicked: %v", n, r)
		}
	}()
	k, err = f(n)
	if err != nil {
		return nil, fmt.Errorf("executor: node %s: building the kernel: %w", n, err)
	}
	if k == nil {
		return nil, fmt.Errorf("executor: node %s: the kernel factory returned no kernel", n)
	}
	return k, nil
}

// Stats are cumulative counters of an executor.
type Stats struct {
	// Nodes is the size of the pruned subgraph.
	Nodes int
	// Runs counts the Run calls that started executing nodes.
	Runs int64
	// NodesExecuted counts kernel invocations over all runs (failed ones included).
	NodesExecuted int64
}

// Stats returns the executor's counters.
func (e *Executor) Stats() Stats {
	return Stats{Nodes: len(e.nodes), Runs: e.runs.Load(), NodesExecuted: e.executed.Load()}
}

// Nodes returns the nodes of the pruned subgraph in execution-compatible
// (topological) order.
func (e *Executor) Nodes() []*graph.Node {
	out := make([]*graph.Node, len(e.nodes))
	for i := range e.nodes {
		out[i] = e.nodes[i].node
	}
	return out
}

// Run executes one step: feedValues in the order of New's feeds, and returns
// the fetches in the order of New's fetches. The returned tensors belong to
// the caller (a fetched constant is a copy; a fetched feed is the fed tensor;
// duplicate fetches return the same tensor). The first error aborts the step
// and is returned, naming the node and op; a cancelled ctx aborts it promptly
// with an error wrapping ctx.Err().
func (e *Executor) Run(ctx context.Context, feedValues []*tensor.Tensor) ([]*tensor.Tensor, error) {
	return e.RunStep(ctx, nil, feedValues)
}

// RunStep is Run with the step's shared services (step ID, rendezvous) given
// to every kernel as kernel.Context.Step. A nil step gets a fresh ID.
func (e *Executor) RunStep(ctx context.Context, step *kernel.Step, feedValues []*tensor.Tensor) ([]*tensor.Tensor, error) {
	return e.RunStepWith(ctx, step, feedValues, StepOptions{})
}

// Blocking reports whether a kernel of the executor's steps may block
// (kernel.Blocking): only then does a step need a cancellable context of
// its own (see StepOptions.Context).
func (e *Executor) Blocking() bool { return e.blocking }

// StepOptions are the optional arguments of RunStepWith.
type StepOptions struct {
	// Context and Canceler, when both are set, are the context the
	// step's kernels get and what cancels it: one the caller derived
	// from RunStepWith's ctx for this step alone, to share with what it
	// starts for the step (a worker's requests for the step's tensors).
	// The executor then derives none: it cancels Context with the step's
	// first error, so that blocked kernels return, as it would its own;
	// the caller cancels it once RunStepWith has returned. A
	// *stepctx.Context is both, without an allocation; a standard
	// context's cancel function serves as CancelFunc(cancel).
	Context  context.Context
	Canceler Canceler
	// Trace, if not nil, records the step (see RunTraced).
	Trace *StepTrace
	// Out, if it has room for the fetches, holds them: they are returned
	// in Out[:n], which then belongs to the caller as a new slice would.
	Out []*tensor.Tensor
	// Owned, if it has room for the fetches, is set to whether each one
	// is storage that the step made (allocated, copied, or received off
	// the wire) and that nothing beyond the step holds: the caller may
	// hand it on without a copy (a worker's response aliases it). Other
	// fetches may share storage with a feed, or with another task's
	// tensor in the same process.
	Owned []bool
}

// Canceler cancels a context with a cause, as a context.CancelCauseFunc
// does.
type Canceler interface{ Cancel(cause error) }

// CancelFunc is the Canceler of a context.CancelCauseFunc (pointer-shaped:
// no allocation).
type CancelFunc context.CancelCauseFunc

// Cancel calls f.
func (f CancelFunc) Cancel(cause error) { f(cause) }

// RunStepWith is RunStep with options.
func (e *Executor) RunStepWith(ctx context.Context, step *kernel.Step, feedValues []*tensor.Tensor, opts StepOptions) ([]*tensor.Tensor, error) {
	if err := e.checkFeeds(feedValues); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("executor: step not started: %w", err)
	}
	r := e.newRun(ctx, step, feedValues, &opts)
	r.trace = opts.Trace
	if !r.callerCtx {
		defer r.cancel.Cancel(nil)
	}
	if len(e.nodes) > 0 {
		e.runs.Add(1)
		if r.parentStep != nil {
			r.parentStep.WatchWaker(&r.parentHook, r)
		}
		r.start()
		woke := false
		select {
		case <-r.finished:
		case <-r.parentDone:
			// Return promptly, unless the step has completed at the same time.
			select {
			case <-r.finished:
			default:
				r.abort(fmt.Errorf("executor: step cancelled: %w", ctx.Err()))
			}
		case <-r.woken: // Wake: the parent ended
			woke = true
			if !r.aborted.Load() {
				<-r.finished // Wake found the step finished: its token is sent, or about to be
			}
		}
		if r.parentStep != nil && !woke && !r.parentStep.Unwatch(&r.parentHook) {
			<-r.woken // Wake runs: r must not be reused before it returns
		}
		if err := r.firstErr(); err != nil {
			return nil, err
		}
	}
	out := slices.Grow(opts.Out[:0], len(e.fetches))[:len(e.fetches)]
	owned := opts.Owned
	if len(owned) < len(out) {
		owned = nil
	}
	for i, s := range e.fetches {
		t := r.values[s]
		org := r.origin[s]
		// The step's storage, allocated or received, unless a variable's
		// (copied below) or one that a stateful kernel keeps.
		own := org >= 0 && !r.held[org].Load()
		switch {
		case e.consts[t]:
			t, own = t.Clone(), true
		case org >= 0 && r.buffers[org].Lease.Valid():
			// A variable's buffer: the caller gets a copy it may modify,
			// and the slot is dead now (pinned slots are dropped here, once).
			own = true
			if j := slices.Index(e.fetches[:i], s); j >= 0 {
				t = out[j]
				break
			}
			t = t.Clone()
			r.drop(s)
		}
		out[i] = t
		if owned != nil {
			owned[i] = own
		}
	}
	r.recycle()
	return out, nil
}

func (e *Executor) checkFeeds(vals []*tensor.Tensor) error {
	if len(vals) != len(e.feeds) {
		return fmt.Errorf("executor: got %d feed values for %d fed tensors", len(vals), len(e.feeds))
	}
	for i, t := range vals {
		if t == nil {
			return fmt.Errorf("executor: feed %s is nil", e.feeds[i])
		}
		if err := graph.CheckFeed(e.feeds[i], t.DType(), t.Shape()); err != nil {
			return fmt.Errorf("executor: %w", err)
		}
	}
	return nil
}

// run is the state of one step.
type run struct {
	e          *Executor
	parent     context.Context
	kctx       context.Context // cancelled on the first error: blocking kernels return
	cancel     Canceler
	callerCtx  bool            // kctx and cancel are the caller's (StepOptions): it ends kctx
	parentDone <-chan struct{} // nil when the parent is a stepctx.Context (parentStep)
	step       *kernel.Step
	// A stepctx.Context parent is heard through a Hook rather than its
	// Done channel, which it would make at every step: Wake aborts the
	// step and tells RunStepWith through woken.
	parentStep *stepctx.Context
	parentHook stepctx.Hook
	woken      chan struct{}

	values  []*tensor.Tensor // one per slot
	inputs  []*tensor.Tensor // backing array of every node's Context.Inputs
	pending []int32          // atomically decremented
	refs    []int32          // remaining consumers per slot, atomically decremented

	// buffers backs every node's Context.Buffers. origin[s] is the slot whose
	// own buffer the tensor in slot s is or aliases (itself for a tensor
	// its kernel allocated, or received as its own, the input's origin for
	// a forwarded or reshaped input), -1 for tensors the step does not own
	// (feeds, constants, tensors received from the same process).
	// escaped[s] marks a buffer that may outlive the step and must not be
	// recycled; held[s], one that a stateful kernel may keep (not only a
	// fetch); viewed[s], one that another slot aliases.
	buffers []kernel.OutputBuffer
	origin  []int32
	escaped []atomic.Bool
	held    []atomic.Bool
	viewed  []atomic.Bool
	// alive[s], for a slot s holding a variable's shared buffer (a Lease
	// in buffers[s]), counts the live slots whose origin is s; the lease is
	// released when it drops to zero, unless the buffer escaped.
	alive []atomic.Int32

	stepBuf kernel.Step // the step of Run calls given none
	trace   *StepTrace  // nil unless the step is traced (RunTraced)
	w0      worker      // the caller's worker

	remaining atomic.Int32 // nodes not yet executed
	aborted   atomic.Bool
	closed    atomic.Bool // finished is closed
	finished  chan struct{}

	mu   sync.Mutex
	idle []*worker // retired spawned workers, reused by later spawns
	// orphaned is set when RunStep returned before every worker retired:
	// the last one recycles r.
	orphaned bool
	queue    []int32 // ready nodes no worker has taken yet
	active   int     // running workers
	err      error
}

func (e *Executor) newRun(ctx context.Context, step *kernel.Step, feeds []*tensor.Tensor, opts *StepOptions) *run {
	r, _ := e.runPool.Get().(*run)
	if r == nil {
		r = &run{
			e:        e,
			values:   make([]*tensor.Tensor, e.numSlots),
			inputs:   make([]*tensor.Tensor, e.numInputs),
			pending:  make([]int32, len(e.pending)),
			refs:     make([]int32, e.numSlots),
			buffers:  make([]kernel.OutputBuffer, e.numSlots),
			origin:   make([]int32, e.numSlots),
			escaped:  make([]atomic.Bool, e.numSlots),
			held:     make([]atomic.Bool, e.numSlots),
			viewed:   make([]atomic.Bool, e.numSlots),
			alive:    make([]atomic.Int32, e.numSlots),
			finished: make(chan struct{}, 1),
			woken:    make(chan struct{}, 1),
		}
		r.w0.caller = true
	}
	r.callerCtx = opts.Context != nil && opts.Canceler != nil
	switch {
	case r.callerCtx:
		r.kctx, r.cancel = opts.Context, opts.Canceler // the caller's, already made
	case r.e.blocking:
		kctx, cancel := context.WithCancelCause(ctx)
		r.kctx, r.cancel = kctx, CancelFunc(cancel)
	default:
		// No kernel waits on the context: the step stops through r.aborted,
		// and the caller's context serves as is (no allocation).
		r.kctx, r.cancel = ctx, CancelFunc(noCancel)
	}
	r.parent = ctx
	if sc, ok := stepctx.Of(ctx); ok {
		r.parentStep, r.parentDone = sc, nil
	} else {
		r.parentStep, r.parentDone = nil, ctx.Done()
	}
	if step == nil {
		r.stepBuf = kernel.Step{ID: e.stepID.Add(1)}
		step = &r.stepBuf
	}
	r.step = step
	copy(r.pending, e.pending)
	copy(r.refs, e.consumerRefs)
	for i := range r.origin {
		r.origin[i] = -1
	}
	copy(r.values[e.feedBase:], feeds)
	r.remaining.Store(int32(len(e.nodes)))
	return r
}

func noCancel(error) {}

// recycle ends a successful step: it offers every buffer the step allocated
// and that did not escape to the next step's kernel of the same slot, and
// returns r to the pool when no worker can touch it any more.
func (r *run) recycle() {
	e := r.e
	for s := range r.buffers[:e.feedBase] {
		b := &r.buffers[s]
		if t := b.Allocated; t != nil && r.origin[s] == int32(s) && !r.escaped[s].Load() {
			e.spare[s].Store(t)
		}
	}
	r.mu.Lock()
	if r.active != 0 || r.aborted.Load() {
		// A worker is still retiring: the last one to retire resets r
		// (see pop).
		r.orphaned = !r.aborted.Load()
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.reset()
}

// reset clears a finished step that no worker touches any more and returns
// it to the pool.
func (r *run) reset() {
	e := r.e
	r.orphaned = false
	if !r.callerCtx {
		r.cancel.Cancel(nil)
	}
	clear(r.values)
	clear(r.inputs)
	clear(r.buffers)
	for i := range r.escaped {
		r.escaped[i].Store(false)
		r.held[i].Store(false)
		r.viewed[i].Store(false)
		r.alive[i].Store(0)
	}
	r.parent, r.kctx, r.cancel, r.parentDone, r.parentStep, r.step, r.trace = nil, nil, nil, nil, nil, nil, nil
	r.closed.Store(false)
	r.queue = r.queue[:0]
	r.err = nil
	r.w0.local = r.w0.local[:0]
	e.runPool.Put(r)
}

// start queues the roots and runs the first of them on the caller's
// goroutine, which is one of the step's workers.
func (r *run) start() {
	roots := r.e.roots
	w := &r.w0
	r.mu.Lock()
	r.active = 1
	for _, n := range roots[1:] {
		if r.costly(n) {
			r.queue = append(r.queue, n)
		} else {
			w.local = append(w.local, n)
		}
	}
	spawn := r.spawnLocked()
	r.mu.Unlock()
	for range spawn {
		go r.work(r.newWorker(), -1)
	}
	r.work(w, roots[0])
}

// worker is the state of one goroutine executing nodes.
type worker struct {
	// c is the kernel context, reused node after node: kernels must not keep
	// it beyond Compute.
	c kernel.Context
	// local holds ready nodes too cheap to be worth a handoff to another
	// goroutine; this worker runs them itself, last in first out.
	local []int32
	// leases backs c.InputLeases, overwritable c.Overwritable.
	leases       []kernel.Lease
	overwritable []bool
	// caller marks the worker of RunStep's goroutine (run.w0). traced is
	// the trace of the step this worker last ran a traced node of, lane
	// its lane in that step (see StepTrace.record).
	caller bool
	traced *StepTrace
	lane   int32
	// detached is the blocking node a detached worker runs first, and
	// runDetached its goroutine's body (see detach), built once per worker.
	detached    int32
	runDetached func()
}

// costlyElems is the number of input elements from which a ready node is
// worth handing to another worker: below it, the goroutine handoff (about a
// microsecond) would cost more than running the node inline.
const costlyElems = 1 << 14

// costly estimates from its inputs, all available now, whether ready node i
// is expensive enough to run on another worker.
func (r *run) costly(i int32) bool {
	total := 0
	for _, s := range r.e.nodes[i].inSlots {
		if s >= 0 {
			if t := r.values[s]; t != nil {
				total += t.NumElements()
			}
		}
	}
	return total >= costlyElems
}

// newWorker returns a retired worker of this or an earlier step of r, or a
// new one.
func (r *run) newWorker() *worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.idleWorkerLocked()
}

// idleWorkerLocked is newWorker with r.mu held.
func (r *run) idleWorkerLocked() *worker {
	if n := len(r.idle); n > 0 {
		w := r.idle[n-1]
		r.idle = r.idle[:n-1]
		return w
	}
	return new(worker)
}

// spawnLocked reserves workers for queued nodes, up to the pool size, and
// returns how many goroutines the caller must start.
func (r *run) spawnLocked() int {
	n := min(len(r.queue), r.e.maxWorkers-r.active)
	if n < 0 {
		n = 0
	}
	r.active += n
	return n
}

// work executes nodes until no ready node is left: next first (if >= 0),
// then the successor each execution returns, then its own stack of cheap ready
// nodes, then the shared queue.
func (r *run) work(w *worker, next int32) {
	for {
		if next < 0 {
			if n := len(w.local); n > 0 {
				next, w.local = w.local[n-1], w.local[:n-1]
			} else if next = r.pop(w); next < 0 {
				return
			}
		}
		if r.aborted.Load() {
			next, w.local = -1, w.local[:0]
			continue
		}
		select {
		case <-r.parentDone:
			r.abort(fmt.Errorf("executor: step cancelled: %w", r.parent.Err()))
			next = -1
			continue
		default:
		}
		if r.e.nodes[next].mayBlock {
			r.detach(next)
			next = -1
			continue
		}
		next = r.exec(next, w)
	}
}

// detach runs node i, which may block, on a goroutine outside the pool; the
// goroutine then works as a pool worker until no ready node is left.
func (r *run) detach(i int32) {
	r.mu.Lock()
	r.active++
	w := r.idleWorkerLocked()
	r.mu.Unlock()
	// A retired worker, its func and its slices serve again: a detach
	// allocates nothing once r has as many workers as a step needs at once.
	// The func touches w no more once pop has put w back in r.idle.
	w.detached = i
	if w.runDetached == nil {
		w.runDetached = func() {
			next := int32(-1)
			if !r.aborted.Load() {
				next = r.exec(w.detached, w)
			}
			r.work(w, next)
		}
	}
	gopool.Go(w.runDetached) // a goroutine whose stack has grown: see gopool
}

// pop takes a queued node, or retires the worker and returns -1.
func (r *run) pop(w *worker) int32 {
	r.mu.Lock()
	if len(r.queue) > 0 && !r.aborted.Load() {
		n := r.queue[0]
		// Shift rather than reslice, so the queue keeps its capacity.
		r.queue = r.queue[:copy(r.queue, r.queue[1:])]
		r.mu.Unlock()
		return n
	}
	if w != &r.w0 {
		// Kept for the next step's spawned workers; r (and so w) is reused
		// only once every worker has retired.
		w.local = w.local[:0]
		r.idle = append(r.idle, w)
	}
	r.active--
	if r.active == 0 && r.aborted.Load() {
		r.finish()
	}
	orphaned := r.active == 0 && r.orphaned
	r.mu.Unlock()
	if orphaned {
		r.reset() // RunStep has returned: no one else holds r
	}
	return -1
}

// Wake aborts the step when its parent context, a stepctx.Context, ends,
// unless the step has finished, and then tells RunStepWith (stepctx.Waker).
func (r *run) Wake() {
	if !r.closed.Load() {
		r.abort(fmt.Errorf("executor: step cancelled: %w", r.parent.Err()))
	}
	r.woken <- struct{}{}
}

// finish signals RunStep, once per step (finished has room for the token).
func (r *run) finish() {
	if r.closed.CompareAndSwap(false, true) {
		r.finished <- struct{}{}
	}
}

// abort records the step's first error and stops it.
func (r *run) abort(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.aborted.Store(true)
	r.queue = nil
	if r.active == 0 {
		r.finish()
	}
	r.mu.Unlock()
	r.cancel.Cancel(err)
}

func (r *run) firstErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// exec runs node i on worker w, releases its inputs, and makes its
// successors ready. It returns one ready successor for w to run next (or -1);
// it keeps the other cheap ones on w's local stack and queues the costly ones
// for the pool.
func (r *run) exec(i int32, w *worker) int32 {
	c := &w.c
	e := r.e
	en := &e.nodes[i]
	c.Ctx = r.kctx
	c.Node = en.node
	c.Resources = e.res
	c.Step = r.step
	c.Refs = en.refs
	nin := int32(len(en.inSlots))
	c.Inputs = r.inputs[en.inBase : en.inBase+nin : en.inBase+nin]
	for k, s := range en.inSlots {
		if s >= 0 {
			c.Inputs[k] = r.values[s]
		}
	}
	c.Outputs = r.values[en.outBase : en.outBase+en.numOut : en.outBase+en.numOut]
	c.Buffers = r.buffers[en.outBase : en.outBase+en.numOut : en.outBase+en.numOut]
	for o := range c.Buffers {
		if s := en.outBase + int32(o); !e.escapes[s] {
			c.Buffers[o].Spare = e.spare[s].Swap(nil)
		}
	}

	if en.leases {
		w.leases = r.leaseInputs(en, w.leases[:0])
		c.InputLeases = w.leases
	}
	if en.overwrite {
		w.overwritable = r.overwritable(en, w.overwritable[:0])
		c.Overwritable = w.overwritable
	}

	e.executed.Add(1)
	tr, start := r.trace, int64(0) // nil unless traced: one branch each side
	if tr != nil {
		start = time.Now().UnixNano()
	}
	err := compute(en, c, r.values[en.outBase:en.outBase+en.numOut])
	if tr != nil {
		tr.record(w, en, c, start, err != nil)
	}
	if en.leases {
		clear(w.leases) // the kernel's now
		c.InputLeases = nil
	}
	c.Overwritable = nil
	if err != nil {
		r.abort(err)
		return -1
	}
	r.track(en, c)

	// Release what no later node needs, so that large intermediates are
	// garbage as soon as possible.
	for k, s := range en.inSlots {
		c.Inputs[k] = nil
		if s >= 0 && atomic.AddInt32(&r.refs[s], -1) == 0 {
			r.values[s] = nil
			r.drop(s)
		}
	}
	for o := en.outBase; o < en.outBase+en.numOut; o++ {
		if e.consumerRefs[o] == 0 {
			r.values[o] = nil
			r.drop(o)
		}
	}
	c.Inputs, c.Outputs, c.Buffers = nil, nil, nil

	// The first costly successor runs next on this worker, so that a chain
	// of real work (a training step's matrix products, which split across
	// the cores themselves) never waits for a goroutine handoff; cheap ones
	// wait on the local stack, and further costly ones go to the pool.
	next, nextCostly := int32(-1), false
	var spawn int
	locked := false
	for _, s := range en.consumers {
		if atomic.AddInt32(&r.pending[s], -1) != 0 {
			continue
		}
		costly := r.costly(s)
		switch {
		case next < 0:
			next, nextCostly = s, costly
			continue
		case !costly:
			w.local = append(w.local, s)
			continue
		case !nextCostly:
			w.local = append(w.local, next)
			next, nextCostly = s, true
			continue
		}
		if !locked {
			r.mu.Lock()
			locked = true
		}
		r.queue = append(r.queue, s)
	}
	if locked {
		spawn = r.spawnLocked()
		r.mu.Unlock()
		for range spawn {
			go r.work(r.newWorker(), -1)
		}
	}
	if r.remaining.Add(-1) == 0 {
		r.finish()
	}
	return next
}

// compute calls the node's kernel, turning a panic into an error, and checks
// that every output was set with the dtype and a shape compatible with the
// ones inferred when the graph was built.
func compute(en *execNode, c *kernel.Context, slots []*tensor.Tensor) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if err = kernel.RecoveredError(p); err == nil {
				err = fmt.Errorf("executor: node %s: kernel panicked: %v", en.node, p)
			}
		}
	}()
	if err := en.kernel.Compute(c); err != nil {
		if ne := (*kernel.NodeError)(nil); !errors.As(err, &ne) || ne.Node != en.node {
			err = fmt.Errorf("executor: node %s: %w", en.node, err)
		}
		return err
	}
	if len(c.Outputs) != len(slots) {
		return fmt.Errorf("executor: node %s: the kernel left %d outputs, the node has %d", en.node, len(c.Outputs), len(slots))
	}
	if len(slots) > 0 && &c.Outputs[0] != &slots[0] {
		copy(slots, c.Outputs) // the kernel replaced the slice instead of filling it
	}
	for o, t := range slots {
		out := en.node.Output(o)
		switch {
		case t == nil:
			return fmt.Errorf("executor: node %s: the kernel did not set output %d", en.node, o)
		case t.DType() != out.DType() || !out.Shape().AcceptsDims(t.Shape()):
			return fmt.Errorf("executor: node %s: output %d is %v%v, but the graph says %v%v",
				en.node, o, t.DType(), tensor.MakeShape(t.Shape()...), out.DType(), out.Shape())
		}
	}
	return nil
}

// track records, after node en computed, which buffer each of its outputs
// lives in (its own allocation, or an input's or sibling's buffer that the
// kernel forwarded or viewed), puts back spares the kernel did not take, and
// marks as escaped the buffers behind outputs that may outlive the step.
func (r *run) track(en *execNode, c *kernel.Context) {
	e := r.e
	for o := range c.Buffers {
		b := &c.Buffers[o]
		s := en.outBase + int32(o)
		if b.Spare != nil {
			e.spare[s].CompareAndSwap(nil, b.Spare)
			b.Spare = nil
		}
		t := c.Outputs[o]
		if b.Allocated != nil && b.Allocated != t {
			b.Allocated = nil // allocated, then replaced: not this slot's tensor
		}
	}
	for o := range c.Buffers {
		s := en.outBase + int32(o)
		t := c.Outputs[o]
		org := int32(-1)
		if b := &c.Buffers[o]; b.Allocated != nil || b.Own || b.Lease.Valid() {
			org = s
		} else if lo, hi := dataRange(t); lo < hi {
			for k, in := range en.inSlots {
				if in >= 0 && r.origin[in] >= 0 && overlaps(lo, hi, c.Inputs[k]) {
					org = r.origin[in]
					break
				}
			}
			for p := range c.Buffers {
				if org < 0 && c.Buffers[p].Allocated != nil && overlaps(lo, hi, c.Outputs[p]) {
					org = en.outBase + int32(p)
				}
			}
		}
		r.origin[s] = org
		if org >= 0 && org != s {
			r.viewed[org].Store(true)
		}
		shared := org >= 0 && r.buffers[org].Lease.Valid()
		if shared && e.kept[s] || !shared && org >= 0 && e.escapes[s] {
			r.escaped[org].Store(true)
		}
		if org >= 0 && e.kept[s] {
			r.held[org].Store(true)
		}
		if shared {
			// Counted before the slot's producer releases its inputs, so
			// an alias keeps a shared buffer alive from its creation.
			r.alive[org].Add(1)
		}
	}
}

// drop notes that slot s is dead (no later node reads it). When s was the
// last live slot holding a variable's shared buffer and the buffer did not
// escape the step, the share goes back to the variable, which may then
// update the buffer in place. A slot is dropped only after its producer's
// track, by the one consumer that brought its count to zero, so the
// escaped flags that matter are set by then.
func (r *run) drop(s int32) {
	org := r.origin[s]
	if org < 0 {
		return
	}
	l := r.buffers[org].Lease
	if l.Valid() && r.alive[org].Add(-1) == 0 && !r.escaped[org].Load() {
		l.Release()
	}
}

// leaseInputs appends to dst, for each input of en, a share of its own of
// the variable buffer the input is, or the zero Lease. The inputs' slots
// are alive, so the step's shares are held.
func (r *run) leaseInputs(en *execNode, dst []kernel.Lease) []kernel.Lease {
	for _, s := range en.inSlots {
		var l kernel.Lease
		if s >= 0 {
			if org := r.origin[s]; org >= 0 {
				l = r.buffers[org].Lease.Dup()
			}
		}
		dst = append(dst, l)
	}
	return dst
}

// overwritable appends to dst, for each input of en, whether en may
// overwrite it (see kernel.InputOverwriter): the input's slot holds the
// step's own buffer itself, not a view of another slot's, no other slot
// views it, it did not escape, and en is the slot's last reader (through
// this input alone: a node reading the slot twice holds two references).
// Every other reader of the slot has been tracked by then, since a
// reader releases its inputs after its track.
func (r *run) overwritable(en *execNode, dst []bool) []bool {
	for _, s := range en.inSlots {
		// A slot is its own origin when its buffer is allocated, received
		// or a variable's (a lease): the last is the variable's to write.
		ok := s >= 0 && r.origin[s] == s && !r.buffers[s].Lease.Valid() &&
			atomic.LoadInt32(&r.refs[s]) == 1 && !r.viewed[s].Load() && !r.escaped[s].Load()
		dst = append(dst, ok)
	}
	return dst
}

// dataRange returns the addresses spanned by t's elements; lo == hi when it
// has none.
func dataRange(t *tensor.Tensor) (lo, hi uintptr) {
	b := t.RawBytes()
	if len(b) == 0 {
		return 0, 0
	}
	lo = uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return lo, lo + uintptr(len(b))
}

func overlaps(lo, hi uintptr, t *tensor.Tensor) bool {
	if t == nil {
		return false
	}
	l, h := dataRange(t)
	return l < h && l < hi && lo < h
}
