package taskgraph_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/runner"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// embedding is a bag-of-ids classifier on /gpu:0: a table of vocab rows
// looked up by a batch's ids (Gather, whose gradient is indexed slices),
// a dense layer, and its optimizer's step.
type embedding struct {
	g             *graph.Graph
	ids, labels   graph.Output
	loss          graph.Output
	table         *ops.Variable
	init, trainOp *graph.Node
}

const vocab, embedDim, classes = 50, 8, 3

func buildEmbedding(t *testing.T, optimizer string, onGPU bool) *embedding {
	t.Helper()
	root := graph.NewScope()
	s := root
	if onGPU {
		s = root.WithDevice("/gpu:0")
	}
	e := &embedding{}
	e.ids = ops.Placeholder(s, "ids", tensor.Int32, tensor.MakeShape(-1))
	e.labels = ops.Placeholder(s, "labels", tensor.Int32, tensor.MakeShape(-1))
	e.table = ops.NewVariable(s, "table", tensor.Float32, []int{vocab, embedDim}, ops.RandomUniformInit(-0.5, 0.5, 1))
	w := ops.NewVariable(s, "w", tensor.Float32, []int{embedDim, classes}, ops.RandomUniformInit(-0.5, 0.5, 2))
	x := ops.Gather(s, e.table.Value(), e.ids, 0)
	logits := ops.MatMul(s, x, w.Value(), false, false)
	xent, _ := ops.SparseSoftmaxCrossEntropyWithLogits(s, logits, e.labels)
	e.loss = ops.Mean(s, xent, []int{0}, false)
	opt, err := train.NewOptimizer(optimizer, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	if e.trainOp, err = train.Minimize(s, opt, e.loss, train.CreateGlobalStep(s)); err != nil {
		t.Fatal(err)
	}
	e.init = ops.GlobalVariablesInitializer(root)
	if err := root.Err(); err != nil {
		t.Fatal(err)
	}
	e.g = root.Graph()
	return e
}

// embeddingBatch draws n ids below vocab, some repeated, and their labels.
func embeddingBatch(r *rand.Rand, n int) (*tensor.Tensor, *tensor.Tensor) {
	ids, labels := tensor.New(tensor.Int32, n), tensor.New(tensor.Int32, n)
	for i := range n {
		ids.Int32s()[i] = int32(r.IntN(vocab))
		if i%4 == 3 {
			ids.Int32s()[i] = ids.Int32s()[0]
		}
		labels.Int32s()[i] = int32(r.IntN(classes))
	}
	return ids, labels
}

type embeddingRun struct {
	losses  []float32
	table   *tensor.Tensor
	step    int64 // the global step at the end
	perStep runner.Transfers
	onGPU   map[string]bool
	badStep error
}

// trainEmbedding trains e for steps on devs (the CPU alone if none), its
// variables on the device if onDevice, feeding an id out of range at step
// bad (if >= 0), and returns what it saw.
func trainEmbedding(t *testing.T, e *embedding, devs []device.Device, onDevice bool, steps, bad int) embeddingRun {
	t.Helper()
	ctx := context.Background()
	res := kernel.NewResources()
	defer taskgraph.ReleaseVariables(res)
	cfg := taskgraph.Config{Task: task, Devices: devs, SoftPlacement: true, VariablesOnDevice: onDevice}
	ie, err := taskgraph.New(e.g, graph.Signature{Targets: []*graph.Node{e.init}}, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ie.Close()
	if _, err := ie.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	ex, err := taskgraph.New(e.g, graph.Signature{Feeds: []graph.Output{e.ids, e.labels},
		Fetches: []graph.Output{e.loss}, Targets: []*graph.Node{e.trainOp}}, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	out := embeddingRun{onGPU: map[string]bool{}}
	for name, d := range ex.Placement() {
		if strings.HasSuffix(d, "/gpu:0") {
			out.onGPU[e.g.Node(name).Op()] = true
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range steps {
		ids, labels := embeddingBatch(r, 16)
		if i == bad {
			bids := ids.Clone()
			bids.Int32s()[5] = vocab + 7
			_, out.badStep = ex.Run(ctx, []*tensor.Tensor{bids, labels})
		}
		before := ex.Transfers()
		v, err := ex.Run(ctx, []*tensor.Tensor{ids, labels})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		out.perStep = ex.Transfers().Sub(before)
		out.losses = append(out.losses, v[0].Float32s()[0])
	}
	re, err := taskgraph.New(e.g, graph.Signature{Fetches: []graph.Output{e.table.Value(), train.GlobalStep(e.g).Value()}}, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	tv, err := re.Run(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	out.table, out.step = tv[0], tv[1].Int64s()[0]
	return out
}

// TestSparseUpdatesOnDevice trains an embedding with each optimizer that
// has a sparse update on the devices, its table and slots in the simulated
// GPU's memory: the sparse update runs there, next to the table, and the
// losses and the trained table are the CPU's.
func TestSparseUpdatesOnDevice(t *testing.T) {
	devs := openSim(t, device.Options{Count: 1})
	for _, c := range []struct{ optimizer, op string }{
		{"sgd", "SparseApplyGradientDescent"}, {"momentum", "SparseApplyMomentum"},
		{"adagrad", "SparseApplyAdagrad"}, {"adam", "SparseApplyAdam"},
	} {
		t.Run(c.optimizer, func(t *testing.T) {
			const steps = 6
			want := trainEmbedding(t, buildEmbedding(t, c.optimizer, false), nil, false, steps, -1)
			got := trainEmbedding(t, buildEmbedding(t, c.optimizer, true), devs, true, steps, -1)
			for _, op := range []string{c.op, "Variable", "AssignAdd", "Gather"} {
				if !got.onGPU[op] {
					t.Errorf("no %s on the GPU (on it: %v)", op, got.onGPU)
				}
			}
			for i := range want.losses {
				if d := math.Abs(float64(got.losses[i] - want.losses[i])); d > tolerance()*max(1, math.Abs(float64(want.losses[i]))) {
					t.Fatalf("step %d: loss %g with the table on the GPU, %g on the CPU", i, got.losses[i], want.losses[i])
				}
			}
			if msg := differ(got.table, want.table); msg != "" {
				t.Errorf("the trained table: %s", msg)
			}
			// In: the ids and the labels; out: the loss. The table stays.
			if got.perStep.In != 2 || got.perStep.Out != 1 {
				t.Errorf("a replayed step copies %+v, want 2 in and 1 out", got.perStep)
			}
			t.Logf("%s: copies per replayed step %+v; on the GPU: %v", c.optimizer, got.perStep, got.onGPU)
		})
	}
}

// TestSparseUpdateIndexOutOfRange: a step fed an id outside the table
// fails with an error wrapping device.ErrIndexOutOfRange (the device's
// Gather finds it), changes no variable (nor the global step), and the
// training goes on from where it was, as on the CPU.
func TestSparseUpdateIndexOutOfRange(t *testing.T) {
	devs := openSim(t, device.Options{Count: 1})
	const steps = 4
	want := trainEmbedding(t, buildEmbedding(t, "adagrad", false), nil, false, steps, -1)
	got := trainEmbedding(t, buildEmbedding(t, "adagrad", true), devs, true, steps, 2)
	if !errors.Is(got.badStep, device.ErrIndexOutOfRange) || !strings.Contains(got.badStep.Error(), "indices[5] = 57") {
		t.Errorf("a step with id %d of a table of %d rows: %v, want device.ErrIndexOutOfRange naming it", vocab+7, vocab, got.badStep)
	}
	if msg := differ(got.table, want.table); msg != "" {
		t.Errorf("the table trained around the failed step: %s", msg)
	}
	for i := range want.losses {
		if d := math.Abs(float64(got.losses[i] - want.losses[i])); d > tolerance()*max(1, math.Abs(float64(want.losses[i]))) {
			t.Errorf("step %d: loss %g after the failed step, %g without it", i, got.losses[i], want.losses[i])
		}
	}
	if got.step != steps {
		t.Errorf("the global step is %d after %d steps and a failed one, want %d", got.step, steps, steps)
	}
}

// TestGatherOfAHostVariable: with the variables on the host, an
// embedding's Gather asked for on the GPU runs on the host, next to the
// table, so that a step copies in the rows it looked up rather than the
// whole table; with them on the device it runs there.
func TestGatherOfAHostVariable(t *testing.T) {
	devs := openSim(t, device.Options{Count: 1})
	for _, onDevice := range []bool{false, true} {
		got := trainEmbedding(t, buildEmbedding(t, "adagrad", true), devs, onDevice, 3, -1)
		if got.onGPU["Gather"] != onDevice {
			t.Errorf("variables on the device %v: Gather on the GPU %v", onDevice, got.onGPU["Gather"])
		}
		if table := int64(vocab * embedDim * 4); got.perStep.InBytes >= table {
			t.Errorf("variables on the device %v: a step copies %d bytes in, the table is %d", onDevice, got.perStep.InBytes, table)
		}
		t.Logf("variables on the device %v: copies per replayed step %+v", onDevice, got.perStep)
	}
}
