package allreduce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/distflow/distflow/tensor"
)

// The star: an all-reduce through summation servers, BytePS's design for
// parameter servers. With Config.Servers > 0 the last peers are servers
// (the ps tasks) and the others the ring's ranks (the workers). The tensor
// is cut into one segment per server; each rank streams the chunks of
// segment j to server j, which adds the chunks of the same index from
// every member into the first one that arrived (no copy) and streams each
// sum back to the members as soon as it is complete. A rank's push of
// chunk k+1 overlaps the return of chunk k, on the other direction of its
// link. Each rank sends and receives the tensor once, as in the ring of
// two, whatever the number of ranks; with as many servers as ranks (on
// their own hosts) no link carries more. All ranks end with bit-identical
// results, since each chunk is summed once, on its server.
//
// The servers hold no state between operations. Every member takes the
// same route for an operation, the one its view says (View.RingOnly; a
// Ring without views always goes through its servers), so that no
// operation is split between the servers and the ring: a server that
// dies fails the operations it was part of, on every member (the members
// that see it fail tell the others, and a member waiting for sums keeps
// its stream to each server open until they are in, so that it sees the
// server die), and the leader of the ring chooses the route of the next
// view: round the ring while a server does not answer, through the
// servers again once they all do. Operations of negative rounds (one-off
// ones, such as the state a ring takes when it re-forms) always go round
// the ring.

// DefaultServerChunkBytes is the size of the chunks of an operation through
// servers when Config.ServerChunkBytes is zero: smaller than the ring's, so
// that a segment is several chunks and pushing overlaps receiving the sums
// even for a model of a few hundred kilobytes.
const DefaultServerChunkBytes = 64 << 10

// serversSuffix ends the key of an operation through the servers: sums
// that a server sends after the operation failed must not land in an
// operation round the ring of the same name and round.
const serversSuffix = "@servers"

// maxSumOps bounds the operations that a server holds partial sums of: a
// member that died before the server heard of it leaves its operation
// incomplete, and the oldest such operation is dropped for a new one.
const maxSumOps = 64

// starItem is one chunk of an operation through servers: elements
// [lo, hi) of the tensor, summed on server (a position among the servers).
type starItem struct {
	server, lo, hi int
}

// starSchedule cuts a tensor of n elements for servers servers: segment j
// is [j*n/servers, (j+1)*n/servers), cut into chunks of chunk elements; a
// chunk's index is its position in this list.
func starSchedule(n, servers, chunk int) []starItem {
	var items []starItem
	for j := range servers {
		lo, hi := j*n/servers, (j+1)*n/servers
		for a := lo; a < hi; a += chunk {
			items = append(items, starItem{server: j, lo: a, hi: min(a+chunk, hi)})
		}
	}
	return items
}

// Servers returns the number of summation servers of the ring.
func (r *Ring) Servers() int { return r.servers }

// throughServers runs op through the servers. A failure on their side
// (a server died or failed the operation) wraps ErrServerFailed; the other
// members are told, so that those that do not see it themselves (no
// stream of theirs broke) do not wait for their deadline.
func (r *Ring) throughServers(ctx context.Context, op Op, data []float32, tp topology) error {
	sop := Op{Name: op.Name + serversSuffix, Round: op.Round}
	err := r.star(ctx, sop, data, tp)
	if err == nil || errors.Is(err, ErrClosed) || errors.Is(err, ErrNonFinite) || errors.Is(err, ErrMismatch) {
		return err
	}
	if ctx.Err() == nil && !errors.As(err, new(*noticeError)) {
		r.notify(ctx, sop, tp.members, noticeServers)
	}
	return fmt.Errorf("%w: %w", ErrServerFailed, err)
}

// DownServers probes the summation servers and returns the ranks of
// those that do not answer (or have closed their ring), in order; none
// when all answer. The probes take at most a second, and end with ctx.
func (r *Ring) DownServers(ctx context.Context) []int {
	pctx, cancel := context.WithTimeout(ctx, maxProbe)
	defer cancel()
	down := make([]bool, r.servers)
	var wg sync.WaitGroup
	for j := range r.servers {
		wg.Go(func() { down[j] = r.tr.Probe(pctx, r.size+j) != nil })
	}
	wg.Wait()
	var out []int
	for j, d := range down {
		if d {
			out = append(out, r.size+j)
		}
	}
	return out
}

// PeerName names rank i as errors do: its rank, task and address.
func (r *Ring) PeerName(i int) string { return r.peer(i) }

