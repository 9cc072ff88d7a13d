package worker_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"testing"

	"github.com/distflow/distflow/internal/race"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/worker"
)

// leakRequests returns n, or n/10 under -short or -race unless
// DISTFLOW_LEAK_FULL is set, with the heap growth allowed for n requests
// scaled alike.
func leakRequests(n int, bound uint64) (int, uint64) {
	if (testing.Short() || race.Enabled) && os.Getenv("DISTFLOW_LEAK_FULL") == "" {
		return n / 10, bound / 10
	}
	return n, bound
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestNoStateForStepsThatNeverRun: receives for steps that no partition
// runs here leave nothing behind: the task's live heap does not grow with
// their number.
func TestNoStateForStepsThatNeverRun(t *testing.T) {
	w := worker.New(worker.Config{Task: "/job:ps/task:0"})
	key := rendezvous.Key("/job:ps/task:0/cpu:0", "/job:worker/task:0/cpu:0", "w:0")
	gone, cancel := context.WithCancel(context.Background())
	cancel() // the deadline of a request that waited in vain

	n, bound := leakRequests(1_000_000, 10<<20)
	before := liveHeap()
	for i := range n {
		step := int64(i) + 1
		var err error
		if i%2 == 0 {
			_, err = w.RecvTensor(gone, step, key)
		} else {
			_, _, err = w.LendTensor(gone, step, key)
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("request %d for step %d: %v; want context.Canceled", i, step, err)
		}
	}
	after := liveHeap()
	runtime.KeepAlive(w) // the task lives on: what it keeps counts
	grew := int64(after) - int64(before)
	t.Logf("%d requests: the live heap grew by %.2f MiB", n, float64(grew)/(1<<20))
	if grew >= int64(bound) {
		t.Errorf("%d receives for steps that never run: the live heap grew by %.1f MiB; want less than %.1f MiB", n, float64(grew)/(1<<20), float64(bound)/(1<<20))
	}
}

// TestNoStateForFailedRunGraph: RunGraph calls that fail before their
// step starts leave nothing behind but a bounded memory of the last
// failures (so that a late receive of such a step fails at once).
func TestNoStateForFailedRunGraph(t *testing.T) {
	w := worker.New(worker.Config{Task: "/job:ps/task:0"})
	// Not scaled down: the last failures' reasons, a few thousand, are a
	// fixed megabyte.
	const n, bound = 100_000, 10 << 20
	before := liveHeap()
	for i := range n {
		_, err := w.RunGraph(context.Background(), &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: "nope", StepId: int64(i) + 1<<40})
		if !errors.Is(err, worker.ErrNoGraph) {
			t.Fatalf("RunGraph %d of an unknown graph: %v; want ErrNoGraph", i, err)
		}
	}
	after := liveHeap()
	runtime.KeepAlive(w)
	grew := int64(after) - int64(before)
	t.Logf("%d requests: the live heap grew by %.2f MiB", n, float64(grew)/(1<<20))
	if grew >= int64(bound) {
		t.Errorf("%d failed RunGraph calls: the live heap grew by %.1f MiB; want less than %.1f MiB", n, float64(grew)/(1<<20), float64(bound)/(1<<20))
	}
}
