package allreduce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distflow/distflow/tensor"
)

// Sentinel errors, wrapped by the errors that the package returns.
var (
	// ErrClosed is returned by operations on a closed Ring and by the
	// operations that a Close interrupts.
	ErrClosed = errors.New("allreduce: ring closed")
	// ErrInvalidConfig is returned by New for a bad Config.
	ErrInvalidConfig = errors.New("allreduce: invalid config")
	// ErrBusy is returned when an operation with the same name and round
	// is already running on the ring.
	ErrBusy = errors.New("allreduce: operation already running")
	// ErrMismatch is returned when a peer's chunk does not fit the local
	// operation: a different tensor length or ring size.
	ErrMismatch = errors.New("allreduce: peers disagree")
	// ErrNonFinite is returned when a tensor holds a NaN or an infinity:
	// this rank's own (the model diverged) or a chunk a peer sent (named).
	ErrNonFinite = errors.New("allreduce: non-finite value")
	// ErrPeerUnreachable is wrapped by PeerDownError, and returned by the
	// in-memory transport for a peer that is cut or closed.
	ErrPeerUnreachable = errors.New("allreduce: peer unreachable")
	// ErrViewFailed is wrapped by the error of an operation of a view
	// (Group) that failed because an operation of the view failed on
	// another member, which told the members: that member waits for a
	// new view, so the others do not wait for it.
	ErrViewFailed = errors.New("allreduce: an operation of the view failed on another member")
	// ErrServerFailed is wrapped by the error of an all-reduce through the
	// summation servers that failed on their side: a server died, was
	// restarted, or failed the operation. The operation is not run round
	// the ring instead: every member takes the route of its view, and the
	// leader chooses the route of the next one.
	ErrServerFailed = errors.New("allreduce: the operation through the summation servers failed")
)

// DefaultChunkBytes is the size of the chunks that a segment is cut into
// when Config.ChunkBytes is zero: small enough that sending one chunk
// overlaps with receiving the next, large enough to amortise the per-message
// cost.
const DefaultChunkBytes = 1 << 20

// Config configures one rank of a ring.
type Config struct {
	// Rank is this worker's position in Peers.
	Rank int
	// Peers holds the address of every rank (host:port for the gRPC
	// transport), indexed by rank, which the Transport reaches and errors
	// name. Every rank must be given the same list. One peer is a valid
	// ring whose operations return at once.
	Peers []string
	// Logger receives connection and failure messages (nil: slog.Default()).
	Logger *slog.Logger
	// ChunkBytes is the size of the pieces a segment is sent in (0:
	// DefaultChunkBytes; rounded down to whole float32s, at least one).
	ChunkBytes int
	// Names optionally names the task of each rank (such as
	// "/job:worker/task:2"), indexed like Peers, for errors.
	Names []string
	// Servers is the number of summation servers (the ps tasks) among
	// Peers: the last Servers of them. The others are the ring's ranks,
	// whose operations then go through the servers (see star.go) rather
	// than round the ring, as long as the servers serve. A server's Ring
	// only sums for the others.
	Servers int
	// ServerChunkBytes is the size of the pieces of an operation through
	// the servers (0: DefaultServerChunkBytes). Every rank and server
	// must be given the same.
	ServerChunkBytes int
}

func (c Config) validate() error {
	if len(c.Peers) == 0 {
		return fmt.Errorf("%w: no peers", ErrInvalidConfig)
	}
	if c.Rank < 0 || c.Rank >= len(c.Peers) {
		return fmt.Errorf("%w: rank %d outside the %d peers", ErrInvalidConfig, c.Rank, len(c.Peers))
	}
	if c.ChunkBytes < 0 || c.ServerChunkBytes < 0 {
		return fmt.Errorf("%w: negative chunk size %d or %d", ErrInvalidConfig, c.ChunkBytes, c.ServerChunkBytes)
	}
	if c.Servers < 0 || c.Servers >= len(c.Peers) {
		return fmt.Errorf("%w: %d summation servers among %d peers: want 0 to %d", ErrInvalidConfig, c.Servers, len(c.Peers), len(c.Peers)-1)
	}
	if len(c.Names) != 0 && len(c.Names) != len(c.Peers) {
		return fmt.Errorf("%w: %d names for %d peers", ErrInvalidConfig, len(c.Names), len(c.Peers))
	}
	seen := make(map[string]int, len(c.Peers))
	for i, p := range c.Peers {
		if p == "" {
			return fmt.Errorf("%w: peer %d has no address", ErrInvalidConfig, i)
		}
		if j, dup := seen[p]; dup {
			return fmt.Errorf("%w: peers %d and %d share the address %s", ErrInvalidConfig, j, i, p)
		}
		seen[p] = i
	}
	return nil
}

