package taskgraph_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/layers"
	tflosses "github.com/distflow/distflow/losses"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// BenchmarkTrainStep times one SGD step of the reference models on a
// device, the variables on the host: the MLP (784-100-10, batch 100) with
// whole-step replay and kernel by kernel, a wide MLP (4096 hidden, batch
// 1024), the CNN (batch 256), its dropout drawn on the host and on the
// device, and an LSTM (layers.LSTM of 64 units over the images' 28 rows,
// batch 100), the variables on the host and on the device.
// DISTFLOW_BENCH_PLATFORM chooses the
// platform (default sim; cuda on a GPU machine, as scripts/gpu_check.sh
// runs it); examples/s is reported per run, for the side-by-side with
// bench/torch_gpu.py.
func BenchmarkTrainStep(b *testing.B) {
	platform := os.Getenv("DISTFLOW_BENCH_PLATFORM")
	if platform == "" {
		platform = "sim"
	}
	p, err := device.Lookup(platform)
	if err != nil {
		b.Skip(err)
	}
	if _, err := p.Probe(); err != nil {
		b.Skip(err)
	}
	devs, err := p.Open(device.Options{Count: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer devs[0].Close()
	for _, c := range []struct {
		name          string
		model         string
		hidden, batch int
		eager, random bool
		deviceVars    bool
	}{
		{"mlp/replay", "mlp", 100, 100, false, false, false},
		{"mlp/eager", "mlp", 100, 100, true, false, false},
		{"mlp4096", "mlp", 4096, 1024, false, false, false},
		{"cnn", "cnn", 0, 256, false, false, false},
		// Dropout drawn on the device: the CNN's step replays whole.
		{"cnn/device-random", "cnn", 0, 256, false, true, false},
		{"lstm", "lstm", 0, 100, false, false, false},
		{"lstm/device-variables", "lstm", 0, 100, false, false, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			root := graph.NewScope()
			s := root.WithDevice("/gpu:0")
			var (
				m   *models.Model
				err error
			)
			if c.model == "lstm" {
				m = lstmModel(s, c.batch)
			} else if m, err = models.Build(s, c.model, models.Config{Seed: 1, MLPHidden: c.hidden}); err != nil {
				b.Fatal(err)
			}
			opt, _ := train.NewOptimizer("sgd", 0.01)
			op, err := train.Minimize(s, opt, m.Loss, train.CreateGlobalStep(root))
			if err != nil {
				b.Fatal(err)
			}
			init := ops.GlobalVariablesInitializer(root)
			ctx := context.Background()
			res := kernel.NewResources()
			defer taskgraph.ReleaseVariables(res) // DISTFLOW_GPU_VARIABLES=1's, after the executors
			cfg := taskgraph.Config{Task: task, Devices: devs, SoftPlacement: true, Eager: c.eager, RandomOnDevice: c.random,
				VariablesOnDevice: c.deviceVars}
			ie, err := taskgraph.New(root.Graph(), graph.Signature{Targets: []*graph.Node{init}}, res, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer ie.Close()
			if _, err := ie.Run(ctx, nil); err != nil {
				b.Fatal(err)
			}
			e, err := taskgraph.New(root.Graph(), graph.Signature{Feeds: []graph.Output{m.Input, m.Label},
				Fetches: []graph.Output{m.Loss}, Targets: []*graph.Node{op}}, res, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			x, y := batch(rand.New(rand.NewPCG(1, 2)), c.batch)
			feeds := []*tensor.Tensor{x, y}
			for range 3 { // the kernels loaded, the step captured
				if _, err := e.Run(ctx, feeds); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			before := e.Transfers()
			for range b.N {
				if _, err := e.Run(ctx, feeds); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.batch)*float64(b.N)/b.Elapsed().Seconds(), "examples/s")
			b.ReportMetric(float64(e.Replays()), "replayed")
			copies := e.Transfers().Sub(before)
			b.ReportMetric(float64(copies.In+copies.Out)/float64(b.N), "copies/step")
			b.Logf("%s on %s (%s): batch %s", c.name, devs[0].Info().Model, platform, strconv.Itoa(c.batch))
		})
	}
}

// lstmModel is a classifier of the images seen as sequences of their 28
// rows: an LSTM of 64 units (unrolled: layers.Unroll), then a dense layer
// to the 10 classes.
func lstmModel(s *graph.Scope, batch int) *models.Model {
	x := ops.Placeholder(s, "images", tensor.Float32, tensor.MakeShape(batch, 784))
	y := ops.Placeholder(s, "labels", tensor.Int32, tensor.MakeShape(batch))
	seq := ops.ReshapeTo(s, x, batch, 28, 28)
	h := layers.LSTM{Units: 64}.Apply(s, seq, true)
	logits := layers.Dense{Units: 10}.Apply(s, h, true)
	return &models.Model{Input: x, Label: y, Loss: tflosses.SparseSoftmaxCrossEntropy(s, y, logits)}
}
