package worker_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	svc "github.com/distflow/distflow/service"
	"github.com/distflow/distflow/train"
	"github.com/distflow/distflow/worker"
)

// heapHeld returns the heap bytes in use after a collection.
func heapHeld() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

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

// decodedSize measures the heap that graph.FromProto(gd) holds.
func decodedSize(t *testing.T, gd *pb.GraphDef) int64 {
	t.Helper()
	copies := max(1, (2<<20)/proto.Size(gd))
	return heldBy(func() func() {
		gs := make([]*graph.Graph, copies)
		for i := range gs {
			g, err := graph.FromProto(gd)
			if err != nil {
				t.Fatal(err)
			}
			gs[i] = g
		}
		return func() { runtime.KeepAlive(gs); gs = nil }
	}) / int64(copies)
}

// trainingGraph is the training graph of a reference model.
func trainingGraph(t *testing.T, name string) *pb.GraphDef {
	t.Helper()
	s := graph.NewScope()
	m, err := models.Build(s, name, models.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := train.Minimize(s, train.NewGradientDescent(0.1), m.Loss, train.CreateGlobalStep(s)); err != nil {
		t.Fatal(err)
	}
	return s.Graph().ToProto()
}

// smallNodes is a graph of n small nodes, each reading the one before: the
// most memory a decoded graph holds per serialised byte.
func smallNodes(t *testing.T, n int) *pb.GraphDef {
	t.Helper()
	s := graph.NewScope()
	x := ops.Const(s, float32(1))
	for range n {
		x = ops.Identity(s, x)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s.Graph().ToProto()
}

// TestGraphMemoryEstimate: worker.GraphMemory is at least what a decoded
// graph holds (within a few percent) and not far above it, on the reference
// models and on graphs of many small nodes.
func TestGraphMemoryEstimate(t *testing.T) {
	cases := map[string]*pb.GraphDef{"small nodes": smallNodes(t, 20000), "const 1 MiB": bigGraph(t, 1024),
		"control inputs": controlInputs(t, 2000, 20)}
	for _, name := range []string{"linreg", "mlp", "cnn"} {
		cases[name] = trainingGraph(t, name)
	}
	for name, gd := range cases {
		t.Run(name, func(t *testing.T) {
			held := decodedSize(t, gd)
			est := worker.GraphMemory(gd)
			size := proto.Size(gd)
			t.Logf("%d nodes, %d bytes serialised, %d held (%.1fx), estimate %d (%.2f of held)", len(gd.GetNode()), size, held,
				float64(held)/float64(size), est, float64(est)/float64(held))
			if float64(est) < 0.95*float64(held) || est > 3*held {
				t.Errorf("estimate %d for %d bytes held", est, held)
			}
		})
	}
}

// controlInputs is a graph of n NoOps, each with k control inputs.
func controlInputs(t *testing.T, n, k int) *pb.GraphDef {
	gd := &pb.GraphDef{Version: 1}
	for i := range n {
		nd := &pb.NodeDef{Name: fmt.Sprintf("n%d", i), Op: "NoOp"}
		for j := max(0, i-k); j < i; j++ {
			nd.Input = append(nd.Input, fmt.Sprintf("^n%d", j))
		}
		gd.Node = append(gd.Node, nd)
	}
	return gd
}

// TestGraphLimitCountsMemory: a session's graphs are counted by what they
// hold in memory, not by their serialised size, so the heap they hold
// stays within Config.MaxGraphBytes even for graphs of small nodes, which
// hold about 9 times their size.
func TestGraphLimitCountsMemory(t *testing.T) {
	gd := smallNodes(t, 20000) // about 880 KiB serialised, 7.3 MiB decoded
	const limit = 40 << 20
	w := worker.New(worker.Config{Task: victim, MaxGraphBytes: limit})
	ctx := context.Background()
	n := 0
	grown := heldBy(func() func() {
		for n = 0; n < 12; n++ {
			_, err := w.RegisterGraph(ctx, &pb.RegisterGraphRequest{SessionHandle: "s", Graph: gd})
			if err != nil {
				if !errors.Is(err, worker.ErrTooManyGraphs) || !strings.Contains(err.Error(), "worker.Config.MaxGraphBytes") {
					t.Fatalf("registration %d: %v, want worker.ErrTooManyGraphs naming worker.Config.MaxGraphBytes", n, err)
				}
				break
			}
		}
		return func() { w.CloseSession(ctx, &pb.WorkerCloseSessionRequest{SessionHandle: "s"}) }
	})
	t.Logf("%d graphs of %d bytes registered, holding %d bytes, limit %d", n, proto.Size(gd), grown, limit)
	if n == 0 || grown > limit+limit/8 {
		t.Errorf("%d graphs registered, holding %d bytes: over the limit of %d", n, grown, limit)
	}
	runtime.KeepAlive(w)
}

// TestGraphLimitsPerCaller: the sessions and graph memory a caller holds
// on a task are bounded whatever names it gives its sessions; other
// callers keep their own share, and a session is the caller's that made
// it.
func TestGraphLimitsPerCaller(t *testing.T) {
	gd := bigGraph(t, 64)
	size := worker.GraphMemory(gd)
	w := worker.New(worker.Config{Task: victim, MaxCallerSessions: 3, MaxCallerGraphBytes: 5 * size})
	a := svc.WithCaller(context.Background(), "/job:worker/task:1")
	b := svc.WithCaller(context.Background(), "/job:worker/task:2")
	register := func(ctx context.Context, session string) error {
		_, err := w.RegisterGraph(ctx, &pb.RegisterGraphRequest{SessionHandle: session, Graph: gd})
		return err
	}
	for i := range 3 {
		if err := register(a, fmt.Sprintf("s%d", i)); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
	}
	if err := register(a, "s3"); !errors.Is(err, worker.ErrTooManyGraphs) || !strings.Contains(err.Error(), "worker.Config.MaxCallerSessions") ||
		!strings.Contains(err.Error(), "/job:worker/task:1") {
		t.Errorf("a fourth session: %v, want worker.ErrTooManyGraphs naming the caller and worker.Config.MaxCallerSessions", err)
	}
	for i := range 2 {
		if err := register(a, "s0"); err != nil {
			t.Fatalf("graph %d more: %v", i, err)
		}
	}
	if err := register(a, "s1"); !errors.Is(err, worker.ErrTooManyGraphs) || !strings.Contains(err.Error(), "worker.Config.MaxCallerGraphBytes") {
		t.Errorf("a sixth graph: %v, want worker.ErrTooManyGraphs naming worker.Config.MaxCallerGraphBytes", err)
	}
	if err := register(b, "s0"); !errors.Is(err, svc.ErrPermissionDenied) {
		t.Errorf("another caller's graph in the session: %v, want service.ErrPermissionDenied", err)
	}
	if err := register(b, "b0"); err != nil {
		t.Errorf("another caller is not limited by the first: %v", err)
	}
	if _, err := w.CloseSession(a, &pb.WorkerCloseSessionRequest{SessionHandle: "s0"}); err != nil {
		t.Fatal(err)
	}
	if err := register(a, "t0"); err != nil {
		t.Errorf("a session after closing one: %v", err)
	}
}
