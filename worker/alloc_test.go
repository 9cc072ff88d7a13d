package worker_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/race"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// batchPeer is a ps whose client serves batches at once from fixed
// tensors (service.BatchReceiver); it serves nothing else.
type batchPeer struct {
	worker.Service // nil: only the methods below are called
	vals           map[string]*tensor.Tensor
}

func (p batchPeer) RecvTensors(ctx context.Context, stepID int64, keys []string, deliver func(int, *tensor.Tensor, error)) error {
	for i, k := range keys {
		deliver(i, p.vals[k], nil)
	}
	return nil
}

type peers map[string]worker.Service

func (p peers) Worker(task string) (worker.Service, error) { return p[task], nil }
func (p peers) Tasks() []string                            { return []string{ps, wk} }

// maxBatchedStepAllocs bounds the worker's allocations for one step that
// receives two tensors from a peer in one batch and fetches their sum:
// the step's rendezvous (rendezvous.Table), the sum (two or three), the
// response and the fetch's proto (two): 8, with the margin of server's
// maxRemoteStepAllocs. Its state (stepState, which holds the step's
// context, the Recvs' shared fetch context and the batch's items, each
// waited for with a WaitGroup and its Recv's context watched with a
// Hook) comes from a pool, its batch's goroutine and delivery bound to
// it once. The step's state, kernel.Step, router and response once took
// eight allocations, and its batches and kernels a context each: 30; its
// standard contexts (the step's, the fetches') then took seven: 21; a
// channel per batch item and the fetch context's Done three: 14; the
// state, reused, and the batch's two closures (its goroutine's and its
// delivery's) three: 11.
const maxBatchedStepAllocs = 10

// TestBatchedStepAllocations keeps a step's own allocations on the worker
// from creeping back (see maxBatchedStepAllocs).
func TestBatchedStepAllocations(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts do not hold under the race detector")
	}
	key := func(name string) string { return ps + "/cpu:0;" + wk + "/cpu:0;" + name + ":0" }
	peer := batchPeer{vals: map[string]*tensor.Tensor{
		key("a"): tensor.MustFromSlice([]float32{1, 2}, 2),
		key("b"): tensor.MustFromSlice([]float32{10, 20}, 2),
	}}
	w := worker.New(worker.Config{Task: wk, Workers: peers{ps: peer}})
	h := register(t, w, "s", batchedGraph(t))
	ctx := context.Background()
	req := &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: h, Fetches: []string{"y/Identity:0"}}
	step := func(check bool) {
		req.StepId++
		resp, err := w.RunGraph(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !w.FinishStep(req.StepId) {
			t.Fatal("the step's rendezvous holds something after it ran")
		}
		if !check {
			return
		}
		if got, _ := graph.TensorFromProto(resp.GetFetches()[0].GetTensor()); got.Float32s()[1] != 22 {
			t.Fatalf("y = %v, want [11 22]", got)
		}
	}
	for range 10 { // the executor built, its pools filled
		step(true)
	}
	n := testing.AllocsPerRun(200, func() { step(false) })
	t.Logf("%.1f allocations per batched step (at most %d)", n, maxBatchedStepAllocs)
	if n > maxBatchedStepAllocs {
		t.Errorf("a batched step made %.1f allocations, more than %d: something is made at every step that was made once, or a step's state came apart", n, maxBatchedStepAllocs)
	}
}
