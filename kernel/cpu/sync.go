package cpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	kernel.Register("SparseConditionalAccumulator", kernel.CPU, syncResourceFactory(func(c *kernel.Context, k *syncHandleKernel) error {
		_, err := k.sparseAccumulator(c)
		return err
	}))
	kernel.Register("AccumulatorApplyGradient", kernel.CPU, kernel.Borrowing(syncUserFactory(syncDenseOp, false, syncApplyGradient)))
	kernel.Register("AccumulatorTakeGradient", kernel.CPU, syncUserFactory(syncDenseOp, true, syncTakeGradient))
	kernel.Register("SparseAccumulatorApplyGradient", kernel.CPU, kernel.Borrowing(syncUserFactory(syncSparseOp, false, syncSparseApplyGradient)))
	kernel.Register("SparseAccumulatorTakeGradient", kernel.CPU, syncUserFactory(syncSparseOp, true, syncSparseTakeGradient))
	kernel.Register("AccumulatorNumAccumulated", kernel.CPU, syncUserFactory(syncAnyAccumulator, false, func(c *kernel.Context, k *syncHandleKernel) error {
		r, err := k.round(c)
		if err != nil {
			return err
		}
		n, _ := r.stats()
		c.Alloc(0, tensor.Int32).Int32s()[0] = int32(n)
		return nil
	}))
	kernel.Register("AccumulatorNumDropped", kernel.CPU, syncUserFactory(syncAnyAccumulator, false, func(c *kernel.Context, k *syncHandleKernel) error {
		r, err := k.round(c)
		if err != nil {
			return err
		}
		_, d := r.stats()
		c.Alloc(0, tensor.Int64).Int64s()[0] = d
		return nil
	}))
	kernel.Register("AccumulatorSetGlobalStep", kernel.CPU, kernel.Borrowing(syncUserFactory(syncAnyAccumulator, false, func(c *kernel.Context, k *syncHandleKernel) error {
		r, err := k.round(c)
		if err != nil {
			return err
		}
		r.setGlobalStep(c.Input(1).Int64s()[0])
		return nil
	})))
	kernel.Register("QueueEnqueueMany", kernel.CPU, syncUserFactory(syncQueueOp, true, syncEnqueueMany))
	kernel.Register("QueueDequeue", kernel.CPU, syncUserFactory(syncQueueOp, true, syncDequeue))
	kernel.Register("QueueSize", kernel.CPU, syncUserFactory(syncQueueOp, false, func(c *kernel.Context, k *syncHandleKernel) error {
		q, err := k.queue(c)
		if err != nil {
			return err
		}
		c.Alloc(0, tensor.Int32).Int32s()[0] = int32(q.size())
		return nil
	}))
	kernel.Register("QueueClose", kernel.CPU, syncUserFactory(syncQueueOp, false, func(c *kernel.Context, k *syncHandleKernel) error {
		q, err := k.queue(c)
		if err != nil {
			return err
		}
		q.close(c.Node.AttrBool("cancel_pending_enqueues"))
		return nil
	}))
}

// The resource ops a kernel's handle may come from.
var (
	syncDenseOp        = []string{"ConditionalAccumulator"}
	syncSparseOp       = []string{"SparseConditionalAccumulator"}
	syncAnyAccumulator = []string{"ConditionalAccumulator", "SparseConditionalAccumulator"}
	syncQueueOp        = []string{"FIFOQueue"}
)

// syncResources is the accumulators and queues of one kernel.Resources.
// A name is of one resource only, whatever its kind.
type syncResources struct {
	mu     sync.Mutex
	accums map[string]*syncAccumulator
	sparse map[string]*syncSparseAccumulator
	queues map[string]*syncQueue
}

// syncResourcesOf returns the sync resources of res, creating them.
func syncResourcesOf(res *kernel.Resources) *syncResources {
	return res.Resource("sync", func() any {
		return &syncResources{accums: map[string]*syncAccumulator{}, sparse: map[string]*syncSparseAccumulator{},
			queues: map[string]*syncQueue{}}
	}).(*syncResources)
}

