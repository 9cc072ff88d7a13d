package allreduce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc/rpcpb"
)

var errSenderFailed = errors.New("the sender failed")

// Window sizes of the gRPC connections: a chunk in flight per direction
// never waits for flow control.
const (
	grpcWindow = 16 << 20
	grpcBuffer = 256 << 10
)

// New returns rank cfg.Rank of a ring over gRPC. It listens (on
// cfg.Listener, or on Peers[Rank]) but serves only once Start is called;
// connections to the next rank are made lazily. Close releases both.
func New(cfg Config) (*Ring, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	lis := cfg.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", cfg.Peers[cfg.Rank]); err != nil {
			return nil, fmt.Errorf("allreduce: rank %d: listening on %s: %w", cfg.Rank, cfg.Peers[cfg.Rank], err)
		}
	}
	r := &Ring{
		rank: cfg.Rank, size: len(cfg.Peers), peers: append([]string(nil), cfg.Peers...), names: append([]string(nil), cfg.Names...),
		chunk: chunkElems(cfg.ChunkBytes), log: log, box: newMailbox(),
	}
	g := &grpcTransport{ring: r, lis: lis, conns: make(map[int]*grpc.ClientConn)}
	g.srv = grpc.NewServer(
		grpc.MaxRecvMsgSize(math.MaxInt32),
		grpc.InitialWindowSize(grpcWindow), grpc.InitialConnWindowSize(grpcWindow),
		grpc.ReadBufferSize(grpcBuffer), grpc.WriteBufferSize(grpcBuffer),
	)
	rpcpb.RegisterRingServer(g.srv, &ringService{ring: r})
	r.tr = g
	r.onClose = g.close
	return r, nil
}

// Start serves the Ring service in the background. Operations may be
// started once every rank has called Start; a peer that is not serving yet
// is waited for until the operation's deadline.
func (r *Ring) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if r.started {
		return nil
	}
	r.started = true
	if g, ok := r.tr.(*grpcTransport); ok {
		go func() {
			if err := g.srv.Serve(g.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				r.log.Error("allreduce: ring service stopped", "rank", r.rank, "addr", g.lis.Addr().String(), "err", err)
			}
		}()
	}
	return nil
}

// Addr returns the address the ring serves on (nil for an in-process ring).
func (r *Ring) Addr() net.Addr {
	if g, ok := r.tr.(*grpcTransport); ok {
		return g.lis.Addr()
	}
	return nil
}

type grpcTransport struct {
	ring *Ring
	lis  net.Listener
	srv  *grpc.Server

	mu    sync.Mutex
	conns map[int]*grpc.ClientConn
}

func (g *grpcTransport) conn(to int) (*grpc.ClientConn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.conns[to]; c != nil {
		return c, nil
	}
	bc := backoff.DefaultConfig
	bc.MaxDelay = time.Second
	c, err := grpc.NewClient(g.ring.peers[to],
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: time.Second}),
		grpc.WithInitialWindowSize(grpcWindow), grpc.WithInitialConnWindowSize(grpcWindow),
		grpc.WithReadBufferSize(grpcBuffer), grpc.WithWriteBufferSize(grpcBuffer),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(math.MaxInt32)),
	)
	if err != nil {
		return nil, err
	}
	g.conns[to] = c
	return c, nil
}

func (g *grpcTransport) open(ctx context.Context, to int, key opKey) (stream, error) {
	c, err := g.conn(to)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	// WaitForReady: a peer that is still starting is waited for, until
	// the operation's deadline.
	st, err := rpcpb.NewRingClient(c).Chunks(ctx, grpc.WaitForReady(true))
	if err != nil {
		cancel()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
	gs := &grpcStream{ctx: ctx, st: st, cancel: cancel, done: make(chan struct{})}
	// The ack (or the failure) is awaited from the start, so that a peer
	// that dies while this side has nothing to send is noticed at once.
	go func() {
		gs.err = st.RecvMsg(new(pb.RingAck))
		close(gs.done)
	}()
	return gs, nil
}

// probe opens an empty stream to rank to and waits for its
// acknowledgement. It does not wait for a peer that cannot be reached
// (no WaitForReady): a refused connection fails at once.
func (g *grpcTransport) probe(ctx context.Context, to int) error {
	c, err := g.conn(to)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := rpcpb.NewRingClient(c).Chunks(ctx)
	if err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	err = st.RecvMsg(new(pb.RingAck))
	if status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), ErrClosed.Error()) {
		return errPeerLeft
	}
	return err
}