// star sums data among the members of tp through the servers. data is
// written only once every sum is in, so that a failure leaves it whole.
func (r *Ring) star(ctx context.Context, op Op, data []float32, tp topology) error {
	servers := make([]int, r.servers)
	for j := range servers {
		servers[j] = r.size + j
	}
	ib, err := r.box.open(op, servers)
	if err != nil {
		return fmt.Errorf("allreduce: rank %d: %v: %w", r.rank, op, err)
	}
	defer r.box.finish(op)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := starSchedule(len(data), r.servers, r.serverChunk)
	// summed[j] is closed once every sum of server j is in: its stream
	// stays open until then.
	summed := make([]chan struct{}, r.servers)
	last := make([]int, r.servers)
	for j := range summed {
		summed[j], last[j] = make(chan struct{}), -1
	}
	for k, it := range items {
		last[it.server] = k
	}
	sent := make(chan error, r.servers)
	for j := range r.servers {
		go func() {
			err := r.starSend(ctx, op, j, items, data, tp.size(), summed[j])
			if err != nil {
				cancel()
			}
			sent <- err
		}()
	}
	sums := make([]*Chunk, len(items))
	var recvErr error
	for k, it := range items {
		c, err := ib.take(ctx, r.size+it.server, k)
		if err != nil {
			recvErr = fmt.Errorf("allreduce: rank %d: %v: waiting for the sum of chunk %d of %d from %s: %w",
				r.rank, op, k, len(items), r.peer(r.size+it.server), err)
			break
		}
		if c.From != r.size+it.server || c.Size != tp.size() || c.Length != len(data) || c.Offset != it.lo || len(c.Data) != it.hi-it.lo {
			recvErr = fmt.Errorf("%w: rank %d: %v: sum %d from rank %d (of %d members, %d values at %d of %d) is not the chunk of %s expected (of %d members, %d values at %d of %d)",
				ErrMismatch, r.rank, op, k, c.From, c.Size, len(c.Data), c.Offset, c.Length,
				r.peer(r.size+it.server), tp.size(), it.hi-it.lo, it.lo, len(data))
			break
		}
		sums[k] = c
		if k == last[it.server] {
			close(summed[it.server])
		}
	}
	if recvErr != nil {
		cancel()
	}
	var sendErr error
	for range r.servers {
		if err := <-sent; err != nil && sendErr == nil {
			sendErr = err
		}
	}
	if recvErr != nil {
		// A sender that the failure cancelled did not cause it.
		if sendErr != nil && !errors.Is(sendErr, context.Canceled) && !errors.As(sendErr, new(*waitingError)) {
			return sendErr
		}
		return recvErr
	}
	if sendErr != nil {
		return sendErr
	}
	for k, it := range items {
		copy(data[it.lo:it.hi], sums[k].Data)
	}
	return nil
}

// starSend streams this rank's chunks of server j's segment to it (none
// for a tensor shorter than the number of servers, whose segment j may be
// empty), and keeps the stream open until the server's sums are in
// (summed is closed): a server that dies meanwhile breaks it, and fails
// the operation at once, even if it had not begun to return sums here.
func (r *Ring) starSend(ctx context.Context, op Op, j int, items []starItem, data []float32, size int, summed <-chan struct{}) error {
	if !slices.ContainsFunc(items, func(it starItem) bool { return it.server == j }) {
		return nil
	}
	to := r.size + j
	wrap := func(err error) error {
		return fmt.Errorf("allreduce: rank %d: %v: sending to summation server %s: %w", r.rank, op, r.peer(to), err)
	}
	st, err := r.tr.Open(ctx, to, op)
	if err != nil {
		return wrap(err)
	}
	for k, it := range items {
		if it.server != j {
			continue
		}
		c := &Chunk{Op: op, From: r.rank, Size: size, Index: k, Length: len(data), Offset: it.lo, Data: data[it.lo:it.hi]}
		if err := st.Send(c); err != nil {
			st.Abort()
			return wrap(err)
		}
	}
	select {
	case <-summed:
	case <-st.Broken():
		err := st.Close()
		if err == nil {
			err = errors.New("the server ended the stream before returning its sums")
		}
		return wrap(err)
	case <-ctx.Done():
		select {
		case <-summed: // both at once: the sums are in
		default:
			st.Abort()
			// The receiver's error, waiting for the sums, says more.
			return &waitingError{wrap(ctx.Err())}
		}
	}
	if err := st.Close(); err != nil {
		return wrap(err)
	}
	return nil
}

// summer is a server's side of the star: the partial sums of the
// operations under way, and the streams that return the sums.
type summer struct {
	r     *Ring
	index int // this server's position among the servers
	mu    sync.Mutex
	ops   map[Op]*sumOp
	// ended holds the operations that completed (nil) or failed, so that
	// late chunks are dropped or refused.
	ended  ended[error]
	bytes  int64 // data held in partial sums
	closed bool
}

