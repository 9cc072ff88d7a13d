package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/distflow/distflow/tensor"
)

// A Dataset is an immutable description of an input pipeline whose elements
// are tuples of tensors ([]*tensor.Tensor, e.g. image and label). Methods
// such as Shuffle and Batch return new datasets and leave the receiver
// unchanged; nothing runs until an Iterator pulls elements through.
//
// Invalid arguments do not panic: the dataset records the first error, every
// dataset derived from it carries that error, and Err and the first
// Iterator.Next report it (the style of graph.Scope).
//
// Shuffling is deterministic: the k-th Iterator created from a Dataset (and
// the k-th pass of a Repeat) sees the k-th order of the seeded sequence, so a
// pipeline built twice with the same seeds yields the same elements, while
// successive epochs are shuffled differently.
//
// A Dataset is safe for concurrent use; iterators are not.
type Dataset struct {
	err    error
	open   func(ctx context.Context, epoch uint64) iter
	opened atomic.Uint64 // iterators created, the epoch of the next one
}

// iter is the internal iterator protocol. next returns io.EOF at the end;
// close releases resources (goroutines) and may be called more than once.
type iter interface {
	next() (item, error)
	close()
}

// item is one element in flight. Rows of a FromTensors source travel as
// (src, row) so that Shuffle, Shard, Take and Batch move them without
// allocating; anything else carries materialised tensors in ts. A batch
// carries the pool its tensors return to once their consumer is done with
// them (see release).
type item struct {
	src  *source
	row  int
	ts   []*tensor.Tensor
	pool *batchPool
}

// release hands a batch's tensors back to the Batch stage that made them,
// for a later batch to reuse; the caller must hold no reference to them.
// It does nothing for other items.
func (x item) release() {
	if x.pool != nil {
		x.pool.put(x.ts)
	}
}

// source holds the tensors given to FromTensors.
type source struct {
	ts []*tensor.Tensor
	n  int // number of elements (the common first dimension)
}

// view returns row r of the source as tensors sharing the source's memory.
func (s *source) view(r int) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(s.ts))
	for i, t := range s.ts {
		out[i] = sliceRow(t, r)
	}
	return out
}

// sliceRow returns t[r] as a tensor that shares t's memory.
func sliceRow(t *tensor.Tensor, r int) *tensor.Tensor {
	shape := t.Shape()[1:]
	m := tensor.NumElements(shape)
	lo, hi := r*m, (r+1)*m
	var d any
	switch x := t.Data().(type) {
	case []float32:
		d = x[lo:hi:hi]
	case []float64:
		d = x[lo:hi:hi]
	case []int32:
		d = x[lo:hi:hi]
	case []int64:
		d = x[lo:hi:hi]
	case []bool:
		d = x[lo:hi:hi]
	case []uint8:
		d = x[lo:hi:hi]
	}
	return tensor.MustFromSlice(d, shape...)
}

// fail returns a dataset that reports err, unless d already reports an
// earlier error.
func (d *Dataset) fail(err error) *Dataset {
	if d.err != nil {
		return d
	}
	return &Dataset{err: err}
}

// derive returns a dataset built on d, or d itself if it carries an error.
func (d *Dataset) derive(open func(ctx context.Context, epoch uint64) iter) *Dataset {
	if d.err != nil {
		return d
	}
	return &Dataset{open: open}
}

// Err returns the first invalid-argument error recorded while building the
// pipeline, or nil.
func (d *Dataset) Err() error { return d.err }