func chunkElems(bytes, def int) int {
	if bytes == 0 {
		bytes = def
	}
	return max(bytes/4, 1)
}

// Ring is one rank of a ring all-reduce. Its methods are safe for
// concurrent use; concurrent operations must differ in (name, round).
//
// A Ring is also its rank's Receiver: its Transport delivers the chunks
// that arrive from the previous rank with Deliver and Fail.
type Ring struct {
	rank, size int // size: the ring's ranks, servers apart
	peers      []string
	names      []string // task names by rank, or nil
	chunk      int      // elements per chunk
	log        *slog.Logger
	box        *mailbox
	tr         Transport
	views      views // the newest view received (elastic rings)

	servers     int     // summation servers, ranks size to size+servers-1
	serverChunk int     // elements per chunk through them
	sum         *summer // set on a server

	mu     sync.Mutex
	closed bool
}

var _ Receiver = (*Ring)(nil)

// NewRing returns rank cfg.Rank of a ring whose chunks travel over tr,
// which the ring owns (Close closes it). Operations may start at once;
// chunks that arrive before their operation starts locally are kept for it.
func NewRing(cfg Config, tr Transport) (*Ring, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if tr == nil {
		return nil, fmt.Errorf("%w: no transport", ErrInvalidConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	r := &Ring{
		rank: cfg.Rank, size: len(cfg.Peers) - cfg.Servers, peers: slices.Clone(cfg.Peers), names: slices.Clone(cfg.Names),
		chunk: chunkElems(cfg.ChunkBytes, DefaultChunkBytes), log: log, box: newMailbox(), tr: tr,
		servers: cfg.Servers, serverChunk: chunkElems(cfg.ServerChunkBytes, DefaultServerChunkBytes),
	}
	if r.rank >= r.size {
		r.sum = newSummer(r)
	}
	return r, nil
}

// Deliver implements Receiver: it files c for its operation. A chunk is
// checked before anything is kept for it: one that names no other peer as
// its sender, or a negative index, offset or length, leaves nothing
// behind.
func (r *Ring) Deliver(c *Chunk) error {
	if r.sum != nil {
		return r.sum.deliver(c) // which checks c against the server's slice
	}
	if c.From < 0 || c.From >= len(r.peers) || c.From == r.rank {
		return fmt.Errorf("%w: rank %d: chunk %d of %v from rank %d, which is not another of the ring's %d peers", ErrMismatch, r.rank, c.Index, c.Op, c.From, len(r.peers))
	}
	switch c.Op.Name {
	case viewOp:
		return r.deliverView(c)
	case viewFailedOp:
		return r.deliverViewFailed(c)
	}
	if c.Size == 0 {
		// A member's or a server's notice of a failure (notice.go).
		if err := r.box.closedErr(); err != nil {
			return err
		}
		return r.deliverNotice(c)
	}
	if c.Index < 0 || c.Offset < 0 || c.Length < 0 {
		err := fmt.Errorf("%w: rank %d: chunk %d of %v from %s: negative index, offset or length", ErrMismatch, r.rank, c.Index, c.Op, r.peer(c.From))
		r.box.fail(c.Op, c.From, err, false)
		return err
	}
	if i := tensor.FirstNonFinite32(c.Data); i >= 0 {
		err := fmt.Errorf("%w: rank %d: %v: %s sent %v at element %d", ErrNonFinite, r.rank, c.Op, r.peer(c.From), c.Data[i], c.Offset+i)
		r.box.fail(c.Op, c.From, err, true)
		return err
	}
	if err := r.box.deliver(c); err != nil {
		if errors.Is(err, ErrMismatch) {
			return fmt.Errorf("allreduce: rank %d: from %s: %w", r.rank, r.peer(c.From), err)
		}
		return err
	}
	return nil
}

// Fail implements Receiver: operation op's incoming stream from rank from
// broke.
func (r *Ring) Fail(op Op, from int, err error) {
	if r.sum != nil {
		r.sum.fail(op, err)
		return
	}
	if from < 0 || from >= len(r.peers) || from == r.rank {
		return
	}
	r.box.fail(op, from, err, true)
}

// Err implements Receiver: ErrClosed once Close was called.
func (r *Ring) Err() error { return r.box.closedErr() }

// Rank returns this ring member's rank.
func (r *Ring) Rank() int { return r.rank }

// Size returns the number of ranks (the summation servers apart).
func (r *Ring) Size() int { return r.size }

// peer names rank i in errors: its rank and, if known, its task and
// address.
func (r *Ring) peer(i int) string {
	name := fmt.Sprintf("rank %d", i)
	if i >= 0 && i < len(r.names) && r.names[i] != "" {
		name += " " + r.names[i]
	}
	if i >= 0 && i < len(r.peers) && r.peers[i] != "" {
		name += " (" + r.peers[i] + ")"
	}
	return name
}

// PeerDownError is the error of an operation during which ranks of the
// ring went down: after the failure, this rank probed every peer, and
// these did not answer. It names them whichever neighbour the failure
// arrived through (in a ring, a dead rank's neighbours see it die; the
// others see a neighbour give up). It wraps ErrPeerUnreachable and the
// failure as this rank saw it.
type PeerDownError struct {
	// Rank is the rank that reports; Op names the operation.
	Rank int
	Op   string
	// Down lists the ranks that did not answer, and Peers describes each
	// (rank, task name if configured, address).
	Down  []int
	Peers []string
	// Err is the failure of the operation on this rank.
	Err error
}

func (e *PeerDownError) Error() string {
	verb := "is"
	if len(e.Peers) > 1 {
		verb = "are"
	}
	return fmt.Sprintf("allreduce: rank %d: %s: %s %s down (%v)", e.Rank, e.Op, strings.Join(e.Peers, ", "), verb, e.Err)
}

// Unwrap returns ErrPeerUnreachable and the failure.
func (e *PeerDownError) Unwrap() []error { return []error{ErrPeerUnreachable, e.Err} }

// probeBudget is the share of an operation's time (a fifth) kept to probe
// the peers after a failure, so that the error names a dead rank within
// the caller's deadline; maxProbe bounds it.
const (
	probeBudget = 5
	maxProbe    = time.Second
	minProbe    = 100 * time.Millisecond
)

// opContext returns the context of an operation: ctx, with a deadline
// earlier by the probing budget if ctx has one.
func opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	budget := min(time.Until(deadline)/probeBudget, maxProbe)
	return context.WithDeadline(ctx, deadline.Add(-budget))
}

// explain turns the failure err of operation key into a PeerDownError if
// some peers do not answer a probe (ctx is the caller's context, whose
// deadline bounds the probes). Failures that no dead peer explains (this
// ring closed, peers that disagree, a cancelled caller) are returned as
// they are.
func (r *Ring) explain(ctx context.Context, op Op, err error) error {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrMismatch) || errors.Is(err, ErrBusy) || errors.Is(ctx.Err(), context.Canceled) {
		return err
	}
	// The probes have the time left to ctx's deadline (at least a little,
	// so that a deadline missed by the operation still names a dead peer),
	// at most maxProbe.
	wait := maxProbe
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(max(time.Until(deadline), minProbe), maxProbe)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	// A peer that refuses (or is closed, in process) is down, unless it
	// answers that it closed its ring (another survivor leaving); one that
	// does not answer in time (a hung process, or a port that accepts
	// connections nobody serves) is down only if no peer refused and the
	// probe had more than the least time.
	refused, silent := make([]bool, r.size), make([]bool, r.size)
	var wg sync.WaitGroup
	for i := range r.size {
		if i != r.rank {
			wg.Go(func() {
				if err := r.tr.Probe(pctx, i); err != nil && !errors.Is(err, ErrPeerLeft) {
					if pctx.Err() != nil {
						silent[i] = true
					} else {
						refused[i] = true
					}
				}
			})
		}
	}
	wg.Wait()
	down := refused
	if !slices.Contains(refused, true) {
		if wait <= minProbe {
			return err // too little time to tell a dead peer from a slow one
		}
		down = silent
	}
	pe := &PeerDownError{Rank: r.rank, Op: op.String(), Err: err}
	for i, d := range down {
		if d {
			pe.Down = append(pe.Down, i)
			pe.Peers = append(pe.Peers, r.peer(i))
		}
	}
	if len(pe.Down) == 0 {
		return err
	}
	return pe
}

