//go:build linux

package cuda

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/runner"
	"github.com/distflow/distflow/device/sim"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/models"
	gops "github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// TestFakeTrainCNN trains the reference CNN, dropout included, on the
// platform over the fake libraries: the GEMM convolutions on the fake
// cuBLAS, the dropout mask from the Philox kernel, every step after the
// second replayed from a CUDA graph. Each step's loss must be the loss of
// the same training on the CPU whose random ops alone run on the
// simulator, which draws the same Philox stream in Go: the same dropout
// masks, step after step, if the CUDA kernels draw them right.
func TestFakeTrainCNN(t *testing.T) { fakeTrainCNN(t, false) }

// TestFakeTrainCNNDeviceVariables is TestFakeTrainCNN with the variables
// in the fake GPU's memory, updated there in place by the update kernels
// (in the replayed CUDA graphs too): the same losses as the CPU's, and a
// step copies in the batch alone.
func TestFakeTrainCNNDeviceVariables(t *testing.T) { fakeTrainCNN(t, true) }

// fakeTrainCNN trains the CNN over the fake libraries, with its variables
// in the GPU's memory if vars, and compares its losses with the CPU's.
func fakeTrainCNN(t *testing.T, vars bool) {
	t.Setenv("DISTFLOW_CUDA_LIB_PATH", fakeDir(t))
	devs, err := (&Platform{}).Open(device.Options{Count: 1, MemoryLimit: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	simDevs, err := sim.New(sim.Config{Cards: 1}).Open(device.Options{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer simDevs[0].Close()
	const steps = 5
	want := trainCNN(t, simDevs, steps, true, false)
	got := trainCNN(t, devs, steps, false, vars)
	t.Logf("losses on the GPU %v (variables in its memory: %v), on the CPU %v", got, vars, want)
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*max(1, math.Abs(float64(want[i]))) {
			t.Errorf("step %d: loss %g on the GPU, %g on the CPU", i, got[i], want[i])
		}
	}
	if st := devs[0].Allocator().Stats(); st.Live != 0 {
		t.Errorf("%d allocations live after training", st.Live)
	}
}

// trainCNN trains the CNN for steps on devs, with every node but the
// random ops on the host if reference, and the variables in device memory
// if vars, and returns the losses.
func trainCNN(t *testing.T, devs []device.Device, steps int, reference, vars bool) []float32 {
	t.Helper()
	root := graph.NewScope()
	s := root.WithDevice("/gpu:0")
	m, err := models.Build(s, "cnn", models.Config{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := train.NewOptimizer("sgd", 0.01)
	op, err := train.Minimize(s, opt, m.Loss, train.CreateGlobalStep(root))
	if err != nil {
		t.Fatal(err)
	}
	init := gops.GlobalVariablesInitializer(root)
	if err := root.Err(); err != nil {
		t.Fatal(err)
	}
	if reference {
		for _, n := range root.Graph().Nodes() {
			if !slices.Contains(device.Random, n.Op()) {
				n.SetDevice("")
			}
		}
	}
	ctx := context.Background()
	res := kernel.NewResources()
	defer taskgraph.ReleaseVariables(res) // after the executors
	cfg := taskgraph.Config{Task: "/job:localhost/task:0", Devices: devs, SoftPlacement: true, RandomOnDevice: true, VariablesOnDevice: vars}
	initialize(t, root.Graph(), init, res, cfg)
	e, err := taskgraph.New(root.Graph(), graph.Signature{Feeds: []graph.Output{m.Input, m.Label},
		Fetches: []graph.Output{m.Loss}, Targets: []*graph.Node{op}}, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := rand.New(rand.NewPCG(5, 6))
	var out []float32
	var copies runner.Transfers
	for range steps {
		x, y := tensor.New(tensor.Float32, 4, 784), tensor.New(tensor.Int32, 4)
		for i := range x.Float32s() {
			x.Float32s()[i] = r.Float32()
		}
		for i := range y.Int32s() {
			y.Int32s()[i] = int32(r.IntN(10))
		}
		before := e.Transfers()
		v, err := e.Run(ctx, []*tensor.Tensor{x, y})
		if err != nil {
			t.Fatal(err)
		}
		copies = e.Transfers().Sub(before)
		out = append(out, v[0].Float32s()[0])
	}
	if vars && (copies.In != 2 || copies.Out != 1) {
		t.Errorf("a replayed step with the variables on the GPU copies %+v, want the batch in and the loss out", copies)
	}
	if !reference && e.Replays() != 1 {
		t.Errorf("the CNN's steps on the GPU: %d partitions replay, want 1", e.Replays())
	}
	return out
}

// TestFakeTrainWideDeep trains the wide-and-deep model (models.ModelFn,
// estimator.BinaryClassificationHead's sigmoid cross-entropy, Adagrad) on
// the platform over the fake libraries: its dense part, forward and
// backward, must run on the GPU with the package's kernels (Concat and
// its gradient's Slice, the loss's Abs, Maximum and Softplus, their
// gradients' Sign, SelectV2 and AddN), the embeddings' lookups and
// partitions on the CPU, and each step's loss must be the CPU's.
func TestFakeTrainWideDeep(t *testing.T) {
	t.Setenv("DISTFLOW_CUDA_LIB_PATH", fakeDir(t))
	devs, err := (&Platform{}).Open(device.Options{Count: 1, MemoryLimit: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	const steps = 4
	want, _ := trainWideDeep(t, nil, steps)
	got, onGPU := trainWideDeep(t, devs, steps)
	t.Logf("losses on the GPU %v, on the CPU %v", got, want)
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*max(1, math.Abs(float64(want[i]))) {
			t.Errorf("step %d: loss %g on the GPU, %g on the CPU", i, got[i], want[i])
		}
	}
	for _, op := range []string{"Abs", "AddN", "Concat", "Maximum", "SelectV2", "Sign", "Slice", "Softplus", "MatMul", "Relu", "ReluGrad"} {
		if !onGPU[op] {
			t.Errorf("no %s of the dense part ran on the GPU (on it: %v)", op, onGPU)
		}
	}
	if st := devs[0].Allocator().Stats(); st.Live != 0 {
		t.Errorf("%d allocations live after training", st.Live)
	}
}

// trainWideDeep trains a small wide-and-deep model for steps on devs (the
// CPU alone if none) and returns the losses and the ops that ran on the
// GPU (none of them if one of their nodes ran elsewhere).
func trainWideDeep(t *testing.T, devs []device.Device, steps int) ([]float32, map[string]bool) {
	t.Helper()
	const vocab, batch = 10, 24
	root := graph.NewScope()
	s := root
	if devs != nil {
		s = root.WithDevice("/gpu:0")
	}
	opt, _ := train.NewOptimizer("adagrad", 0.1)
	fn, err := models.ModelFn("widedeep", models.Config{Seed: 3, WideDeep: models.WideDeepConfig{Vocab: vocab, Dim: 4, Hidden: []int{16, 8}}}, opt)
	if err != nil {
		t.Fatal(err)
	}
	cat := gops.Placeholder(s, "cat", tensor.Int64, tensor.MakeShape(-1, data.CategoricalFeatures))
	dense := gops.Placeholder(s, "dense", tensor.Float32, tensor.MakeShape(-1, data.DenseFeatures))
	labels := gops.Placeholder(s, "labels", tensor.Float32, tensor.MakeShape(-1))
	spec, err := fn(s, estimator.Features{"cat": cat, "dense": dense}, labels, estimator.Train)
	if err != nil {
		t.Fatal(err)
	}
	op, err := train.Minimize(s, spec.Optimizer, spec.Loss, train.CreateGlobalStep(root))
	if err != nil {
		t.Fatal(err)
	}
	init := gops.GlobalVariablesInitializer(root)
	if err := root.Err(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res := kernel.NewResources()
	cfg := taskgraph.Config{Task: "/job:localhost/task:0", Devices: devs, SoftPlacement: true}
	initialize(t, root.Graph(), init, res, cfg)
	e, err := taskgraph.New(root.Graph(), graph.Signature{Feeds: []graph.Output{cat, dense, labels},
		Fetches: []graph.Output{spec.Loss}, Targets: []*graph.Node{op}}, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	onGPU, elsewhere := map[string]bool{}, map[string]bool{}
	for name, d := range e.Placement() {
		op := root.Graph().Node(name).Op()
		if strings.HasSuffix(d, "/gpu:0") {
			onGPU[op] = true
		} else {
			elsewhere[op] = true
		}
	}
	for op := range elsewhere {
		delete(onGPU, op)
	}
	r := rand.New(rand.NewPCG(7, 8))
	var out []float32
	for range steps {
		c, x, y := tensor.New(tensor.Int64, batch, data.CategoricalFeatures), tensor.New(tensor.Float32, batch, data.DenseFeatures), tensor.New(tensor.Float32, batch)
		for i := range c.Int64s() {
			c.Int64s()[i] = int64(i%data.CategoricalFeatures*vocab + r.IntN(vocab))
		}
		for i := range x.Float32s() {
			x.Float32s()[i] = float32(r.NormFloat64())
		}
		for i := range y.Float32s() {
			y.Float32s()[i] = float32(r.IntN(2))
		}
		v, err := e.Run(ctx, []*tensor.Tensor{c, x, y})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v[0].Float32s()[0])
	}
	return out, onGPU
}

// initialize runs init, the variables' initializer, on cfg's devices.
func initialize(t *testing.T, g *graph.Graph, init *graph.Node, res *kernel.Resources, cfg taskgraph.Config) {
	t.Helper()
	ie, err := taskgraph.New(g, graph.Signature{Targets: []*graph.Node{init}}, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ie.Close()
	if _, err := ie.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}
