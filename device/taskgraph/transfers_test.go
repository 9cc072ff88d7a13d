package taskgraph_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/runner"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// stepTransfers is what one replayed training step of a reference model
// copies between host and device, and the ops that asked for the GPU but
// run on the host.
type stepTransfers struct {
	copies   runner.Transfers
	fellBack []string
}

// trainStepTransfers trains model with optimizer on devs for a few steps,
// all of it (the global step too) asked for on /gpu:0, with the variables
// on the device or on the host, and returns what the last step copied.
func trainStepTransfers(t *testing.T, devs []device.Device, model, optimizer string, onDevice bool) stepTransfers {
	t.Helper()
	root := graph.NewScope()
	s := root.WithDevice("/gpu:0")
	m, err := models.Build(s, model, models.Config{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	opt, err := train.NewOptimizer(optimizer, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	op, err := train.Minimize(s, opt, m.Loss, train.CreateGlobalStep(s))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := initializedStep(t, root, m, op, taskgraph.Config{Task: task, Devices: devs, SoftPlacement: true, RandomOnDevice: true, VariablesOnDevice: onDevice})
	var out stepTransfers
	fell := map[string]bool{}
	for name, dev := range e.Placement() {
		n := root.Graph().Node(name)
		d, err := placement.ParseDevice(n.Device())
		if err == nil && d.Type == "gpu" && !strings.HasSuffix(dev, "/gpu:0") && n.Op() != "NoOp" {
			fell[n.Op()] = true
		}
	}
	for op := range fell {
		out.fellBack = append(out.fellBack, op)
	}
	sort.Strings(out.fellBack)
	r := rand.New(rand.NewPCG(1, 2))
	var x, y *tensor.Tensor
	if model == "linreg" {
		x, y = tensor.New(tensor.Float32, 16, 1), tensor.New(tensor.Float32, 16, 1)
		for i := range 16 {
			x.Float32s()[i] = r.Float32()
			y.Float32s()[i] = 2*x.Float32s()[i] + 1
		}
	} else {
		x, y = batch(r, 8)
	}
	for range 3 { // the third step replays the captured second
		before := e.Transfers()
		if _, err := e.Run(ctx, []*tensor.Tensor{x, y}); err != nil {
			t.Fatal(err)
		}
		out.copies = e.Transfers().Sub(before)
	}
	return out
}

// TestDeviceVariablesTransfers: with the variables on the device, a
// replayed training step of each reference model under each optimizer,
// the global step on the GPU too, copies its batch in and its loss out and
// nothing else, and no op asked for on the GPU runs on the host but the
// ones no device runs (the reads of the global step's summary aside).
// With -v it logs the copies per step with the variables on the host and
// on the device, for the record.
func TestDeviceVariablesTransfers(t *testing.T) {
	devs := openSim(t, device.Options{Count: 1})
	var table []string
	for _, model := range []string{"linreg", "mlp", "cnn"} {
		for _, optimizer := range []string{"sgd", "momentum", "adagrad", "rmsprop", "adam"} {
			t.Run(model+"/"+optimizer, func(t *testing.T) {
				host := trainStepTransfers(t, devs, model, optimizer, false)
				dev := trainStepTransfers(t, devs, model, optimizer, true)
				table = append(table, fmt.Sprintf("%-6s %-8s  host vars: %3d in %3d out  device vars: %d in %d out (%d B in, %d B out)  on the host: %v",
					model, optimizer, host.copies.In, host.copies.Out, dev.copies.In, dev.copies.Out, dev.copies.InBytes, dev.copies.OutBytes, dev.fellBack))
				if dev.copies.In != 2 || dev.copies.Out != 1 {
					t.Errorf("a replayed step with the variables on the device copies %+v, want 2 in (the batch) and 1 out (the loss); on the host: %v",
						dev.copies, dev.fellBack)
				}
				if i := slices.IndexFunc(dev.fellBack, func(op string) bool { return op != "RandomUniform" }); i >= 0 {
					t.Errorf("ops asked for on the GPU run on the host: %v", dev.fellBack)
				}
			})
		}
	}
	t.Logf("copies per replayed step, global step on /gpu:0:\n%s", strings.Join(table, "\n"))
}

// initializedStep initialises the variables of root's graph in new
// resources and returns the executor of m's training step op (feeding its
// input and label, fetching its loss): closed when the test ends, then
// the variables it kept on a device released.
func initializedStep(t *testing.T, root *graph.Scope, m *models.Model, op *graph.Node, cfg taskgraph.Config) *taskgraph.Executor {
	t.Helper()
	res := kernel.NewResources()
	t.Cleanup(func() { taskgraph.ReleaseVariables(res) })
	init := ops.GlobalVariablesInitializer(root)
	if err := root.Err(); err != nil {
		t.Fatal(err)
	}
	ie, err := taskgraph.New(root.Graph(), graph.Signature{Targets: []*graph.Node{init}}, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ie.Close()
	if _, err := ie.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	e, err := taskgraph.New(root.Graph(), graph.Signature{Feeds: []graph.Output{m.Input, m.Label},
		Fetches: []graph.Output{m.Loss}, Targets: []*graph.Node{op}}, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}
