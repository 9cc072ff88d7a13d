package taskgraph_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/device"
	_ "github.com/distflow/distflow/device/cuda" // DISTFLOW_TEST_PLATFORM=cuda
	"github.com/distflow/distflow/device/sim"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

const task = "/job:localhost/task:0"

// trainer is a reference model built on /gpu:0 with its SGD step.
type trainer struct {
	g             *graph.Graph
	m             *models.Model
	init, trainOp *graph.Node
}

func build(t *testing.T, model string) *trainer {
	t.Helper()
	root := graph.NewScope()
	s := root.WithDevice("/gpu:0")
	m, err := models.Build(s, model, models.Config{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := train.NewOptimizer("sgd", 0.1)
	op, err := train.Minimize(s, opt, m.Loss, train.CreateGlobalStep(root))
	if err != nil {
		t.Fatal(err)
	}
	ginit := ops.GlobalVariablesInitializer(root)
	if err := root.Err(); err != nil {
		t.Fatal(err)
	}
	return &trainer{g: root.Graph(), m: m, init: ginit, trainOp: op}
}

func batch(r *rand.Rand, n int) (*tensor.Tensor, *tensor.Tensor) {
	x := tensor.New(tensor.Float32, n, 784)
	for i := range x.Float32s() {
		x.Float32s()[i] = r.Float32()
	}
	y := tensor.New(tensor.Int32, n)
	for i := range y.Int32s() {
		y.Int32s()[i] = int32(r.IntN(10))
	}
	return x, y
}

// reference makes tr the host's reference training: every node runs on
// the CPU but the random ops of device.Random, which stay on /gpu:0, so
// that the reference draws the same numbers as a training on the device
// (the devices' Philox stream, not the CPU kernels' PCG streams).
func reference(tr *trainer) *trainer {
	for _, n := range tr.g.Nodes() {
		if !slices.Contains(device.Random, n.Op()) {
			n.SetDevice("")
		}
	}
	return tr
}

// losses trains tr for steps on devs and returns each step's loss. With
// ref, tr is a reference (see reference): only its random ops may run on
// devs.
func losses(t *testing.T, tr *trainer, devs []device.Device, steps, batchSize int, replays int, ref bool) []float32 {
	t.Helper()
	ctx := context.Background()
	res := kernel.NewResources()
	cfg := taskgraph.Config{Task: task, Devices: devs, SoftPlacement: true, RandomOnDevice: true}
	initE, err := taskgraph.New(tr.g, graph.Signature{Targets: []*graph.Node{tr.init}}, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := initE.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	e, err := taskgraph.New(tr.g, graph.Signature{Feeds: []graph.Output{tr.m.Input, tr.m.Label},
		Fetches: []graph.Output{tr.m.Loss}, Targets: []*graph.Node{tr.trainOp}}, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !ref && e.Accelerated() != (len(devs) > 0) {
		t.Fatalf("Accelerated() = %v with %d devices", e.Accelerated(), len(devs))
	}
	if len(devs) > 0 && !ref {
		onGPU := map[string]bool{}
		for name, d := range e.Placement() {
			if strings.HasSuffix(d, "/gpu:0") {
				onGPU[tr.g.Node(name).Op()] = true
			}
		}
		for _, op := range []string{"MatMul", "BiasAdd", "SparseSoftmaxCrossEntropyWithLogits", "BiasAddGrad"} {
			if !onGPU[op] {
				t.Errorf("no %s ran on the GPU (on it: %v)", op, onGPU)
			}
		}
		for _, op := range []string{"Variable", "ApplyGradientDescent"} {
			if onGPU[op] {
				t.Errorf("%s ran on the GPU: without Config.VariablesOnDevice the variables live on the host", op)
			}
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	var out []float32
	for i := range steps {
		n := batchSize
		if i%5 == 4 {
			n = batchSize/2 + 1 // a short batch: other shapes, another captured step
		}
		x, y := batch(r, n)
		v, err := e.Run(ctx, []*tensor.Tensor{x, y})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v[0].Float32s()[0])
	}
	if len(devs) > 0 {
		if e.Replays() != replays {
			t.Errorf("%d device partitions replay whole steps, want %d", e.Replays(), replays)
		}
		e.Close()
		initE.Close()
	}
	return out
}

// openSim opens devices of the platform the tests run on: the simulator,
// or DISTFLOW_TEST_PLATFORM's (cuda on a GPU machine: scripts/gpu_check.sh).
func openSim(t *testing.T, opts device.Options) []device.Device {
	t.Helper()
	var p device.Platform = sim.New(sim.Config{Cards: 1, CardBytes: 1 << 30})
	if name := os.Getenv("DISTFLOW_TEST_PLATFORM"); name != "" {
		var err error
		if p, err = device.Lookup(name); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Probe(); err != nil {
			t.Skipf("DISTFLOW_TEST_PLATFORM=%s: %v", name, err)
		}
	}
	devs, err := p.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			d.Close()
		}
	})
	return devs
}

// tolerance is how far a device's loss may be from the CPU's: none on
// the simulator, which computes with the CPU kernels; a real device sums
// in another order.
func tolerance() float64 {
	if os.Getenv("DISTFLOW_TEST_PLATFORM") == "" {
		return 1e-6
	}
	return 1e-3
}

// TestTrainsAsOnTheCPU trains the reference models with their compute on a
// simulated GPU and the variables on the host (Config.VariablesOnDevice
// off; TestVariablesOnDeviceTrainAsOnTheCPU keeps them on the GPU), and
// checks every step's loss against the same training on the CPU alone.
func TestTrainsAsOnTheCPU(t *testing.T) {
	for _, c := range []struct {
		model        string
		steps, batch int
		// replays: the steps of both replay whole, the CNN's with its
		// dropout mask drawn on the device, afresh at each replay.
		replays int
	}{{"mlp", 20, 32, 1}, {"cnn", 5, 4, 1}} {
		t.Run(c.model, func(t *testing.T) {
			devs := openSim(t, device.Options{Count: 1})
			want := losses(t, reference(build(t, c.model)), devs, c.steps, c.batch, 0, true)
			got := losses(t, build(t, c.model), devs, c.steps, c.batch, c.replays, false)
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > tolerance()*max(1, math.Abs(float64(want[i]))) {
					t.Fatalf("step %d: loss %g on the GPU, %g on the CPU", i, got[i], want[i])
				}
			}
			if want[len(want)-1] >= want[0] && c.steps > 5 {
				t.Errorf("the loss did not fall: %v", want)
			}
			if st := devs[0].Allocator().Stats(); st.Live != 0 || st.Peak == 0 {
				t.Errorf("after training: %+v: want memory used, and none left live", st)
			}
		})
	}
}

// TestSoftPlacementLoggedOnce: the ops asked for on a GPU that run on the
// CPU are logged with their reasons the first time a task's graph places
// them, and not again for another signature of the task; another task
// logs its own.
func TestSoftPlacementLoggedOnce(t *testing.T) {
	tr := build(t, "mlp")
	devs := openSim(t, device.Options{Count: 1})
	var logs bytes.Buffer
	cfg := taskgraph.Config{Task: "/job:worker/task:71", Devices: devs, SoftPlacement: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	newExec := func(sig graph.Signature) {
		t.Helper()
		e, err := taskgraph.New(tr.g, sig, kernel.NewResources(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
	}
	trainSig := graph.Signature{Feeds: []graph.Output{tr.m.Input, tr.m.Label}, Fetches: []graph.Output{tr.m.Loss}, Targets: []*graph.Node{tr.trainOp}}
	newExec(trainSig)
	first := logs.String()
	t.Logf("the first placement logs: %s", first)
	// The variables have no kernel on the GPU: they, and the updates that
	// take them by ref, stay on the host, each with its reason.
	for _, want := range []string{"soft placement", "task=/job:worker/task:71", "Variable: no " + devs[0].Info().Platform + " kernel for Variable", "ApplyGradientDescent: "} {
		if !strings.Contains(first, want) {
			t.Errorf("the first placement's log does not say %q:\n%s", want, first)
		}
	}
	logs.Reset()
	newExec(graph.Signature{Feeds: []graph.Output{tr.m.Input, tr.m.Label}, Fetches: []graph.Output{tr.m.Loss}})
	newExec(trainSig)
	if logs.Len() != 0 {
		t.Errorf("ops logged twice for one task:\n%s", logs.String())
	}
	cfg.Task = "/job:worker/task:72"
	newExec(trainSig)
	if !strings.Contains(logs.String(), "Variable: ") {
		t.Errorf("another task's fallback was not logged:\n%s", logs.String())
	}
}

// TestPlacementErrors: without soft placement a node on a GPU the task
// lacks, or an op without a GPU kernel, is refused by name.
func TestPlacementErrors(t *testing.T) {
	tr := build(t, "mlp")
	_, err := taskgraph.New(tr.g, graph.Signature{Feeds: []graph.Output{tr.m.Input, tr.m.Label},
		Fetches: []graph.Output{tr.m.Loss}}, kernel.NewResources(), taskgraph.Config{Task: task})
	if !errors.Is(err, placement.ErrNoDevice) || !strings.Contains(err.Error(), "the task has 0 GPUs") {
		t.Errorf("a GPU node on a task without GPUs: %v", err)
	}
}

// TestOutOfMemory: a step that does not fit in the device's memory fails
// naming the device and the bytes, frees what it took, and the device
// serves the next step.
func TestOutOfMemory(t *testing.T) {
	tr := build(t, "mlp")
	devs := openSim(t, device.Options{Count: 1, MemoryLimit: 2 << 20})
	ctx := context.Background()
	res := kernel.NewResources()
	cfg := taskgraph.Config{Task: task, Devices: devs, SoftPlacement: true}
	initE, _ := taskgraph.New(tr.g, graph.Signature{Targets: []*graph.Node{tr.init}}, res, cfg)
	if _, err := initE.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	e, err := taskgraph.New(tr.g, graph.Signature{Feeds: []graph.Output{tr.m.Input, tr.m.Label},
		Fetches: []graph.Output{tr.m.Loss}, Targets: []*graph.Node{tr.trainOp}}, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	x, y := batch(r, 2000) // 784*2000*4 bytes: 6 MiB of input alone
	_, err = e.Run(ctx, []*tensor.Tensor{x, y})
	if !errors.Is(err, device.ErrOutOfMemory) || !strings.Contains(err.Error(), "GPU:0") {
		t.Fatalf("a batch too large for the device: %v, want ErrOutOfMemory naming GPU:0", err)
	}
	if st := devs[0].Allocator().Stats(); st.Live != 0 {
		t.Errorf("after the failed step %d allocations are live", st.Live)
	}
	x, y = batch(r, 16)
	if _, err := e.Run(ctx, []*tensor.Tensor{x, y}); err != nil {
		t.Errorf("a step that fits, after one that did not: %v", err)
	}
}

// TestFetchFed: a fetch that is also fed returns the fed tensor, as on
// the CPU, whether it is a placeholder or a tensor computed on the GPU
// that the step feeds instead.
func TestFetchFed(t *testing.T) {
	root := graph.NewScope()
	s := root.WithDevice("/gpu:0")
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2, 2))
	h := ops.MatMul(s, x, x, false, true)
	y := ops.Relu(s, h)
	if err := root.Err(); err != nil {
		t.Fatal(err)
	}
	devs := openSim(t, device.Options{Count: 1})
	xv := tensor.MustFromSlice([]float32{1, -2, 3, 4}, 2, 2)
	hv := tensor.MustFromSlice([]float32{-1, 2, -3, 4}, 2, 2)
	for _, c := range []struct {
		name  string
		sig   graph.Signature
		feeds []*tensor.Tensor
		want  [][]float32
	}{
		{"placeholder", graph.Signature{Feeds: []graph.Output{x}, Fetches: []graph.Output{y, x, x}},
			[]*tensor.Tensor{xv}, [][]float32{{5, 0, 0, 25}, {1, -2, 3, 4}, {1, -2, 3, 4}}},
		{"computed", graph.Signature{Feeds: []graph.Output{h}, Fetches: []graph.Output{h, y}},
			[]*tensor.Tensor{hv}, [][]float32{{-1, 2, -3, 4}, {0, 2, 0, 4}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := taskgraph.New(root.Graph(), c.sig, kernel.NewResources(), taskgraph.Config{Task: task, Devices: devs})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			out, err := e.Run(context.Background(), c.feeds)
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range c.want {
				if got := out[i].Float32s(); !slices.Equal(got, w) {
					t.Errorf("fetch %s = %v, want %v", c.sig.Fetches[i], got, w)
				}
			}
		})
	}
}
