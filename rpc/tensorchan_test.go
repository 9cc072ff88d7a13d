package rpc_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/race"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/rpc/rpctest"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
	"github.com/distflow/distflow/worker/workertest"
)

// The conformance suite runs over the tensor channel (TestWorkerServiceGRPC:
// a default client) and over gRPC alone (here).
func TestWorkerServiceGRPCOnly(t *testing.T) {
	workertest.Run(t, func(t *testing.T, w *worker.Worker) worker.Service {
		return serveWorker(t, w, rpc.Options{}, rpc.Options{NoTensorChannel: true})
	}, workertest.Options{HugeRecv: !race.Enabled})
}

// wantChannel fails t unless c received its tensors over the tensor
// channel (a connection back in its pool, the peer not taken to lack it).
func wantChannel(t *testing.T, c worker.Service) {
	t.Helper()
	if idle, offline := rpc.TensorChannelState(c); idle == 0 || offline {
		t.Errorf("tensor channel: %d idle connections, offline %v; want the channel used", idle, offline)
	}
}

// TestTensorChannelRoundTrip: every dtype, empty and odd sizes, over one
// pooled connection, plaintext and TLS.
func TestTensorChannelRoundTrip(t *testing.T) {
	tlsSrv, tlsCli := testTLS(t)
	for _, tc := range []struct {
		name     string
		srv, cli rpc.Options
	}{{"plaintext", rpc.Options{}, rpc.Options{}}, {"tls", tlsSrv, tlsCli}} {
		t.Run(tc.name, func(t *testing.T) { testRoundTrip(t, tc.srv, tc.cli) })
	}
}

func testRoundTrip(t *testing.T, srvOpts, cliOpts rpc.Options) {
	s := &suite{Svc: serveWorker(t, worker.New(worker.Config{Task: suiteTask}), srvOpts, cliOpts)}
	filled := func(dt tensor.DType, shape ...int) *tensor.Tensor {
		v := tensor.New(dt, shape...)
		raw := v.RawBytes()
		for i := range raw {
			raw[i] = byte(i*7 + i>>8 + 3)
			if dt == tensor.Bool {
				raw[i] &= 1
			}
		}
		return v
	}
	var tests []*tensor.Tensor
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64, tensor.Bool, tensor.Uint8} {
		for _, shape := range [][]int{{}, {0}, {3, 0, 2}, {1}, {3}, {7, 5}, {1023, 3}} {
			tests = append(tests, filled(dt, shape...))
		}
	}
	tests = append(tests, filled(tensor.Uint8, 1<<20+3), filled(tensor.Float64, 3, 1<<17+1))
	for i, want := range tests {
		t.Run(fmt.Sprintf("%v%v", want.DType(), want.Shape()), func(t *testing.T) {
			h, key := s.SendGraph(t, func(sc *graph.Scope) graph.Output { return ops.Const(sc, want) })
			step := int64(i + 1)
			s.RunSend(t, h, step)
			got, err := s.Svc.RecvTensor(ctxT(t), step, key)
			if err != nil {
				t.Fatal(err)
			}
			if got.DType() != want.DType() || !slices.Equal(got.Shape(), want.Shape()) || !bytes.Equal(got.RawBytes(), want.RawBytes()) {
				t.Errorf("received %v%v, want %v%v with the same bytes", got.DType(), got.Shape(), want.DType(), want.Shape())
			}
		})
	}
	wantChannel(t, s.Svc)
	if idle, _ := rpc.TensorChannelState(s.Svc); idle != 1 {
		t.Errorf("%d idle connections after sequential transfers, want 1 reused", idle)
	}
}

// testTLS returns server and client options with a fresh self-signed
// certificate for 127.0.0.1.
func testTLS(t testing.TB) (srv, cli rpc.Options) {
	server, client := rpctest.SelfSignedTLS(t)
	return rpc.Options{TLS: server}, rpc.Options{TLS: client}
}

