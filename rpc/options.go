package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/distflow/distflow/metrics"
	"github.com/distflow/distflow/worker"
)

// Options configure both ends of every connection of a task: its gRPC
// services (worker, master, the all-reduce ring), the tensor channel, and
// the connections it dials to other tasks. They are the one place where
// transport security, size limits and keepalive live: the security work
// that follows plugs in here (certificates in TLS, a token check in
// Authenticate, a token source in PerRPCCredentials) without touching any
// service. A task uses one Options for its server and its clients
// (server.Config.RPC), so its TLS config holds both its certificate and the
// roots that verify its peers.
//
// The zero value means plaintext, unauthenticated connections, messages
// of up to DefaultMaxRecvMessageBytes received by servers and 2 GiB
// otherwise, tensors of up to 64 TiB, and keepalive pings every 30 s. Validate reports bad values;
// NewServer's Serve and the Dial functions return its error.
type Options struct {
	// TLS, when set, secures connections: on a server it holds the
	// server's certificate (and ClientAuth for mutual TLS); on a client it
	// holds the roots that verify the server.
	TLS *tls.Config
	// Authenticate, when set, is called by the server's interceptors before
	// every RPC with the call's context (metadata, peer and TLS state are
	// in it: see google.golang.org/grpc/metadata and peer). A non-nil error
	// refuses the call with codes.Unauthenticated and that message, or
	// codes.PermissionDenied when it wraps service.ErrPermissionDenied (a
	// caller proven to be another than the one it claims to be).
	Authenticate func(ctx context.Context) error
	// Identify, when set, names the peer of every call that Authenticate
	// admitted: the task ("/job:worker/task:1") or client its verified
	// certificate (PeerCertificate) or credentials name, for the method
	// called (a full gRPC method name, "/distflow.WorkerService/RunGraph",
	// also for the tensor channel's RecvTensor). The name reaches the
	// service as service.Caller; an error refuses the call as
	// Authenticate's does. Refusals of both are logged, as warnings with
	// the peer's address and the reason, by the server.
	Identify func(ctx context.Context, method string) (caller string, err error)
	// PerRPCCredentials, when set, attach credentials (such as a bearer
	// token) to every call a client makes.
	PerRPCCredentials credentials.PerRPCCredentials
	// MaxMessageBytes bounds one gRPC message, sent or received (RunGraph
	// and RunStep carry their feeds and fetches in one message,
	// RegisterGraph and CreateSession a graph; tensors move in chunks of
	// 4 MiB, all-reduce in chunks of allreduce.Config.ChunkBytes). A
	// server refuses a larger request from its length, before it reads or
	// decodes it (codes.ResourceExhausted). 0 means
	// DefaultMaxRecvMessageBytes for what a server receives and gRPC's
	// largest, 2 GiB, for the rest; else at least MinMessageBytes.
	MaxMessageBytes int
	// MaxTensorBytes bounds the size of a tensor received with RecvTensor
	// (over the tensor channel or gRPC) and of a tensor all-reduced by a
	// peer's ring, checked before anything is allocated: a larger one fails
	// the call with ErrTooLarge. 0 means 64 TiB.
	MaxTensorBytes int64
	// Keepalive is how often idle connections are pinged (gRPC pings, and
	// TCP keepalive on the tensor channel's and the server's accepted
	// connections); 0 means 30 s, a negative value turns pings off.
	Keepalive time.Duration
	// KeepaliveTimeout is how long a gRPC ping waits for its answer before
	// the connection is taken for dead; 0 means 20 s.
	KeepaliveTimeout time.Duration
	// Logger receives the waits for peers (nil: slog.Default()).
	Logger *slog.Logger
	// NoTensorChannel turns the tensor channel off: a server serves gRPC
	// only, as servers before it did, and a client receives every tensor
	// over gRPC. By default a client receives tensors over the channel
	// when its peer offers it, and over gRPC otherwise (see the package
	// documentation).
	NoTensorChannel bool
	// Metrics, when set, records every call made with these options and
	// the tensor channel's bytes (see metrics.go); nil records nothing.
	Metrics *metrics.Task

	// metricsPeer names the peer of a dial in Metrics (a WorkerCache's
	// task); "" names it by its address.
	metricsPeer string
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

// ErrTooLarge is wrapped by the errors of receiving a tensor larger than
// Options.MaxTensorBytes.
var ErrTooLarge = errors.New("rpc: tensor larger than Options.MaxTensorBytes")

// MinMessageBytes is the least Options.MaxMessageBytes: a RecvTensor chunk
// and its header, with room to spare.
const MinMessageBytes = 2 * chunkSize

// DefaultMaxRecvMessageBytes is the largest message a server receives when
// Options.MaxMessageBytes is 0: the largest legitimate request is a graph
// of a session (worker.DefaultMaxGraphBytes, counted in memory, which is
// never less than its serialised size), and recvHeadroom more leaves room
// for the request's other fields and for the feeds of a step, which the
// tensor budget cannot size (it bounds each tensor, 64 TiB by default, not
// a request). Tensors received with RecvTensor come in chunks (gRPC) or
// outside gRPC (the tensor channel, whose requests are at most 1 MiB), and
// the ring's in chunks, so none needs a larger message. A step that feeds
// more than about 1 GiB in one request needs a larger MaxMessageBytes on
// the task that receives it.
const DefaultMaxRecvMessageBytes = worker.DefaultMaxGraphBytes + recvHeadroom

// recvHeadroom is what DefaultMaxRecvMessageBytes allows beyond a graph.
const recvHeadroom = 64 << 20

// Validate reports the first bad field of o.
func (o Options) Validate() error {
	switch {
	case o.MaxMessageBytes < 0 || o.MaxMessageBytes > 0 && o.MaxMessageBytes < MinMessageBytes:
		return fmt.Errorf("rpc: Options.MaxMessageBytes %d: must be 0 (the defaults) or at least %d", o.MaxMessageBytes, MinMessageBytes)
	case o.MaxTensorBytes < 0:
		return fmt.Errorf("rpc: Options.MaxTensorBytes %d: must not be negative (0: 64 TiB)", o.MaxTensorBytes)
	case o.KeepaliveTimeout < 0:
		return fmt.Errorf("rpc: Options.KeepaliveTimeout %v: must not be negative (0: %v)", o.KeepaliveTimeout, keepaliveTO)
	case o.PerRPCCredentials != nil && o.PerRPCCredentials.RequireTransportSecurity() && o.TLS == nil:
		return errors.New("rpc: Options.PerRPCCredentials require transport security, and Options.TLS is not set")
	}
	return nil
}

func (o Options) maxMessageBytes() int {
	if o.MaxMessageBytes == 0 {
		return maxMsgSize
	}
	return o.MaxMessageBytes
}

// maxRecvBytes is the largest message a server receives.
func (o Options) maxRecvBytes() int {
	if o.MaxMessageBytes == 0 {
		return DefaultMaxRecvMessageBytes
	}
	return o.MaxMessageBytes
}

func (o Options) maxTensorBytes() int64 {
	if o.MaxTensorBytes == 0 {
		return maxTensorSize
	}
	return o.MaxTensorBytes
}

// keepalive returns the ping interval (0: off) and timeout.
func (o Options) keepalive() (every, timeout time.Duration) {
	every, timeout = o.Keepalive, o.KeepaliveTimeout
	if every == 0 {
		every = keepaliveT
	}
	if every < 0 {
		every = 0
	}
	if timeout == 0 {
		timeout = keepaliveTO
	}
	return every, timeout
}

// tensorTooLarge returns the error of a tensor of size bytes above o's
// limit, or nil; callers add the tensor's name. It runs on every received
// tensor and chunk, so it allocates nothing unless it fails.
func (o Options) tensorTooLarge(size uint64) error {
	if limit := o.maxTensorBytes(); size > uint64(limit) {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, size, limit)
	}
	return nil
}

