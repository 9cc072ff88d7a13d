package cpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// Kernels of the sync family: conditional accumulators and FIFO queues.
//
// Both are resources that outlive steps, kept in the task's kernel.Resources
// (under the key "sync": the accumulators and queues by name). The name is the shared_name
// attribute of the resource op, or else its node name, so that the graphs of
// several workers that build the same resource op share one resource on the
// ps, as they share variables.
//
// The ops that use a resource take the handle as input 0 and resolve the
// resource through that input's producer node; they must run on the
// resource's device (the ops builders place them there). Waiting kernels
// (take, enqueue into a full queue, dequeue) declare MayBlock and end when
// the step's context ends.

// ErrQueueClosed is wrapped by the errors of dequeues from a closed, empty
// queue and of enqueues into a closed queue.
var ErrQueueClosed = errors.New("queue is closed")

// ErrResourceConflict is wrapped when a resource op finds an existing
// resource of the same name with another kind, dtype, shape or capacity.
var ErrResourceConflict = errors.New("resource exists with another definition")

func init() {
	kernel.Register("ConditionalAccumulator", kernel.CPU, syncResourceFactory(func(c *kernel.Context, k *syncHandleKernel) error {
		_, err := k.accumulator(c)
		return err
	}))
	kernel.Register("FIFOQueue", kernel.CPU, syncResourceFactory(func(c *kernel.Context, k *syncHandleKernel) error {
		_, err := k.queue(c)
		return err
	}))
	kernel.Register("AccumulatorApplyGradient", kernel.CPU, kernel.Borrowing(syncUserFactory("ConditionalAccumulator", false, syncApplyGradient)))
	kernel.Register("AccumulatorTakeGradient", kernel.CPU, syncUserFactory("ConditionalAccumulator", true, syncTakeGradient))
	kernel.Register("AccumulatorNumAccumulated", kernel.CPU, syncUserFactory("ConditionalAccumulator", false, func(c *kernel.Context, k *syncHandleKernel) error {
		a, err := k.accumulator(c)
		if err != nil {
			return err
		}
		n, _ := a.stats()
		c.Alloc(0, tensor.Int32).Int32s()[0] = int32(n)
		return nil
	}))
	kernel.Register("AccumulatorNumDropped", kernel.CPU, syncUserFactory("ConditionalAccumulator", false, func(c *kernel.Context, k *syncHandleKernel) error {
		a, err := k.accumulator(c)
		if err != nil {
			return err
		}
		_, d := a.stats()
		c.Alloc(0, tensor.Int64).Int64s()[0] = d
		return nil
	}))
	kernel.Register("AccumulatorSetGlobalStep", kernel.CPU, kernel.Borrowing(syncUserFactory("ConditionalAccumulator", false, func(c *kernel.Context, k *syncHandleKernel) error {
		a, err := k.accumulator(c)
		if err != nil {
			return err
		}
		a.setGlobalStep(c.Input(1).Int64s()[0])
		return nil
	})))
	kernel.Register("QueueEnqueueMany", kernel.CPU, syncUserFactory("FIFOQueue", true, syncEnqueueMany))
	kernel.Register("QueueDequeue", kernel.CPU, syncUserFactory("FIFOQueue", true, syncDequeue))
	kernel.Register("QueueSize", kernel.CPU, syncUserFactory("FIFOQueue", false, func(c *kernel.Context, k *syncHandleKernel) error {
		q, err := k.queue(c)
		if err != nil {
			return err
		}
		c.Alloc(0, tensor.Int32).Int32s()[0] = int32(q.size())
		return nil
	}))
	kernel.Register("QueueClose", kernel.CPU, syncUserFactory("FIFOQueue", false, func(c *kernel.Context, k *syncHandleKernel) error {
		q, err := k.queue(c)
		if err != nil {
			return err
		}
		q.close(c.Node.AttrBool("cancel_pending_enqueues"))
		return nil
	}))
}

// syncResources is the accumulators and queues of one kernel.Resources.
type syncResources struct {
	mu     sync.Mutex
	accums map[string]*syncAccumulator
	queues map[string]*syncQueue
}

// syncResourcesOf returns the sync resources of res, creating them.
func syncResourcesOf(res *kernel.Resources) *syncResources {
	return res.Resource("sync", func() any {
		return &syncResources{accums: map[string]*syncAccumulator{}, queues: map[string]*syncQueue{}}
	}).(*syncResources)
}

