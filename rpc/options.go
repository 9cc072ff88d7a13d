package rpc

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Options configure both ends of distflow's gRPC connections. They are the
// one place where transport security lives: the security work that follows
// plugs in here (certificates in TLS, a token check in Authenticate, a token
// source in PerRPCCredentials) without touching any service.
// The zero value means plaintext, unauthenticated connections.
type Options struct {
	// TLS, when set, secures connections: on a server it holds the
	// server's certificate (and ClientAuth for mutual TLS); on a client it
	// holds the roots that verify the server.
	TLS *tls.Config
	// Authenticate, when set, is called by the server's interceptors before
	// every RPC with the call's context (metadata, peer and TLS state are
	// in it: see google.golang.org/grpc/metadata and peer). A non-nil error
	// refuses the call with codes.Unauthenticated and that message.
	Authenticate func(ctx context.Context) error
	// PerRPCCredentials, when set, attach credentials (such as a bearer
	// token) to every call a client makes.
	PerRPCCredentials credentials.PerRPCCredentials
	// Logger receives the waits for peers (nil: slog.Default()).
	Logger *slog.Logger
	// NoTensorChannel turns the tensor channel off: a server serves gRPC
	// only, as servers before it did, and a client receives every tensor
	// over gRPC. By default a client receives tensors over the channel
	// when its peer offers it, and over gRPC otherwise (see the package
	// documentation).
	NoTensorChannel bool
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

// Sizes and timings of connections. Tensors move in RecvTensor chunks, but
// RunGraph and RunStep may carry large feeds and fetches in one message, so
// message sizes are not limited.
const (
	maxMsgSize  = math.MaxInt32
	chunkSize   = 4 << 20 // bytes of tensor data per RecvTensor message
	windowSize  = 16 << 20
	keepaliveT  = 30 * time.Second
	keepaliveTO = 20 * time.Second
	backoffBase = 50 * time.Millisecond
	backoffMax  = 2 * time.Second
	bufferSize  = 256 << 10
)

// serverOptions are the gRPC server's options: unlimited message sizes,
// keepalive, the given transport credentials (nil: plaintext) and
// interceptors that run opts.Authenticate before every unary and streaming
// call.
func serverOptions(opts Options, creds credentials.TransportCredentials) []grpc.ServerOption {
	so := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsgSize),
		grpc.MaxSendMsgSize(maxMsgSize),
		grpc.InitialWindowSize(windowSize),
		grpc.InitialConnWindowSize(windowSize),
		grpc.ReadBufferSize(bufferSize),
		grpc.WriteBufferSize(bufferSize),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveT, Timeout: keepaliveTO}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveT / 2, PermitWithoutStream: true}),
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

// authenticate is the single check every incoming call goes through.
func (o Options) authenticate(ctx context.Context, method string) error {
	if o.Authenticate == nil {
		return nil
	}
	if err := o.Authenticate(ctx); err != nil {
		return status.Errorf(codes.Unauthenticated, "rpc: %s: %v", method, err)
	}
	return nil
}

func (o Options) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := o.authenticate(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (o Options) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := o.authenticate(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// dial opens a client connection to target ("host:port", an optional
// "grpc://" prefix is dropped). It does not wait for the peer: grpc
// connects in the background and reconnects with a backoff of 50 ms
// doubling to 2 s, so a peer that starts late is found quickly.
func dial(target string, opts Options) (*grpc.ClientConn, string, error) {
	addr := strings.TrimPrefix(target, "grpc://")
	if addr == "" {
		return nil, addr, fmt.Errorf("rpc: empty target address")
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	do := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
		grpc.WithInitialWindowSize(windowSize),
		grpc.WithInitialConnWindowSize(windowSize),
		grpc.WithReadBufferSize(bufferSize),
		grpc.WithWriteBufferSize(bufferSize),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveT, Timeout: keepaliveTO, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: backoffBase, Multiplier: 2, Jitter: 0.2, MaxDelay: backoffMax},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if opts.PerRPCCredentials != nil {
		do = append(do, grpc.WithPerRPCCredentials(opts.PerRPCCredentials))
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, do...)
	if err != nil {
		return nil, addr, fmt.Errorf("rpc: dialing %s: %w", addr, err)
	}
	return cc, addr, nil
}
