package layers_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/grad/gradtest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
)

func TestMinMaxPartitioner(t *testing.T) {
	for _, c := range []struct {
		max   int
		min   int64
		shape []int
		want  int
	}{
		{3, 64 << 10, []int{784, 100}, 3},        // 313,600 bytes: 4 slices fit, 3 allowed
		{3, 64 << 10, []int{100, 10}, 1},         // 4,000 bytes: below one slice
		{8, 64 << 10, []int{784, 100}, 4},        // 4 slices of at least 64 KiB
		{8, 1, []int{5, 5, 32, 64}, 5},           // at most one shard per row
		{1, 1, []int{784, 100}, 1},               // one shard allowed
		{4, 0, []int{784, 100}, 1},               // no slice size: whole
		{4, 1, []int{}, 1},                       // a scalar has no rows
		{2, 100, []int{10, 10}, 2},               // 400 bytes, 2 allowed
		{2, 400, []int{10, 10}, 1},               // exactly one slice
		{3, 1 << 20, []int{1 << 10, 1 << 10}, 3}, // 4 MiB
	} {
		if got := layers.MinMaxPartitioner(c.max, c.min)(c.shape, tensor.Float32); got != c.want {
			t.Errorf("MinMaxPartitioner(%d, %d)(%v) = %d shards, want %d", c.max, c.min, c.shape, got, c.want)
		}
	}
}

// A partitioned kernel is its shards ("<name>/kernel/part_<i>"), starts
// from the values the whole kernel would have, computes the same outputs,
// is penalised once and is shared by a layer built again in a reusing
// scope.
func TestPartitionedKernel(t *testing.T) {
	s := graph.NewScope().WithSeed(3)
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 5))
	images := ops.Placeholder(s, "images", tensor.Float32, tensor.MakeShape(-1, 4, 4, 2))
	three := layers.MinMaxPartitioner(3, 1)
	dense := func(name string, p layers.Partitioner) layers.Dense {
		return layers.Dense{Units: 4, Name: name, Partitioner: p, KernelInit: smallUniform, KernelRegularizer: layers.L2(1)}
	}
	conv := func(name string, p layers.Partitioner) layers.Conv2D {
		return layers.Conv2D{Filters: 2, KernelSize: [2]int{3, 3}, Name: name, Partitioner: p, KernelInit: smallUniform, KernelName: "W", BiasName: "b"}
	}
	outs := []graph.Output{
		dense("whole", nil).Apply(s, x, true), dense("split", three).Apply(s, x, true),
		conv("cwhole", nil).Apply(s, images, true), conv("csplit", three).Apply(s, images, true),
		dense("split", three).Apply(s.NameScope("tower_1").ReuseVariables(), x, true),
	}
	want := "whole/kernel whole/bias split/kernel/part_0 split/kernel/part_1 split/kernel/part_2 split/bias " +
		"cwhole/W cwhole/b csplit/W/part_0 csplit/W/part_1 csplit/W/part_2 csplit/b"
	if got := strings.Join(variableNames(s.Graph()), " "); got != want {
		t.Fatalf("variables %q, want %q", got, want)
	}
	if got := len(s.Graph().Collection(ops.RegularizationLossesCollection)); got != 2 {
		t.Errorf("%d regularization losses, want one per kernel built without reuse", got)
	}
	feeds := map[graph.Output]*tensor.Tensor{x: gradtest.Random32(1, 2, 5), images: gradtest.Random32(2, 3, 4, 4, 2)}
	got := run(t, s, feeds, outs)
	for _, c := range [][2]int{{0, 1}, {2, 3}, {0, 4}} {
		if a, b := got[c[0]].Float32s(), got[c[1]].Float32s(); !slices.Equal(a, b) {
			t.Errorf("outputs %d and %d differ: %v and %v", c[0], c[1], a, b)
		}
	}

	// The default initializer too: a split Glorot kernel is the whole one's rows.
	glorot := func(p layers.Partitioner) []float32 {
		s := graph.NewScope().WithSeed(3)
		layers.Dense{Units: 3, Name: "g", Partitioner: p}.Apply(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 5)), true)
		var vars []graph.Output
		for _, v := range ops.TrainableVariables(s.Graph()) {
			if strings.HasPrefix(v.Name(), "g/kernel") {
				vars = append(vars, v.Value())
			}
		}
		var all []float32
		for _, v := range run(t, s, nil, vars) {
			all = append(all, v.Float32s()...)
		}
		return all
	}
	if a, b := glorot(nil), glorot(layers.MinMaxPartitioner(2, 1)); !slices.Equal(a, b) {
		t.Errorf("Glorot kernel %v whole, %v in shards", a, b)
	}

	// A partitioned layer of the same name built twice without reuse would not share.
	s = graph.NewScope()
	x = ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 5))
	dense("split", three).Apply(s, x, true)
	dense("split", three).Apply(s, x, true)
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), `"split/kernel" already exists`) {
		t.Fatalf("a named partitioned layer built twice: err %v", err)
	}
}

