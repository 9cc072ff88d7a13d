package partition_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/executor"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	_ "github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/partition"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
)

// cluster runs partitions in one process: one kernel.Resources per task
// (so a variable lives on its ps task only) and one rendezvous.Local per
// step shared by all tasks.
type cluster struct {
	res map[string]*kernel.Resources
}

// closure returns the nodes that roots need (data and control inputs), as
// the master's pruning does.
func closure(roots ...*graph.Node) []*graph.Node {
	seen := map[*graph.Node]bool{}
	var out []*graph.Node
	var walk func(n *graph.Node)
	walk = func(n *graph.Node) {
		if seen[n] {
			return
		}
		seen[n] = true
		for _, in := range n.Inputs() {
			walk(in.Node)
		}
		for _, c := range n.ControlInputs() {
			walk(c)
		}
		out = append(out, n)
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

// partitionFor partitions the nodes that roots need, each on the device
// place gives it, and returns the partitions and the devices.
func partitionFor(t *testing.T, place func(*graph.Node) string, roots ...*graph.Node) (map[string]*graph.Graph, map[*graph.Node]string) {
	t.Helper()
	nodes := closure(roots...)
	devs := map[*graph.Node]string{}
	for _, n := range nodes {
		devs[n] = place(n)
	}
	parts, err := partition.Partition(nodes, devs)
	if err != nil {
		t.Fatal(err)
	}
	return parts, devs
}

// run partitions the nodes needed by fetches and targets, runs every
// partition concurrently in one step and returns the fetches. Feeds go to
// the task of the fed node, fetches come from the task of their producer.
func (c *cluster) run(t *testing.T, g *graph.Graph, place func(*graph.Node) string,
	feeds map[graph.Output]*tensor.Tensor, fetches []graph.Output, targets []*graph.Node) []*tensor.Tensor {
	t.Helper()
	roots := append([]*graph.Node(nil), targets...)
	for _, f := range fetches {
		roots = append(roots, f.Node)
	}
	parts, devs := partitionFor(t, place, roots...)
	t.Logf("partitions:\n%s", partition.Format(parts))
	rv := rendezvous.NewLocal()
	step := &kernel.Step{ID: 1, Rendezvous: rv}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	results := make([]*tensor.Tensor, len(fetches))
	var wg sync.WaitGroup
	errs := make(chan error, len(parts))
	for task, pg := range parts {
		var pfeeds []graph.Output
		var vals []*tensor.Tensor
		for o, v := range feeds {
			if n := pg.Node(o.Node.Name()); n != nil && devs[o.Node] != "" {
				pfeeds = append(pfeeds, n.Output(o.Index))
				vals = append(vals, v)
			}
		}
		var pfetches []graph.Output
		var idx []int
		for i, f := range fetches {
			if mustTask(t, devs[f.Node]) == task {
				pfetches = append(pfetches, pg.Node(f.Node.Name()).Output(f.Index))
				idx = append(idx, i)
			}
		}
		ptargets := partition.Sends(pg)
		for _, n := range targets {
			if mustTask(t, devs[n]) == task {
				ptargets = append(ptargets, pg.Node(n.Name()))
			}
		}
		if c.res[task] == nil {
			c.res[task] = kernel.NewResources()
		}
		e, err := executor.New(pg, graph.Signature{Feeds: pfeeds, Fetches: pfetches, Targets: ptargets}, c.res[task])
		if err != nil {
			t.Fatalf("task %s: %v", task, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := e.RunStep(ctx, step, vals)
			if err != nil {
				rv.Abort(err) // what the master does: one failure ends the step everywhere
				errs <- err
				return
			}
			for j, i := range idx {
				results[i] = out[j]
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := rv.Pending(); n != 0 {
		t.Errorf("%d tensors sent but never received", n)
	}
	return results
}

func mustTask(t *testing.T, dev string) string {
	t.Helper()
	task, err := partition.TaskOf(dev)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// TestEndToEnd computes y = x W with W on the ps and x and the MatMul on a
// worker, then a two-worker model with a control edge, and compares with the
// unpartitioned graph run by one executor.
func TestEndToEnd(t *testing.T) {
	s := graph.NewScope()
	ps, w1 := s.WithDevice("/job:ps/task:0/cpu:0"), s.WithDevice("/job:worker/task:1/cpu:0")
	W := ops.NewVariable(ps, "W", tensor.Float32, []int{3, 2}, ops.RandomNormalInit(0, 1, 7))
	b := ops.NewVariable(ps, "b", tensor.Float32, []int{2}, ops.ConstantInit(0.5))
	init := ops.GlobalVariablesInitializer(ps)
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 3))
	y := ops.MatMul(s, x, W.Value(), false, false)
	// On worker 1: z = relu(y + b) + y, after y (a control edge too).
	z := ops.Add(w1.WithControlDependencies(y.Node), ops.Relu(w1, ops.Add(w1, y, b.Value())), y)
	// An update on the ps that must run after z.
	upd := ops.AssignAdd(ps.WithControlDependencies(z.Node), b.Value(), ops.Const(ps, []float32{1, 1}))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	g := s.Graph()
	place := func(n *graph.Node) string {
		if n.Device() != "" {
			return n.Device()
		}
		return "/job:worker/task:0/cpu:0"
	}
	xv := tensor.MustFromSlice([]float32{1, 2, 3, -4, 5, -6}, 2, 3)

	// Reference: one executor, one resource container.
	ctx := context.Background()
	ref := kernel.NewResources()
	runLocal := func(feeds []graph.Output, vals []*tensor.Tensor, fetches []graph.Output, targets []*graph.Node) []*tensor.Tensor {
		e, err := executor.New(g, graph.Signature{Feeds: feeds, Fetches: fetches, Targets: targets}, ref)
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.Run(ctx, vals)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	runLocal(nil, nil, nil, []*graph.Node{init})
	want := runLocal([]graph.Output{x}, []*tensor.Tensor{xv}, []graph.Output{y, z}, []*graph.Node{upd.Node})
	wantB := runLocal(nil, nil, []graph.Output{b.Value()}, nil)

	c := &cluster{res: map[string]*kernel.Resources{}}
	c.run(t, g, place, nil, nil, []*graph.Node{init})
	if names := c.res["/job:ps/task:0"].VariableNames(); len(names) != 2 {
		t.Fatalf("ps variables %v, want W and b", names)
	}
	got := c.run(t, g, place, map[graph.Output]*tensor.Tensor{x: xv}, []graph.Output{y, z}, []*graph.Node{upd.Node})
	gotB := c.run(t, g, place, nil, []graph.Output{b.Value()}, nil)
	for i, name := range []string{"y", "z"} {
		if !tensor.Equal(got[i], want[i]) {
			t.Errorf("%s = %v, want %v", name, got[i], want[i])
		}
	}
	if !tensor.Equal(gotB[0], wantB[0]) {
		t.Errorf("b after the update = %v, want %v", gotB[0], wantB[0])
	}
	for task, res := range c.res {
		if task != "/job:ps/task:0" && len(res.VariableNames()) != 0 {
			t.Errorf("task %s holds variables %v", task, res.VariableNames())
		}
	}
}

// TestEndToEndAbort checks that a failing partition ends the step on the
// others: a worker waits for a tensor from a ps whose kernel fails.
func TestEndToEndAbort(t *testing.T) {
	s := graph.NewScope()
	ps := s.WithDevice("/job:ps/task:0/cpu:0")
	v := ps.Out("Variable", "v", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(2)})
	y := ops.Identity(s, v) // reading an uninitialized variable fails on the ps
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	nodes := s.Graph().Nodes()
	devs := map[*graph.Node]string{v.Node: "/job:ps/task:0/cpu:0", y.Node: "/job:worker/task:0/cpu:0"}
	parts, err := partition.Partition(nodes, devs)
	if err != nil {
		t.Fatal(err)
	}
	rv := rendezvous.NewLocal()
	step := &kernel.Step{ID: 2, Rendezvous: rv}
	pe, err := executor.New(parts["/job:ps/task:0"], graph.Signature{Targets: partition.Sends(parts["/job:ps/task:0"])}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wg := parts["/job:worker/task:0"]
	we, err := executor.New(wg, graph.Signature{Fetches: []graph.Output{wg.Node(y.Node.Name()).Output(0)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	werr := make(chan error, 1)
	go func() { _, err := we.RunStep(ctx, step, nil); werr <- err }()
	_, perr := pe.RunStep(ctx, step, nil)
	if perr == nil {
		t.Fatal("the ps step did not fail")
	}
	rv.Abort(perr)
	start := time.Now()
	if err := <-werr; err == nil {
		t.Fatal("the worker step did not fail")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the worker waited %v after the abort", d)
	}
}

// TestHalfReadsEndToEnd: a node of a half-read collection gets a ps
// variable as the half type rounded back to float32, through a Cast on
// each side of the Send/Recv; a node outside the collections, in the same
// step and task, gets the exact float32 value, through a transfer of its
// own.
func TestHalfReadsEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		collection string
		wire       tensor.DType
		round      func(float32) float32
	}{
		{partition.Float16ReadsCollection, tensor.Float16, func(f float32) float32 { return tensor.Float16From(tensor.Float16Bits(f)) }},
		{partition.BFloat16ReadsCollection, tensor.BFloat16, func(f float32) float32 { return tensor.BFloat16From(tensor.BFloat16Bits(f)) }},
	} {
		t.Run(tc.wire.String(), func(t *testing.T) {
			s := graph.NewScope()
			ps := s.WithDevice("/job:ps/task:0/cpu:0")
			wv := []float32{1.0001, -3.14159, 1e-3, 65000, 0.1, 2}
			W := ops.NewVariable(ps, "W", tensor.Float32, []int{6}, func(s *graph.Scope, _ tensor.DType, _ []int) graph.Output {
				return ops.Const(s, wv)
			})
			init := ops.GlobalVariablesInitializer(ps)
			read := ops.Identity(s, W.Value())  // the forward pass: half
			exact := ops.Identity(s, W.Value()) // a fetch of the weights: float32
			s.Graph().AddToCollection(tc.collection, read.Node)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			place := func(n *graph.Node) string {
				if n.Device() != "" {
					return n.Device()
				}
				return "/job:worker/task:0/cpu:0"
			}
			c := &cluster{res: map[string]*kernel.Resources{}}
			c.run(t, s.Graph(), place, nil, nil, []*graph.Node{init})
			got := c.run(t, s.Graph(), place, nil, []graph.Output{read, exact}, nil)
			for i, w := range wv {
				if h := got[0].Float32s()[i]; h != tc.round(w) {
					t.Errorf("half read [%d] = %v, want %v rounded to %v: %v", i, h, w, tc.wire, tc.round(w))
				}
				if e := got[1].Float32s()[i]; e != w {
					t.Errorf("exact read [%d] = %v, want %v", i, e, w)
				}
			}

			if slices.Equal(got[0].Float32s(), wv) {
				t.Errorf("the half read is the float32 value itself: %v", wv)
			}

			parts, _ := partitionFor(t, place, read.Node, exact.Node)
			var wires []tensor.DType
			for _, n := range parts["/job:worker/task:0"].Nodes() {
				if n.Op() == "Recv" {
					wires = append(wires, n.AttrDType("dtype"))
				}
			}
			if len(wires) != 2 || !slices.Contains(wires, tc.wire) || !slices.Contains(wires, tensor.Float32) {
				t.Errorf("the worker receives W as %v, want once as %v and once as float32", wires, tc.wire)
			}
		})
	}
}
