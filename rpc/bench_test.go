package rpc_test

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/rpc/rpctest"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// BenchmarkRecvTensor measures the bandwidth of RecvTensor between two
// endpoints on loopback (a worker pulling a parameter from a ps), over the
// tensor channel (plaintext and TLS) and over gRPC. Each iteration runs a step that sends the
// tensor (timer stopped) and receives it (timed). cpu-ms/op is the CPU time
// of both ends together (the process's user and system time), which holds
// on a busy machine where the bandwidth does not.
func BenchmarkRecvTensor(b *testing.B) {
	tlsSrv, tlsCli := testTLS(b)
	for _, path := range []struct {
		name     string
		srv, cli rpc.Options
	}{
		{"channel", rpc.Options{}, rpc.Options{}},
		{"channel-tls", tlsSrv, tlsCli},
		{"grpc", rpc.Options{}, rpc.Options{NoTensorChannel: true}},
	} {
		for _, size := range []int{4 << 10, 1 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", path.name, size>>10), func(b *testing.B) {
				s := &suite{Svc: serveWorker(b, worker.New(worker.Config{Task: suiteTask}), path.srv, path.cli)}
				h, key := s.SendGraph(b, func(sc *graph.Scope) graph.Output { return ops.Zeros(sc, tensor.Float32, size/4) })
				ctx := context.Background()
				b.SetBytes(int64(size))
				step := int64(0)
				var cpu time.Duration
				for b.Loop() {
					b.StopTimer()
					step++
					s.RunSend(b, h, step)
					start := cpuTime()
					b.StartTimer()
					if _, err := s.Svc.RecvTensor(ctx, step, key); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					cpu += cpuTime() - start
					b.StartTimer()
				}
				b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// BenchmarkRunGraphTiny measures the round trip of a tiny RunGraph over
// gRPC on loopback: the per-step overhead of the transport.
func BenchmarkRunGraphTiny(b *testing.B) {
	s := &suite{Svc: serveWorker(b, worker.New(worker.Config{Task: suiteTask}), rpc.Options{}, rpc.Options{})}
	h := s.Register(b, "sess", func(sc *graph.Scope) {
		x := ops.Placeholder(sc, "x", tensor.Float32, tensor.MakeShape(1))
		sc.AddNode("Identity", "y", []graph.Output{ops.Add(sc, x, x)}, nil)
	})
	req := &pb.RunGraphRequest{SessionHandle: "sess", GraphHandle: h,
		Feeds:   []*pb.NamedTensor{{Name: "x:0", Tensor: graph.TensorToProto(tensor.MustFromSlice([]float32{1}, 1))}},
		Fetches: []string{"y:0"}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		req.StepId++
		if _, err := s.Svc.RunGraph(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAEAD is the floor of what TLS costs a transfer here: sealing
// (sender) and opening (receiver) 64 MiB as TLS 1.3 records of 16 KiB with
// the AEADs crypto/tls negotiates (AES-128-GCM when both ends have AES
// instructions, AES-256-GCM when a peer asks for it), beside copying 64 MiB
// once, which crypto/tls adds on each side (record buffer to tensor and
// back). ChaCha20-Poly1305 is not in the standard library's API; it is
// measured through TLS with GODEBUG=cpu.aes=off (see docs/BENCHMARKS.md).
func BenchmarkAEAD(b *testing.B) {
	const size, record = 64 << 20, 16 << 10
	src := make([]byte, size)
	sealed := make([]byte, 0, size+size/record*16)
	for _, keyBytes := range []int{16, 32} {
		block, err := aes.NewCipher(make([]byte, keyBytes))
		if err != nil {
			b.Fatal(err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			b.Fatal(err)
		}
		nonce := make([]byte, aead.NonceSize())
		seal := func() {
			sealed = sealed[:0]
			for off := 0; off < size; off += record {
				sealed = aead.Seal(sealed, nonce, src[off:off+record], nil)
			}
		}
		b.Run(fmt.Sprintf("seal/aes-%d-gcm", keyBytes*8), func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				seal()
			}
		})
		b.Run(fmt.Sprintf("open/aes-%d-gcm", keyBytes*8), func(b *testing.B) {
			seal()
			opened := make([]byte, 0, record)
			b.SetBytes(size)
			for b.Loop() {
				for in := sealed; len(in) > 0; {
					n := record + aead.Overhead()
					if _, err := aead.Open(opened, nonce, in[:n], nil); err != nil {
						b.Fatal(err)
					}
					in = in[n:]
				}
			}
		})
	}
	b.Run("copy", func(b *testing.B) {
		dst := make([]byte, size)
		b.SetBytes(size)
		for b.Loop() {
			copy(dst, src)
		}
	})
}

// BenchmarkLoopbackStream moves 64 MiB over loopback with crypto/tls
// alone (TLS 1.3, the client reading through readBufferedConn as the
// tensor channel does), over 1, 2 and 4 connections at once (a tensor
// striped over them), beside plain TCP: the best the tensor channel can do
// with crypto/tls on this machine. cpu-ms/op is both ends' CPU time.
func BenchmarkLoopbackStream(b *testing.B) {
	server, client := rpctest.SelfSignedTLS(b)
	client.ServerName = "127.0.0.1"
	for _, bc := range []struct {
		name  string
		tls   bool
		conns int
	}{{"tcp/1", false, 1}, {"tls/1", true, 1}, {"tls/2", true, 2}, {"tls/4", true, 4}} {
		b.Run(bc.name, func(b *testing.B) {
			const size = 64 << 20
			var senders, receivers []net.Conn
			for range bc.conns {
				s, r := loopbackPair(b, bc.tls, server, client)
				senders, receivers = append(senders, s), append(receivers, r)
			}
			src, dst := make([]byte, size), make([]byte, size)
			part := size / bc.conns
			b.SetBytes(size)
			var cpu time.Duration
			start := cpuTime()
			for b.Loop() {
				var wg sync.WaitGroup
				errs := make(chan error, 2*bc.conns)
				for i := range bc.conns {
					stripe := [2]int{i * part, (i + 1) * part}
					wg.Go(func() {
						_, err := senders[i].Write(src[stripe[0]:stripe[1]])
						errs <- err
					})
					wg.Go(func() {
						_, err := io.ReadFull(receivers[i], dst[stripe[0]:stripe[1]])
						errs <- err
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			cpu = cpuTime() - start
			b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
		})
	}
}

// loopbackPair returns the two ends of a TCP (or TLS) connection on
// 127.0.0.1, closed at the end of the benchmark.
func loopbackPair(b *testing.B, useTLS bool, server, client *tls.Config) (sender, receiver net.Conn) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		if useTLS {
			tc := tls.Server(c, server)
			if tc.Handshake() != nil {
				c.Close()
				accepted <- nil
				return
			}
			c = tc
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	receiver = c
	if useTLS {
		tc := rpc.NewTLSClientConn(c, client)
		if err := tc.Handshake(); err != nil {
			b.Fatal(err)
		}
		receiver = tc
	}
	if sender = <-accepted; sender == nil {
		b.Fatal("the server's end of the connection failed")
	}
	b.Cleanup(func() { sender.Close(); receiver.Close() })
	return sender, receiver
}
