package server_test

import (
	"context"
	"runtime/metrics"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/abtest"
	"github.com/distflow/distflow/internal/race"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// maxRemoteStepAllocs bounds the allocations of one remote linreg step with
// every task in this process: the client and its master on the worker, the
// ps over the tensor channel on loopback. The step keeps its count low by
// making once, not at every step, what does not change between steps: one
// step state, response and context per worker step, reused with its
// batches' closures; stepctx contexts rather than the standard ones, whose
// waits use a Hook, a WaitGroup per batch item and a condition per batch
// served instead of channels; a RunGraph request decoded once per
// responder; a lent Send's release made once per variable buffer; a
// step's first rendezvous items and batch waiter kept in its Local; and
// responses written into the caller's storage (service.RunnerInto). A step
// makes about 32: about 21 for the tensors and their protos, then
// each tensor-channel request's context (3), each worker's step
// rendezvous (2), the master's step state (its context and the
// response it returns) and the client's result. The margin is for the
// runtime's own.
const maxRemoteStepAllocs = 36

// TestRemoteStepAllocations keeps the remote step's allocations from
// creeping back: names, plans, requests and batches are made once, not at
// every step (docs/BENCHMARKS.md, "The remote step").
func TestRemoteStepAllocations(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector changes allocations (sync.Pool drops items at random)")
	}
	tc := newTestCluster(t, map[string]int{"ps": 1, "worker": 1})
	tc.start(t, "ps", 0, nil)
	w := tc.start(t, "worker", 0, nil)
	g, init := abtest.LinearModel(t, 0)
	sess, err := session.New(g, session.WithMaster(w.Master(), &pb.SessionConfig{StepTimeoutMs: 60000}))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	feeds := map[string]*tensor.Tensor{"x": tensor.MustFromSlice([]float32{0.5}, 1, 1), "y": tensor.MustFromSlice([]float32{2}, 1, 1)}
	step := func() {
		if _, err := sess.RunNamed(ctx, feeds, nil, []string{"train"}); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // plans, executors, connections and pools made
		step()
	}
	n := testing.AllocsPerRun(500, step)
	t.Logf("%.0f allocations per remote step (at most %d)", n, maxRemoteStepAllocs)
	if n > maxRemoteStepAllocs {
		t.Errorf("a remote step made %.0f allocations, more than %d: something is made at every step that was made once", n, maxRemoteStepAllocs)
	}
	// Nor goroutines: a standard context derived from a stepctx.Context
	// seen through values watches it with one (see internal/stepctx).
	const steps = 500
	g0 := goroutinesCreated()
	for range steps {
		step()
	}
	if g := float64(goroutinesCreated()-g0) / steps; g > 0.1 {
		t.Errorf("a remote step started %.2f goroutines, want none", g)
	}
}

// goroutinesCreated returns the number of goroutines the process started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