// setKeepAlive applies o's keepalive to a TCP connection (a no-op for
// other connections).
func (o Options) setKeepAlive(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	every, _ := o.keepalive()
	if every == 0 {
		tc.SetKeepAlive(false)
		return
	}
	tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: every, Interval: every})
}

// Sizes and timings of connections that Options do not set. Tensors move
// in RecvTensor chunks, but RunGraph and RunStep may carry large feeds and
// fetches in one message, so message sizes are not limited by default.
const (
	maxMsgSize    = math.MaxInt32
	maxTensorSize = 1 << 46 // bytes: 64 TiB
	chunkSize     = 4 << 20 // bytes of tensor data per RecvTensor message
	windowSize    = 16 << 20
	keepaliveT    = 30 * time.Second
	keepaliveTO   = 20 * time.Second
	backoffBase   = 50 * time.Millisecond
	backoffMax    = 2 * time.Second
	bufferSize    = 256 << 10
)

// infinity turns gRPC's keepalive pings off.
const infinity = time.Duration(math.MaxInt64)

// serverOptions are the gRPC server's options: opts's message sizes and
// keepalive, the given transport credentials (nil: plaintext) and
// interceptors that run opts.Authenticate before every unary and streaming
// call.
func serverOptions(opts Options, creds credentials.TransportCredentials) []grpc.ServerOption {
	every, timeout := opts.keepalive()
	minPing := every / 2
	if every == 0 {
		every, minPing = infinity, keepaliveT/2 // no pings of ours; the peers' at most so often
	}
	so := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.maxRecvBytes()),
		grpc.MaxSendMsgSize(opts.maxMessageBytes()),
		grpc.InitialWindowSize(windowSize),
		grpc.InitialConnWindowSize(windowSize),
		grpc.ReadBufferSize(bufferSize),
		grpc.WriteBufferSize(bufferSize),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: every, Timeout: timeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPing, PermitWithoutStream: true}),
		grpc.ForceServerCodecV2(tensorCodec), // protobuf, RecvTensor without copies
		// Calls run on long-lived goroutines whose stacks have already grown
		// (a new goroutine per call spends much of a small step growing its
		// stack); when all are busy, such as in RecvTensor waits, a call gets
		// a goroutine of its own as without the option.
		grpc.NumStreamWorkers(uint32(max(8, 4*runtime.GOMAXPROCS(0)))),
		grpc.ChainUnaryInterceptor(opts.unaryInterceptor),
		grpc.ChainStreamInterceptor(opts.streamInterceptor),
	}
	if creds != nil {
		so = append(so, grpc.Creds(creds))
	}
	return so
}