// takenLocked names the resource of another kind than kind that has name.
func (r *syncResources) takenLocked(name, kind string) string {
	if _, ok := r.accums[name]; ok && kind != "accumulator" {
		return "an accumulator"
	}
	if _, ok := r.sparse[name]; ok && kind != "sparse accumulator" {
		return "a sparse accumulator"
	}
	if _, ok := r.queues[name]; ok && kind != "queue" {
		return "a queue"
	}
	return ""
}

// AccumulatorBytes returns the bytes that the accumulators of res (dense
// and sparse) hold for the gradients they sum, now and at most since they
// were created: a dense accumulator holds the whole variable's shape, a
// sparse one the rows touched in a round (their sums, indices and index).
func AccumulatorBytes(res *kernel.Resources) (held, peak int64) {
	r := syncResourcesOf(res)
	r.mu.Lock()
	var rounds []*syncRound
	for _, a := range r.accums {
		rounds = append(rounds, &a.syncRound)
	}
	for _, a := range r.sparse {
		rounds = append(rounds, &a.syncRound)
	}
	r.mu.Unlock()
	for _, a := range rounds {
		a.mu.Lock()
		held, peak = held+a.held, peak+a.peak
		a.mu.Unlock()
	}
	return held, peak
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
// of a resource op of one of the kinds resourceOps.
func syncUserFactory(resourceOps []string, mayWait bool, compute func(c *kernel.Context, k *syncHandleKernel) error) kernel.Factory {
	return func(n *graph.Node) (kernel.Kernel, error) {
		if n.NumInputs() == 0 {
			return nil, fmt.Errorf("kernel: node %s: no resource handle input", n)
		}
		p := n.Input(0).Node
		if p == nil || !slices.Contains(resourceOps, p.Op()) {
			return nil, fmt.Errorf("kernel: node %s: input 0 must come directly from a %s node on the same device, got %v "+
				"(place the node with its resource: the ops builders do)", n, strings.Join(resourceOps, " or "), p)
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
	if other := r.takenLocked(k.name, "accumulator"); other != "" {
		return nil, fmt.Errorf("kernel: node %s: accumulator %q: %w: %s has that name", c.Node, k.name, ErrResourceConflict, other)
	}
	a, ok := r.accums[k.name]
	if !ok {
		a = &syncAccumulator{name: k.name, dtype: dt, shape: shape}
		a.changed = make(chan struct{})
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
	if other := r.takenLocked(k.name, "queue"); other != "" {
		return nil, fmt.Errorf("kernel: node %s: queue %q: %w: %s has that name", c.Node, k.name, ErrResourceConflict, other)
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

// syncRound is what accumulators of both kinds keep across steps: the
// counts of the current round and the global step. Waiters watch changed,
// which is closed and replaced at every change.
type syncRound struct {
	mu         sync.Mutex
	count      int   // gradients accumulated since the last take
	offered    int64 // gradients offered (accepted or dropped) since the last take
	dropped    int64 // stale gradients dropped, in total
	globalStep int64
	changed    chan struct{}
	held, peak int64 // bytes of the summed gradients (see AccumulatorBytes)
}

func (a *syncRound) broadcastLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *syncRound) stats() (count int, dropped int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count, a.dropped
}

func (a *syncRound) setGlobalStep(step int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.globalStep = step
	a.broadcastLocked()
}

// offerLocked counts a gradient computed at local step and reports whether
// it is fresh; a stale one is counted as dropped.
func (a *syncRound) offerLocked(local int64) bool {
	a.offered++
	if local < a.globalStep {
		a.dropped++
		a.broadcastLocked()
		return false
	}
	return true
}

// acceptedLocked ends an apply that added a gradient holding held bytes.
func (a *syncRound) acceptedLocked(held int64) {
	a.count++
	a.held, a.peak = held, max(a.peak, held)
	a.broadcastLocked()
}

// startTake checks a take's num_required (input 1) and dtype against
// accumulator name of kind what, and waits until that many gradients are
// in: on success it returns with a locked.
func (a *syncRound) startTake(c *kernel.Context, what, name string, dtype tensor.DType) error {
	n := int(c.Input(1).Int32s()[0])
	if n < 1 {
		return c.Errorf("%s %q: num_required must be at least 1, got %d", what, name, n)
	}
	if dt := c.Node.AttrDType("dtype"); dt != dtype {
		return c.Errorf("%s %q holds %v, the node takes %v", what, name, dtype, dt)
	}
	if err := a.lockWhen(c.Ctx, n); err != nil {
		return fmt.Errorf("kernel: node %s: waiting for %d gradients in %s %q: %w", c.Node, n, what, name, err)
	}
	return nil
}

// lockWhen locks a once n gradients are accumulated and returns nil, or
// returns ctx's error unlocked.
func (a *syncRound) lockWhen(ctx context.Context, n int) error {
	a.mu.Lock()
	for a.count < n {
		ch := a.changed
		a.mu.Unlock()
		if err := syncWait(ctx, ch); err != nil {
			return err
		}
		a.mu.Lock()
	}
	return nil
}

// endRoundLocked starts the next round after a take.
func (a *syncRound) endRoundLocked() {
	a.count, a.offered = 0, 0
	a.globalStep++
	a.broadcastLocked()
}

// round returns the round state of k's accumulator, of either kind.
func (k *syncHandleKernel) round(c *kernel.Context) (*syncRound, error) {
	if k.spec.Op() == "SparseConditionalAccumulator" {
		a, err := k.sparseAccumulator(c)
		if err != nil {
			return nil, err
		}
		return &a.syncRound, nil
	}
	a, err := k.accumulator(c)
	if err != nil {
		return nil, err
	}
	return &a.syncRound, nil
}

// syncAccumulator sums the dense gradients applied since its last take.
type syncAccumulator struct {
	name  string
	dtype tensor.DType
	shape tensor.Shape // declared shape, possibly partial

	syncRound
	sum      []float64
	sumShape []int
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
	if !a.offerLocked(local) {
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
	a.acceptedLocked(int64(cap(a.sum)) * 8)
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
	if err := a.startTake(c, "accumulator", a.name, a.dtype); err != nil {
		return err
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
	a.endRoundLocked()
	return nil
}

// sparseAccumulator returns the sparse accumulator of k's resource op in
// c's resources, creating it from the op's attributes.
func (k *syncHandleKernel) sparseAccumulator(c *kernel.Context) (*syncSparseAccumulator, error) {
	if c.Resources == nil {
		return nil, c.Errorf("no resource container for sparse accumulator %q", k.name)
	}
	r := syncResourcesOf(c.Resources)
	dt, shape := k.spec.AttrDType("dtype"), k.spec.AttrShape("shape")
	r.mu.Lock()
	defer r.mu.Unlock()
	if other := r.takenLocked(k.name, "sparse accumulator"); other != "" {
		return nil, fmt.Errorf("kernel: node %s: sparse accumulator %q: %w: %s has that name", c.Node, k.name, ErrResourceConflict, other)
	}
	a, ok := r.sparse[k.name]
	if !ok {
		a = &syncSparseAccumulator{name: k.name, dtype: dt, shape: shape, pos: map[int64]int32{}}
		a.changed = make(chan struct{})
		r.sparse[k.name] = a
		return a, nil
	}
	if a.dtype != dt || !a.shape.Equal(shape) {
		return nil, fmt.Errorf("kernel: node %s: sparse accumulator %q: %w: it holds %v%v, the node declares %v%v",
			c.Node, k.name, ErrResourceConflict, a.dtype, a.shape, dt, shape)
	}
	return a, nil
}

// syncSparseAccumulator sums the indexed slices applied since its last
// take: its state is the union of the rows they touch (each row once,
// summed in float64), so its memory follows the distinct ids of a round,
// not the table's size. The take divides every row by the number of
// gradients, as the dense accumulator does, so that both give the same
// mean (TensorFlow's SparseConditionalAccumulator divides each row by the
// number of gradients that touched it instead: a row touched by one replica
// of two then moves twice as far as in the single-process step on the
// combined batch).
type syncSparseAccumulator struct {
	name  string
	dtype tensor.DType
	shape tensor.Shape // declared dense shape, possibly partial

	syncRound
	rowShape   []int   // the values' shape after dimension 0, in this round
	denseShape []int64 // the gradients' dense shape, in this round
	pos        map[int64]int32
	idx        []int64   // the touched rows, in order of first touch
	sum        []float64 // len(idx) rows of rowSize
	maxRows    int       // the most rows pos held (a Go map keeps its room)
}

// syncSparseRowOverhead is the bytes a touched row costs beyond its sum:
// its index and an estimate of its entry in the index map.
const syncSparseRowOverhead = 8 + 24

func (a *syncSparseAccumulator) heldLocked() int64 {
	return int64(cap(a.sum))*8 + int64(cap(a.idx))*8 + int64(a.maxRows)*(syncSparseRowOverhead-8)
}

// syncSlices is one gradient's indexed slices, validated, with repeated
// indices summed (in the gradient's dtype, as the dense form sums them).
type syncSlices struct {
	ids        []int64   // distinct
	rows       []float64 // len(ids) rows of the row shape
	rowShape   []int
	denseShape []int64
}

// syncReadSlices validates the inputs of SparseAccumulatorApplyGradient
// (bytes from another task: every index is checked against the dense
// shape) and deduplicates them.
func syncReadSlices(a *syncSparseAccumulator, indices, values, denseShape *tensor.Tensor) (*syncSlices, error) {
	if values.DType() != a.dtype {
		return nil, fmt.Errorf("it holds %v, got %v values", a.dtype, values.DType())
	}
	if indices.Rank() != 1 || values.Rank() < 1 || denseShape.Rank() != 1 {
		return nil, fmt.Errorf("indices %v and dense_shape %v must be vectors and values %v have rank >= 1",
			indices.Shape(), denseShape.Shape(), values.Shape())
	}
	n := indices.Shape()[0]
	if values.Shape()[0] != n {
		return nil, fmt.Errorf("%d indices for values of shape %v: want one row per index", n, values.Shape())
	}
	sl := &syncSlices{rowShape: values.Shape()[1:], denseShape: syncInt64s(denseShape)}
	if len(sl.denseShape) != values.Rank() {
		return nil, fmt.Errorf("dense shape %v for values of shape %v: want the same rank", sl.denseShape, values.Shape())
	}
	for i, d := range sl.rowShape {
		if sl.denseShape[i+1] != int64(d) {
			return nil, fmt.Errorf("dense shape %v for rows of shape %v: want the same dimensions after the first", sl.denseShape, sl.rowShape)
		}
	}
	dims := make([]int, len(sl.denseShape))
	for i, d := range sl.denseShape {
		dims[i] = int(d)
	}
	if sl.denseShape[0] < 0 || !a.shape.AcceptsDims(dims) {
		return nil, fmt.Errorf("it holds shape %v, got slices of dense shape %v", a.shape, tensor.MakeShape(dims...))
	}
	ids := syncInt64s(indices)
	for i, id := range ids {
		if id < 0 || id >= sl.denseShape[0] {
			return nil, fmt.Errorf("index %d at position %d is outside the %d rows of dense shape %v", id, i, sl.denseShape[0], sl.denseShape)
		}
	}
	switch v := values.Data().(type) {
	case []float32:
		sl.ids, sl.rows = syncDedup(ids, v, tensor.NumElements(sl.rowShape))
	case []float64:
		sl.ids, sl.rows = syncDedup(ids, v, tensor.NumElements(sl.rowShape))
	}
	return sl, nil
}

// syncInt64s returns the elements of an int32 or int64 vector as int64s.
func syncInt64s(t *tensor.Tensor) []int64 {
	if t.DType() == tensor.Int64 {
		return t.Int64s()
	}
	out := make([]int64, t.NumElements())
	for i, v := range t.Int32s() {
		out[i] = int64(v)
	}
	return out
}

// syncDedup sums the rows of repeated ids (in T, in order of appearance)
// and returns the distinct ids with their rows as float64.
func syncDedup[T float32 | float64](ids []int64, vals []T, rowSize int) ([]int64, []float64) {
	pos := make(map[int64]int32, len(ids))
	distinct := ids[:0:0]
	sum := make([]T, 0, len(vals))
	for i, id := range ids {
		row := vals[i*rowSize : (i+1)*rowSize]
		if p, ok := pos[id]; ok {
			dst := sum[int(p)*rowSize : (int(p)+1)*rowSize]
			for j, v := range row {
				dst[j] += v
			}
			continue
		}
		pos[id] = int32(len(distinct))
		distinct = append(distinct, id)
		sum = append(sum, row...)
	}
	rows := make([]float64, len(sum))
	for i, v := range sum {
		rows[i] = float64(v)
	}
	return distinct, rows
}

// syncSparseApplyGradient adds the slices' rows into the accumulator's
// union of touched rows, or drops them if they are stale.
func syncSparseApplyGradient(c *kernel.Context, k *syncHandleKernel) error {
	a, err := k.sparseAccumulator(c)
	if err != nil {
		return err
	}
	local := c.Input(1).Int64s()[0]
	sl, err := syncReadSlices(a, c.Input(2), c.Input(3), c.Input(4))
	if err != nil {
		return c.Errorf("sparse accumulator %q: %w", a.name, err)
	}
	rowSize := tensor.NumElements(sl.rowShape)
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.offerLocked(local) {
		return nil
	}
	if a.count == 0 {
		a.rowShape = append(a.rowShape[:0], sl.rowShape...)
		a.denseShape = append(a.denseShape[:0], sl.denseShape...)
		clear(a.pos)
		a.idx, a.sum = a.idx[:0], a.sum[:0]
	} else if !slices.Equal(a.denseShape, sl.denseShape) {
		a.offered--
		return c.Errorf("sparse accumulator %q holds gradients of dense shape %v, got one of dense shape %v", a.name, a.denseShape, sl.denseShape)
	}
	added := 0
	for _, id := range sl.ids {
		if _, ok := a.pos[id]; !ok {
			added++
		}
	}
	// The state is bounded by the rows touched; a round that touches more
	// than the task's budget allows fails here, before anything grows.
	rows := len(a.idx) + added
	if err := c.Resources.CheckTensorBytes(fmt.Sprintf("sparse accumulator %q: the sums, indices and index of %d touched rows", a.name, rows),
		tensor.Float64, []int{rows, rowSize + syncSparseRowOverhead/8}); err != nil {
		a.offered--
		return c.Wrap(err)
	}
	for i, id := range sl.ids {
		row := sl.rows[i*rowSize : (i+1)*rowSize]
		p, ok := a.pos[id]
		if !ok {
			p = int32(len(a.idx))
			a.pos[id] = p
			a.idx = append(a.idx, id)
			a.sum = append(a.sum, row...)
			continue
		}
		dst := a.sum[int(p)*rowSize : (int(p)+1)*rowSize]
		for j, v := range row {
			dst[j] += v
		}
	}
	a.maxRows = max(a.maxRows, len(a.pos))
	a.acceptedLocked(a.heldLocked())
	return nil
}

// syncSparseTakeGradient waits for num_required gradients and outputs their
// mean as indexed slices: the touched rows in ascending order, each row's
// sum divided by the number of gradients, the dense shape; then the number
// offered since the previous take. It starts a new round.
func syncSparseTakeGradient(c *kernel.Context, k *syncHandleKernel) error {
	a, err := k.sparseAccumulator(c)
	if err != nil {
		return err
	}
	if err := a.startTake(c, "sparse accumulator", a.name, a.dtype); err != nil {
		return err
	}
	defer a.mu.Unlock()
	m, rowSize := len(a.idx), tensor.NumElements(a.rowShape)
	order := make([]int32, m)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(x, y int32) int { return cmp.Compare(a.idx[x], a.idx[y]) })
	ids := c.AllocUninit(0, tensor.Int64, m).Int64s()
	values := c.AllocUninit(1, a.dtype, append([]int{m}, a.rowShape...)...)
	copy(c.AllocUninit(2, tensor.Int64, len(a.denseShape)).Int64s(), a.denseShape)
	inv := 1 / float64(a.count)
	for i, p := range order {
		ids[i] = a.idx[p]
		row := a.sum[int(p)*rowSize : (int(p)+1)*rowSize]
		switch a.dtype {
		case tensor.Float32:
			d := values.Float32s()[i*rowSize : (i+1)*rowSize]
			for j, v := range row {
				d[j] = float32(v * inv)
			}
		case tensor.Float64:
			d := values.Float64s()[i*rowSize : (i+1)*rowSize]
			for j, v := range row {
				d[j] = v * inv
			}
		}
	}
	c.Alloc(3, tensor.Int64).Int64s()[0] = a.offered
	a.endRoundLocked()
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
