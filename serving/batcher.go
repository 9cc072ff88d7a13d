package serving

import (
	"context"
	"fmt"
	"strings"
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
	done   chan batchResult
}

type batchResult struct {
	out map[string]*tensor.Tensor
	err error
}

// batcher merges concurrent requests along their first dimension into one
// Predict call. One goroutine collects batches; up to `threads` batches run
// at once. A batch closes when it reaches maxRows, when maxWait has passed
// since its first request, or as soon as no other request is on its way
// (incoming is zero): a lone client never waits for the timeout.
type batcher struct {
	pred    *savedmodel.Predictor
	maxRows int
	maxWait time.Duration
	in      chan *batchItem
	slots   chan struct{}
	stop    chan struct{}
	// incoming counts requests that have entered a handler for this
	// servable and are not yet in a batch (or have given up).
	incoming atomic.Int64
	merged   atomic.Int64 // batches of more than one request, for tests and logs
	wg       sync.WaitGroup
}

func newBatcher(p *savedmodel.Predictor, maxRows int, maxWait time.Duration, threads int) *batcher {
	b := &batcher{
		pred: p, maxRows: maxRows, maxWait: maxWait,
		in: make(chan *batchItem), slots: make(chan struct{}, threads), stop: make(chan struct{}),
	}
	b.wg.Add(1)
	go b.loop()
	return b
}

// batchKey returns the key of a request's inputs: their names and the
// dimensions after the first, and its number of rows; ok is false when the
// inputs cannot be batched (a scalar, or inputs with different row counts).
func batchKey(inputs map[string]*tensor.Tensor, names []string) (key string, rows int, ok bool) {
	var sb strings.Builder
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
		fmt.Fprintf(&sb, "%s%v;", name, t.Shape()[1:])
	}
	return sb.String(), rows, rows > 0
}

// submit queues an item and waits for its result or ctx. The caller has
// incremented incoming; the batcher decrements it when it takes the item.
func (b *batcher) submit(ctx context.Context, it *batchItem) (map[string]*tensor.Tensor, error) {
	select {
	case b.in <- it:
	case <-ctx.Done():
		b.incoming.Add(-1)
		return nil, ctx.Err()
	}
	select {
	case r := <-it.done:
		return r.out, r.err
	case <-ctx.Done():
		return nil, ctx.Err() // the batch still runs; its result is dropped
	}
}

func (b *batcher) loop() {
	defer b.wg.Done()
	var carry *batchItem
	for {
		select {
		case b.slots <- struct{}{}:
		case <-b.stop:
			return
		}
		first := carry
		carry = nil
		if first == nil {
			select {
			case first = <-b.in:
				b.incoming.Add(-1)
			case <-b.stop:
				<-b.slots
				return
			}
		}
		batch, rows := []*batchItem{first}, first.rows
		if rows < b.maxRows && b.incoming.Load() > 0 {
			timer := time.NewTimer(b.maxWait)
		collect:
			for rows < b.maxRows {
				select {
				case it := <-b.in:
					b.incoming.Add(-1)
					if it.key != first.key || rows+it.rows > b.maxRows {
						carry = it
						break collect
					}
					batch, rows = append(batch, it), rows+it.rows
					if b.incoming.Load() == 0 {
						break collect
					}
				case <-timer.C:
					break collect
				}
			}
			timer.Stop()
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() { <-b.slots }()
			b.run(batch, rows)
		}()
	}
}

// run computes a batch and hands each item its rows. If the batch cannot be
// split by rows, or fails, each item is computed on its own, so one bad
// request cannot fail the others.
func (b *batcher) run(batch []*batchItem, rows int) {
	ctx := context.Background() // the batch outlives any one client
	if len(batch) > 1 {
		if outs, ok := b.runMerged(ctx, batch, rows); ok {
			b.merged.Add(1)
			for i, it := range batch {
				it.done <- batchResult{out: outs[i]}
			}
			return
		}
	}
	for _, it := range batch {
		out, err := b.pred.Predict(ctx, it.inputs)
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
		res[i] = map[string]*tensor.Tensor{}
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

// close stops the batcher once its running batches end. No request may be
// in flight (the servable's references are all released).
func (b *batcher) close() {
	close(b.stop)
	b.wg.Wait()
}
