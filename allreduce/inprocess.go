package allreduce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// errSenderFailed is the cause an aborted in-memory stream reports when
// its context has none.
var errSenderFailed = errors.New("the sender failed")

// InProcessConfig configures a ring whose ranks live in one process.
type InProcessConfig struct {
	// ChunkBytes is as in Config.
	ChunkBytes int
	// Logger is as in Config.
	Logger *slog.Logger
	// Delay, when positive, holds every chunk that long before delivering
	// it (waiting on the sender's side): a slow network for tests.
	Delay time.Duration
	// Names is as in Config.
	Names []string
}

// NewInProcess returns n rings connected by a MemNetwork, one per rank:
// for tests and for workers that share a process. Closing one of them
// makes its neighbours' operations fail, as a dead peer does.
func NewInProcess(n int, cfg InProcessConfig) ([]*Ring, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: %d ranks", ErrInvalidConfig, n)
	}
	if len(cfg.Names) != 0 && len(cfg.Names) != n {
		return nil, fmt.Errorf("%w: %d names for %d ranks", ErrInvalidConfig, len(cfg.Names), n)
	}
	net := NewMemNetwork(make([]Receiver, n), cfg.Delay)
	peers := make([]string, n)
	for i := range peers {
		peers[i] = fmt.Sprintf("memory:%d", i)
	}
	rings := make([]*Ring, n)
	for i := range rings {
		r, err := NewRing(Config{Rank: i, Peers: peers, Names: cfg.Names, ChunkBytes: cfg.ChunkBytes, Logger: cfg.Logger}, net.Transport(i))
		if err != nil {
			return nil, err
		}
		rings[i] = r
		net.recv[i] = r
	}
	return rings, nil
}

// MemNetwork connects the ranks of rings in one process through memory: a
// Transport per rank, which delivers the chunks it sends to the receiving
// rank's Receiver. It can delay every chunk (a slow network) and cut a
// rank (a dead process). It is safe for concurrent use.
type MemNetwork struct {
	recv  []Receiver
	delay time.Duration

	mu      sync.Mutex
	down    []chan struct{}           // closed when the rank is cut
	streams []map[*memStream]struct{} // open streams, by sending rank
}

// NewMemNetwork connects len(recv) ranks: what is sent to rank i goes to
// recv[i]. A positive delay holds every chunk that long before it is
// delivered (on the sender's side).
func NewMemNetwork(recv []Receiver, delay time.Duration) *MemNetwork {
	n := &MemNetwork{recv: recv, delay: delay, down: make([]chan struct{}, len(recv)), streams: make([]map[*memStream]struct{}, len(recv))}
	for i := range recv {
		n.down[i] = make(chan struct{})
		n.streams[i] = make(map[*memStream]struct{})
	}
	return n
}

// Transport returns rank's transport. Closing it cuts the rank.
func (n *MemNetwork) Transport(rank int) Transport { return &memTransport{net: n, rank: rank} }

// Cut makes rank unreachable, as a process that dies: its peers' streams
// to it and its own streams to them break (the receiving ends are told),
// and opening a stream to it, probing it or sending to it fail with
// ErrPeerUnreachable. Cutting a rank twice is harmless.
func (n *MemNetwork) Cut(rank int) {
	n.mu.Lock()
	select {
	case <-n.down[rank]:
		n.mu.Unlock()
		return
	default:
	}
	close(n.down[rank])
	var open []*memStream
	for s := range n.streams[rank] {
		open = append(open, s)
	}
	n.mu.Unlock()
	for _, s := range open {
		s.fail(fmt.Errorf("stream from rank %d broke: %w", rank, ErrPeerUnreachable))
	}
}

// isDown reports whether rank is cut, or its ring is closed.
func (n *MemNetwork) isDown(rank int) bool {
	select {
	case <-n.down[rank]:
		return true
	default:
		return n.recv[rank] == nil || n.recv[rank].Err() != nil
	}
}

type memTransport struct {
	net  *MemNetwork
	rank int
}

func (t *memTransport) Open(ctx context.Context, to int, op Op) (Stream, error) {
	n := t.net
	if n.isDown(to) || n.isDown(t.rank) {
		return nil, ErrPeerUnreachable
	}
	s := &memStream{net: n, ctx: ctx, from: t.rank, to: to, op: op}
	n.mu.Lock()
	n.streams[t.rank][s] = struct{}{}
	n.mu.Unlock()
	return s, nil
}

func (t *memTransport) Probe(_ context.Context, to int) error {
	if t.net.isDown(to) {
		return ErrPeerUnreachable
	}
	return nil
}

// Close cuts the rank: in one process, a closed ring is a dead peer.
func (t *memTransport) Close() error {
	t.net.Cut(t.rank)
	return nil
}

type memStream struct {
	net      *MemNetwork
	ctx      context.Context
	from, to int
	op       Op
	once     sync.Once
}

// fail tells the receiver that the stream broke, once, and forgets it.
func (s *memStream) fail(err error) {
	s.once.Do(func() {
		s.net.recv[s.to].Fail(s.op, s.from, err)
		s.forget()
	})
}

func (s *memStream) forget() {
	s.net.mu.Lock()
	delete(s.net.streams[s.from], s)
	s.net.mu.Unlock()
}

func (s *memStream) Send(c *Chunk) error {
	if d := s.net.delay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return s.ctx.Err()
		}
	}
	if s.net.isDown(s.to) || s.net.isDown(s.from) {
		return ErrPeerUnreachable
	}
	cp := *c
	cp.Data = append([]float32(nil), c.Data...)
	if err := s.net.recv[s.to].Deliver(&cp); err != nil {
		if errors.Is(err, ErrClosed) {
			return ErrPeerUnreachable
		}
		return err
	}
	return nil
}

func (s *memStream) Broken() <-chan struct{} { return s.net.down[s.to] }

func (s *memStream) Close() error {
	s.once.Do(s.forget)
	if s.net.isDown(s.to) {
		return ErrPeerUnreachable
	}
	return nil
}

// Abort tells the receiver that the stream broke, as a gRPC stream's
// cancellation does.
func (s *memStream) Abort() {
	cause := context.Cause(s.ctx)
	if cause == nil {
		cause = errSenderFailed
	}
	s.fail(fmt.Errorf("stream from the previous rank broke: %w", cause))
}
