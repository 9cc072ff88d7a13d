package rpc

import (
	"bufio"
	"crypto/tls"
	"net"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/worker"
)

// TensorChannelState reports, for a client made by DialWorker, how many
// tensor-channel connections sit idle in its pool and whether its peer is
// taken not to offer the channel.
func TensorChannelState(w worker.Service) (idle int, offline bool) {
	p := w.(*workerClient).tensors
	if p == nil {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle), !p.offline.IsZero()
}

// SetHelloTimeout sets how long a new tensor-channel connection waits for
// its hello's answer, until the returned function restores it.
func SetHelloTimeout(d time.Duration) (restore func()) {
	old := helloTimeout
	helloTimeout = d
	return func() { helloTimeout = old }
}

// RegisterRingReceiver and NewRingTransport are RegisterRing's two halves,
// for the conformance suite of allreduce.Transport, which makes the rings.
func RegisterRingReceiver(s *Server, recv allreduce.Receiver, names ...string) error {
	return registerRingReceiver(s, recv, names)
}

func NewRingTransport(peers []string, opts Options) allreduce.Transport {
	return newRingTransport(peers, opts)
}

// NewTLSClientConn is a TLS client connection as the tensor channel makes
// them (reads through readBufferedConn), for benchmarks of crypto/tls.
func NewTLSClientConn(c net.Conn, cfg *tls.Config) *tls.Conn {
	return tls.Client(&readBufferedConn{Conn: c, r: bufio.NewReaderSize(c, tlsReadBufferSize)}, cfg)
}

// TensorChannelTLS returns the TLS state of an idle tensor-channel
// connection of a client made by DialWorker (false: none idle, or
// plaintext).
func TensorChannelTLS(w worker.Service) (tls.ConnectionState, bool) {
	p := w.(*workerClient).tensors
	if p == nil {
		return tls.ConnectionState{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		if tc, ok := c.conn.(*tls.Conn); ok {
			return tc.ConnectionState(), true
		}
	}
	return tls.ConnectionState{}, false
}