// TestTensorChannelTLS: with TLS, gRPC calls and the tensor channel share
// the certificate and the address, and Authenticate sees the TLS state
// and the method name of both.
func TestTensorChannelTLS(t *testing.T) {
	srv, cli := testTLS(t)
	srv.Authenticate = func(ctx context.Context) error {
		p, ok := peer.FromContext(ctx)
		if !ok {
			return errors.New("no peer")
		}
		if _, ok := p.AuthInfo.(credentials.TLSInfo); !ok {
			return fmt.Errorf("peer %v is not over TLS", p.Addr)
		}
		if m, ok := grpc.Method(ctx); !ok || m == "" {
			return errors.New("no method name")
		}
		return nil
	}
	s := &suite{Svc: serveWorker(t, worker.New(worker.Config{Task: suiteTask}), srv, cli)}
	want := tensor.MustFromSlice([]float32{1, 2, 3}, 3)
	h, key := s.SendGraph(t, func(sc *graph.Scope) graph.Output { return ops.Const(sc, want) })
	s.RunSend(t, h, 1)
	got, err := s.Svc.RecvTensor(ctxT(t), 1, key)
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(got, want) {
		t.Errorf("received %v, want %v", got, want)
	}
	wantChannel(t, s.Svc)
	// The channel negotiates TLS 1.3 with AES-128-GCM, the cheapest suite
	// with AES instructions (see docs/BENCHMARKS.md, TLS); ChaCha20 only
	// where a peer lacks them (GODEBUG=cpu.aes=off stands for one).
	st, ok := rpc.TensorChannelTLS(s.Svc)
	want13 := tls.TLS_AES_128_GCM_SHA256
	if strings.Contains(os.Getenv("GODEBUG"), "cpu.aes=off") || runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		want13 = st.CipherSuite // no claim where AES instructions may be missing
	}
	if !ok || st.Version != tls.VersionTLS13 || st.CipherSuite != want13 || st.NegotiatedProtocol != "distflow-tensors/1" {
		t.Errorf("tensor channel: TLS %x, suite %s, ALPN %q (found %v); want TLS 1.3, %s, distflow-tensors/1",
			st.Version, tls.CipherSuiteName(st.CipherSuite), st.NegotiatedProtocol, ok, tls.CipherSuiteName(want13))
	}
}

// TestTensorChannelFallback: a client uses gRPC when its peer does not
// offer the channel (an older server, plaintext or TLS) or when told not
// to.
func TestTensorChannelFallback(t *testing.T) {
	tlsSrv, tlsCli := testTLS(t)
	old := func(o rpc.Options) rpc.Options { o.NoTensorChannel = true; return o }
	tests := []struct {
		name        string
		srv, cli    rpc.Options
		wantOffline bool
	}{
		{"older server", old(rpc.Options{}), rpc.Options{}, true},
		{"older server over TLS", old(tlsSrv), tlsCli, true},
		{"client without the channel", rpc.Options{}, old(rpc.Options{}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &suite{Svc: serveWorker(t, worker.New(worker.Config{Task: suiteTask}), tt.srv, tt.cli)}
			want := tensor.MustFromSlice([]int64{4, 5}, 2)
			h, key := s.SendGraph(t, func(sc *graph.Scope) graph.Output { return ops.Const(sc, want) })
			for step := int64(1); step <= 2; step++ {
				s.RunSend(t, h, step)
				got, err := s.Svc.RecvTensor(ctxT(t), step, key)
				if err != nil {
					t.Fatal(err)
				}
				if !tensor.Equal(got, want) {
					t.Errorf("received %v, want %v", got, want)
				}
			}
			if idle, offline := rpc.TensorChannelState(s.Svc); idle != 0 || offline != tt.wantOffline {
				t.Errorf("tensor channel: %d idle connections, offline %v; want none and offline %v", idle, offline, tt.wantOffline)
			}
		})
	}
}