// Towers share one set of variables, placed as the outer scope places
// them (here on the ps tasks, with their initializers and assignments),
// while each tower's computation runs on its device.
func TestTowers(t *testing.T) {
	for _, withPS := range []bool{false, true} {
		s := graph.NewScope()
		if withPS {
			s = s.WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{PSTasks: 2}))
		}
		x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 784))
		devices := []string{"/job:worker/task:0", "/job:worker/task:1"}
		outs := make([]graph.Output, len(devices))
		layers.Towers(s, devices, func(ts *graph.Scope, i int) {
			outs[i] = layers.Sequential{
				layers.Dense{Units: 8, Activation: ops.Relu, Name: "hidden", Partitioner: layers.MinMaxPartitioner(2, 1)},
				layers.BatchNormalization{Name: "bn"},
				layers.Dense{Units: 2, Name: "out"},
			}.Apply(ts, x, true)
		})
		want := "hidden/kernel/part_0 hidden/kernel/part_1 hidden/bias bn/gamma bn/beta bn/moving_mean bn/moving_variance out/kernel out/bias"
		if got := strings.Join(variableNames(s.Graph()), " "); got != want {
			t.Fatalf("variables %q, want %q", got, want)
		}
		for i, o := range outs {
			if !strings.HasPrefix(o.Node.Name(), "tower_"+string(rune('0'+i))+"/") || o.Node.Device() != devices[i] {
				t.Errorf("tower %d's output %s on %q", i, o.Node.Name(), o.Node.Device())
			}
		}
		for _, n := range s.Graph().Nodes() {
			onWorker := strings.HasPrefix(n.Device(), "/job:worker/")
			ofVariable := n.Op() == "Variable" || strings.Contains(n.Name(), "/Initializer/") || strings.HasPrefix(n.Op(), "Assign")
			switch {
			case n.Op() == "Placeholder":
			case ofVariable && onWorker, n.Op() == "Variable" && withPS != strings.HasPrefix(n.Device(), "/job:ps/"):
				t.Errorf("%s (%s) on %q: want the outer scope's placement", n.Name(), n.Op(), n.Device())
			case !ofVariable && !onWorker:
				t.Errorf("%s (%s) on %q: want a tower's device", n.Name(), n.Op(), n.Device())
			}
		}
		feeds := map[graph.Output]*tensor.Tensor{x: gradtest.Random32(1, 4, 784)}
		got := run(t, s, feeds, outs)
		if !slices.Equal(got[0].Float32s(), got[1].Float32s()) {
			t.Errorf("withPS %v: the towers differ on the same input: %v and %v", withPS, got[0], got[1])
		}
	}
	s := graph.NewScope()
	layers.Towers(s, nil, func(*graph.Scope, int) { t.Error("built a tower of no device") })
	if s.Err() == nil {
		t.Error("no devices accepted")
	}
}
