package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distflow/distflow/allreduce"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc/rpcpb"
	"github.com/distflow/distflow/service"
)

// RegisterRing makes s serve rank cfg.Rank of an all-reduce ring, beside
// the task's other services on its one address, and returns the ring. Its
// chunks go to the next rank over gRPC (the Ring service of
// proto/distflowpb/allreduce_service.proto), dialled with s's Options: the
// same TLS, credentials, size limits and keepalive as every other
// connection of the task; the receiving side is authenticated like any
// call, and when Options.Identify names the caller, every chunk of its
// stream must name the caller's rank in cfg.Names (else the stream is
// refused, PermissionDenied): a member cannot send as another. cfg.Peers
// are the ranks' host:port addresses (their tasks').
//
// Register before Serve, at most one ring per server. Close the ring before
// stopping s: a closed ring answers its peers' probes that it has left
// (allreduce.ErrPeerLeft) for as long as s serves, and s's graceful stop
// lets the peers' last streams finish.
func RegisterRing(s *Server, cfg allreduce.Config) (*allreduce.Ring, error) {
	tr := newRingTransport(cfg.Peers, s.opts)
	tr.names, tr.servers = cfg.Names, cfg.Servers
	r, err := allreduce.NewRing(cfg, tr)
	if err != nil {
		return nil, err
	}
	if err := registerRingReceiver(s, r, cfg.Names); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// registerRingReceiver serves the Ring service of s, filing the chunks
// that arrive with recv. names are the tasks of the ranks (Config.Names),
// against which the rank a chunk claims to come from is checked.
func registerRingReceiver(s *Server, recv allreduce.Receiver, names []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.serving:
		return errors.New("rpc: RegisterRing after Serve")
	case s.ring:
		return errors.New("rpc: the server already has a ring")
	}
	s.ring = true
	rpcpb.RegisterRingServer(s.grpc, &ringServer{recv: recv, opts: s.opts, names: slices.Clone(names)})
	return nil
}

// ringServer receives the chunks that the previous rank streams.
type ringServer struct {
	rpcpb.UnimplementedRingServer
	recv  allreduce.Receiver
	opts  Options  // for MaxTensorBytes
	names []string // the ranks' tasks, or nil
}

// callerRank returns the rank of the task that the stream comes from, as
// the transport authenticated it (service.Caller), or -1 when the ring's
// tasks or the caller are not known (no Options.Identify).
func (s *ringServer) callerRank(ctx context.Context) (int, string, error) {
	caller, ok := service.Caller(ctx)
	if !ok || len(s.names) == 0 {
		return -1, "", nil
	}
	rank := slices.Index(s.names, caller)
	if rank < 0 {
		return -1, caller, s.refuse(ctx, fmt.Errorf("%s is not a rank of this ring (%s)", caller, strings.Join(s.names, ", ")))
	}
	return rank, caller, nil
}

// refuse logs the refusal of a stream from a member and returns its
// status.
func (s *ringServer) refuse(ctx context.Context, err error) error {
	logRefusal(s.opts.logger(), time.Now(), "rpc: refused ring chunk", PeerAddr(ctx), err)
	return status.Errorf(codes.PermissionDenied, "rpc: ring: %v", err)
}

func (s *ringServer) Chunks(st grpc.ClientStreamingServer[pb.RingChunk, pb.RingAck]) error {
	// A closed ring answers neither chunks nor probes: the message tells
	// a probe that the process is alive (ringTransport.Probe).
	if err := s.recv.Err(); err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	rank, caller, err := s.callerRank(st.Context())
	if err != nil {
		return err
	}
	var op allreduce.Op
	from := -1
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return st.SendAndClose(&pb.RingAck{})
		}
		if err != nil {
			if from >= 0 {
				s.recv.Fail(op, from, fmt.Errorf("stream from rank %d broke: %w", from, err))
			}
			return err
		}
		if rank >= 0 && int(m.From) != rank {
			// A member may not send as another: its chunks, failure
			// notices and views are its own.
			return s.refuse(st.Context(), fmt.Errorf("chunk %d of %q round %d claims to come from rank %d, but %s is rank %d",
				m.Index, m.Name, m.Round, m.From, caller, rank))
		}
		op, from = allreduce.Op{Name: m.Name, Round: m.Round}, int(m.From)
		size := uint64(max(m.Length, 0)) // a negative length is refused by Deliver
		if size > math.MaxUint64/4 {
			size = math.MaxUint64 / 4
		}
		if err := s.opts.tensorTooLarge(4 * size); err != nil {
			err = fmt.Errorf("rpc: ring: all-reduced tensor %v from rank %d: %w", op, m.From, err)
			s.recv.Fail(op, from, err)
			return status.Error(codes.ResourceExhausted, err.Error())
		}
		if len(m.Data)%4 != 0 {
			err := fmt.Errorf("%w: chunk %d of %v from rank %d has %d bytes, not whole float32s",
				allreduce.ErrMismatch, m.Index, op, m.From, len(m.Data))
			s.recv.Fail(op, from, err)
			return status.Error(codes.InvalidArgument, err.Error())
		}
		c := &allreduce.Chunk{
			Op: op, From: from, Size: int(m.Size), Index: int(m.Index),
			Length: int(m.Length), Offset: int(m.Offset), Data: bytesFloats(m.Data),
		}
		if err := s.recv.Deliver(c); err != nil {
			code := codes.InvalidArgument
			if errors.Is(err, allreduce.ErrClosed) {
				code = codes.Unavailable
			}
			return status.Error(code, err.Error())
		}
	}
}

