package server_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/sim"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// TestGPUWorkerWithCPUParameterServer trains the MLP on a worker whose
// compute is on its (simulated) GPU while the variables live on a CPU ps,
// over loopback, and checks each step's loss against the same cluster
// without a GPU.
func TestGPUWorkerWithCPUParameterServer(t *testing.T) {
	const steps = 15
	run := func(gpus []device.Device) []float32 {
		tc := newTestCluster(t, map[string]int{"ps": 1, "worker": 1})
		tc.start(t, "ps", 0, nil)
		id := cluster.TaskID{Job: "worker", Index: 0}
		w, err := server.New(server.Config{Cluster: tc.spec, Task: id, Listener: tc.lis[id.String()], Logger: quiet, Devices: gpus})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)

		root := graph.NewScope()
		s := root.WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
			PSTasks: 1, WorkerDevice: "/job:worker/task:0/gpu:0"}))
		m, err := models.Build(s, "mlp", models.Config{Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		opt, _ := train.NewOptimizer("sgd", 0.2)
		trainOp, err := train.Minimize(s, opt, m.Loss, train.CreateGlobalStep(s))
		if err != nil {
			t.Fatal(err)
		}
		init := ops.GlobalVariablesInitializer(s)
		ctx := ctxTimeout(t, time.Minute)
		sess, err := session.Open(ctx, w.Target(), root.Graph())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sess.Close() })
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(9, 9))
		var losses []float32
		for range steps {
			x := tensor.New(tensor.Float32, 50, 784)
			for i := range x.Float32s() {
				x.Float32s()[i] = r.Float32()
			}
			y := tensor.New(tensor.Int32, 50)
			for i := range y.Int32s() {
				y.Int32s()[i] = int32(r.IntN(10))
			}
			out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{m.Input: x, m.Label: y}, []graph.Output{m.Loss}, []*graph.Node{trainOp})
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, out[0].Float32s()[0])
		}
		// Closing the session drops its graphs on the worker, and with
		// them the device memory their captured steps hold.
		if err := sess.Close(); err != nil {
			t.Fatal(err)
		}
		return losses
	}
	want := run(nil)
	gpus, err := sim.New(sim.Config{Cards: 1}).Open(device.Options{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gpus[0].Close() })
	got := run(gpus)
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-4*max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("step %d: loss %g with the GPU worker, %g without", i, got[i], want[i])
		}
	}
	if st := gpus[0].Allocator().Stats(); st.Peak == 0 || st.Live != 0 {
		t.Errorf("the GPU's allocator after the session closed: %+v; want memory used and none left live", st)
	}
}