// AllReduce replaces data, on every rank, by the element-wise sum of the
// data of all ranks. Every rank must call it with the same name, round and
// len(data); (name, round) identifies the operation, so that concurrent
// calls (different names) and successive calls (different rounds) never
// mix. data is read and written until AllReduce returns and must not be
// touched meanwhile. All ranks end with bit-identical results.
//
// It blocks until the operation is complete, ctx is done, or a peer fails:
// give ctx a deadline, since a dead peer is detected by a broken stream or
// by the deadline. After a failure the ring probes the peers, keeping a
// fifth of the time to ctx's deadline (at most a second) for it: if some
// are down the error is a *PeerDownError that names them, on every rank
// that survives; otherwise it names the neighbour involved. After an error
// data holds partial sums.
func (r *Ring) AllReduce(ctx context.Context, name string, round int64, data []float32) error {
	if err := r.box.closedErr(); err != nil {
		return err
	}
	if r.size == 1 {
		return ctx.Err()
	}
	return r.allReduce(ctx, Op{Name: name, Round: round}, data, r.full(), mode{})
}

// allReduce runs op among the members of tp (of more than one rank): the
// one path of Ring.AllReduce and Group.AllReduce (and of their variants:
// a compressed wire, an all-gather).
func (r *Ring) allReduce(ctx context.Context, op Op, data []float32, tp topology, m mode) error {
	if r.sum != nil {
		return fmt.Errorf("%w: rank %d is a summation server: it takes part in no operation of its own", ErrInvalidConfig, r.rank)
	}
	if i := tensor.FirstNonFinite32(data); i >= 0 {
		// The other members would wait for this rank's chunks until
		// their deadline: they are told, as of a value a peer sent.
		r.notify(ctx, op, tp.members, noticeNonFinite)
		return fmt.Errorf("%w: rank %d: %v: this rank's own tensor holds %v at element %d (has the model diverged? lower the learning rate)", ErrNonFinite, r.rank, op, data[i], i)
	}
	opCtx, cancel := opContext(ctx)
	defer cancel()
	var err error
	if m == (mode{}) && tp.servers && op.Round >= 0 {
		// An all-reduce of float32 values in a round of its own goes
		// through the servers when the view says so (compressed wires,
		// all-gathers and one-off operations go round the ring).
		err = r.throughServers(opCtx, op, data, tp)
	} else {
		err = r.ring(opCtx, op, data, tp, m)
	}
	if err != nil {
		if tp.gen >= 0 && noticeCause(err) == noticeFailed && !errors.Is(err, ErrViewFailed) && !errors.Is(err, ErrClosed) {
			// The members that finished the operation, or have not
			// started it, would wait for this one in the view's next.
			go r.tellViewFailed(tp, err)
		}
		err = r.explain(ctx, op, err)
		r.log.Warn("allreduce: operation failed", "rank", r.rank, "name", op.Name, "round", op.Round, "members", tp.members, "err", err)
		return err
	}
	return nil
}