// ringTransport is the gRPC allreduce.Transport: one connection per peer,
// dialled on first use with the server's Options.
type ringTransport struct {
	peers []string
	opts  Options
	// names are the ranks' tasks (allreduce.Config.Names; may be nil), and
	// the last servers of the peers are summation servers.
	names   []string
	servers int

	mu    sync.Mutex
	conns map[int]*grpc.ClientConn
	// answered holds the ranks that have answered a stream or a probe:
	// their process was up, so a refused connection means it has exited.
	answered map[int]bool
	// unserved holds the ranks found not to serve the Ring service (an
	// error logged once for each).
	unserved map[int]bool
	closed   bool
}

func newRingTransport(peers []string, opts Options) *ringTransport {
	return &ringTransport{peers: peers, opts: opts, conns: make(map[int]*grpc.ClientConn), answered: make(map[int]bool), unserved: make(map[int]bool)}
}

// peerName names rank to as the logs do: its task and address.
func (g *ringTransport) peerName(to int) string {
	if to >= 0 && to < len(g.names) && g.names[to] != "" {
		return fmt.Sprintf("%s (%s)", g.names[to], g.peers[to])
	}
	return g.peers[to]
}

// noRing turns a peer's answer that it serves no Ring service (a task
// started without one: `distflow server` before it served the summation
// service, or a task of another strategy) into an error that names the
// task and says what to do, and logs it once per peer as an error: the
// ring goes on without that peer (round the ring, without a summation
// server), which a warning among the ring's own would hide. Other errors
// are returned as they are.
func (g *ringTransport) noRing(to int, err error) error {
	if status.Code(err) != codes.Unimplemented || to < 0 || to >= len(g.peers) {
		return err
	}
	what, fix := "rank", "start every training task with the same strategy flags (--allreduce or --strategy)"
	if to >= len(g.peers)-g.servers {
		what, fix = "summation server", "start the ps tasks with `distflow server` of this version or `distflow train` with the workers' flags; until they serve it, the ranks go round the ring without them"
	}
	err = fmt.Errorf("rpc: ring: %s %s does not serve the all-reduce service (distflow.Ring): %s: %w", what, g.peerName(to), fix, err)
	g.mu.Lock()
	first := !g.unserved[to]
	g.unserved[to] = true
	g.mu.Unlock()
	if first {
		g.opts.logger().Error("rpc: ring: a task does not serve the all-reduce service", "peer", g.peerName(to), "role", what, "fix", fix)
	}
	return err
}

func (g *ringTransport) conn(to int) (*grpc.ClientConn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, allreduce.ErrClosed
	}
	if c := g.conns[to]; c != nil {
		return c, nil
	}
	if to < 0 || to >= len(g.peers) {
		return nil, fmt.Errorf("rpc: ring: no rank %d among %d peers", to, len(g.peers))
	}
	c, _, err := dial(g.peers[to], g.opts)
	if err != nil {
		return nil, err
	}
	g.conns[to] = c
	return c, nil
}

