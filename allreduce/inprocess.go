package allreduce

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

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

// NewInProcess returns n started rings connected by memory, one per rank:
// for tests and for workers that share a process. Closing one of them
// makes its neighbours' operations fail, as a dead peer does.
func NewInProcess(n int, cfg InProcessConfig) ([]*Ring, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: %d ranks", ErrInvalidConfig, n)
	}
	if cfg.ChunkBytes < 0 {
		return nil, fmt.Errorf("%w: negative chunk size %d", ErrInvalidConfig, cfg.ChunkBytes)
	}
	if len(cfg.Names) != 0 && len(cfg.Names) != n {
		return nil, fmt.Errorf("%w: %d names for %d ranks", ErrInvalidConfig, len(cfg.Names), n)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	net := &memNetwork{delay: cfg.Delay}
	rings := make([]*Ring, n)
	for i := range rings {
		rings[i] = &Ring{
			rank: i, size: n, peers: make([]string, n), names: cfg.Names,
			chunk: chunkElems(cfg.ChunkBytes), log: log,
			box: newMailbox(), tr: net, started: true,
		}
	}
	net.rings = rings
	return rings, nil
}

// memNetwork is the in-process transport shared by the rings of
// NewInProcess.
type memNetwork struct {
	rings []*Ring
	delay time.Duration
}

func (n *memNetwork) open(ctx context.Context, to int, key opKey) (stream, error) {
	if n.rings[to].box.closedErr() != nil {
		return nil, ErrPeerUnreachable
	}
	return &memStream{ctx: ctx, to: n.rings[to], key: key, delay: n.delay}, nil
}

func (n *memNetwork) probe(_ context.Context, to int) error {
	if n.rings[to].box.closedErr() != nil {
		return ErrPeerUnreachable
	}
	return nil
}

type memStream struct {
	ctx   context.Context
	to    *Ring
	key   opKey
	delay time.Duration
	once  sync.Once
}

func (s *memStream) send(c *chunk) error {
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return s.ctx.Err()
		}
	}
	cp := *c
	cp.data = append([]float32(nil), c.data...)
	if s.to.box.deliver(&cp) != nil {
		return ErrPeerUnreachable
	}
	return nil
}

func (s *memStream) broken() <-chan struct{} { return s.to.box.closed }

func (s *memStream) close() error {
	if s.to.box.closedErr() != nil {
		return ErrPeerUnreachable
	}
	return nil
}

// abort tells the receiver that the stream broke, as a gRPC stream's
// cancellation does.
func (s *memStream) abort() {
	s.once.Do(func() {
		cause := context.Cause(s.ctx)
		if cause == nil {
			cause = errSenderFailed
		}
		s.to.box.fail(s.key, fmt.Errorf("stream from the previous rank broke: %w", cause))
	})
}