func (o Options) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := o.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (o Options) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := o.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if ctx != ss.Context() {
		ss = admittedStream{ss, ctx}
	}
	return h(srv, ss)
}

// dial opens a client connection to target ("host:port", an optional
// "grpc://" prefix is dropped) with opts. It does not wait for the peer:
// grpc connects in the background and reconnects with a backoff of 50 ms
// doubling to 2 s, so a peer that starts late is found quickly.
func dial(target string, opts Options) (*grpc.ClientConn, string, error) {
	addr := strings.TrimPrefix(target, "grpc://")
	if addr == "" {
		return nil, addr, fmt.Errorf("rpc: empty target address")
	}
	if err := opts.Validate(); err != nil {
		return nil, addr, err
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	every, timeout := opts.keepalive()
	if every == 0 {
		every = infinity
	}
	do := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// Calls other than RecvTensor keep gRPC's own proto codec, which
		// rpc's codec delegates to: forcing ours on them would only add a
		// content-subtype to every call (6 allocations per remote step).
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(opts.maxMessageBytes()), grpc.MaxCallSendMsgSize(opts.maxMessageBytes())),
		grpc.WithInitialWindowSize(windowSize),
		grpc.WithInitialConnWindowSize(windowSize),
		grpc.WithReadBufferSize(bufferSize),
		grpc.WithWriteBufferSize(bufferSize),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: every, Timeout: timeout, PermitWithoutStream: true}),
		grpc.WithChainStreamInterceptor(opts.limitTensors),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: backoffBase, Multiplier: 2, Jitter: 0.2, MaxDelay: backoffMax},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if opts.PerRPCCredentials != nil {
		do = append(do, grpc.WithPerRPCCredentials(opts.PerRPCCredentials))
	}
	do = append(do, opts.metricsDialOptions(addr)...)
	cc, err := grpc.NewClient("passthrough:///"+addr, do...)
	if err != nil {
		return nil, addr, fmt.Errorf("rpc: dialing %s: %w", addr, err)
	}
	return cc, addr, nil
}

// limitTensors is the client's stream interceptor: it gives the receiver
// of a RecvTensor stream (tensorReceiver) the MaxTensorBytes limit it
// checks before allocating the tensor.
func (o Options) limitTensors(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, callOpts...)
	if err != nil || method != recvTensorMethod {
		return cs, err
	}
	return &limitedStream{ClientStream: cs, limit: o.maxTensorBytes()}, nil
}

type limitedStream struct {
	grpc.ClientStream
	limit int64
}

func (s *limitedStream) RecvMsg(m any) error {
	if r, ok := m.(*tensorReceiver); ok {
		r.limit = s.limit
	}
	return s.ClientStream.RecvMsg(m)
}
