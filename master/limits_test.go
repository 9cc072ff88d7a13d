package master_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/service"
	"github.com/distflow/distflow/worker"
)

// chain is a graph of a Const and n-1 Identity nodes reading each other.
func chain(t *testing.T, n int) *pb.GraphDef {
	t.Helper()
	s := graph.NewScope()
	x := ops.Const(s, float32(1))
	for range n - 1 {
		x = ops.Identity(s, x)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s.Graph().ToProto()
}

// out is the output of the last node of gd.
func out(gd *pb.GraphDef) string { return gd.GetNode()[len(gd.GetNode())-1].GetName() + ":0" }

// heldBy measures the heap that what hold allocates and keeps until it
// calls the function it returns: the heap freed by that call, after a
// collection, the median of three tries, so that what other goroutines
// allocate or free meanwhile matters little.
func heldBy(hold func() (release func())) int64 {
	var tries [3]int64
	for i := range tries {
		release := hold()
		held := heapHeld()
		release()
		tries[i] = held - heapHeld()
	}
	slices.Sort(tries[:])
	return tries[1]
}

// heapHeld returns the heap bytes in use after a collection.
func heapHeld() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func limitedMaster(cfg master.Config) *master.Master {
	net := cluster()
	cfg.Task, cfg.Workers, cfg.Logger = wk0, net.From(wk0), quiet
	return master.New(cfg)
}

// TestSessionsPerCaller: a caller holds at most Config.MaxSessions open
// sessions, whoever else holds some; closing one makes room.
func TestSessionsPerCaller(t *testing.T) {
	m := limitedMaster(master.Config{MaxSessions: 2})
	a := service.WithCaller(context.Background(), "client:a")
	b := service.WithCaller(context.Background(), "client:b")
	gd := chain(t, 2)
	var handles []string
	for i := range 2 {
		resp, err := m.CreateSession(a, &pb.CreateSessionRequest{Graph: gd})
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		handles = append(handles, resp.GetSessionHandle())
	}
	_, err := m.CreateSession(a, &pb.CreateSessionRequest{Graph: gd})
	if !errors.Is(err, master.ErrTooManySessions) || !strings.Contains(err.Error(), "master.Config.MaxSessions") || !strings.Contains(err.Error(), "client:a") {
		t.Errorf("a third session: %v, want master.ErrTooManySessions naming the caller and master.Config.MaxSessions", err)
	}
	if _, err := m.CreateSession(b, &pb.CreateSessionRequest{Graph: gd}); err != nil {
		t.Errorf("another caller is not limited by the first: %v", err)
	}
	if _, err := m.CloseSession(a, &pb.CloseSessionRequest{SessionHandle: handles[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateSession(a, &pb.CreateSessionRequest{Graph: gd}); err != nil {
		t.Errorf("a session after closing one: %v", err)
	}
}

// TestGraphMemoryPerCaller: the graphs a caller's sessions hold on the
// master are counted by the memory they hold, whatever the number of
// sessions, and the heap they take stays within Config.MaxGraphBytes.
func TestGraphMemoryPerCaller(t *testing.T) {
	gd := chain(t, 20000) // about 880 KiB serialised, 7.3 MiB decoded
	const limit = 40 << 20
	m := limitedMaster(master.Config{MaxGraphBytes: limit, MaxSessions: 100})
	ctx := service.WithCaller(context.Background(), "client:a")
	n := 0
	grown := heldBy(func() func() {
		var handles []string
		for n = 0; n < 12; n++ {
			cs, err := m.CreateSession(ctx, &pb.CreateSessionRequest{Graph: gd})
			if err != nil {
				if !errors.Is(err, master.ErrTooManySessions) || !strings.Contains(err.Error(), "master.Config.MaxGraphBytes") {
					t.Fatalf("session %d: %v, want master.ErrTooManySessions naming master.Config.MaxGraphBytes", n, err)
				}
				break
			}
			handles = append(handles, cs.GetSessionHandle())
		}
		return func() {
			for _, h := range handles {
				if _, err := m.CloseSession(ctx, &pb.CloseSessionRequest{SessionHandle: h}); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	t.Logf("%d sessions of a graph of %d nodes, holding %d bytes, limit %d", n, len(gd.GetNode()), grown, limit)
	if n == 0 || grown > limit+limit/8 {
		t.Errorf("%d sessions, holding %d bytes: over the limit of %d", n, grown, limit)
	}
	runtime.KeepAlive(m)
}

// TestPlansCountAgainstGraphMemory: the partitions of a session's plans
// count against its caller's Config.MaxGraphBytes too, so that a session
// cannot hold a copy of its graph per signature without bound.
func TestPlansCountAgainstGraphMemory(t *testing.T) {
	gd := chain(t, 200)
	size := worker.GraphMemory(gd)
	m := limitedMaster(master.Config{MaxGraphBytes: size * 3 / 2})
	ctx := context.Background()
	cs, err := m.CreateSession(ctx, &pb.CreateSessionRequest{Graph: gd})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.RunStep(ctx, &pb.RunStepRequest{SessionHandle: cs.GetSessionHandle(), Fetches: []string{out(gd)}})
	if !errors.Is(err, master.ErrTooManySessions) || !strings.Contains(err.Error(), "master.Config.MaxGraphBytes") {
		t.Errorf("a step whose plan is over the limit: %v, want master.ErrTooManySessions naming master.Config.MaxGraphBytes", err)
	}
	// A small plan fits, and goes with the session.
	if _, err := m.RunStep(ctx, &pb.RunStepRequest{SessionHandle: cs.GetSessionHandle(), Fetches: []string{"Const:0"}}); err != nil {
		t.Errorf("a small step: %v", err)
	}
	if _, err := m.CloseSession(ctx, &pb.CloseSessionRequest{SessionHandle: cs.GetSessionHandle()}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateSession(ctx, &pb.CreateSessionRequest{Graph: gd}); err != nil {
		t.Errorf("a session after closing the first: %v", err)
	}
}

// TestSessionIdle: a session unused for longer than Config.SessionIdle is
// closed: its steps fail with ErrNoSession naming the limit, and it no
// longer counts against its caller's limits.
func TestSessionIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	m := limitedMaster(master.Config{MaxSessions: 1, SessionIdle: time.Hour, Now: func() time.Time { return now }})
	ctx := context.Background()
	gd := chain(t, 2)
	cs, err := m.CreateSession(ctx, &pb.CreateSessionRequest{Graph: gd})
	if err != nil {
		t.Fatal(err)
	}
	step := &pb.RunStepRequest{SessionHandle: cs.GetSessionHandle(), Fetches: []string{out(gd)}}
	now = now.Add(59 * time.Minute)
	if _, err := m.RunStep(ctx, step); err != nil {
		t.Fatalf("a step within the idle time: %v", err)
	}
	now = now.Add(59 * time.Minute) // an hour after creation, not after the last use
	if _, err := m.RunStep(ctx, step); err != nil {
		t.Fatalf("a step within the idle time of the last step: %v", err)
	}
	now = now.Add(61 * time.Minute)
	if _, err := m.RunStep(ctx, step); !errors.Is(err, master.ErrNoSession) || !strings.Contains(err.Error(), "SessionIdle") {
		t.Errorf("a step after the idle time: %v, want master.ErrNoSession naming SessionIdle", err)
	}
	if _, err := m.CreateSession(ctx, &pb.CreateSessionRequest{Graph: gd}); err != nil {
		t.Errorf("a session after the first expired: %v", err)
	}
	// An idle session that nobody uses again is closed by the next
	// CreateSession.
	now = now.Add(2 * time.Hour)
	if _, err := m.CreateSession(ctx, &pb.CreateSessionRequest{Graph: gd}); err != nil {
		t.Errorf("a session after the second went idle: %v", err)
	}
}

// TestPartitionsRegisteredAsTheMaster: the master registers a session's
// partitions in its own name on every task, whichever caller's step builds
// the plan, so callers that share a session do not collide on a worker
// that keeps each session to the caller that made it.
func TestPartitionsRegisteredAsTheMaster(t *testing.T) {
	m := limitedMaster(master.Config{})
	a := service.WithCaller(context.Background(), "client:a")
	b := service.WithCaller(context.Background(), "client:b")
	gd := chain(t, 3)
	cs, err := m.CreateSession(a, &pb.CreateSessionRequest{Graph: gd})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.RunStep(a, &pb.RunStepRequest{SessionHandle: cs.GetSessionHandle(), Fetches: []string{"Const:0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RunStep(b, &pb.RunStepRequest{SessionHandle: cs.GetSessionHandle(), Fetches: []string{out(gd)}}); err != nil {
		t.Errorf("a step of another caller in the session: %v", err)
	}
}

// TestGraphBuildingTimePerCaller: a caller spends at most its share of the
// master's time building graphs (Config.BuildShare, BuildBurst at once);
// past it, it is refused until its share has come back, while another
// caller is not; a caller's concurrent sessions are built one at a time.
func TestGraphBuildingTimePerCaller(t *testing.T) {
	now := time.Unix(1000, 0)
	m := limitedMaster(master.Config{BuildShare: 0.5, BuildBurst: time.Microsecond, Now: func() time.Time { return now }})
	a := service.WithCaller(context.Background(), "client:a")
	b := service.WithCaller(context.Background(), "client:b")
	big := chain(t, 5000) // takes more than the burst to decode
	if _, err := m.CreateSession(a, &pb.CreateSessionRequest{Graph: big}); err != nil {
		t.Fatalf("the first session: %v", err)
	}
	_, err := m.CreateSession(a, &pb.CreateSessionRequest{Graph: chain(t, 2)})
	if !errors.Is(err, master.ErrTooManySessions) || !strings.Contains(err.Error(), "master.Config.BuildShare") || !strings.Contains(err.Error(), "client:a") || !strings.Contains(err.Error(), "retry in") {
		t.Errorf("a session past the caller's building time: %v, want master.ErrTooManySessions naming the caller, BuildShare and when to retry", err)
	}
	if _, err := m.CreateSession(b, &pb.CreateSessionRequest{Graph: chain(t, 2)}); err != nil {
		t.Errorf("another caller is not limited by the first: %v", err)
	}
	now = now.Add(time.Minute) // the share has come back
	if _, err := m.CreateSession(a, &pb.CreateSessionRequest{Graph: chain(t, 2)}); err != nil {
		t.Errorf("a session once the share has come back: %v", err)
	}

	// Concurrent sessions of one caller with its share to spend: built
	// one at a time, none refused.
	m = limitedMaster(master.Config{BuildShare: 0.5, BuildBurst: time.Hour})
	errs, gd := make(chan error, 8), chain(t, 200)
	for range cap(errs) {
		go func() {
			_, err := m.CreateSession(a, &pb.CreateSessionRequest{Graph: gd})
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("a concurrent session: %v", err)
		}
	}
}
