package allreduce

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// maxFinished bounds the memory of finished operations, whose late chunks
// (sent before a failure was noticed) are dropped.
const maxFinished = 4096

// maxEarlyOps and maxEarlyBytes bound, for each peer, what it may send for
// operations that have not started here: a rank runs at most a few
// operations ahead of its neighbour. A peer over its bound loses its
// chunks of its oldest such operation (a later chunk of it is refused, and
// the operation fails here if it starts with that peer as a sender), never
// another peer's: chunks of operations that never start here, sent by
// mistake, by a hostile member or by a ring that re-formed before it ran
// them, cost a bounded memory and stall nothing.
const (
	maxEarlyOps   = 256
	maxEarlyBytes = 1 << 30
)

// mailbox holds the chunks that arrive for each operation, possibly before
// the operation starts locally. Lock order: mailbox.mu, then inbox.mu.
type mailbox struct {
	mu       sync.Mutex
	ops      map[Op]*inbox
	finished ended[struct{}]
	// dropped holds the operations of which a peer's early chunks were
	// dropped over its bound, and which peers.
	dropped ended[droppedChunks]
	// peers holds, by rank, what each peer sent for operations that have
	// not started here (ranks are checked by Ring.Deliver).
	peers map[int]*peerEarly
	// failedViews holds the views (generations) of which a member said
	// an operation failed, and why: their operations fail here too.
	failedViews map[int64]error
	err         error // set by close
	closed      chan struct{}
}

// maxFailedViews bounds the failed views remembered: a view's operations
// are a few steps' worth, and the leader sends a new view at once.
const maxFailedViews = 64

// peerEarly is what one peer sent for operations that have not started
// here: their number, the bytes of their chunks, and the order they came
// in (which may still list operations that started since, or were
// dropped).
type peerEarly struct {
	ops   int
	bytes int64
	order []Op
}

type droppedChunks struct {
	peers []int
	err   error
}