// sumOp is one operation on a server.
type sumOp struct {
	op           Op
	size, length int
	base, chunks int // the index of this server's first chunk, and their number
	lo, hi       int // this server's segment
	slots        map[int]*sumSlot
	members      []int // the ranks heard from
	done         int   // chunks summed and sent
	outs         map[int]*sumOut
	bytes        int64
	started      time.Time
	ctx          context.Context
	cancel       context.CancelFunc
}

// sumSlot is one chunk's partial sum: the first chunk that arrived, to
// which the others are added, and the members they came from.
type sumSlot struct {
	sum  *Chunk
	from []int
}

// sumOut streams the sums of one operation to one member, in order.
type sumOut struct {
	queue chan *Chunk
	done  chan struct{}
}

func newSummer(r *Ring) *summer {
	return &summer{r: r, index: r.rank - r.size, ops: make(map[Op]*sumOp)}
}

// deliver adds c to its chunk's partial sum, and sends the sum to the
// members once each has added its chunk. A chunk that does not fit the
// operation fails it (the members are told) and is refused.
func (s *summer) deliver(c *Chunk) error {
	r := s.r
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err, ended := s.ended.get(c.Op); ended {
		if err != nil {
			return err
		}
		// Every member gave its chunks to the completed operation: this
		// is the key used again (see Op).
		s.ended.forget(c.Op)
	}
	o := s.ops[c.Op]
	if o == nil {
		var err error
		if o, err = s.start(c); err != nil {
			return err
		}
	}
	if err := o.fits(c, r); err != nil {
		s.failLocked(o, err)
		return err
	}
	if i := tensor.FirstNonFinite32(c.Data); i >= 0 {
		err := fmt.Errorf("%w: summation server %d: %v: %s sent %v at element %d", ErrNonFinite, r.rank, c.Op, r.peer(c.From), c.Data[i], c.Offset+i)
		s.failLocked(o, err)
		return err
	}
	if !slices.Contains(o.members, c.From) {
		o.members = append(o.members, c.From)
	}
	sl := o.slots[c.Index]
	if sl == nil {
		n := 4 * int64(len(c.Data))
		if s.bytes+n > maxEarlyBytes {
			err := fmt.Errorf("%w: summation server %d: %v: more than %d bytes of partial sums", ErrMismatch, r.rank, c.Op, maxEarlyBytes)
			s.failLocked(o, err)
			return err
		}
		s.bytes += n
		o.bytes += n
		o.slots[c.Index] = &sumSlot{sum: c, from: []int{c.From}}
	} else {
		if slices.Contains(sl.from, c.From) {
			err := fmt.Errorf("%w: summation server %d: %v: chunk %d came twice from %s", ErrMismatch, r.rank, c.Op, c.Index, r.peer(c.From))
			s.failLocked(o, err)
			return err
		}
		dst := sl.sum.Data
		for i, v := range c.Data {
			dst[i] += v
		}
		sl.from = append(sl.from, c.From)
	}
	if sl = o.slots[c.Index]; len(sl.from) < o.size {
		return nil
	}
	delete(o.slots, c.Index)
	n := 4 * int64(len(sl.sum.Data))
	s.bytes -= n
	o.bytes -= n
	out := &Chunk{Op: c.Op, From: r.rank, Size: o.size, Index: c.Index, Length: o.length, Offset: c.Offset, Data: sl.sum.Data}
	for _, m := range sl.from {
		o.out(s, m).queue <- out
	}
	if o.done++; o.done == o.chunks {
		for _, w := range o.outs {
			close(w.queue)
		}
		s.endLocked(o, nil)
		go func() { // the context ends once every return stream is
			for _, w := range o.outs {
				<-w.done
			}
			o.cancel()
		}()
	}
	return nil
}

