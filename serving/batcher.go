package serving

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/tensor"
)

// batchItem is one request waiting in a batcher.
type batchItem struct {
	inputs map[string]*tensor.Tensor
	rows   int
	key    string // requests with equal keys can be concatenated
	// enqueued is when the item entered the queue (for the metrics).
	enqueued time.Time
	// done receives the item's result, or a lead signal: the receiver
	// now holds a batch thread and runs the next batch (buffered, 1).
	done  chan batchResult
	state itemState // guarded by the batcher's mu
}

type itemState uint8

const (
	queued  itemState = iota
	taken             // in a batch being run: the result will come
	leading           // handed a batch thread: it must run a batch
)

type batchResult struct {
	out  map[string]*tensor.Tensor
	err  error
	lead bool // not a result: run the next batch (see batchItem.done)
}

// batcher merges concurrent requests along their first dimension into one
// Predict call. It has no goroutine of its own: batches run on the
// goroutines of their requests, at most `threads` at once, so a request
// costs no goroutine handoff to be batched. The oldest queued request leads
// the next batch once it holds a thread: a request arriving at an empty
// queue takes a free thread at once, the others queue behind it. The leader
// lets its batch fill (see collect: a lone client never waits), takes the
// oldest requests with its key, up to maxRows rows, and passes a free
// thread to the next queued request if there is one. When its batch ends,
// it answers its own request and passes its thread to the oldest queued
// request, or frees it: requests that queued while every thread was busy
// form the next batch.
type batcher struct {
	pred    *savedmodel.Predictor
	metrics *serverMetrics // nil: none
	maxRows int
	maxWait time.Duration
	threads int

	mu         sync.Mutex
	queue      []*batchItem // FIFO; only the head can be leading
	running    int          // threads held by leaders
	collecting bool         // the head is waiting for its batch to fill
	wake       chan struct{}

	// incoming counts requests that have entered a handler for this
	// servable and are not yet in the queue (or have given up).
	incoming atomic.Int64
	merged   atomic.Int64 // batches of more than one request, for tests and logs
	batches  atomic.Int64 // batches run
	requests atomic.Int64 // requests in those batches
}

func newBatcher(p *savedmodel.Predictor, maxRows int, maxWait time.Duration, threads int, m *serverMetrics) *batcher {
	return &batcher{pred: p, metrics: m, maxRows: maxRows, maxWait: maxWait, threads: max(threads, 1), wake: make(chan struct{}, 1)}
}

// batchKey returns the key of a request's inputs: their names and the
// dimensions after the first, and its number of rows; ok is false when the
// inputs cannot be batched (a scalar, or inputs with different row counts).
func batchKey(inputs map[string]*tensor.Tensor, names []string) (key string, rows int, ok bool) {
	var buf [64]byte
	b := buf[:0]
	rows = -1
	for _, name := range names {
		t := inputs[name]
		if t == nil || t.Rank() == 0 {
			return "", 0, false
		}
		if rows >= 0 && t.Shape()[0] != rows {
			return "", 0, false
		}
		rows = t.Shape()[0]
		b = append(b, name...)
		for _, d := range t.Shape()[1:] {
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(d), 10)
		}
		b = append(b, ';')
	}
	return string(b), rows, rows > 0
}

// submit queues an item and waits for its result or ctx. The caller has
// incremented incoming; submit decrements it. If ctx ends while the item
// waits in the queue, it leaves the queue; once in a batch, the batch runs
// and its result is dropped.
func (b *batcher) submit(ctx context.Context, it *batchItem) (map[string]*tensor.Tensor, error) {
	it.enqueued = time.Now()
	b.mu.Lock()
	it.state = queued
	if len(b.queue) == 0 && b.running < b.threads {
		b.running++
		it.state = leading
	}
	b.queue = append(b.queue, it)
	b.incoming.Add(-1)
	if b.collecting {
		select { // the collecting leader recounts its rows
		case b.wake <- struct{}{}:
		default:
		}
	}
	lead := it.state == leading
	b.mu.Unlock()
	for {
		if lead {
			b.lead()
		}
		select {
		case r := <-it.done:
			if !r.lead {
				return r.out, r.err
			}
			lead = true
		case <-ctx.Done():
			b.mu.Lock()
			switch it.state {
			case queued:
				b.queue = slices.DeleteFunc(b.queue, func(q *batchItem) bool { return q == it })
				b.mu.Unlock()
				return nil, ctx.Err()
			case leading:
				// Handed a thread (the signal is in done): run a batch
				// for the others, then give up.
				b.mu.Unlock()
				<-it.done
				b.lead()
				return nil, ctx.Err()
			}
			b.mu.Unlock()
			return nil, ctx.Err() // the batch still runs; its result is dropped
		}
	}
}

// lead runs one batch from the head of the queue, which is the caller's
// own item, on the thread the caller holds; then it passes the thread to
// the oldest queued request, or frees it.
func (b *batcher) lead() {
	b.mu.Lock()
	b.collect()
	batch, rows := b.take()
	if b.running < b.threads {
		b.handOff() // a free thread for what is left
	}
	b.mu.Unlock()

	b.run(batch, rows)

	b.mu.Lock()
	b.running--
	b.handOff()
	b.mu.Unlock()
}