// syncHandleKernel is the kernel of a resource op or of an op using one:
// spec is the resource op's node, read once when the kernel is built.
type syncHandleKernel struct {
	spec    *graph.Node // the ConditionalAccumulator or FIFOQueue node
	name    string      // the resource's name: spec's shared_name, else its node name
	mayWait bool
	compute func(c *kernel.Context, k *syncHandleKernel) error
}

func (k *syncHandleKernel) Compute(c *kernel.Context) error { return k.compute(c, k) }

// syncBlockingKernel is a syncHandleKernel that may wait on other steps.
type syncBlockingKernel struct{ *syncHandleKernel }

// MayBlock reports that the kernel waits for other steps (gradients, room
// or elements in a queue), so the executor runs it on its own goroutine.
func (syncBlockingKernel) MayBlock() bool { return true }

func syncResourceName(n *graph.Node) string {
	if s := n.AttrString("shared_name"); s != "" {
		return s
	}
	return n.Name()
}

// syncResourceFactory builds the kernel of a resource op, which creates the
// resource (or checks the existing one) and outputs a dummy handle.
func syncResourceFactory(create func(c *kernel.Context, k *syncHandleKernel) error) kernel.Factory {
	return func(n *graph.Node) (kernel.Kernel, error) {
		k := &syncHandleKernel{spec: n, name: syncResourceName(n)}
		k.compute = func(c *kernel.Context, k *syncHandleKernel) error {
			if err := create(c, k); err != nil {
				return err
			}
			c.Alloc(0, tensor.Int64)
			return nil
		}
		return k, nil
	}
}

// syncUserFactory builds the kernel of an op whose input 0 is the handle
// of a resource op of kind resourceOp.
func syncUserFactory(resourceOp string, mayWait bool, compute func(c *kernel.Context, k *syncHandleKernel) error) kernel.Factory {
	return func(n *graph.Node) (kernel.Kernel, error) {
		if n.NumInputs() == 0 {
			return nil, fmt.Errorf("kernel: node %s: no resource handle input", n)
		}
		p := n.Input(0).Node
		if p == nil || p.Op() != resourceOp {
			return nil, fmt.Errorf("kernel: node %s: input 0 must come directly from a %s node on the same device, got %v "+
				"(place the node with its resource: the ops builders do)", n, resourceOp, p)
		}
		k := &syncHandleKernel{spec: p, name: syncResourceName(p), mayWait: mayWait, compute: compute}
		if mayWait {
			return syncBlockingKernel{k}, nil
		}
		return k, nil
	}
}

// accumulator returns the accumulator of k's resource op in c's resources,
// creating it from the op's attributes.
func (k *syncHandleKernel) accumulator(c *kernel.Context) (*syncAccumulator, error) {
	if c.Resources == nil {
		return nil, c.Errorf("no resource container for accumulator %q", k.name)
	}
	r := syncResourcesOf(c.Resources)
	dt, shape := k.spec.AttrDType("dtype"), k.spec.AttrShape("shape")
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.queues[k.name]; ok {
		return nil, fmt.Errorf("kernel: node %s: accumulator %q: %w: a queue has that name", c.Node, k.name, ErrResourceConflict)
	}
	a, ok := r.accums[k.name]
	if !ok {
		a = &syncAccumulator{name: k.name, dtype: dt, shape: shape, changed: make(chan struct{})}
		r.accums[k.name] = a
		return a, nil
	}
	if a.dtype != dt || !a.shape.Equal(shape) {
		return nil, fmt.Errorf("kernel: node %s: accumulator %q: %w: it holds %v%v, the node declares %v%v",
			c.Node, k.name, ErrResourceConflict, a.dtype, a.shape, dt, shape)
	}
	return a, nil
}

