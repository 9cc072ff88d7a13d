package dashboard

import (
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
)

// TestFromGraph places a replica's graph as the replica device setter does:
// variables on the ps tasks, the rest on the worker; nodes without a
// device run on the default task.
func TestFromGraph(t *testing.T) {
	s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
		PSTasks: 2, WorkerDevice: "/job:worker/task:1"}))
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(1, 2))
	w := ops.NewVariable(s, "W", tensor.Float32, []int{2, 1}, ops.ZerosInit())
	b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
	ops.Add(s, ops.MatMul(s, x, w.Value(), false, false), b.Value())
	loose := graph.NewScope()
	ops.Scalar(loose, tensor.Float32, 1)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	g := FromGraph(s.Graph(), "/job:chief/task:0")
	tasks := map[string]string{}
	inputs := map[string][]string{}
	for _, n := range g.Nodes {
		tasks[n.Name], inputs[n.Name] = n.Task, n.Inputs
	}
	if tasks["W"] != "/job:ps/task:0" || tasks["b"] != "/job:ps/task:1" || tasks["x"] != "/job:worker/task:1" {
		t.Errorf("placement: %v", tasks)
	}
	var matmul, add string
	for _, n := range g.Nodes {
		switch n.Op {
		case "MatMul":
			matmul = n.Name
		case "Add":
			add = n.Name
		}
	}
	if tasks[matmul] != "/job:worker/task:1" || len(inputs[matmul]) != 2 || len(inputs[add]) != 2 {
		t.Errorf("MatMul %q on %s reads %v; Add %q reads %v", matmul, tasks[matmul], inputs[matmul], add, inputs[add])
	}
	for _, n := range FromGraph(loose.Graph(), "/job:chief/task:0").Nodes {
		if n.Task != "/job:chief/task:0" {
			t.Errorf("a node without a device: %+v, want it on the default task", n)
		}
	}
}