// ring runs op round the ring.
func (r *Ring) ring(ctx context.Context, op Op, data []float32, tp topology, m mode) error {
	prev := tp.members[(tp.pos+tp.size()-1)%tp.size()]
	ib, err := r.box.open(op, []int{prev})
	if err != nil {
		return fmt.Errorf("allreduce: rank %d: %v: %w", r.rank, op, err)
	}
	defer r.box.finish(op)
	err = r.run(ctx, op, ib, data, tp, m)
	if cause := noticeCause(err); cause != noticeFailed && !errors.As(err, new(*noticeError)) {
		// This rank found the cause: the other members are told, before
		// the operation ends here (so that a notice cannot outlive it).
		r.notify(ctx, op, tp.members, cause)
	}
	return err
}

// AllReduceMean is AllReduce followed by a division by the number of ranks:
// data becomes the element-wise mean.
func (r *Ring) AllReduceMean(ctx context.Context, name string, round int64, data []float32) error {
	if err := r.AllReduce(ctx, name, round, data); err != nil {
		return err
	}
	inv := 1 / float32(r.size)
	for i := range data {
		data[i] *= inv
	}
	return nil
}

// Broadcast replaces data, on every rank, by root's data: an all-reduce to
// which the other ranks contribute zeros (x+0 is exact, so every rank ends
// with root's values bit for bit). Every rank must pass the same len(data).
func (r *Ring) Broadcast(ctx context.Context, name string, round int64, root int, data []float32) error {
	if root < 0 || root >= r.size {
		return fmt.Errorf("allreduce: broadcast %q: root %d outside the %d ranks", name, root, r.size)
	}
	if r.rank != root {
		clear(data)
	}
	return r.AllReduce(ctx, name, round, data)
}

