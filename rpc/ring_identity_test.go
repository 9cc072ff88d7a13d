package rpc_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/rpc"
)

// TestRingChunksComeFromTheirSender: a member cannot send chunks, failure
// notices or views as another rank: the rank a chunk names is checked
// against the task that the transport authenticated (here a header that
// Options.Identify reads, as it reads a certificate), so worker 1 cannot
// forge rank 0's Stop, and the ring goes on.
func TestRingChunksComeFromTheirSender(t *testing.T) {
	names := []string{"/job:worker/task:0", "/job:worker/task:1", "/job:worker/task:2"}
	opts := func(i int) rpc.Options {
		return rpc.Options{Identify: identifyByHeader, PerRPCCredentials: taskCreds(names[i]), Logger: quiet}
	}
	addrs := make([]string, len(names))
	lis := make([]net.Listener, len(names))
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	rings := make([]*allreduce.Ring, len(names))
	for i := range rings {
		s := rpc.NewServer(opts(i))
		r, err := rpc.RegisterRing(s, allreduce.Config{Rank: i, Peers: addrs, Names: names, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve(lis[i])
		t.Cleanup(func() { r.Close(); s.Stop() })
		rings[i] = r
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// Worker 1 runs a ring that says it is rank 0, over its own
	// credentials.
	forger, err := allreduce.NewRing(allreduce.Config{Rank: 0, Peers: addrs, Names: names, Logger: quiet}, rpc.NewRingTransport(addrs, opts(1)))
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	err = forger.SendViewTo(ctx, allreduce.View{Gen: 99, Members: []int{0, 1, 2}, Stop: true}, []int{2})
	if !isPermissionDenied(err) {
		t.Errorf("a Stop sent as rank 0 by worker 1: %v; want PermissionDenied", err)
	}
	if v, ok := rings[2].NewestView(); ok {
		t.Fatalf("rank 2 took the forged view %+v", v)
	}
	// A chunk of the next operation, sent as rank 0 to rank 1.
	st, err := rpc.NewRingTransport(addrs, opts(2)).Open(ctx, 1, allreduce.Op{Name: "grads"})
	if err == nil {
		err = st.Send(&allreduce.Chunk{Op: allreduce.Op{Name: "grads"}, From: 0, Size: 3, Length: 6, Data: []float32{1e9, 1e9}})
		if err == nil {
			err = st.Close()
		}
	}
	if !isPermissionDenied(err) {
		t.Errorf("a chunk sent as rank 0 by worker 2: %v; want PermissionDenied", err)
	}

	// The true rank 0's view, and the ring's operations, go through.
	if err := rings[0].SendView(ctx, allreduce.View{Gen: 1, Members: []int{0, 1, 2}}); err != nil {
		t.Fatalf("rank 0's own view: %v", err)
	}
	if v, ok := rings[2].NewestView(); !ok || v.Gen != 1 || v.Stop {
		t.Fatalf("rank 2's newest view: %+v, %v; want rank 0's generation 1", v, ok)
	}
	var wg sync.WaitGroup
	for i, r := range rings {
		wg.Go(func() {
			data := []float32{1, 2, 3, 4, 5, 6}
			if err := r.AllReduce(ctx, "grads", 0, data); err != nil {
				t.Errorf("rank %d: %v", i, err)
			} else if data[0] != 3 || data[5] != 18 {
				t.Errorf("rank %d: %v; want 3 times the data", i, data)
			}
		})
	}
	wg.Wait()
}

// isPermissionDenied reports whether err wraps a PermissionDenied status.
func isPermissionDenied(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	return errors.As(err, &se) && se.GRPCStatus().Code() == codes.PermissionDenied
}
