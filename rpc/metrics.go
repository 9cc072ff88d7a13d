package rpc

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/metrics"
	"github.com/distflow/distflow/service"
)

// The transport's metrics (Options.Metrics): every call a task makes, by
// peer and method (distflow_rpc_seconds, _sent_bytes_total,
// _received_bytes_total: the caller's latency and the serialised sizes of
// requests and responses), and the tensor channel's bytes, by peer and
// direction. A peer is named by its task ("/job:ps/task:0") where the
// transport knows it (a WorkerCache's connections, callers named by
// Options.Identify), else by its address. Series are resolved once per
// connection and method, so that recording a call allocates nothing.

// peerLabel is the name of the peer at addr in metrics.
func (o Options) peerLabel(addr string) string {
	if o.metricsPeer != "" {
		return o.metricsPeer
	}
	return addr
}

// metricsDialOptions are the interceptors that record the calls of a
// connection to addr; none without Options.Metrics.
func (o Options) metricsDialOptions(addr string) []grpc.DialOption {
	if o.Metrics == nil {
		return nil
	}
	cm := &callMetrics{m: o.Metrics, peer: o.peerLabel(addr)}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(cm.unary), grpc.WithChainStreamInterceptor(cm.stream)}
}

// callMetrics records the calls of one connection.
type callMetrics struct {
	m    *metrics.Task
	peer string

	mu      sync.RWMutex
	methods map[string]*metrics.RPC // by full method name
}

// series returns the series of a full method name
// ("/distflow.WorkerService/RunGraph" -> method="RunGraph").
func (c *callMetrics) series(full string) *metrics.RPC {
	c.mu.RLock()
	r := c.methods[full]
	c.mu.RUnlock()
	if r != nil {
		return r
	}
	r = c.m.RPC(c.peer, full[strings.LastIndexByte(full, '/')+1:])
	c.mu.Lock()
	if c.methods == nil {
		c.methods = map[string]*metrics.RPC{}
	}
	c.methods[full] = r
	c.mu.Unlock()
	return r
}

func (c *callMetrics) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	d := time.Since(start)
	received := 0
	if err == nil {
		received = messageSize(reply)
	}
	c.series(method).Observe(d, sentSize(req), received)
	return err
}

func (c *callMetrics) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	start := time.Now()
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		c.series(method).Observe(time.Since(start), 0, 0)
		return nil, err
	}
	return &meteredStream{ClientStream: cs, series: c.series(method), start: start, serverStreams: desc.ServerStreams}, nil
}

// meteredStream counts a stream's messages and records the call when it
// ends: at the error (io.EOF included) that ends a server stream, or at
// the one response of a client stream.
type meteredStream struct {
	grpc.ClientStream
	series        *metrics.RPC
	start         time.Time
	serverStreams bool
	// sent may grow on one goroutine while another receives (gRPC allows
	// one of each); received and done belong to the receiving one.
	sent     atomic.Int64
	received int
	done     bool
}

func (s *meteredStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err == nil {
		s.sent.Add(int64(messageSize(m)))
	}
	return err
}

func (s *meteredStream) RecvMsg(m any) error {
	r, isTensor := m.(*tensorReceiver)
	before := 0
	if isTensor {
		before = r.off
	}
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		if isTensor {
			s.received += r.off - before
		} else {
			s.received += messageSize(m)
		}
	}
	if !s.done && (err != nil || !s.serverStreams) {
		s.done = true
		s.series.Observe(time.Since(s.start), int(s.sent.Load()), s.received)
	}
	return err
}

// messageSize is the serialised size of a protobuf message (0 for others).
func messageSize(m any) int {
	if pm, ok := m.(proto.Message); ok {
		return proto.Size(pm)
	}
	return 0
}

// sentSize is the size of a message just sent: its marshalling left its
// size in the message's cache, which is read instead of computed again.
func sentSize(m any) int {
	if pm, ok := m.(proto.Message); ok {
		return cachedSize.Size(pm)
	}
	return 0
}

var cachedSize = proto.MarshalOptions{UseCachedSize: true}

// countReceived records a tensor received over the channel from p's peer
// in d: its request and response bytes as a RecvTensor call, and its
// data as the channel's received bytes.
func (p *tensorPool) countReceived(d time.Duration, request, header, data int) {
	if p.rpcSeries == nil {
		return
	}
	p.rpcSeries.Observe(d, request, header+data)
	p.channel.Received(data)
}

// meterPool resolves p's series (none without Options.Metrics).
func (p *tensorPool) meterPool() {
	if m := p.opts.Metrics; m != nil {
		label := p.opts.peerLabel(p.addr)
		p.rpcSeries, p.channel = m.RPC(label, "RecvTensor"), m.TensorChannel(label)
		for _, method := range []int{methodRunGraph, methodCleanupStep} {
			p.callSeries[method] = m.RPC(label, methodNames[method])
		}
	}
}

// connChannelKey keys a tensor-channel connection's series by its
// peer's host in the connection's context.
type connChannelKey struct{}

// meterConn resolves the series of a tensor-channel connection from
// remote once, for callers that Options.Identify does not name: by host,
// since the port changes with every connection.
func (s *Server) meterConn(ctx context.Context, remote net.Addr) context.Context {
	if s.opts.Metrics == nil {
		return ctx
	}
	host := remote.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return context.WithValue(ctx, connChannelKey{}, s.opts.Metrics.TensorChannel(host))
}

// countServed records n tensor bytes served over the channel to the caller
// of ctx: named by Options.Identify, or by its host.
func (s *Server) countServed(ctx context.Context, n int) {
	m := s.opts.Metrics
	if m == nil {
		return
	}
	if who, ok := service.Caller(ctx); ok {
		m.TensorChannel(who).Sent(n)
		return
	}
	ch, _ := ctx.Value(connChannelKey{}).(*metrics.Channel)
	ch.Sent(n)
}