// Close stops the ring: running operations fail with ErrClosed, chunks
// that arrive are refused, probes are answered with ErrPeerLeft (while
// the process serves), and the transport is closed. It is safe to call more
// than once.
func (r *Ring) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.box.close(ErrClosed)
	if r.sum != nil {
		r.sum.close()
	}
	return r.tr.Close()
}

// item is one chunk of a send or receive sequence: elements [lo, hi) of
// the tensor, and whether it is reduced (added) or gathered (copied).
type item struct {
	lo, hi int
	reduce bool
}

// schedule returns the chunks that rank sends, in order, for a tensor of n
// elements on a ring of size ranks. Segment j is [j*n/size, (j+1)*n/size).
// Reduce-scatter: at step s rank sends segment rank-s, and receives
// segment rank-s-1 which it adds to its own. All-gather: at step s it
// sends segment rank+1-s (the first being the one it finished reducing)
// and receives segment rank-s which it copies. The chunks that rank
// receives are those that rank-1 sends, in the same order. first is the
// number of chunks of the first step: send item k >= first forwards receive
// item k-first.
//
// An all-gather (gather) is the all-gather phase alone, each rank starting
// with its own segment: at step s rank sends segment rank-s.
func schedule(rank, size, n, chunk int, gather bool) (items []item, first int) {
	seg := func(j int) (int, int) {
		j = ((j % size) + size) % size
		return j * n / size, (j + 1) * n / size
	}
	add := func(j int, reduce bool) int {
		lo, hi := seg(j)
		c := 0
		for a := lo; a < hi; a += chunk {
			items = append(items, item{lo: a, hi: min(a+chunk, hi), reduce: reduce})
			c++
		}
		return c
	}
	for s := 0; s < size-1; s++ {
		c := add(rank-s, !gather)
		if s == 0 {
			first = c
		}
	}
	if !gather {
		for s := 0; s < size-1; s++ {
			add(rank+1-s, false)
		}
	}
	return items, first
}

// run is the pipelined ring: a sender goroutine streams chunks to the next
// rank while this goroutine takes the previous rank's chunks in order,
// reduces or copies them, and releases the sender to forward each one.
func (r *Ring) run(ctx context.Context, op Op, ib *inbox, data []float32, tp topology, m mode) error {
	next, prev := tp.members[(tp.pos+1)%tp.size()], tp.members[(tp.pos+tp.size()-1)%tp.size()]
	sends, first := schedule(tp.pos, tp.size(), len(data), r.chunk, m.gather)
	recvs, _ := schedule((tp.pos+tp.size()-1)%tp.size(), tp.size(), len(data), r.chunk, m.gather)

	// The cause of a cancellation travels with the aborted streams (in
	// memory): the next rank then fails for the same reason.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ready := make(chan struct{}, len(recvs))
	sendErr := make(chan error, 1)
	var notice atomic.Int32 // set before cancel: why the receiver failed
	go func() {
		err := r.send(ctx, op, next, tp.size(), sends, first, ready, data, m.wire, &notice)
		if err != nil {
			cancel(err)
		}
		sendErr <- err
	}()

	recvErr := r.receive(ctx, op, ib, prev, tp.size(), recvs, len(sends)-first, ready, data, m.wire)
	if recvErr != nil {
		notice.Store(int32(noticeCause(recvErr)))
		cancel(recvErr)
	}
	err := <-sendErr
	// The first cause wins over the cancellations it triggered.
	// A sender that stopped on the context while waiting for the receiver,
	// or that the receiver cancelled, did not cause the failure: the
	// receiver's error names the cause. A sender stuck on the next rank
	// (its deadline passed while connecting or sending) is the cause.
	var waiting *waitingError
	if err == nil || (recvErr != nil && (errors.As(err, &waiting) || errors.Is(err, context.Canceled))) {
		err = recvErr
	}
	if errors.As(err, &waiting) {
		err = waiting.err
	}
	return err
}