// collect lets the batch at the head of the queue fill, for at most maxWait
// in all, until it holds maxRows rows. b.mu is held, and released while
// waiting. First it waits while requests are being read or decoded
// (incoming > 0), waking at each arrival. Then it yields the processor
// while that brings more requests: runtime.Gosched returns at once when no
// other goroutine is runnable (a lone client pays nothing for it), and
// runs the runnable ones first when the machine is busy, which is when
// more requests are coming (handlers with a request ready to read): on a
// saturated server, batches grow with the load at no cost in idle CPU.
func (b *batcher) collect() {
	rows := b.fill()
	if rows >= b.maxRows || b.maxWait <= 0 {
		return
	}
	start := time.Now()
	if b.incoming.Load() > 0 {
		b.collecting = true
		timer := time.NewTimer(b.maxWait)
	wait:
		for rows < b.maxRows && b.incoming.Load() > 0 {
			b.mu.Unlock()
			select {
			case <-b.wake:
				b.mu.Lock()
			case <-timer.C:
				b.mu.Lock()
				break wait
			}
			rows = b.fill()
		}
		timer.Stop()
		b.collecting = false
	}
	for rows < b.maxRows && time.Since(start) < b.maxWait {
		n := len(b.queue)
		b.mu.Unlock()
		runtime.Gosched()
		b.mu.Lock()
		if len(b.queue) == n {
			return
		}
		rows = b.fill()
	}
}

// handOff gives a free thread to the head of the queue if it waits for
// one. b.mu is held.
func (b *batcher) handOff() {
	if len(b.queue) > 0 && b.queue[0].state == queued {
		b.running++
		b.queue[0].state = leading
		b.queue[0].done <- batchResult{lead: true}
	}
}

// fill returns how many rows the batch at the head of the queue would take
// now. b.mu is held.
func (b *batcher) fill() int {
	rows := 0
	for _, it := range b.queue {
		if it.key != b.queue[0].key || rows+it.rows > b.maxRows {
			break
		}
		rows += it.rows
	}
	return rows
}

// take removes the batch at the head of the queue: the oldest request and
// those after it with its key, up to maxRows rows. b.mu is held.
func (b *batcher) take() ([]*batchItem, int) {
	rows, n := 0, 0
	for _, it := range b.queue {
		if it.key != b.queue[0].key || (n > 0 && rows+it.rows > b.maxRows) {
			break
		}
		rows += it.rows
		it.state = taken
		n++
	}
	batch := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	return batch, rows
}

// run computes a batch and hands each item its rows. If the batch cannot be
// split by rows, or fails, each item is computed on its own, so one bad
// request cannot fail the others.
func (b *batcher) run(batch []*batchItem, rows int) {
	ctx := context.Background() // the batch outlives any one client
	b.batches.Add(1)
	b.requests.Add(int64(len(batch)))
	start := time.Now()
	for _, it := range batch {
		b.metrics.queued(start.Sub(it.enqueued))
	}
	if len(batch) > 1 {
		if outs, ok := b.runMerged(ctx, batch, rows); ok {
			b.metrics.run(time.Since(start))
			b.merged.Add(1)
			for i, it := range batch {
				it.done <- batchResult{out: outs[i]}
			}
			return
		}
	}
	for _, it := range batch {
		out, err := b.metrics.predict(ctx, b.pred, it.inputs)
		it.done <- batchResult{out: out, err: err}
	}
}

func (b *batcher) runMerged(ctx context.Context, batch []*batchItem, rows int) ([]map[string]*tensor.Tensor, bool) {
	merged := map[string]*tensor.Tensor{}
	for name, t0 := range batch[0].inputs {
		t := tensor.New(t0.DType(), append([]int{rows}, t0.Shape()[1:]...)...)
		dst := t.RawBytes()
		off := 0
		for _, it := range batch {
			off += copy(dst[off:], it.inputs[name].RawBytes())
		}
		merged[name] = t
	}
	out, err := b.pred.Predict(ctx, merged)
	if err != nil {
		return nil, false
	}
	for _, t := range out {
		if t.Rank() == 0 || t.Shape()[0] != rows {
			return nil, false
		}
	}
	res := make([]map[string]*tensor.Tensor, len(batch))
	from := 0
	for i, it := range batch {
		res[i] = make(map[string]*tensor.Tensor, len(out))
		for name, t := range out {
			res[i][name] = sliceRows(t, from, from+it.rows)
		}
		from += it.rows
	}
	return res, true
}

// sliceRows copies rows [from, to) of t.
func sliceRows(t *tensor.Tensor, from, to int) *tensor.Tensor {
	per := tensor.NumElements(t.Shape()[1:]) * t.DType().Size()
	out := tensor.New(t.DType(), append([]int{to - from}, t.Shape()[1:]...)...)
	copy(out.RawBytes(), t.RawBytes()[from*per:to*per])
	return out
}