// fakeTensorPeer serves one tensor-channel connection on 127.0.0.1 that
// announces a 64 MiB float32 tensor, sends 1 MiB of it and then runs then
// (hang up, stall, ...). It returns the address.
func fakeTensorPeer(t *testing.T, then func(c net.Conn)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		hello := make([]byte, 24)
		if _, err := io.ReadFull(c, hello); err != nil {
			return
		}
		c.Write(hello)
		var n [4]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, c, int64(binary.LittleEndian.Uint32(n[:]))); err != nil {
			return
		}
		const elems = 16 << 20
		hdr := []byte{0, byte(tensor.Float32), 1}
		hdr = binary.LittleEndian.AppendUint64(hdr, elems)
		hdr = binary.LittleEndian.AppendUint64(hdr, 4*elems)
		if _, err := c.Write(append(hdr, make([]byte, 1<<20)...)); err != nil {
			return
		}
		then(c)
	}()
	return lis.Addr().String()
}

// TestTensorChannelPeerDies: a peer that dies mid-transfer fails the
// receive at once with an error naming it.
func TestTensorChannelPeerDies(t *testing.T) {
	addr := fakeTensorPeer(t, func(c net.Conn) { c.(*net.TCPConn).SetLinger(0) }) // then closed: a reset
	c, closer, err := rpc.DialWorker(addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.RecvTensor(ctx, 1, "k")
	if !errors.Is(err, rpc.ErrUnavailable) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "of the 67108864 bytes") {
		t.Errorf("err = %v, want one wrapping ErrUnavailable naming %s and the bytes received", err, addr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("RecvTensor failed after %v, want at once", d)
	}
}

// TestTensorChannelCancel: cancelling the receiving step stops a transfer
// in flight, and the sender sees the connection end.
func TestTensorChannelCancel(t *testing.T) {
	sent, ended := make(chan struct{}), make(chan struct{})
	addr := fakeTensorPeer(t, func(c net.Conn) {
		close(sent)
		io.Copy(io.Discard, c) // until the client hangs up
		close(ended)
	})
	c, closer, err := rpc.DialWorker(addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-sent
		cancel()
	}()
	_, err = c.RecvTensor(ctx, 1, "k")
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), addr) {
		t.Errorf("err = %v, want one wrapping context.Canceled naming %s", err, addr)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Error("the sender's connection is still open 10s after the cancellation")
	}
}

// TestTensorChannelPeerRestarts: pooled connections to a peer that
// restarted are dead; the next receive opens a new one. Over TLS the
// check sees through the client's read buffer (readBufferedConn).
func TestTensorChannelPeerRestarts(t *testing.T) {
	tlsSrv, tlsCli := testTLS(t)
	for _, tc := range []struct {
		name     string
		srv, cli rpc.Options
	}{{"plaintext", rpc.Options{}, rpc.Options{}}, {"tls", tlsSrv, tlsCli}} {
		t.Run(tc.name, func(t *testing.T) { testPeerRestarts(t, tc.srv, tc.cli) })
	}
}

func testPeerRestarts(t *testing.T, srvOpts, cliOpts rpc.Options) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	c, closer, err := rpc.DialWorker(addr, cliOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	for run := range 2 {
		if run > 0 {
			if lis, err = net.Listen("tcp", addr); err != nil {
				t.Fatal(err)
			}
		}
		w := worker.New(worker.Config{Task: suiteTask})
		srv := rpc.NewServer(srvOpts)
		rpc.RegisterWorker(srv, w)
		go srv.Serve(lis)
		s := &suite{Svc: w} // the step runs in process; only the tensor crosses
		want := tensor.MustFromSlice([]int32{int32(run)}, 1)
		h, key := s.SendGraph(t, func(sc *graph.Scope) graph.Output { return ops.Const(sc, want) })
		s.RunSend(t, h, 1)
		got, err := c.RecvTensor(ctxT(t), 1, key)
		if err != nil || !tensor.Equal(got, want) {
			t.Fatalf("server %d: RecvTensor = %v, %v; want %v", run, got, err, want)
		}
		wantChannel(t, c)
		srv.Stop()
	}
}
