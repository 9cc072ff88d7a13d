package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/allreduce/allreducetest"
	"github.com/distflow/distflow/rpc"
)

var quiet = slog.New(slog.DiscardHandler)

// ringNetwork serves every rank's ring on an rpc.Server of its own on
// 127.0.0.1, with opts on both ends (as a task does: server.Config.RPC).
// Kill stops a rank's server at once.
func ringNetwork(opts rpc.Options) allreducetest.Network {
	return func(t testing.TB, recv []allreduce.Receiver) []allreducetest.Peer {
		t.Helper()
		servers := make([]*rpc.Server, len(recv))
		lis := make([]net.Listener, len(recv))
		addrs := make([]string, len(recv))
		for i := range recv {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lis[i], addrs[i] = l, l.Addr().String()
			servers[i] = rpc.NewServer(opts)
			if err := rpc.RegisterRingReceiver(servers[i], recv[i]); err != nil {
				t.Fatal(err)
			}
		}
		peers := make([]allreducetest.Peer, len(recv))
		for i, s := range servers {
			go s.Serve(lis[i])
			t.Cleanup(s.Stop)
			peers[i] = allreducetest.Peer{Transport: rpc.NewRingTransport(addrs, opts), Addr: addrs[i], Kill: s.Stop}
		}
		return peers
	}
}

func TestRingConformance(t *testing.T) { allreducetest.Run(t, ringNetwork(rpc.Options{})) }

// ringOptions is one task's Options with TLS and a token, for both ends.
func ringOptions(t *testing.T) rpc.Options {
	srv, cli := testTLS(t)
	srv.TLS.RootCAs = cli.TLS.RootCAs
	srv.Authenticate = checkToken
	srv.PerRPCCredentials = tokenCreds("s3cret")
	return srv
}

// TestRingConformanceTLS runs the suite with TLS and authentication: the
// ring's streams go through the same handshake and check as every call.
func TestRingConformanceTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite over TLS takes a few seconds")
	}
	allreducetest.Run(t, ringNetwork(ringOptions(t)))
}

// TestRingRefusesStrangers: a rank without the token, or without TLS,
// cannot feed chunks to a secured ring.
func TestRingRefusesStrangers(t *testing.T) {
	opts := ringOptions(t)
	for _, tc := range []struct {
		name string
		opts rpc.Options
	}{
		{"no token", rpc.Options{TLS: opts.TLS}},
		{"plaintext", rpc.Options{PerRPCCredentials: opts.PerRPCCredentials}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rings := twoRings(t, opts, tc.opts)
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			errs := make(chan error, 2)
			for _, r := range rings {
				go func() { errs <- r.AllReduce(ctx, "x", 0, make([]float32, 100)) }()
			}
			for range 2 {
				if err := <-errs; err == nil {
					t.Error("an all-reduce with a stranger succeeded")
				}
			}
		})
	}
}

