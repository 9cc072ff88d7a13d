package rpc_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/internal/testlog"

	"github.com/distflow/distflow/allreduce"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
)

// TestRingNamesASummationServerWithoutTheService: a ps whose server does
// not serve the Ring service (a task started without it) fails the ranks'
// operations through it with an error that names the task and says what
// to do, logged once per peer as an error (it was a warning among the
// ring's, "unknown service distflow.Ring"), and its probe finds it down.
func TestRingNamesASummationServerWithoutTheService(t *testing.T) {
	lis := make([]net.Listener, 3)
	addrs := make([]string, 3)
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	names := []string{"/job:worker/task:0", "/job:worker/task:1", "/job:ps/task:0"}
	ps := rpc.NewServer(rpc.Options{Logger: quiet}) // no ring
	go ps.Serve(lis[2])
	t.Cleanup(ps.Stop)
	logs := make([]*testlog.Buffer, 2)
	rings := make([]*allreduce.Ring, 2)
	for i := range rings {
		logs[i] = &testlog.Buffer{}
		log := slog.New(slog.NewTextHandler(logs[i], nil))
		s := rpc.NewServer(rpc.Options{Logger: log})
		r, err := rpc.RegisterRing(s, allreduce.Config{Rank: i, Peers: addrs, Names: names, Servers: 1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve(lis[i])
		t.Cleanup(s.Stop)
		t.Cleanup(func() { r.Close() })
		rings[i] = r
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for round := range int64(2) {
		errs := make(chan error, 2)
		for _, r := range rings {
			go func() { errs <- r.AllReduce(ctx, "x", round, []float32{1, 2}) }()
		}
		var named bool
		for range rings {
			err := <-errs
			if err == nil {
				t.Fatalf("round %d: an all-reduce through a ps without the Ring service succeeded", round)
			}
			named = named || strings.Contains(err.Error(), "summation server /job:ps/task:0 ("+addrs[2]+") does not serve the all-reduce service")
		}
		if !named {
			t.Errorf("round %d: neither rank's error names the ps that lacks the service", round)
		}
	}
	if down := rings[0].DownServers(ctx); len(down) != 1 || down[0] != 2 {
		t.Errorf("DownServers = %v, want [2]", down)
	}
	var logged int
	for i, b := range logs {
		n := strings.Count(b.String(), "level=ERROR")
		logged += n
		if n > 1 {
			t.Errorf("rank %d logged the missing service %d times, want once:\n%s", i, n, b)
		}
		if n == 1 && (!strings.Contains(b.String(), "/job:ps/task:0") || !strings.Contains(b.String(), "distflow server")) {
			t.Errorf("rank %d's error does not name the ps or say what to do:\n%s", i, b)
		}
	}
	if logged == 0 {
		t.Error("no rank logged the missing service as an error")
	}
}

// TestKnownWorkerExited: a call of DialKnownWorker's client to a task
// whose port refuses connections fails at once (a DialWorker's waits until
// its deadline), and Exited tells that the process there has exited; a
// task that serves is not taken for one.
func TestKnownWorkerExited(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	w, closer, err := rpc.DialKnownWorker(addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = w.GetStatus(ctx, &pb.GetStatusRequest{})
	if took := time.Since(start); err == nil || took > 5*time.Second {
		t.Fatalf("GetStatus of a refused task: %v after %v; want a failure at once", err, took)
	}
	if !errors.Is(err, rpc.ErrUnavailable) || !rpc.Exited(ctx, addr, err) {
		t.Errorf("GetStatus of a refused task: %v; want ErrUnavailable and Exited", err)
	}
	// Something listens on the address again: the old refusal is no exit.
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the address is taken: %v", err)
	}
	defer l.Close()
	if rpc.Exited(ctx, addr, err) {
		t.Error("Exited with a listener on the address")
	}
}
