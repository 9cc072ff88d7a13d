package allreduce

import (
	"context"
	"fmt"
	"sync"
)

// maxFinished bounds the memory of finished operations, whose late chunks
// (sent before a failure was noticed) are dropped.
const maxFinished = 4096

// maxEarlyOps and maxEarlyBytes bound what peers may send for operations
// that have not started here: a rank runs at most a few operations ahead
// of its neighbour, and a peer that sends more cannot make this one keep
// it without end.
const (
	maxEarlyOps   = 256
	maxEarlyBytes = 1 << 30
)

// mailbox holds the chunks that arrive for each operation, possibly before
// the operation starts locally.
type mailbox struct {
	mu       sync.Mutex
	ops      map[Op]*inbox
	finished ended[struct{}]
	// early counts the operations that have chunks but have not started
	// here, and earlyBytes their chunks' data.
	early, earlyBytes int64
	err               error // set by close
	closed            chan struct{}
}

func newMailbox() *mailbox {
	return &mailbox{ops: make(map[Op]*inbox), closed: make(chan struct{})}
}

// ended remembers the outcome of the last maxFinished operations that
// ended, so that their late chunks are dropped (or refused) rather than
// taken for a new operation's. The zero value is ready to use.
type ended[V any] struct {
	outcome map[Op]V
	order   []Op
}

// get returns the outcome of op, and whether op is remembered.
func (e *ended[V]) get(op Op) (V, bool) {
	v, ok := e.outcome[op]
	return v, ok
}

// put remembers that op ended with v, forgetting the oldest beyond
// maxFinished.
func (e *ended[V]) put(op Op, v V) {
	if e.outcome == nil {
		e.outcome = make(map[Op]V)
	}
	if _, ok := e.outcome[op]; !ok {
		e.order = append(e.order, op)
		if len(e.order) > maxFinished {
			delete(e.outcome, e.order[0])
			e.order = e.order[1:]
		}
	}
	e.outcome[op] = v
}

// forget drops op: its key is used again.
func (e *ended[V]) forget(op Op) { delete(e.outcome, op) }

// inbox is one operation's received chunks, by index; its single consumer
// is the operation's receive loop.
type inbox struct {
	mu     sync.Mutex
	chunks map[int]*Chunk
	err    error
	active bool
	// earlyBytes is the data of the chunks that arrived before the
	// operation started here.
	earlyBytes int64
	notify     chan struct{}
}

func newInbox() *inbox {
	return &inbox{chunks: make(map[int]*Chunk), notify: make(chan struct{}, 1)}
}

func (ib *inbox) signal() {
	select {
	case ib.notify <- struct{}{}:
	default:
	}
}

// take returns chunk index, waiting for it until ctx is done or the inbox
// fails.
func (ib *inbox) take(ctx context.Context, index int) (*Chunk, error) {
	for {
		ib.mu.Lock()
		c, ok := ib.chunks[index]
		if ok {
			delete(ib.chunks, index)
		}
		err := ib.err
		ib.mu.Unlock()
		if ok {
			return c, nil
		}
		if err != nil {
			return nil, err
		}
		select {
		case <-ib.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (ib *inbox) fail(err error) {
	ib.mu.Lock()
	if ib.err == nil {
		ib.err = err
	}
	ib.mu.Unlock()
	ib.signal()
}

// lookup returns the inbox of op, creating it, with n more bytes of early
// chunks if the operation has not started here; nil if the operation has
// finished or the mailbox is closed, and an error if peers are too far
// ahead.
func (m *mailbox) lookup(op Op, n int64) (*inbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, nil
	}
	if _, done := m.finished.get(op); done {
		return nil, nil
	}
	ib := m.ops[op]
	if ib == nil {
		if m.early >= maxEarlyOps {
			return nil, fmt.Errorf("%w: %v: %d operations that have not started here already have chunks", ErrMismatch, op, m.early)
		}
		ib = newInbox()
		m.ops[op] = ib
		m.early++
	}
	if !ib.active {
		if m.earlyBytes+n > maxEarlyBytes {
			return nil, fmt.Errorf("%w: %v: more than %d bytes of chunks for operations that have not started here", ErrMismatch, op, maxEarlyBytes)
		}
		m.earlyBytes += n
		ib.earlyBytes += n
	}
	return ib, nil
}

// deliver files c in its operation's inbox. Chunks of finished operations
// are dropped.
func (m *mailbox) deliver(c *Chunk) error {
	ib, err := m.lookup(c.Op, 4*int64(len(c.Data)))
	if err != nil {
		return err
	}
	if ib == nil {
		if m.closedErr() != nil {
			return ErrClosed
		}
		return nil
	}
	ib.mu.Lock()
	ib.chunks[c.Index] = c
	ib.mu.Unlock()
	ib.signal()
	return nil
}

// fail makes the operation op fail with err (a broken incoming stream).
func (m *mailbox) fail(op Op, err error) {
	if ib, _ := m.lookup(op, 0); ib != nil {
		ib.fail(err)
	}
}

// open starts operation op locally.
func (m *mailbox) open(op Op) (*inbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	m.finished.forget(op) // a key may be reused once its operation is over
	ib := m.ops[op]
	switch {
	case ib == nil:
		ib = newInbox()
		m.ops[op] = ib
	case ib.active:
		return nil, ErrBusy
	default: // chunks came first: they are no longer early
		m.early--
		m.earlyBytes -= ib.earlyBytes
		ib.earlyBytes = 0
	}
	ib.active = true
	return ib, nil
}

// finish forgets operation op and drops its late chunks.
func (m *mailbox) finish(op Op) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.ops, op)
	m.finished.put(op, struct{}{})
}

func (m *mailbox) closedErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// close fails every operation with err.
func (m *mailbox) close(err error) {
	m.mu.Lock()
	if m.err == nil {
		close(m.closed)
	}
	m.err = err
	ops := m.ops
	m.ops = make(map[Op]*inbox)
	m.mu.Unlock()
	for _, ib := range ops {
		ib.fail(err)
	}
}