// twoRings serves rank 0 with opts0 and rank 1 with opts1, each with
// RegisterRing on its own server.
func twoRings(t *testing.T, opts0, opts1 rpc.Options) []*allreduce.Ring {
	var lis [2]net.Listener
	addrs := make([]string, 2)
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	rings := make([]*allreduce.Ring, 2)
	for i, opts := range []rpc.Options{opts0, opts1} {
		s := rpc.NewServer(opts)
		r, err := rpc.RegisterRing(s, allreduce.Config{Rank: i, Peers: addrs, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve(lis[i])
		t.Cleanup(s.Stop)
		t.Cleanup(func() { r.Close() })
		rings[i] = r
	}
	return rings
}

// TestRegisterRing: a ring shares its server with the other services, and
// is registered once, before Serve.
func TestRegisterRing(t *testing.T) {
	rings := twoRings(t, rpc.Options{}, rpc.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	data := [][]float32{{1, 2, 3}, {4, 5, 6}}
	errs := make(chan error, 2)
	for i, r := range rings {
		go func() { errs <- r.AllReduceMean(ctx, "g", 0, data[i]) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if data[0][2] != 4.5 || data[1][0] != 2.5 {
		t.Errorf("means: %v", data)
	}

	s := rpc.NewServer(rpc.Options{})
	if _, err := rpc.RegisterRing(s, allreduce.Config{Peers: []string{"127.0.0.1:1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rpc.RegisterRing(s, allreduce.Config{Peers: []string{"127.0.0.1:1"}}); err == nil {
		t.Error("a second ring on one server was accepted")
	}
	if _, err := rpc.RegisterRing(s, allreduce.Config{}); !errors.Is(err, allreduce.ErrInvalidConfig) {
		t.Errorf("RegisterRing with no peers: %v, want ErrInvalidConfig", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s2 := rpc.NewServer(rpc.Options{})
	go s2.Serve(l)
	defer s2.Stop()
	time.Sleep(10 * time.Millisecond)
	if _, err := rpc.RegisterRing(s2, allreduce.Config{Peers: []string{"127.0.0.1:1"}}); err == nil {
		t.Error("RegisterRing after Serve was accepted")
	}
}

// benchmarkAllReduce all-reduces n float32s among 2 ranks, round the ring
// or through servers summation servers, each on its own rpc.Server.
func benchmarkAllReduce(b *testing.B, n, servers int) {
	b.StopTimer()
	lis := make([]net.Listener, 2+servers)
	addrs := make([]string, len(lis))
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	rings := make([]*allreduce.Ring, len(lis))
	for i := range rings {
		s := rpc.NewServer(rpc.Options{Logger: quiet})
		r, err := rpc.RegisterRing(s, allreduce.Config{Rank: i, Peers: addrs, Servers: servers, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		go s.Serve(lis[i])
		b.Cleanup(s.Stop)
		b.Cleanup(func() { r.Close() })
		rings[i] = r
	}
	ctx := b.Context()
	data := [][]float32{make([]float32, n), make([]float32, n)}
	b.SetBytes(int64(4 * n))
	b.StartTimer()
	for i := range b.N {
		errs := make(chan error, 2)
		for k, r := range rings[:2] {
			go func() { errs <- r.AllReduce(ctx, "bench", int64(i), data[k]) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAllReduceGRPC measures the bytes of tensor all-reduced per
// second by 2 ranks over loopback gRPC, each on its task's rpc.Server.
func BenchmarkAllReduceGRPC1MiB(b *testing.B)  { benchmarkAllReduce(b, 1<<20/4, 0) }
func BenchmarkAllReduceGRPC64MiB(b *testing.B) { benchmarkAllReduce(b, 64<<20/4, 0) }

// BenchmarkAllReduceMLP is the reference mlp's gradients (79,510
// float32s) among 2 ranks: round the ring, and through 1 and 2 summation
// servers (the ps tasks of --allreduce).
func BenchmarkAllReduceMLP(b *testing.B) {
	for _, servers := range []int{0, 1, 2} {
		b.Run(fmt.Sprintf("servers=%d", servers), func(b *testing.B) { benchmarkAllReduce(b, 79510, servers) })
	}
}

// TestRingReachesAPeerRestartedOnItsAddress: rank 1's process exits (a
// view sent to it fails at once: it answered before, and its port refuses
// connections), and a new process serves on the same address at once. A
// view sent to it then is taken, although the connection to it still
// waits out the backoff of its refused attempt (about a second), during
// which a call fails with that old refusal.
func TestRingReachesAPeerRestartedOnItsAddress(t *testing.T) {
	lis := make([]net.Listener, 2)
	addrs := make([]string, 2)
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	serve := func(rank int, l net.Listener) (*allreduce.Ring, *rpc.Server) {
		s := rpc.NewServer(rpc.Options{Logger: quiet})
		r, err := rpc.RegisterRing(s, allreduce.Config{Rank: rank, Peers: addrs, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve(l)
		t.Cleanup(s.Stop)
		t.Cleanup(func() { r.Close() })
		return r, s
	}
	leader, _ := serve(0, lis[0])
	_, old := serve(1, lis[1])
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := leader.SendView(ctx, allreduce.View{Gen: 1, Members: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	old.Stop()
	// The first send may meet the connection's end; the next, a refusal.
	gen := int64(2)
	for err := error(nil); !errors.Is(err, allreduce.ErrPeerUnreachable); gen++ {
		if err = leader.SendView(ctx, allreduce.View{Gen: gen, Members: []int{0, 1}}); err == nil || gen > 5 {
			t.Fatalf("view %d sent to a rank that exited: %v; want ErrPeerUnreachable at once", gen, err)
		}
	}
	l, err := net.Listen("tcp", addrs[1])
	if err != nil {
		t.Skipf("the address of the rank that exited is taken: %v", err)
	}
	restarted, _ := serve(1, l)
	start := time.Now()
	if err := leader.SendView(ctx, allreduce.View{Gen: gen, Members: []int{0, 1}}); err != nil {
		t.Fatalf("a view sent to the rank restarted on its address: %v; want it taken", err)
	}
	if v, ok := restarted.NewestView(); !ok || v.Gen != gen {
		t.Errorf("the restarted rank has view %+v (%v); want %d", v, ok, gen)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the view took %v to reach the restarted rank; want well under the backoff's growth", took)
	}
}
