package master_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// placeholders adds the inputs of one replica of the model.
func placeholders(s *graph.Scope, suffix string) (x, y graph.Output) {
	return ops.Placeholder(s, "x"+suffix, tensor.Float32, tensor.MakeShape(-1, 4)),
		ops.Placeholder(s, "y"+suffix, tensor.Float32, tensor.MakeShape(-1, 2))
}

// variables adds the weights of a 4-3-2 classifier.
func variables(s *graph.Scope) []*ops.Variable {
	return []*ops.Variable{
		ops.NewVariable(s, "w1", tensor.Float32, []int{4, 3}, ops.ZerosInit()),
		ops.NewVariable(s, "b1", tensor.Float32, []int{3}, ops.ZerosInit()),
		ops.NewVariable(s, "w2", tensor.Float32, []int{3, 2}, ops.ZerosInit()),
		ops.NewVariable(s, "b2", tensor.Float32, []int{2}, ops.ZerosInit()),
	}
}

// model adds the MLP on x and y (sigmoid hidden layer, softmax
// cross-entropy) and returns its loss.
func model(s *graph.Scope, x, y graph.Output, vars []*ops.Variable) graph.Output {
	h := ops.Sigmoid(s, ops.BiasAdd(s, ops.MatMul(s, x, vars[0].Value(), false, false), vars[1].Value()))
	logits := ops.BiasAdd(s, ops.MatMul(s, h, vars[2].Value(), false, false), vars[3].Value())
	xent, _ := ops.SoftmaxCrossEntropyWithLogits(s, logits, y)
	return ops.Mean(s, xent, nil, false)
}

// TestPlanGolden plans the reference topologies (SPEC.md) and compares the
// plans' text (Plan.String: routes, then every task's partition with its
// nodes, devices and Send/Recv keys) with testdata/*.golden. Run with
// -update to rewrite them after an intended change.
func TestPlanGolden(t *testing.T) {
	const (
		ps0, ps1, ps2 = "/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2"
		w0, w1        = "/job:worker/task:0", "/job:worker/task:1"
	)
	cpus := func(tasks ...string) []string {
		var out []string
		for _, t := range tasks {
			out = append(out, t+"/cpu:0")
		}
		return out
	}
	tests := []struct {
		name  string
		build func(t *testing.T) (*graph.Graph, graph.Signature)
		opts  placement.Options
	}{
		{
			// Between-graph: worker 1's client, variables on the ps by the
			// replica device setter; its session sees the ps and itself.
			name: "between_graph_1ps_2workers",
			opts: placement.Options{Devices: cpus(ps0, w1), Default: w1 + "/cpu:0", SoftPlacement: true},
			build: func(t *testing.T) (*graph.Graph, graph.Signature) {
				s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{PSTasks: 1, WorkerDevice: w1}))
				x, y := placeholders(s, "")
				loss := model(s, x, y, variables(s))
				step, err := train.Minimize(s, train.NewGradientDescent(0.5), loss, train.CreateGlobalStep(s))
				if err != nil {
					t.Fatal(err)
				}
				return s.Graph(), graph.Signature{Feeds: []graph.Output{x, y}, Fetches: []graph.Output{loss}, Targets: []*graph.Node{step}}
			},
		},
		{
			// In-graph: one client, the variables on the ps, a tower per
			// worker, the towers' gradients averaged and applied on the ps.
			name: "in_graph_2towers",
			opts: placement.Options{Devices: cpus(ps0, w0, w1), Default: w0 + "/cpu:0", SoftPlacement: true},
			build: func(t *testing.T) (*graph.Graph, graph.Signature) {
				root := graph.NewScope()
				opt := train.NewGradientDescent(0.5)
				vars := variables(root.WithDevice(ps0))
				var feeds, losses []graph.Output
				var grads [][]train.GradVar
				for i, w := range []string{w0, w1} {
					s := root.WithDevice(w).SubScope(fmt.Sprintf("tower%d", i))
					x, y := placeholders(s, "")
					loss := model(s, x, y, vars)
					gvs, err := opt.ComputeGradients(s, loss, vars)
					if err != nil {
						t.Fatal(err)
					}
					feeds = append(feeds, x, y)
					losses = append(losses, loss)
					grads = append(grads, gvs)
				}
				ps := root.WithDevice(ps0).SubScope("average")
				var avg []train.GradVar
				for k := range grads[0] {
					g := ops.Mul(ps, ops.Add(ps, grads[0][k].Grad, grads[1][k].Grad), ops.Const(ps, float32(0.5)))
					avg = append(avg, train.GradVar{Grad: g, Var: grads[0][k].Var})
				}
				step, err := opt.ApplyGradients(root.WithDevice(ps0), avg, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := root.Err(); err != nil {
					t.Fatal(err)
				}
				return root.Graph(), graph.Signature{Feeds: feeds, Fetches: losses, Targets: []*graph.Node{step}}
			},
		},
		{
			// A partitioned variable over 3 ps tasks: each shard on its ps,
			// the lookup (Concat, MatMul) on the worker.
			name: "partitioned_3ps",
			opts: placement.Options{Devices: cpus(ps0, ps1, ps2, w0), Default: w0 + "/cpu:0", SoftPlacement: true},
			build: func(t *testing.T) (*graph.Graph, graph.Signature) {
				s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{PSTasks: 3, WorkerDevice: w0}))
				x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 6))
				emb, err := ops.NewPartitionedVariable(s, "emb", tensor.Float32, []int{6, 2}, ops.ZerosInit(), 3)
				if err != nil {
					t.Fatal(err)
				}
				out := ops.MatMul(s, x, emb.Value(), false, false)
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				return s.Graph(), graph.Signature{Feeds: []graph.Output{x}, Fetches: []graph.Output{out}}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, sig := tc.build(t)
			p, err := master.NewPlan(g, sig, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			got := p.String()
			if again, err := master.NewPlan(g, sig, tc.opts); err != nil || again.String() != got {
				t.Errorf("planning twice gave another plan (err %v)", err)
			}
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("plan differs from %s (run with -update if intended):\n%s", path, got)
			}
		})
	}
}