// FromTensors returns a dataset whose i-th element is (ts[0][i], ts[1][i],
// ...): each tensor is sliced along dimension 0, which must be the same for
// all. The elements share memory with ts: treat them, and ts while the
// dataset is in use, as read-only. Batch copies, so batches are independent.
func FromTensors(ts ...*tensor.Tensor) (*Dataset, error) {
	if len(ts) == 0 {
		return nil, errors.New("data: FromTensors: no tensors")
	}
	src := &source{ts: ts}
	for i, t := range ts {
		if t == nil {
			return nil, fmt.Errorf("data: FromTensors: tensor %d is nil", i)
		}
		if t.Rank() == 0 {
			return nil, fmt.Errorf("data: FromTensors: tensor %d is a scalar: need at least one dimension to slice", i)
		}
		if i == 0 {
			src.n = t.Shape()[0]
		} else if t.Shape()[0] != src.n {
			return nil, fmt.Errorf("data: FromTensors: tensor %d has shape %v, tensor 0 has %v: first dimensions differ",
				i, t.StaticShape(), ts[0].StaticShape())
		}
	}
	return &Dataset{open: func(context.Context, uint64) iter { return &sourceIter{src: src} }}, nil
}

type sourceIter struct {
	src *source
	i   int
}

func (it *sourceIter) next() (item, error) {
	if it.i >= it.src.n {
		return item{}, io.EOF
	}
	it.i++
	return item{src: it.src, row: it.i - 1}, nil
}

func (it *sourceIter) close() {}

// Take returns a dataset of at most the first n elements of d.
func (d *Dataset) Take(n int) *Dataset {
	if n < 0 {
		return d.fail(fmt.Errorf("data: Take: negative count %d", n))
	}
	return d.derive(func(ctx context.Context, epoch uint64) iter {
		return &takeIter{in: d.open(ctx, epoch), left: n}
	})
}

type takeIter struct {
	in   iter
	left int
}

func (it *takeIter) next() (item, error) {
	if it.left <= 0 {
		return item{}, io.EOF
	}
	it.left--
	return it.in.next()
}

func (it *takeIter) close() { it.in.close() }

// Shard returns every n-th element of d starting with element i: the part of
// the data that worker i of n reads. The n shards of a dataset are disjoint
// and together cover it. Shard before Shuffle so that the shards stay
// disjoint whatever the shuffle seeds.
func (d *Dataset) Shard(n, i int) *Dataset {
	if n <= 0 {
		return d.fail(fmt.Errorf("data: Shard: number of shards %d is not positive", n))
	}
	if i < 0 || i >= n {
		return d.fail(fmt.Errorf("data: Shard: index %d out of range [0, %d)", i, n))
	}
	return d.derive(func(ctx context.Context, epoch uint64) iter {
		return &shardIter{in: d.open(ctx, epoch), n: n, skip: i}
	})
}

type shardIter struct {
	in      iter
	n, skip int
}

func (it *shardIter) next() (item, error) {
	for ; it.skip > 0; it.skip-- {
		x, err := it.in.next()
		if err != nil {
			return item{}, err
		}
		x.release()
	}
	it.skip = it.n - 1
	return it.in.next()
}

func (it *shardIter) close() { it.in.close() }

// Repeat returns a dataset that iterates over d count times (count = -1:
// forever; 0: empty). Each pass of a Shuffle inside the repeated pipeline is
// ordered differently. Repeating an empty dataset forever yields nothing
// rather than looping.
func (d *Dataset) Repeat(count int) *Dataset {
	if count < -1 {
		return d.fail(fmt.Errorf("data: Repeat: count %d (want -1 for forever, or >= 0)", count))
	}
	return d.derive(func(ctx context.Context, epoch uint64) iter {
		return &repeatIter{d: d, ctx: ctx, epoch: epoch, left: count}
	})
}

type repeatIter struct {
	d     *Dataset
	ctx   context.Context
	epoch uint64
	left  int // passes still to start; negative: forever
	pass  uint64
	in    iter
	got   bool // the current pass produced an element
}

func (it *repeatIter) next() (item, error) {
	for {
		if it.in == nil {
			if it.left == 0 {
				return item{}, io.EOF
			}
			if it.left > 0 {
				it.left--
			}
			it.in = it.d.open(it.ctx, mix(it.epoch, it.pass))
			it.pass++
			it.got = false
		}
		x, err := it.in.next()
		if err != io.EOF {
			it.got = it.got || err == nil
			return x, err
		}
		it.in.close()
		it.in = nil
		if !it.got {
			return item{}, io.EOF // an empty pass: the rest would be empty too
		}
	}
}

