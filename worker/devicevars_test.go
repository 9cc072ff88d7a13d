package worker_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/sim"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// TestDeviceVariablesInStatus: with the variables kept in GPU memory
// (DISTFLOW_GPU_VARIABLES=1), a worker's variable on its GPU lives there,
// outlives the session's graph, and GetStatus lists it.
func TestDeviceVariablesInStatus(t *testing.T) {
	t.Setenv("DISTFLOW_GPU_VARIABLES", "1")
	devs, err := sim.New(sim.Config{Cards: 1}).Open(device.Options{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	w := worker.New(worker.Config{Task: wk, Devices: devs})
	ctx := context.Background()
	s := graph.NewScope().WithDevice(wk + "/gpu:0")
	v := ops.NewVariable(s, "v", tensor.Float32, []int{2, 3}, ops.OnesInit())
	ops.Identity(s.SubScope("read"), v.Value())
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	h := register(t, w, "s1", s.Graph().ToProto())
	if _, err := w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s1", GraphHandle: h, StepId: 1, Targets: []string{"v/Assign"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s1", GraphHandle: h, StepId: 2, Fetches: []string{"read/Identity:0"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := graph.TensorFromProto(resp.GetFetches()[0].GetTensor()); got == nil || got.Float32s()[5] != 1 {
		t.Errorf("v read on the GPU = %v, want ones", got)
	}
	st, err := w.GetStatus(ctx, &pb.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetVariables()) != 1 {
		t.Fatalf("status lists %v, want v alone", st.GetVariables())
	}
	if got := st.GetVariables()[0]; got.GetName() != "v" || !got.GetInitialized() || got.GetBytes() != 24 || len(got.GetDims()) != 2 {
		t.Errorf("variable status %v", got)
	}
	if st := devs[0].Allocator().Stats(); st.Live == 0 {
		t.Errorf("no memory of the GPU holds v")
	}
}

// TestDeviceGlobalStep: a global step on the worker's GPU (an int64
// variable incremented by AssignAdd, as an optimizer's step is) lives in
// the GPU's memory with its increment, counts every RunGraph, and GetStatus
// lists it.
func TestDeviceGlobalStep(t *testing.T) {
	t.Setenv("DISTFLOW_GPU_VARIABLES", "1")
	devs, err := sim.New(sim.Config{Cards: 1}).Open(device.Options{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	w := worker.New(worker.Config{Task: wk, Devices: devs})
	ctx := context.Background()
	s := graph.NewScope().WithDevice(wk + "/gpu:0")
	gs := ops.NewVariable(s, "global_step", tensor.Int64, nil, ops.ZerosInit())
	inc := ops.AssignAdd(s.SubScope("inc"), gs.Value(), ops.Scalar(s, tensor.Int64, 1))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	h := register(t, w, "s1", s.Graph().ToProto())
	if _, err := w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s1", GraphHandle: h, StepId: 1, Targets: []string{"global_step/Assign"}}); err != nil {
		t.Fatal(err)
	}
	for step := int64(1); step <= 4; step++ { // the third and fourth replay the second
		resp, err := w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s1", GraphHandle: h, StepId: 1 + step, Fetches: []string{inc.Name()}})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := graph.TensorFromProto(resp.GetFetches()[0].GetTensor()); got == nil || got.Int64s()[0] != step {
			t.Errorf("increment %d gave %v", step, got)
		}
	}
	st, err := w.GetStatus(ctx, &pb.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetVariables()) != 1 || st.GetVariables()[0].GetName() != "global_step" || !st.GetVariables()[0].GetInitialized() {
		t.Errorf("status lists %v, want the global step on the GPU", st.GetVariables())
	}
	if st := devs[0].Allocator().Stats(); st.Live == 0 {
		t.Errorf("no memory of the GPU holds the global step")
	}
}