func (g *ringTransport) Open(ctx context.Context, to int, op allreduce.Op) (allreduce.Stream, error) {
	c, err := g.conn(to)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	st, err := g.chunks(ctx, c, to)
	if err != nil {
		ctxErr := ctx.Err()
		cancel()
		if ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
	gs := &ringStream{ctx: ctx, st: st, cancel: cancel, done: make(chan struct{}), g: g, to: to}
	// The ack (or the failure) is awaited from the start, so that a peer
	// that dies while this side has nothing to send is noticed at once.
	go func() {
		gs.err = st.RecvMsg(new(pb.RingAck))
		close(gs.done)
	}()
	return gs, nil
}

// chunks opens a stream of chunks to rank to on c. A peer that has never
// answered may be starting: it is waited for until ctx ends, as
// WaitForReady would. One that answered before and now refuses connections
// has exited (its port is closed), and is not waited for: the error, at
// once, wraps allreduce.ErrPeerUnreachable. A refusal counts when a
// connection made then is refused too, not only the connection's last
// attempt, which may predate a restart (a new process on the address is
// connected to at once). A peer that accepts
// connections but does not answer (a stopped process, or one restarting
// on a socket that its supervisor holds) is waited for, as one that is
// starting.
func (g *ringTransport) chunks(ctx context.Context, c *grpc.ClientConn, to int) (grpc.ClientStreamingClient[pb.RingChunk, pb.RingAck], error) {
	client := rpcpb.NewRingClient(c)
	for {
		// Without WaitForReady, a call fails as soon as the connection
		// does, with the reason, which WaitForReady would hide.
		st, err := client.Chunks(ctx)
		if err == nil {
			g.answeredBy(to)
			return st, nil
		}
		if ctx.Err() != nil || status.Code(err) != codes.Unavailable {
			return nil, err
		}
		if refused(err) && g.hasAnswered(to) {
			if Exited(ctx, g.peers[to], err) {
				return nil, fmt.Errorf("%w: %s refuses connections (its process has exited): %w", allreduce.ErrPeerUnreachable, g.peers[to], err)
			}
			// The refusal is that of the connection's last attempt, made
			// before the peer restarted on its address: the connection
			// waits out its backoff, and a call fails meanwhile with that
			// refusal. It connects again now.
			c.ResetConnectBackoff()
		}
		// Not reachable yet: try again when the connection changes (its
		// next attempt, after the backoff).
		c.WaitForStateChange(ctx, c.GetState())
	}
}

// Exited reports whether err, a call's failure to reach the task at addr,
// means that the task's process has exited: the call's connection was
// refused, and a TCP connection made now (waiting at most a second) is
// refused too. A refusal alone is not enough: a gRPC connection reports
// that of its last attempt, which may predate a new process serving on the
// address. A stopped or busy process, or a listening socket that a
// supervisor holds, accepts connections: none of these counts as exited.
// Callers apply it to peers that have answered before: one that has not
// may be starting.
func Exited(ctx context.Context, addr string, err error) bool {
	return refused(err) && !listens(ctx, addr)
}

// listens reports whether a connection to addr is accepted now, or at
// least not refused (a refusal that a gRPC connection reports may be that
// of an attempt made before its backoff).
func listens(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return !errors.Is(err, syscall.ECONNREFUSED)
	}
	conn.Close()
	return true
}

// refused reports whether err is a call's failure to connect because the
// peer's port refused the connection.
func refused(err error) bool {
	if re := (*RemoteError)(nil); errors.As(err, &re) {
		return re.Code == codes.Unavailable && strings.Contains(re.Msg, "connection refused")
	}
	return status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), "connection refused")
}

// hasAnswered reports whether rank to has answered this transport before.
func (g *ringTransport) hasAnswered(to int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.answered[to]
}

// answeredBy records that rank to answered.
func (g *ringTransport) answeredBy(to int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.answered[to] = true
}

// Probe opens an empty stream to rank to and waits for its
// acknowledgement. It does not wait for a peer that cannot be reached
// (no WaitForReady): a refused connection fails at once.
func (g *ringTransport) Probe(ctx context.Context, to int) error {
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
	err = g.noRing(to, st.RecvMsg(new(pb.RingAck)))
	if status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), allreduce.ErrClosed.Error()) {
		g.answeredBy(to)
		return allreduce.ErrPeerLeft
	}
	if err == nil {
		g.answeredBy(to)
	}
	return err
}

func (g *ringTransport) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	var errs []error
	for _, c := range g.conns {
		errs = append(errs, c.Close())
	}
	g.conns = nil
	return errors.Join(errs...)
}

type ringStream struct {
	ctx    context.Context
	done   chan struct{} // closed when the ack or a failure arrived
	err    error         // of the ack, set before done is closed
	st     grpc.ClientStreamingClient[pb.RingChunk, pb.RingAck]
	cancel context.CancelFunc
	g      *ringTransport
	to     int // the peer's rank
}

func (s *ringStream) Send(c *allreduce.Chunk) error {
	msg := &pb.RingChunk{
		Name: c.Op.Name, Round: c.Op.Round, From: int32(c.From), Size: int32(c.Size),
		Index: int32(c.Index), Length: int64(c.Length), Offset: int64(c.Offset),
		Data: floatBytes(c.Data),
	}
	// SendMsg has marshalled the message when it returns, so c.Data may
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
func (s *ringStream) why(err error) error {
	if ctxErr := s.ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	// The server's copy of the deadline may expire first.
	switch status.Code(err) {
	case codes.Unimplemented:
		return s.g.noRing(s.to, err)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	case codes.Canceled:
		return fmt.Errorf("%w: %w", context.Canceled, err)
	}
	return err
}

func (s *ringStream) Broken() <-chan struct{} { return s.done }

func (s *ringStream) Close() error {
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

func (s *ringStream) Abort() { s.cancel() }

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