// queue returns the queue of k's resource op in c's resources, creating it.
func (k *syncHandleKernel) queue(c *kernel.Context) (*syncQueue, error) {
	if c.Resources == nil {
		return nil, c.Errorf("no resource container for queue %q", k.name)
	}
	r := syncResourcesOf(c.Resources)
	dt, capacity := k.spec.AttrDType("dtype"), k.spec.AttrInt("capacity")
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.accums[k.name]; ok {
		return nil, fmt.Errorf("kernel: node %s: queue %q: %w: an accumulator has that name", c.Node, k.name, ErrResourceConflict)
	}
	q, ok := r.queues[k.name]
	if !ok {
		q = &syncQueue{name: k.name, dtype: dt, capacity: capacity, changed: make(chan struct{})}
		r.queues[k.name] = q
		return q, nil
	}
	if q.dtype != dt || q.capacity != capacity {
		return nil, fmt.Errorf("kernel: node %s: queue %q: %w: it holds %v with capacity %d, the node declares %v with capacity %d",
			c.Node, k.name, ErrResourceConflict, q.dtype, q.capacity, dt, capacity)
	}
	return q, nil
}

// syncWait waits until ch is closed or ctx ends.
func syncWait(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// syncAccumulator sums the gradients applied since its last take. Waiters
// watch changed, which is closed and replaced at every change.
type syncAccumulator struct {
	name  string
	dtype tensor.DType
	shape tensor.Shape // declared shape, possibly partial

	mu         sync.Mutex
	sum        []float64
	sumShape   []int
	count      int   // gradients accumulated since the last take
	offered    int64 // gradients offered (accepted or dropped) since the last take
	dropped    int64 // stale gradients dropped, in total
	globalStep int64
	changed    chan struct{}
}

func (a *syncAccumulator) broadcastLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *syncAccumulator) stats() (count int, dropped int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count, a.dropped
}

func (a *syncAccumulator) setGlobalStep(step int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.globalStep = step
	a.broadcastLocked()
}

// syncApplyGradient adds the gradient, or drops it if it is stale.
func syncApplyGradient(c *kernel.Context, k *syncHandleKernel) error {
	a, err := k.accumulator(c)
	if err != nil {
		return err
	}
	local, g := c.Input(1).Int64s()[0], c.Input(2)
	if g.DType() != a.dtype {
		return c.Errorf("accumulator %q holds %v, got a %v gradient", a.name, a.dtype, g.DType())
	}
	if !a.shape.IsCompatibleWith(g.StaticShape()) {
		return c.Errorf("accumulator %q holds shape %v, got a gradient of shape %v", a.name, a.shape, g.StaticShape())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.offered++
	if local < a.globalStep {
		a.dropped++
		a.broadcastLocked()
		return nil
	}
	if a.count == 0 {
		a.sumShape = append(a.sumShape[:0], g.Shape()...)
		if cap(a.sum) >= g.NumElements() {
			a.sum = a.sum[:g.NumElements()]
			clear(a.sum)
		} else {
			a.sum = make([]float64, g.NumElements())
		}
	} else if !slices.Equal(a.sumShape, g.Shape()) {
		a.offered--
		return c.Errorf("accumulator %q holds gradients of shape %v, got one of shape %v", a.name, a.sumShape, g.Shape())
	}
	switch g.DType() {
	case tensor.Float32:
		syncAdd(a.sum, g.Float32s())
	case tensor.Float64:
		syncAdd(a.sum, g.Float64s())
	}
	a.count++
	a.broadcastLocked()
	return nil
}

func syncAdd[T float32 | float64](sum []float64, g []T) {
	for i, v := range g[:len(sum)] {
		sum[i] += float64(v)
	}
}

// syncTakeGradient waits for num_required gradients, outputs their mean
// and the number offered since the previous take, and starts a new round.
func syncTakeGradient(c *kernel.Context, k *syncHandleKernel) error {
	a, err := k.accumulator(c)
	if err != nil {
		return err
	}
	n := int(c.Input(1).Int32s()[0])
	if n < 1 {
		return c.Errorf("accumulator %q: num_required must be at least 1, got %d", a.name, n)
	}
	if dt := c.Node.AttrDType("dtype"); dt != a.dtype {
		return c.Errorf("accumulator %q holds %v, the node takes %v", a.name, a.dtype, dt)
	}
	a.mu.Lock()
	for a.count < n {
		ch := a.changed
		a.mu.Unlock()
		if err := syncWait(c.Ctx, ch); err != nil {
			return fmt.Errorf("kernel: node %s: waiting for %d gradients in accumulator %q: %w", c.Node, n, a.name, err)
		}
		a.mu.Lock()
	}
	defer a.mu.Unlock()
	out := c.AllocUninit(0, a.dtype, a.sumShape...)
	inv := 1 / float64(a.count)
	switch a.dtype {
	case tensor.Float32:
		d := out.Float32s()
		for i, v := range a.sum {
			d[i] = float32(v * inv)
		}
	case tensor.Float64:
		d := out.Float64s()
		for i, v := range a.sum {
			d[i] = v * inv
		}
	}
	c.Alloc(1, tensor.Int64).Int64s()[0] = a.offered
	a.count, a.offered = 0, 0
	a.globalStep++
	a.broadcastLocked()
	return nil
}

// syncQueue is a FIFO of tensors (the slices of enqueued batches).
type syncQueue struct {
	name     string
	dtype    tensor.DType
	capacity int // -1: unbounded

	mu            sync.Mutex
	items         []*tensor.Tensor
	closed        bool
	cancelPending bool
	changed       chan struct{}
}

func (q *syncQueue) broadcastLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
}