func newMailbox() *mailbox {
	return &mailbox{ops: make(map[Op]*inbox), peers: make(map[int]*peerEarly), failedViews: make(map[int64]error), closed: make(chan struct{})}
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

// chunkKey files a chunk by its sender and index: chunks that a peer that
// is not the operation's sender sends are never taken for the sender's.
type chunkKey struct{ from, index int }

// inbox is one operation's received chunks; its single consumer is the
// operation's receive loop.
type inbox struct {
	mu     sync.Mutex
	chunks map[chunkKey]*Chunk
	err    error
	active bool
	// senders are the ranks whose chunks the operation takes, set when it
	// starts here.
	senders []int
	// early holds the bytes of each peer that sent chunks (or a notice, or
	// whose stream broke) before the operation started here, and broken
	// the failures of their streams, which fail the operation if it takes
	// their chunks.
	early  map[int]int64
	broken map[int]error
	notify chan struct{}
}

func newInbox() *inbox {
	return &inbox{chunks: make(map[chunkKey]*Chunk), notify: make(chan struct{}, 1)}
}

func (ib *inbox) signal() {
	select {
	case ib.notify <- struct{}{}:
	default:
	}
}

// take returns chunk index from rank from, waiting for it until ctx is
// done or the inbox fails.
func (ib *inbox) take(ctx context.Context, from, index int) (*Chunk, error) {
	k := chunkKey{from, index}
	for {
		ib.mu.Lock()
		c, ok := ib.chunks[k]
		if ok {
			delete(ib.chunks, k)
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

// slotLocked returns op's inbox for a chunk, a notice or a failure from
// peer from, making it and from's place in it if the operation has not
// started here; nil if the operation has finished or the mailbox is
// closed, and an error if from's chunks of op were dropped.
func (m *mailbox) slotLocked(op Op, from int) (*inbox, error) {
	if m.err != nil {
		return nil, nil
	}
	if _, done := m.finished.get(op); done {
		return nil, nil
	}
	ib := m.ops[op]
	if ib != nil && ib.active {
		return ib, nil
	}
	if d, ok := m.dropped.get(op); ok && slices.Contains(d.peers, from) {
		return nil, d.err
	}
	if ib == nil {
		ib = newInbox()
		m.ops[op] = ib
	}
	if _, ok := ib.early[from]; !ok {
		pe := m.peers[from]
		if pe == nil {
			pe = &peerEarly{}
			m.peers[from] = pe
		}
		if pe.ops >= maxEarlyOps {
			m.dropOldestLocked(from, pe, op, fmt.Sprintf("it sent chunks of %d operations that had not started here", pe.ops))
		}
		if ib.early == nil {
			ib.early = make(map[int]int64, 1)
		}
		ib.early[from] = 0
		pe.ops++
		if len(pe.order) >= 2*maxEarlyOps {
			pe.order = slices.DeleteFunc(pe.order, func(op Op) bool {
				ib := m.ops[op]
				if ib == nil || ib.active {
					return true
				}
				_, early := ib.early[from]
				return !early
			})
		}
		pe.order = append(pe.order, op)
	}
	return ib, nil
}

// dropOldestLocked drops peer from's chunks of its oldest operation that
// has not started here, other than keep, and reports whether there was
// one. why says why, in the error of its later chunks.
func (m *mailbox) dropOldestLocked(from int, pe *peerEarly, keep Op, why string) bool {
	for i, op := range pe.order {
		ib := m.ops[op]
		if op == keep || ib == nil || ib.active {
			continue
		}
		n, ok := ib.early[from]
		if !ok {
			continue
		}
		pe.order = slices.Delete(pe.order, i, i+1)
		delete(ib.early, from)
		delete(ib.broken, from)
		pe.ops--
		pe.bytes -= n
		ib.mu.Lock()
		for k := range ib.chunks {
			if k.from == from {
				delete(ib.chunks, k)
			}
		}
		ib.mu.Unlock()
		if len(ib.early) == 0 {
			delete(m.ops, op)
		}
		d, _ := m.dropped.get(op)
		if d.err == nil {
			d.err = fmt.Errorf("%w: %v: the chunks of rank %d were dropped: %s", ErrMismatch, op, from, why)
		}
		d.peers = append(d.peers, from)
		m.dropped.put(op, d)
		return true
	}
	return false
}

// deliver files c in its operation's inbox. Chunks of finished operations
// are dropped; a chunk from a rank that is not one of a running
// operation's senders is refused.
func (m *mailbox) deliver(c *Chunk) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ib, err := m.slotLocked(c.Op, c.From)
	if err != nil {
		return err
	}
	if ib == nil {
		if m.err != nil {
			return ErrClosed
		}
		return nil
	}
	if ib.active {
		if !slices.Contains(ib.senders, c.From) {
			return fmt.Errorf("%w: %v: chunk %d from rank %d, which is not the rank that sends this operation's chunks here (%v)", ErrMismatch, c.Op, c.Index, c.From, ib.senders)
		}
	} else {
		n := 4 * int64(len(c.Data))
		pe := m.peers[c.From]
		for pe.bytes+n > maxEarlyBytes {
			if !m.dropOldestLocked(c.From, pe, c.Op, fmt.Sprintf("it sent more than %d bytes of chunks of operations that had not started here", maxEarlyBytes)) {
				return fmt.Errorf("%w: %v: more than %d bytes of chunks from rank %d for operations that have not started here", ErrMismatch, c.Op, maxEarlyBytes, c.From)
			}
		}
		pe.bytes += n
		ib.early[c.From] += n
	}
	ib.mu.Lock()
	ib.chunks[chunkKey{c.From, c.Index}] = c
	ib.mu.Unlock()
	ib.signal()
	return nil
}

// fail makes op fail with err, which peer from caused (its stream broke,
// or it sent a chunk that does not fit): a running operation if from is
// one of its senders, one that has not started here once it starts with
// from as a sender. made says whether an operation that has not started
// here and from has sent nothing of may be recorded (a broken stream, a
// non-finite value: bounded by from's share), or not (a malformed chunk,
// which leaves nothing behind).
func (m *mailbox) fail(op Op, from int, err error, made bool) {
	m.mu.Lock()
	ib := m.ops[op]
	if ib == nil || !ib.active {
		slot := false
		if ib != nil {
			_, slot = ib.early[from]
		}
		if !slot && !made {
			m.mu.Unlock()
			return
		}
		ib, _ = m.slotLocked(op, from)
	}
	switch {
	case ib == nil:
	case !ib.active:
		if ib.broken == nil {
			ib.broken = make(map[int]error, 1)
		}
		if ib.broken[from] == nil {
			ib.broken[from] = err
		}
	case slices.Contains(ib.senders, from):
		m.mu.Unlock()
		ib.fail(err)
		return
	}
	m.mu.Unlock()
}

// notice makes op fail with err, as a failure notice from member from
// says: at once if it runs, and else when it starts.
func (m *mailbox) notice(op Op, from int, err error) {
	m.mu.Lock()
	ib, _ := m.slotLocked(op, from)
	m.mu.Unlock()
	if ib != nil {
		ib.fail(err)
	}
}

// failView makes every operation of view gen fail with err: those
// running at once, the others when they start.
func (m *mailbox) failView(gen int64, err error) {
	m.mu.Lock()
	if m.err != nil || m.failedViews[gen] != nil {
		m.mu.Unlock()
		return
	}
	if len(m.failedViews) >= maxFailedViews {
		oldest := gen
		for g := range m.failedViews {
			oldest = min(oldest, g)
		}
		if oldest == gen {
			m.mu.Unlock()
			return // older than every view remembered
		}
		delete(m.failedViews, oldest)
	}
	m.failedViews[gen] = err
	var running []*inbox
	for op, ib := range m.ops {
		if ib.active && opGen(op) == gen {
			running = append(running, ib)
		}
	}
	m.mu.Unlock()
	for _, ib := range running {
		ib.fail(err)
	}
}

// open starts operation op locally, taking the chunks of senders.
func (m *mailbox) open(op Op, senders []int) (*inbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	if g := opGen(op); g >= 0 && m.failedViews[g] != nil {
		return nil, m.failedViews[g]
	}
	m.finished.forget(op) // a key may be reused once its operation is over
	ib := m.ops[op]
	if ib != nil && ib.active {
		return nil, ErrBusy
	}
	d, dropped := m.dropped.get(op)
	m.dropped.forget(op)
	if ib != nil { // chunks came first: they are no longer early
		m.unearlyLocked(ib)
	}
	if dropped && slices.ContainsFunc(d.peers, func(p int) bool { return slices.Contains(senders, p) }) {
		delete(m.ops, op)
		m.finished.put(op, struct{}{})
		return nil, d.err
	}
	if ib == nil {
		ib = newInbox()
		m.ops[op] = ib
	}
	ib.mu.Lock()
	for k := range ib.chunks {
		if !slices.Contains(senders, k.from) {
			delete(ib.chunks, k)
		}
	}
	for p, err := range ib.broken {
		if slices.Contains(senders, p) && ib.err == nil {
			ib.err = err
		}
	}
	ib.broken = nil
	ib.active, ib.senders = true, senders
	ib.mu.Unlock()
	return ib, nil
}

// unearlyLocked gives back to their peers the shares of ib's early chunks.
func (m *mailbox) unearlyLocked(ib *inbox) {
	for p, n := range ib.early {
		if pe := m.peers[p]; pe != nil {
			pe.ops--
			pe.bytes -= n
		}
	}
	ib.early = nil
}

// expire drops the chunks of operations of views older than gen (see
// opGen) that have not started here: the ring re-formed without running
// them. Their late chunks are dropped.
func (m *mailbox) expire(gen int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for op, ib := range m.ops {
		if g := opGen(op); ib.active || g < 0 || g >= gen {
			continue
		}
		m.unearlyLocked(ib)
		delete(m.ops, op)
		m.finished.put(op, struct{}{})
	}
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