// send streams items to rank next, each k >= first once ready says that
// the receiver reduced it. When the receiver fails with a cause worth
// telling (notice), the next rank is told on the stream, in order, rather
// than by a broken stream: it then fails for the same reason, and tells
// its own next rank.
func (r *Ring) send(ctx context.Context, op Op, next, size int, items []item, first int, ready <-chan struct{}, data []float32, w Wire, notice *atomic.Int32) error {
	wrap := func(err error) error {
		if errors.Is(err, ErrClosed) {
			return fmt.Errorf("allreduce: rank %d: %v: %w", r.rank, op, err)
		}
		return fmt.Errorf("allreduce: rank %d: %v: sending to %s: %w", r.rank, op, r.peer(next), err)
	}
	st, err := r.tr.Open(ctx, next, op)
	if err != nil {
		return wrap(err)
	}
	enc := newCodec(w, r.chunk)
	for k, it := range items {
		if k >= first {
			select {
			case <-ready:
			case <-st.Broken():
				err := st.Close()
				if isContextErr(err) {
					// The operation's deadline ended the idle stream.
					return &waitingError{wrap(err)}
				}
				return wrap(err)
			case <-ctx.Done():
				if cause := int(notice.Load()); cause != noticeFailed && st.Send(&Chunk{Op: op, From: r.rank, Index: cause}) == nil {
					st.Close()
				} else {
					st.Abort()
				}
				return &waitingError{wrap(ctx.Err())}
			}
		}
		words, err := enc.encode(data[it.lo:it.hi], !it.reduce)
		if err != nil {
			st.Abort()
			return fmt.Errorf("%w: rank %d: %v: element %d: %w", ErrNonFinite, r.rank, op, it.lo+enc.overflow, err)
		}
		c := &Chunk{Op: op, From: r.rank, Size: size, Index: k, Length: len(data), Offset: it.lo, Data: words}
		if err := st.Send(c); err != nil {
			st.Abort()
			return wrap(err)
		}
	}
	if err := st.Close(); err != nil {
		return wrap(err)
	}
	return nil
}

func (r *Ring) receive(ctx context.Context, op Op, ib *inbox, prev, size int, items []item, forward int, ready chan<- struct{}, data []float32, w Wire) error {
	dec := newCodec(w, r.chunk)
	for k, it := range items {
		c, err := ib.take(ctx, prev, k)
		if err != nil {
			return fmt.Errorf("allreduce: rank %d: %v: waiting for chunk %d of %d from %s: %w",
				r.rank, op, k, len(items), r.peer(prev), err)
		}
		if c.From != prev || c.Size != size || c.Length != len(data) || c.Offset != it.lo || len(c.Data) != w.words(it.hi-it.lo) {
			return fmt.Errorf("%w: rank %d: %v: chunk %d from rank %d (ring of %d, %d words at %d of %d) does not fit this rank's ring of %d, %d words (%d elements as %v) at %d of %d",
				ErrMismatch, r.rank, op, k, c.From, c.Size, len(c.Data), c.Offset, c.Length,
				size, w.words(it.hi-it.lo), it.hi-it.lo, w, it.lo, len(data))
		}
		dst := data[it.lo:it.hi]
		vals := dec.decode(c.Data, len(dst))
		if w != Float32 { // Deliver checked float32 chunks
			if i := tensor.FirstNonFinite32(vals); i >= 0 {
				return fmt.Errorf("%w: rank %d: %v: %s sent %v at element %d", ErrNonFinite, r.rank, op, r.peer(prev), vals[i], it.lo+i)
			}
		}
		if it.reduce {
			for i, v := range vals {
				dst[i] += v
			}
		} else {
			copy(dst, vals)
		}
		if k < forward {
			ready <- struct{}{}
		}
	}
	return nil
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// waitingError marks a sender that stopped while it waited for the
// receiver to reduce a chunk, rather than on its own peer.
type waitingError struct{ err error }

func (e *waitingError) Error() string { return e.err.Error() }
func (e *waitingError) Unwrap() error { return e.err }