func (q *syncQueue) size() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

func (q *syncQueue) close(cancelPending bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cancelPending = q.cancelPending || cancelPending
	q.broadcastLocked()
}

// syncEnqueueMany appends values[0], values[1], ... waiting for room.
func syncEnqueueMany(c *kernel.Context, k *syncHandleKernel) error {
	q, err := k.queue(c)
	if err != nil {
		return err
	}
	v := c.Input(1)
	if v.DType() != q.dtype {
		return c.Errorf("queue %q holds %v, got %v values", q.name, q.dtype, v.DType())
	}
	if v.Rank() == 0 {
		return c.Errorf("queue %q: values must have rank >= 1, got a scalar", q.name)
	}
	elems, err := syncSplit(v)
	if err != nil {
		return c.Errorf("queue %q: %w", q.name, err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("kernel: node %s: enqueue into queue %q: %w", c.Node, q.name, ErrQueueClosed)
	}
	for _, e := range elems {
		for {
			if q.closed && q.cancelPending {
				return fmt.Errorf("kernel: node %s: enqueue into queue %q: %w (pending enqueues cancelled)", c.Node, q.name, ErrQueueClosed)
			}
			if q.capacity < 0 || len(q.items) < q.capacity {
				break
			}
			ch := q.changed
			q.mu.Unlock()
			err := syncWait(c.Ctx, ch)
			q.mu.Lock()
			if err != nil {
				return fmt.Errorf("kernel: node %s: waiting for room in queue %q: %w", c.Node, q.name, err)
			}
		}
		q.items = append(q.items, e)
		q.broadcastLocked()
	}
	return nil
}

// syncDequeue removes the first element, waiting for one.
func syncDequeue(c *kernel.Context, k *syncHandleKernel) error {
	q, err := k.queue(c)
	if err != nil {
		return err
	}
	if dt := c.Node.AttrDType("dtype"); dt != q.dtype {
		return c.Errorf("queue %q holds %v, the node dequeues %v", q.name, q.dtype, dt)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 {
		if q.closed {
			return fmt.Errorf("kernel: node %s: dequeue from queue %q: %w and empty", c.Node, q.name, ErrQueueClosed)
		}
		ch := q.changed
		q.mu.Unlock()
		err := syncWait(c.Ctx, ch)
		q.mu.Lock()
		if err != nil {
			return fmt.Errorf("kernel: node %s: waiting for an element of queue %q: %w", c.Node, q.name, err)
		}
	}
	e := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	q.broadcastLocked()
	c.SetOutput(0, e)
	return nil
}

// syncSplit returns copies of the slices t[0], t[1], ... along dimension 0.
func syncSplit(t *tensor.Tensor) ([]*tensor.Tensor, error) {
	switch d := t.Data().(type) {
	case []float32:
		return syncSplitT(d, t.Shape())
	case []float64:
		return syncSplitT(d, t.Shape())
	case []int32:
		return syncSplitT(d, t.Shape())
	case []int64:
		return syncSplitT(d, t.Shape())
	case []bool:
		return syncSplitT(d, t.Shape())
	case []uint8:
		return syncSplitT(d, t.Shape())
	}
	return nil, fmt.Errorf("unsupported dtype %v", t.DType())
}

func syncSplitT[T any](d []T, shape []int) ([]*tensor.Tensor, error) {
	n, elem := shape[0], shape[1:]
	size := tensor.NumElements(elem)
	out := make([]*tensor.Tensor, n)
	for i := range n {
		e, err := tensor.FromSlice(append([]T(nil), d[i*size:(i+1)*size]...), elem...)
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}
