package rpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/distflow/distflow/worker"
)

// Server serves a task's gRPC services and, when a worker is registered,
// the tensor channel (see tensorchan.go) on one listener: users give one
// address per task, so the two protocols share it. Each accepted
// connection is told apart by its first bytes (after the TLS handshake,
// which the Server does itself when Options.TLS is set, so both protocols
// use the same certificates): the tensor channel's hello, or anything else
// for gRPC. Build one with NewServer, register services with RegisterWorker
// and RegisterMaster, then Serve.
type Server struct {
	opts Options
	err  error // of opts.Validate: Serve returns it
	grpc *grpc.Server
	tlsc *tls.Config // the server's TLS config with both protocols' ALPN names, or nil

	mu       sync.Mutex
	worker   worker.Service // served on the tensor channel, once registered
	ring     bool           // a ring is registered (RegisterRing)
	serving  bool           // Serve was called: no more services
	lis      []net.Listener
	conns    map[*tensorServerConn]struct{}
	stopping bool
	wg       sync.WaitGroup // the tensor channel's connections
}

// NewServer returns a server configured by opts (message sizes, keepalive,
// TLS from opts.TLS, and opts.Authenticate run before every gRPC call,
// unary and streaming, and every tensor-channel request). Register the
// services with RegisterWorker, RegisterMaster and RegisterRing. Options
// that do not validate make Serve fail.
func NewServer(opts Options) *Server {
	s := &Server{opts: opts, err: opts.Validate(), conns: map[*tensorServerConn]struct{}{}}
	var creds credentials.TransportCredentials
	if opts.TLS != nil {
		if opts.NoTensorChannel {
			creds = credentials.NewTLS(opts.TLS) // gRPC does the handshakes: the older servers' way
		} else {
			s.tlsc = serverTLS(opts.TLS)
			creds = handshakenTLS{}
		}
	}
	s.grpc = grpc.NewServer(serverOptions(opts, creds)...)
	return s
}

// serverTLS clones cfg and offers both protocols through ALPN: h2 for
// gRPC (required by its clients) and tensorALPN for the tensor channel.
func serverTLS(cfg *tls.Config) *tls.Config {
	c := cfg.Clone()
	for _, p := range []string{"h2", tensorALPN} {
		if !slices.Contains(c.NextProtos, p) {
			c.NextProtos = append(c.NextProtos, p)
		}
	}
	return c
}

// Serve accepts connections on lis until Stop or GracefulStop, and
// returns lis's Accept error (nil after a stop). It closes lis.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.stopping || s.err != nil {
		s.mu.Unlock()
		lis.Close()
		return s.err
	}
	s.lis = append(s.lis, lis)
	s.serving = true
	s.mu.Unlock()
	if s.opts.NoTensorChannel {
		return s.grpc.Serve(keepaliveListener{lis, s.opts})
	}
	g := newChanListener(lis.Addr())
	served := make(chan error, 1)
	go func() { served <- s.grpc.Serve(g) }()
	var err error
	var delay time.Duration
	for {
		c, aerr := lis.Accept()
		if aerr != nil {
			if errors.Is(aerr, net.ErrClosed) {
				err = aerr
				break
			}
			// Out of file descriptors and the like: retry, as gRPC's
			// own Serve does, with a backoff.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.opts.logger().Warn("rpc: accept failed; retrying", "addr", lis.Addr().String(), "err", aerr, "delay", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		s.opts.setKeepAlive(c)
		go s.sniff(c, g)
	}
	g.Close()
	gerr := <-served
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	if stopping {
		return nil
	}
	return errors.Join(fmt.Errorf("rpc: serving on %s: %w", lis.Addr(), err), gerr)
}

// sniffTimeout bounds the TLS handshake and the first bytes of a new
// connection: a client that sends nothing is dropped.
const sniffTimeout = 10 * time.Second

// sniff finishes the TLS handshake (when configured), reads the first
// bytes and hands the connection to the tensor channel or to gRPC.
func (s *Server) sniff(c net.Conn, g *chanListener) {
	c.SetDeadline(time.Now().Add(sniffTimeout))
	if s.tlsc != nil {
		tc := tls.Server(c, s.tlsc)
		if err := tc.Handshake(); err != nil {
			// A plaintext client, a certificate of another CA or cluster:
			// refused here, and told to whoever runs the task.
			logRefusal(s.opts.logger(), time.Now(), "rpc: refused connection: TLS handshake failed", c.RemoteAddr().String(), err)
			c.Close()
			return
		}
		c = tc
	}
	head := make([]byte, len(tensorHello))
	n, err := io.ReadFull(c, head)
	if err != nil && n == 0 {
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	if err == nil && (bytes.Equal(head, tensorHello) || bytes.Equal(head, tensorHello11)) {
		s.serveTensors(c, bytes.Equal(head, tensorHello11))
		return
	}
	if err == nil && bytes.HasPrefix(head, tensorHelloPrefix) {
		c.Write(tensorHello) // a version we do not speak: answer ours, and hang up
		c.Close()
		return
	}
	if !g.put(&prefixConn{Conn: c, prefix: head[:n]}) {
		c.Close()
	}
}

// GracefulStop stops accepting connections and waits for the calls and
// transfers in progress. Idle tensor-channel connections are closed at
// once.
func (s *Server) GracefulStop() {
	s.beginStop()
	s.grpc.GracefulStop()
	s.mu.Lock()
	for c := range s.conns {
		c.closeIfIdle()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Stop stops the server at once: listeners and connections are closed,
// calls and transfers in progress fail.
func (s *Server) Stop() {
	s.beginStop()
	s.grpc.Stop()
	s.mu.Lock()
	for c := range s.conns {
		c.conn.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) beginStop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	for _, l := range s.lis {
		l.Close()
	}
	for c := range s.conns {
		c.draining = true
	}
}

// chanListener is the net.Listener gRPC serves: the connections the
// Server's accept loop found to be gRPC.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// put hands c to gRPC; false when the listener is closed.
func (l *chanListener) put(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// keepaliveListener applies Options' keepalive to the connections it
// accepts.
type keepaliveListener struct {
	net.Listener
	opts Options
}

func (l keepaliveListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.opts.setKeepAlive(c)
	}
	return c, err
}

// prefixConn replays the bytes read while sniffing before the rest of the
// connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// handshakenTLS are the gRPC server's transport credentials when the
// Server has done the TLS handshake itself: they pass the connection
// through and report its TLS state, so Options.Authenticate sees the same
// peer information (peer.FromContext, credentials.TLSInfo) as with
// credentials.NewTLS.
type handshakenTLS struct{}

func (handshakenTLS) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("rpc: handshakenTLS is for servers only")
}

func (handshakenTLS) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	pc, ok := c.(*prefixConn)
	if !ok {
		return nil, nil, fmt.Errorf("rpc: connection from %s did not go through the TLS handshake", c.RemoteAddr())
	}
	tc, ok := pc.Conn.(*tls.Conn)
	if !ok {
		return nil, nil, fmt.Errorf("rpc: connection from %s did not go through the TLS handshake", c.RemoteAddr())
	}
	return c, credentials.TLSInfo{State: tc.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (handshakenTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (handshakenTLS) Clone() credentials.TransportCredentials { return handshakenTLS{} }

func (handshakenTLS) OverrideServerName(string) error { return nil }
