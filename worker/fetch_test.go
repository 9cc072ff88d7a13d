package worker_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/partition"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// freshPeer is batchPeer whose tensors are the receiver's own
// (service.FreshReceiver), a new copy at every request.
type freshPeer struct{ batchPeer }

func (p freshPeer) ReceivesFresh() bool { return true }

func (p freshPeer) RecvTensor(ctx context.Context, stepID int64, key string) (*tensor.Tensor, error) {
	return p.vals[key].Clone(), nil
}

// sharingPeer hands out its own tensors, as a worker in the same process
// may.
type sharingPeer struct{ batchPeer }

func (p sharingPeer) RecvTensor(ctx context.Context, stepID int64, key string) (*tensor.Tensor, error) {
	return p.vals[key], nil
}

func (p freshPeer) RecvTensors(ctx context.Context, stepID int64, keys []string, deliver func(int, *tensor.Tensor, error)) error {
	for i, k := range keys {
		deliver(i, p.vals[k].Clone(), nil)
	}
	return nil
}

// TestFetchesAliasOnlyWhatTheStepMade: a worker's response hands on
// uncopied only the tensors its step made (computed, or received as its
// own); a fetch of a fed tensor, or of a tensor a peer in the same
// process still holds, is copied, so that the response does not change
// with the request or the peer's tensor.
func TestFetchesAliasOnlyWhatTheStepMade(t *testing.T) {
	g := graph.New()
	recvA, err := g.AddNode(partition.RecvSpec("recv_a", "a:0", ps+"/cpu:0", wk+"/cpu:0", tensor.Float32, tensor.MakeShape(2)))
	if err != nil {
		t.Fatal(err)
	}
	s := graph.NewScopeWithGraph(g)
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2))
	ops.Identity(s.SubScope("received"), recvA.Output(0))
	ops.Identity(s.SubScope("fed"), x)
	ops.Identity(s.SubScope("sum"), ops.Add(s, recvA.Output(0), x))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	key := ps + "/cpu:0;" + wk + "/cpu:0;a:0"
	for _, fresh := range []bool{false, true} {
		a := tensor.MustFromSlice([]float32{1, 2}, 2)
		var peer worker.Service = sharingPeer{batchPeer{vals: map[string]*tensor.Tensor{key: a}}}
		if fresh {
			peer = freshPeer{batchPeer{vals: map[string]*tensor.Tensor{key: a}}}
		}
		w := worker.New(worker.Config{Task: wk, Workers: peers{ps: peer}})
		h := register(t, w, "s", g.ToProto())
		fed := graph.TensorToProto(tensor.MustFromSlice([]float32{10, 20}, 2))
		req := &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: h, StepId: 1,
			Feeds:   []*pb.NamedTensor{{Name: "x:0", Tensor: fed}},
			Fetches: []string{"received/Identity:0", "fed/Identity:0", "sum/Identity:0"}}
		resp, err := w.RunGraph(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got := resp.GetFetches()
		// The request's and the peer's tensors change after the step.
		a.Float32s()[0] = -1
		fed.Content[0] ^= 0xff
		for i, want := range [][]float32{{1, 2}, {10, 20}, {11, 22}} {
			v, err := graph.TensorFromProto(got[i].GetTensor())
			if err != nil {
				t.Fatal(err)
			}
			if vals := v.Float32s(); vals[0] != want[0] || vals[1] != want[1] {
				t.Errorf("fresh=%v: fetch %s = %v after the step, want %v: the response aliases a tensor the step did not own", fresh, req.Fetches[i], vals, want)
			}
		}
	}
}