func (it *repeatIter) close() {
	if it.in != nil {
		it.in.close()
		it.in = nil
	}
}

// mix derives a well-spread 64-bit value from a and b (splitmix64 finaliser).
func mix(a, b uint64) uint64 {
	z := a*0x9e3779b97f4a7c15 + b + 0x632be59bd9b4e019
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Shuffle returns a dataset with the elements of d in a seeded random order,
// using a buffer of bufferSize elements: the next element is drawn uniformly
// from the buffer, which is refilled from d. A buffer at least as large as
// the dataset gives a uniform permutation; a smaller one only mixes nearby
// elements. Every epoch (each new Iterator, each pass of an enclosing
// Repeat) gets a different order, determined by seed.
func (d *Dataset) Shuffle(bufferSize int, seed int64) *Dataset {
	if bufferSize <= 0 {
		return d.fail(fmt.Errorf("data: Shuffle: buffer size %d is not positive", bufferSize))
	}
	return d.derive(func(ctx context.Context, epoch uint64) iter {
		s := mix(uint64(seed), epoch)
		return &shuffleIter{
			in:  d.open(ctx, epoch),
			rng: rand.New(rand.NewPCG(s, mix(s, 1))),
			buf: make([]item, 0, min(bufferSize, 1<<16)),
			cap: bufferSize,
		}
	})
}

type shuffleIter struct {
	in   iter
	rng  *rand.Rand
	buf  []item
	cap  int
	done bool // the input is exhausted

	// While every buffered element is a row of one source (the usual
	// shuffle of a FromTensors dataset), the buffer holds just their row
	// numbers, in rows, with buf unused: a buffer of 60,000 rows is then
	// 240 KB and stays in cache, where items would take 3 MB and a cache
	// miss per draw. The draws are the same either way.
	src  *source
	rows []int32
}

// push adds x to the buffer.
func (it *shuffleIter) push(x item) {
	if x.src != nil && x.ts == nil && x.pool == nil && x.row <= math.MaxInt32 && len(it.buf) == 0 &&
		(it.src == nil || it.src == x.src) {
		if it.src == nil {
			it.src = x.src
			it.rows = make([]int32, 0, min(it.cap, 1<<16))
		}
		it.rows = append(it.rows, int32(x.row))
		return
	}
	if len(it.rows) > 0 { // a different element: back to items
		for _, r := range it.rows {
			it.buf = append(it.buf, item{src: it.src, row: int(r)})
		}
		it.rows = it.rows[:0]
	}
	it.buf = append(it.buf, x)
}

func (it *shuffleIter) len() int { return len(it.buf) + len(it.rows) }

func (it *shuffleIter) next() (item, error) {
	for !it.done && it.len() < it.cap {
		x, err := it.in.next()
		if err == io.EOF {
			it.done = true
			break
		}
		if err != nil {
			return item{}, err
		}
		it.push(x)
	}
	n := it.len()
	if n == 0 {
		return item{}, io.EOF
	}
	// Swap-remove a random element; the next call refills the hole.
	j := it.rng.IntN(n)
	last := n - 1
	if len(it.rows) > 0 {
		r := it.rows[j]
		it.rows[j] = it.rows[last]
		it.rows = it.rows[:last]
		return item{src: it.src, row: int(r)}, nil
	}
	x := it.buf[j]
	it.buf[j] = it.buf[last]
	it.buf[last] = item{}
	it.buf = it.buf[:last]
	return x, nil
}

func (it *shuffleIter) close() { it.in.close() }

// Batch returns a dataset whose elements stack n consecutive elements of d
// along a new dimension 0: component j of a batch has shape
// [n, shape of component j]. The components of the batched elements must
// agree in type and shape. The last batch has fewer than n elements unless
// dropRemainder is set, in which case it is dropped.
//
// Each batch is a contiguous copy of its elements. Its tensors are valid
// until the consumer asks for the following element (Iterator.Next, or the
// next stage of the pipeline once it has copied them): then they may be
// reused for a later batch, so that a training loop does not allocate,
// zero and collect a batch per step. A caller that keeps a batch longer
// clones it (tensor.Clone). Apart from that, batching allocates nothing per
// element or per batch.
func (d *Dataset) Batch(n int, dropRemainder bool) *Dataset {
	if n <= 0 {
		return d.fail(fmt.Errorf("data: Batch: batch size %d is not positive", n))
	}
	return d.derive(func(ctx context.Context, epoch uint64) iter {
		return &batchIter{in: d.open(ctx, epoch), n: n, drop: dropRemainder, pending: make([]item, 0, n), pool: new(batchPool)}
	})
}

type batchIter struct {
	in      iter
	n       int
	drop    bool
	done    bool
	pending []item // reused between batches
	pool    *batchPool
}

func (it *batchIter) next() (item, error) {
	it.pending = it.pending[:0]
	for !it.done && len(it.pending) < it.n {
		x, err := it.in.next()
		if err == io.EOF {
			it.done = true
			break
		}
		if err != nil {
			return item{}, err
		}
		it.pending = append(it.pending, x)
	}
	k := len(it.pending)
	if k == 0 || (it.drop && k < it.n) {
		return item{}, io.EOF
	}
	// Only full batches are recycled: a short last one has other shapes.
	var pool *batchPool
	if k == it.n {
		pool = it.pool
	}
	out, err := stack(it.pending, pool)
	for _, x := range it.pending {
		x.release() // copied: an inner batch's buffers can be reused
	}
	clear(it.pending) // drop references to the elements
	if err != nil {
		return item{}, err
	}
	return item{ts: out, pool: pool}, nil
}

func (it *batchIter) close() { it.in.close() }

// batchPool holds the tensors of batches that their consumers are done
// with, for one Batch stage of one iterator to refill. The stage may run in
// a Prefetch goroutine while the consumer releases batches, hence the lock.
type batchPool struct {
	mu   sync.Mutex
	free [][]*tensor.Tensor
}

// maxFreeBatches bounds a pool: a pipeline has at most a few batches in
// flight (the consumer's, a Prefetch buffer's, the one being stacked).
const maxFreeBatches = 8

func (p *batchPool) put(ts []*tensor.Tensor) {
	p.mu.Lock()
	if len(p.free) < maxFreeBatches {
		p.free = append(p.free, ts)
	}
	p.mu.Unlock()
}

// get returns released batch tensors, or nil if there are none.
func (p *batchPool) get() []*tensor.Tensor {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if n == 0 {
		return nil
	}
	ts := p.free[n-1]
	p.free[n-1] = nil
	p.free = p.free[:n-1]
	return ts
}

// stack copies the elements xs into tensors of shape [len(xs), ...]: a
// released batch from pool if one fits, else new ones.
func stack(xs []item, pool *batchPool) ([]*tensor.Tensor, error) {
	// The first element fixes the arity, types and shapes.
	first := xs[0]
	arity := len(first.ts)
	if first.src != nil {
		arity = len(first.src.ts)
	}
	var out []*tensor.Tensor
	if pool != nil {
		out = pool.get()
	}
	if !fits(out, first, len(xs)) {
		out = make([]*tensor.Tensor, arity)
		for j := range out {
			dt, shape := componentInfo(first, j)
			out[j] = tensor.New(dt, append([]int{len(xs)}, shape...)...)
		}
	}
	if gatherRows(out, xs) {
		return out, nil
	}
	for i, x := range xs {
		for j, dst := range out {
			if x.src != nil {
				if len(x.src.ts) != arity {
					return nil, arityError(i, len(x.src.ts), arity)
				}
				if err := copyRows(dst, i, x.src.ts[j], x.row); err != nil {
					return nil, err
				}
				continue
			}
			if len(x.ts) != arity {
				return nil, arityError(i, len(x.ts), arity)
			}
			if err := copyRows(dst, i, x.ts[j], -1); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// fits reports whether the tensors ts can hold a batch of n elements shaped
// like x.
func fits(ts []*tensor.Tensor, x item, n int) bool {
	arity := len(x.ts)
	if x.src != nil {
		arity = len(x.src.ts)
	}
	if ts == nil || len(ts) != arity {
		return false
	}
	for j, t := range ts {
		dt, shape := componentInfo(x, j)
		s := t.Shape()
		if t.DType() != dt || len(s) != len(shape)+1 || s[0] != n || !slices.Equal(s[1:], shape) {
			return false
		}
	}
	return true
}

// gatherRows is stack's fast path: when every element is a row of one
// source (a shuffled or sharded FromTensors dataset), it copies component
// by component with one type switch each, and reports true. Rows of one
// source share its types and shapes, so nothing needs checking per row.
func gatherRows(out []*tensor.Tensor, xs []item) bool {
	src := xs[0].src
	if src == nil {
		return false
	}
	for _, x := range xs[1:] {
		if x.src != src {
			return false
		}
	}
	for j, t := range src.ts {
		m := tensor.NumElements(t.Shape()[1:])
		switch d := out[j].Data().(type) {
		case []float32:
			gather(d, t.Float32s(), xs, m)
		case []float64:
			gather(d, t.Float64s(), xs, m)
		case []int32:
			gather(d, t.Int32s(), xs, m)
		case []int64:
			gather(d, t.Int64s(), xs, m)
		case []bool:
			gather(d, t.Bools(), xs, m)
		case []uint8:
			gather(d, t.Uint8s(), xs, m)
		default:
			return false
		}
	}
	return true
}

// gather copies row xs[i].row of src (rows of m elements) to row i of dst.
func gather[T any](dst, src []T, xs []item, m int) {
	if m == 1 { // labels: an assignment, not a call to memmove per row
		dst = dst[:len(xs)]
		for i, x := range xs {
			dst[i] = src[x.row]
		}
		return
	}
	for i, x := range xs {
		copy(dst[i*m:(i+1)*m], src[x.row*m:(x.row+1)*m])
	}
}

func arityError(i, got, want int) error {
	return fmt.Errorf("data: Batch: element %d has %d components, element 0 has %d", i, got, want)
}

// componentInfo returns the type and shape of component j of x.
func componentInfo(x item, j int) (tensor.DType, []int) {
	if x.src != nil {
		t := x.src.ts[j]
		return t.DType(), t.Shape()[1:]
	}
	return x.ts[j].DType(), x.ts[j].Shape()
}

// copyRows copies one element into row i of dst. The element is row r of
// src if r >= 0, else the whole of src.
func copyRows(dst *tensor.Tensor, i int, src *tensor.Tensor, r int) error {
	shape := src.Shape()
	if r >= 0 {
		shape = shape[1:]
	}
	want := dst.Shape()[1:]
	if src.DType() != dst.DType() || !slices.Equal(shape, want) {
		return fmt.Errorf("data: Batch: element %d has a component of type %v and shape %v, the first element's is %v %v",
			i, src.DType(), tensor.MakeShape(shape...), dst.DType(), tensor.MakeShape(want...))
	}
	m := tensor.NumElements(want)
	so, do := 0, i*m
	if r >= 0 {
		so = r * m
	}
	switch d := dst.Data().(type) {
	case []float32:
		copy(d[do:do+m], src.Float32s()[so:so+m])
	case []float64:
		copy(d[do:do+m], src.Float64s()[so:so+m])
	case []int32:
		copy(d[do:do+m], src.Int32s()[so:so+m])
	case []int64:
		copy(d[do:do+m], src.Int64s()[so:so+m])
	case []bool:
		copy(d[do:do+m], src.Bools()[so:so+m])
	case []uint8:
		copy(d[do:do+m], src.Uint8s()[so:so+m])
	}
	return nil
}

// Prefetch returns a dataset that computes up to n elements of d ahead, in a
// goroutine, while the consumer works on the current one. The goroutine
// stops when the iterator is closed or its context is cancelled, and Close
// waits for it, so nothing leaks.
func (d *Dataset) Prefetch(n int) *Dataset {
	if n <= 0 {
		return d.fail(fmt.Errorf("data: Prefetch: buffer size %d is not positive", n))
	}
	return d.derive(func(ctx context.Context, epoch uint64) iter {
		ctx, cancel := context.WithCancel(ctx)
		it := &prefetchIter{ctx: ctx, cancel: cancel, ch: make(chan result, n), done: make(chan struct{})}
		go it.fill(d.open(ctx, epoch))
		return it
	})
}

type result struct {
	x   item
	err error
}

type prefetchIter struct {
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan result
	done   chan struct{} // closed when fill has returned
	once   sync.Once
	err    error // sticky end: io.EOF or the first error
}

// fill runs in its own goroutine and owns in.
func (it *prefetchIter) fill(in iter) {
	defer close(it.done)
	defer in.close()
	for {
		x, err := in.next()
		select {
		case it.ch <- result{x, err}:
		case <-it.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (it *prefetchIter) next() (item, error) {
	if it.err != nil {
		return item{}, it.err
	}
	select {
	case r := <-it.ch:
		if r.err != nil {
			it.err = r.err
		}
		return r.x, r.err
	case <-it.ctx.Done():
		it.err = it.ctx.Err()
		return item{}, it.err
	}
}

func (it *prefetchIter) close() {
	it.once.Do(func() {
		it.cancel()
		<-it.done
	})
}

// Iterator starts a pass over the dataset. Iteration stops with ctx's error
// once ctx is cancelled (promptly for a pipeline with Prefetch, at the next
// call otherwise). Close the iterator when done with it, to stop prefetching
// goroutines.
func (d *Dataset) Iterator(ctx context.Context) *Iterator {
	if d.err != nil {
		return &Iterator{err: d.err}
	}
	if d.open == nil {
		return &Iterator{err: errors.New("data: Iterator: the Dataset was not made by FromTensors")}
	}
	epoch := d.opened.Add(1) - 1
	return &Iterator{ctx: ctx, it: d.open(ctx, epoch)}
}

// Iterator yields the elements of a Dataset. It is not safe for concurrent
// use.
type Iterator struct {
	ctx  context.Context
	it   iter
	err  error // sticky: the error that ended the iteration
	held item  // the element Next returned last, released by the next call
}

// Next returns the next element, or io.EOF after the last one, or the error
// that stopped the pipeline (an invalid argument, a batch of mismatched
// shapes, the context's error). After an error, every call returns it.
//
// A batch is the caller's to read and write until the next call to Next,
// which may recycle its tensors for a later batch (see Dataset.Batch):
// finish the step that consumes a batch before asking for the next one, or
// clone what must outlive it. Close does not recycle the last batch. An
// element that comes straight from FromTensors (without Batch) shares
// memory with the source tensors and must not be modified.
func (it *Iterator) Next() ([]*tensor.Tensor, error) {
	it.held.release()
	it.held = item{}
	if it.err != nil {
		return nil, it.err
	}
	if err := it.ctx.Err(); err != nil {
		it.fail(err)
		return nil, err
	}
	x, err := it.it.next()
	if err != nil {
		it.fail(err)
		return nil, err
	}
	if x.src != nil {
		return x.src.view(x.row), nil
	}
	it.held = x
	return x.ts, nil
}

func (it *Iterator) fail(err error) {
	it.err = err
	it.Close()
}

// Close stops the pipeline and releases its goroutines; it waits until they
// have exited. Next returns io.EOF after Close. Close may be called more
// than once.
func (it *Iterator) Close() {
	it.held = item{} // the caller may still read it: not recycled
	if it.it != nil {
		it.it.close()
		it.it = nil
	}
	if it.err == nil {
		it.err = io.EOF
	}
}