// start begins the operation of c, its first chunk here, after checking
// what every later chunk is checked against.
func (s *summer) start(c *Chunk) (*sumOp, error) {
	r := s.r
	switch {
	case c.From < 0 || c.From >= r.size:
		return nil, fmt.Errorf("%w: summation server %d: %v: chunk from rank %d, not one of the %d ranks", ErrMismatch, r.rank, c.Op, c.From, r.size)
	case c.Size < 1 || c.Size > r.size:
		return nil, fmt.Errorf("%w: summation server %d: %v: chunk of an operation among %d members, not 1 to %d", ErrMismatch, r.rank, c.Op, c.Size, r.size)
	case c.Length < 1:
		return nil, fmt.Errorf("%w: summation server %d: %v: a tensor of %d values", ErrMismatch, r.rank, c.Op, c.Length)
	}
	s.evict()
	o := &sumOp{op: c.Op, size: c.Size, length: c.Length, slots: make(map[int]*sumSlot), outs: make(map[int]*sumOut), started: time.Now()}
	o.lo, o.hi = s.index*c.Length/r.servers, (s.index+1)*c.Length/r.servers
	for j := range s.index {
		lo, hi := j*c.Length/r.servers, (j+1)*c.Length/r.servers
		o.base += (hi - lo + r.serverChunk - 1) / r.serverChunk
	}
	o.chunks = (o.hi - o.lo + r.serverChunk - 1) / r.serverChunk
	o.ctx, o.cancel = context.WithCancel(context.Background())
	s.ops[c.Op] = o
	return o, nil
}

// evict drops the oldest operation when maxSumOps are held: one that a
// member left without a word.
func (s *summer) evict() {
	if len(s.ops) < maxSumOps {
		return
	}
	var oldest *sumOp
	for _, o := range s.ops {
		if oldest == nil || o.started.Before(oldest.started) {
			oldest = o
		}
	}
	s.failLocked(oldest, fmt.Errorf("summation server %d: %v: dropped, incomplete after %v, for a newer operation", s.r.rank, oldest.op, time.Since(oldest.started).Round(time.Millisecond)))
}

// fits checks that c is a chunk of o's segment from one of its members.
func (o *sumOp) fits(c *Chunk, r *Ring) error {
	k := c.Index - o.base
	lo := o.lo + k*r.serverChunk
	if c.Size != o.size || c.Length != o.length || c.From < 0 || c.From >= r.size || k < 0 || k >= o.chunks ||
		c.Offset != lo || len(c.Data) != min(r.serverChunk, o.hi-lo) {
		return fmt.Errorf("%w: summation server %d: %v: chunk %d from %s (of %d members, %d values at %d of %d) is not one of its chunks %d to %d here (of %d members, a segment [%d, %d) of %d, in chunks of %d)",
			ErrMismatch, r.rank, c.Op, c.Index, r.peer(c.From), c.Size, len(c.Data), c.Offset, c.Length,
			o.base, o.base+o.chunks-1, o.size, o.lo, o.hi, o.length, r.serverChunk)
	}
	return nil
}

// out returns the stream of o's sums to member m, started on first use.
func (o *sumOp) out(s *summer, m int) *sumOut {
	if w := o.outs[m]; w != nil {
		return w
	}
	w := &sumOut{queue: make(chan *Chunk, o.chunks), done: make(chan struct{})}
	o.outs[m] = w
	go s.stream(o, m, w)
	return w
}

// stream sends w's sums to member m. A failure fails the operation, which
// tells the other members.
func (s *summer) stream(o *sumOp, m int, w *sumOut) {
	defer close(w.done)
	r := s.r
	st, err := r.tr.Open(o.ctx, m, o.op)
	if err == nil {
		for c := range w.queue {
			if err = st.Send(c); err != nil {
				break
			}
		}
		if err == nil {
			err = o.ctx.Err() // the operation failed
		}
		if err == nil {
			err = st.Close()
		} else {
			st.Abort()
		}
	}
	if err != nil {
		s.fail(o.op, fmt.Errorf("summation server %d: %v: returning the sums to %s: %w", r.rank, o.op, r.peer(m), err))
	}
}

// fail ends operation op with err (an incoming stream broke, or a return
// stream failed): the members are told, through their streams, and its
// later chunks are refused with err.
func (s *summer) fail(op Op, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.ops[op]; o != nil {
		s.failLocked(o, err)
	}
}

func (s *summer) failLocked(o *sumOp, err error) {
	s.r.log.Warn("allreduce: summation server: operation failed", "rank", s.r.rank, "name", o.op.Name, "round", o.op.Round, "err", err)
	o.cancel() // aborts the return streams
	s.bytes -= o.bytes
	if o.done < o.chunks {
		for _, w := range o.outs {
			close(w.queue)
		}
	}
	s.endLocked(o, err)
	// An aborted stream tells a member nothing if no sum went through it:
	// every member heard from gets a notice of the failure, and its cause.
	go s.r.notify(context.Background(), o.op, o.members, noticeCause(err))
}

// endLocked forgets o, keeping its outcome for its late chunks.
func (s *summer) endLocked(o *sumOp, err error) {
	delete(s.ops, o.op)
	s.ended.put(o.op, err)
}

// close fails every operation: the ring is closing.
func (s *summer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, o := range s.ops {
		s.failLocked(o, ErrClosed)
	}
}