// closeGrace bounds how long Close waits for peers' streams to finish.
const closeGrace = 5 * time.Second

func (g *grpcTransport) close() error {
	// A peer may still be waiting for the acknowledgement of the last chunks
	// it sent us (we had all we needed and returned first): let its stream
	// finish, up to a bound, before breaking what is left.
	stopped := make(chan struct{})
	go func() {
		g.srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(closeGrace):
		g.srv.Stop()
		<-stopped
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for _, c := range g.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

type grpcStream struct {
	ctx    context.Context
	done   chan struct{} // closed when the ack or a failure arrived
	err    error         // of the ack, set before done is closed
	st     grpc.ClientStreamingClient[pb.RingChunk, pb.RingAck]
	cancel context.CancelFunc
}

func (s *grpcStream) send(c *chunk) error {
	msg := &pb.RingChunk{
		Name: c.key.name, Round: c.key.round, From: int32(c.from), Size: int32(c.size),
		Index: int32(c.index), Length: int64(c.length), Offset: int64(c.offset),
		Data: floatBytes(c.data),
	}
	// SendMsg has marshalled the message when it returns, so c.data may
	// then be rewritten.
	if err := s.st.Send(msg); err != nil {
		if errors.Is(err, io.EOF) {
			// The server ended the stream: its status says why.
			<-s.done
			err = s.err
		}
		return s.why(err)
	}
	return nil
}

// why prefers the operation's cancellation to the status it caused.
func (s *grpcStream) why(err error) error {
	if ctxErr := s.ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	// The server's copy of the deadline may expire first.
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	case codes.Canceled:
		return fmt.Errorf("%w: %w", context.Canceled, err)
	}
	return err
}

func (s *grpcStream) broken() <-chan struct{} { return s.done }

func (s *grpcStream) close() error {
	defer s.cancel()
	if err := s.st.CloseSend(); err != nil {
		return s.why(err)
	}
	<-s.done
	if s.err == nil {
		return nil
	}
	if errors.Is(s.err, io.EOF) {
		return errors.New("the peer ended the stream without an acknowledgement")
	}
	return s.why(s.err)
}

func (s *grpcStream) abort() { s.cancel() }

// floatBytes views f as its little-endian bytes (the engine targets
// little-endian hosts, as tensor.RawBytes does).
func floatBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// bytesFloats views b as float32s when it is aligned, and copies it
// otherwise.
func bytesFloats(b []byte) []float32 {
	n := len(b) / 4
	if n == 0 {
		return nil
	}
	if uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	}
	f := make([]float32, n)
	copy(floatBytes(f), b)
	return f
}

// ringService receives the chunks that the previous rank streams.
type ringService struct {
	rpcpb.UnimplementedRingServer
	ring *Ring
}

func (s *ringService) Chunks(st grpc.ClientStreamingServer[pb.RingChunk, pb.RingAck]) error {
	// A closed ring may still serve while it stops gracefully: it answers
	// neither chunks nor probes.
	if err := s.ring.box.closedErr(); err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	var key opKey
	from := -1
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return st.SendAndClose(&pb.RingAck{})
		}
		if err != nil {
			if from >= 0 {
				s.ring.box.fail(key, fmt.Errorf("stream from %s broke: %w", s.ring.peer(from), err))
			}
			return err
		}
		if len(m.Data)%4 != 0 {
			err := fmt.Errorf("%w: chunk %d of %q round %d from rank %d has %d bytes, not whole float32s",
				ErrMismatch, m.Index, m.Name, m.Round, m.From, len(m.Data))
			s.ring.box.fail(opKey{name: m.Name, round: m.Round}, err)
			return err
		}
		key, from = opKey{name: m.Name, round: m.Round}, int(m.From)
		c := &chunk{
			key: key, from: from, size: int(m.Size), index: int(m.Index),
			length: int(m.Length), offset: int(m.Offset), data: bytesFloats(m.Data),
		}
		if err := s.ring.box.deliver(c); err != nil {
			return err
		}
	}
}
