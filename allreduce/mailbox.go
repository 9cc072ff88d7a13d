package allreduce

import (
	"context"
	"fmt"
	"sync"
)

// opKey identifies one all-reduce operation.
type opKey struct {
	name  string
	round int64
}

// chunk is a received or sent piece of a tensor.
type chunk struct {
	key    opKey
	from   int
	size   int
	index  int
	length int
	offset int
	data   []float32
}

// maxFinished bounds the memory of finished operations, whose late chunks
// (sent before a failure was noticed) are dropped.
const maxFinished = 4096

// mailbox holds the chunks that arrive for each operation, possibly before
// the operation starts locally.
type mailbox struct {
	mu       sync.Mutex
	ops      map[opKey]*inbox
	finished map[opKey]struct{}
	order    []opKey
	err      error // set by close
	closed   chan struct{}
}

func newMailbox() *mailbox {
	return &mailbox{ops: make(map[opKey]*inbox), finished: make(map[opKey]struct{}), closed: make(chan struct{})}
}

// inbox is one operation's received chunks, by index; its single consumer
// is the operation's receive loop.
type inbox struct {
	mu     sync.Mutex
	chunks map[int]*chunk
	err    error
	active bool
	notify chan struct{}
}

func newInbox() *inbox {
	return &inbox{chunks: make(map[int]*chunk), notify: make(chan struct{}, 1)}
}

func (ib *inbox) signal() {
	select {
	case ib.notify <- struct{}{}:
	default:
	}
}

// take returns chunk index, waiting for it until ctx is done or the inbox
// fails.
func (ib *inbox) take(ctx context.Context, index int) (*chunk, error) {
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

// lookup returns the inbox of key, creating it; nil if the operation has
// finished or the mailbox is closed.
func (m *mailbox) lookup(key opKey) *inbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil
	}
	if _, done := m.finished[key]; done {
		return nil
	}
	ib := m.ops[key]
	if ib == nil {
		ib = newInbox()
		m.ops[key] = ib
	}
	return ib
}

// deliver files c in its operation's inbox. Chunks of finished operations
// are dropped.
func (m *mailbox) deliver(c *chunk) error {
	ib := m.lookup(c.key)
	if ib == nil {
		if m.closedErr() != nil {
			return ErrClosed
		}
		return nil
	}
	ib.mu.Lock()
	ib.chunks[c.index] = c
	ib.mu.Unlock()
	ib.signal()
	return nil
}

// fail makes the operation key fail with err (a broken incoming stream).
func (m *mailbox) fail(key opKey, err error) {
	if ib := m.lookup(key); ib != nil {
		ib.fail(err)
	}
}

// open starts operation key locally.
func (m *mailbox) open(key opKey) (*inbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	delete(m.finished, key) // a key may be reused once its operation is over
	ib := m.ops[key]
	if ib == nil {
		ib = newInbox()
		m.ops[key] = ib
	}
	if ib.active {
		return nil, ErrBusy
	}
	ib.active = true
	return ib, nil
}

// finish forgets operation key and drops its late chunks.
func (m *mailbox) finish(key opKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.ops, key)
	if _, ok := m.finished[key]; !ok {
		m.finished[key] = struct{}{}
		m.order = append(m.order, key)
		if len(m.order) > maxFinished {
			delete(m.finished, m.order[0])
			m.order = m.order[1:]
		}
	}
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
	m.ops = make(map[opKey]*inbox)
	m.mu.Unlock()
	for _, ib := range ops {
		ib.fail(err)
	}
}

// String is used in debugging messages.
func (k opKey) String() string { return fmt.Sprintf("%q round %d", k.name, k.round) }
