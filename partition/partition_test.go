package partition

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Devices used in the tests, by short name.
var testDevices = map[string]string{
	"ps":  "/job:ps/task:0/cpu:0",
	"ps1": "/job:ps/task:1/cpu:0",
	"w0":  "/job:worker/task:0/cpu:0",
	"w1":  "/job:worker/task:1/cpu:0",
	"w0b": "/job:worker/replica:0/task:0/device:CPU:1", // long form, same task as w0
}

// placeAll maps every node of g to a device: the device of the first name
// prefix in at that matches, else def.
func placeAll(g *graph.Graph, def string, at map[string]string) map[*graph.Node]string {
	devs := map[*graph.Node]string{}
	for _, n := range g.Nodes() {
		d := def
		best := -1
		for prefix, short := range at {
			if strings.HasPrefix(n.Name(), prefix) && len(prefix) > best {
				d, best = short, len(prefix)
			}
		}
		devs[n] = testDevices[d]
	}
	return devs
}

func constF(s *graph.Scope, name string, v ...float32) graph.Output {
	return ops.ConstNamed(s, name, tensor.MustFromSlice(v, len(v)))
}

func TestPartition(t *testing.T) {
	tests := []struct {
		name  string
		build func(s *graph.Scope)
		def   string
		at    map[string]string
		// want: number of Send nodes per task and of nodes per task.
		sends map[string]int
		nodes map[string]int
	}{
		{
			name: "single task",
			build: func(s *graph.Scope) {
				a := constF(s, "a", 1, 2)
				ops.Add(s, a, ops.Identity(s, a))
			},
			def:   "w0",
			sends: map[string]int{},
			nodes: map[string]int{"/job:worker/task:0": 3},
		},
		{
			name: "two tasks one crossing edge",
			build: func(s *graph.Scope) {
				ops.Identity(s, constF(s, "w", 1, 2))
			},
			def:   "w0",
			at:    map[string]string{"w": "ps"},
			sends: map[string]int{"/job:ps/task:0": 1},
			nodes: map[string]int{"/job:ps/task:0": 2, "/job:worker/task:0": 2},
		},
		{
			name: "fan-out to three consumers on one task",
			build: func(s *graph.Scope) {
				w := constF(s, "w", 1, 2)
				a := ops.Identity(s, w)
				b := ops.Add(s, w, a)
				ops.Add(s, b, w)
			},
			def:   "w0",
			at:    map[string]string{"w": "ps"},
			sends: map[string]int{"/job:ps/task:0": 1},
			nodes: map[string]int{"/job:ps/task:0": 2, "/job:worker/task:0": 4},
		},
		{
			name: "fan-out to two tasks",
			build: func(s *graph.Scope) {
				w := constF(s, "w", 1, 2)
				ops.Add(s.SubScope("t0"), w, w)
				s1 := s.SubScope("t1")
				ops.Add(s1, w, ops.Identity(s1, w))
			},
			def:   "w0",
			at:    map[string]string{"w": "ps", "t1/": "w1"},
			sends: map[string]int{"/job:ps/task:0": 2},
			nodes: map[string]int{"/job:ps/task:0": 3, "/job:worker/task:0": 2, "/job:worker/task:1": 3},
		},
		{
			name: "two devices of one task need no transfer",
			build: func(s *graph.Scope) {
				ops.Identity(s, constF(s, "w", 1))
			},
			def:   "w0",
			at:    map[string]string{"w": "w0b"},
			sends: map[string]int{},
			nodes: map[string]int{"/job:worker/task:0": 2},
		},
		{
			name: "control edges",
			build: func(s *graph.Scope) {
				a := constF(s, "a", 1)
				b := constF(s.WithControlDependencies(a.Node), "b", 2)
				// Two consumers on w1 of one control source: one transfer.
				s1 := s.SubScope("t1").WithControlDependencies(a.Node, b.Node)
				ops.Identity(s1, b)
				ops.Identity(s1, b)
			},
			def: "w0",
			at:  map[string]string{"a": "ps", "t1/": "w1"},
			// ps: a, and a dummy Const and its Send for each worker;
			// w0: recv ^a, b, send b:0 (which also carries ^b);
			// w1: recv b:0, recv ^a, two identities.
			sends: map[string]int{"/job:ps/task:0": 2, "/job:worker/task:0": 1},
			nodes: map[string]int{"/job:ps/task:0": 5, "/job:worker/task:0": 3, "/job:worker/task:1": 4},
		},
		{
			name: "both directions between two tasks",
			build: func(s *graph.Scope) {
				x := constF(s, "x", 1, 2)
				w := ops.Identity(s.SubScope("ps"), x)
				ops.Add(s, x, w)
			},
			def:   "w0",
			at:    map[string]string{"ps/": "ps"},
			sends: map[string]int{"/job:ps/task:0": 1, "/job:worker/task:0": 1},
			nodes: map[string]int{"/job:ps/task:0": 3, "/job:worker/task:0": 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := graph.NewScope()
			tt.build(s)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			g := s.Graph()
			devs := placeAll(g, tt.def, tt.at)
			parts, err := Partition(g.Nodes(), devs)
			if err != nil {
				t.Fatal(err)
			}
			checkPartition(t, g.Nodes(), devs, parts)
			sends, nodes := map[string]int{}, map[string]int{}
			for task, pg := range parts {
				if n := len(Sends(pg)); n > 0 {
					sends[task] = n
				}
				nodes[task] = pg.NumNodes()
			}
			if fmt.Sprint(sends) != fmt.Sprint(tt.sends) || fmt.Sprint(nodes) != fmt.Sprint(tt.nodes) {
				t.Errorf("sends %v, nodes %v; want %v, %v\n%s", sends, nodes, tt.sends, tt.nodes, Format(parts))
			}
		})
	}
}

func TestPartitionErrors(t *testing.T) {
	s := graph.NewScope()
	v := s.Out("Variable", "v", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(2)})
	init := constF(s, "init", 1, 2)
	assign := ops.Assign(s, v, init)
	other := graph.NewScope()
	foreign := constF(other, "foreign", 1)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	g := s.Graph()
	ps, w0 := testDevices["ps"], testDevices["w0"]
	tests := []struct {
		name  string
		nodes []*graph.Node
		devs  map[*graph.Node]string
		is    error
		want  []string
	}{
		{"ref edge crosses tasks", g.Nodes(), map[*graph.Node]string{v.Node: ps, init.Node: w0, assign.Node: w0},
			ErrRefCrossesTasks, []string{"v (Variable)", "Assign", ps, w0}},
		{"missing device", g.Nodes(), map[*graph.Node]string{v.Node: ps, init.Node: ps},
			ErrNoDevice, []string{assign.Node.Name()}},
		{"device without task", g.Nodes(), map[*graph.Node]string{v.Node: ps, init.Node: ps, assign.Node: "/cpu:0"},
			ErrNoDevice, []string{`"/cpu:0"`, assign.Node.Name()}},
		{"input outside the node set", []*graph.Node{v.Node, assign.Node}, map[*graph.Node]string{v.Node: ps, assign.Node: ps},
			ErrMissingInput, []string{"init:0", assign.Node.Name()}},
		{"nodes of two graphs", []*graph.Node{v.Node, foreign.Node}, map[*graph.Node]string{v.Node: ps, foreign.Node: ps},
			nil, []string{"different graphs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Partition(tt.nodes, tt.devs)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v does not wrap %v", err, tt.is)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	// The colocated ref edge is fine.
	if _, err := Partition(g.Nodes(), map[*graph.Node]string{v.Node: ps, init.Node: w0, assign.Node: ps}); err != nil {
		t.Errorf("colocated variable and assign: %v", err)
	}
}

// TestPartitionRandom checks the invariants on random graphs placed at
// random on four tasks.
func TestPartitionRandom(t *testing.T) {
	tasks := []string{"ps", "ps1", "w0", "w1"}
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 1))
		s := graph.NewScope()
		outs := []graph.Output{constF(s, "c", 1, 2)}
		for i := range 2 + r.IntN(25) {
			pick := func() graph.Output { return outs[r.IntN(len(outs))] }
			sc := s
			if r.IntN(4) == 0 {
				sc = s.WithControlDependencies(pick().Node)
			}
			var o graph.Output
			switch r.IntN(3) {
			case 0:
				o = constF(sc, fmt.Sprintf("c%d", i), float32(i), 1)
			case 1:
				o = ops.Identity(sc, pick())
			default:
				o = ops.Add(sc, pick(), pick())
			}
			outs = append(outs, o)
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		g := s.Graph()
		devs := map[*graph.Node]string{}
		for _, n := range g.Nodes() {
			devs[n] = testDevices[tasks[r.IntN(len(tasks))]]
		}
		parts, err := Partition(g.Nodes(), devs)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		checkPartition(t, g.Nodes(), devs, parts)
		again, _ := Partition(g.Nodes(), devs)
		if Format(again) != Format(parts) {
			t.Fatalf("seed %d: two partitions of the same input differ", seed)
		}
	}
}

// checkPartition verifies that parts is a correct partition of nodes: every
// node copied once to its task with its op, attributes and device; every
// edge either kept within a task or carried by a Send/Recv pair; and exactly
// one pair per (tensor or control source, destination task).
func checkPartition(t *testing.T, nodes []*graph.Node, devs map[*graph.Node]string, parts map[string]*graph.Graph) {
	t.Helper()
	taskOf := func(dev string) string {
		task, err := TaskOf(dev)
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	type transfer struct{ tensor, from, to string }
	wantPairs := map[transfer]bool{}
	copies := 0
	dataCross := map[string]bool{} // "src task" pairs with a data transfer
	for _, n := range nodes {
		for _, in := range n.Inputs() {
			if taskOf(devs[in.Node]) != taskOf(devs[n]) {
				dataCross[in.Node.Name()+" "+taskOf(devs[n])] = true
			}
		}
	}
	for _, n := range nodes {
		task := taskOf(devs[n])
		cp := parts[task].Node(n.Name())
		if cp == nil || cp.Op() != n.Op() || cp.Device() != devs[n] {
			t.Fatalf("node %s: copy in %s is %v (device %q)", n, task, cp, devs[n])
		}
		copies++
		for _, a := range n.AttrNames() {
			v1, _ := n.Attr(a)
			v2, _ := cp.Attr(a)
			if fmt.Sprint(v1) != fmt.Sprint(v2) {
				t.Errorf("node %s: attr %s = %v, want %v", n, a, v2, v1)
			}
		}
		if cp.NumInputs() != n.NumInputs() {
			t.Fatalf("node %s: %d inputs, want %d", n, cp.NumInputs(), n.NumInputs())
		}
		for i, in := range n.Inputs() {
			got := cp.Input(i)
			src := taskOf(devs[in.Node])
			if src == task {
				if got.Node.Name() != in.Node.Name() || got.Index != in.Index {
					t.Errorf("node %s input %d: %v, want %v", n, i, got, in)
				}
				continue
			}
			wantPairs[transfer{in.Name(), src, task}] = true
			if got.Node.Op() != "Recv" || got.Node.AttrString("tensor_name") != in.Name() ||
				got.Node.AttrString("send_device") != devs[in.Node] || got.DType() != in.DType() {
				t.Errorf("node %s input %d: %v is not the Recv of %s", n, i, got.Node, in)
			}
		}
		ctrl := map[string]bool{}
		for _, c := range cp.ControlInputs() {
			if c.Op() == "Recv" {
				tn := c.AttrString("tensor_name")
				if i := strings.LastIndexByte(tn, ':'); i >= 0 {
					tn = "^" + tn[:i] // a data Recv also orders after its producer
				}
				ctrl[tn] = true
			} else {
				ctrl[c.Name()] = true
			}
		}
		for _, c := range n.ControlInputs() {
			src := taskOf(devs[c])
			name := c.Name()
			if src != task {
				name = "^" + name
				if !dataCross[c.Name()+" "+task] {
					wantPairs[transfer{name, src, task}] = true
				}
			}
			if !ctrl[name] {
				t.Errorf("node %s: control input %s lost (have %v)", n, name, ctrl)
			}
		}
	}
	// Every Send has exactly one Recv with the same attributes, and the pairs
	// are exactly the crossing edges, without duplicates.
	gotPairs := map[transfer]int{}
	recvs := map[string]int{}
	added := 0
	for task, g := range parts {
		for _, n := range g.Nodes() {
			switch n.Op() {
			case "Send":
				added++
				if taskOf(n.AttrString("send_device")) != task || n.Device() != n.AttrString("send_device") {
					t.Errorf("%s in %s has send_device %s", n, task, n.AttrString("send_device"))
				}
				gotPairs[transfer{n.AttrString("tensor_name"), task, taskOf(n.AttrString("recv_device"))}]++
			case "Recv":
				added++
				if taskOf(n.AttrString("recv_device")) != task {
					t.Errorf("%s in %s has recv_device %s", n, task, n.AttrString("recv_device"))
				}
				recvs[strings.Join([]string{n.AttrString("send_device"), n.AttrString("recv_device"), n.AttrString("tensor_name")}, ";")]++
			default:
				if strings.HasPrefix(n.Name(), "_ctrl/") {
					added++
				}
			}
			if n.Op() == "Send" {
				key := strings.Join([]string{n.AttrString("send_device"), n.AttrString("recv_device"), n.AttrString("tensor_name")}, ";")
				recvs[key]--
			}
		}
	}
	for k, c := range recvs {
		if c != 0 {
			t.Errorf("key %s: %+d more Recvs than Sends", k, c)
		}
	}
	if len(gotPairs) != len(wantPairs) {
		t.Errorf("%d transfers, want %d: %v vs %v", len(gotPairs), len(wantPairs), gotPairs, wantPairs)
	}
	for p, c := range gotPairs {
		if c != 1 || !wantPairs[p] {
			t.Errorf("transfer %v: %d Sends, wanted %v", p, c, wantPairs[p])
		}
	}
	total := 0
	for _, g := range parts {
		total += g.NumNodes()
	}
	if total != copies+added {
		t.Errorf("%d nodes in the partitions, want %d copies + %d added", total, copies, added)
	}
}

func TestGolden(t *testing.T) {
	// A linear model: W and b on the ps, the rest on the worker, an update
	// on the ps after the worker's loss (a control edge back).
	s := graph.NewScope()
	ps := s.WithDevice("ps")
	w := ps.Out("Variable", "W", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(2, 1)})
	b := ps.Out("Variable", "b", nil, map[string]any{"dtype": tensor.Float32, "shape": tensor.MakeShape(1)})
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 2))
	y := ops.Add(s, ops.MatMul(s, x, w, false, false), b)
	loss := ops.Mean(s, ops.Square(s, y), nil, false)
	ops.AssignAdd(ps.WithControlDependencies(loss.Node), b, ops.ConstNamed(ps, "delta", tensor.MustFromSlice([]float32{1}, 1)))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	g := s.Graph()
	devs := map[*graph.Node]string{}
	for _, n := range g.Nodes() {
		devs[n] = testDevices["w0"]
		if n.Device() == "ps" {
			devs[n] = testDevices["ps"]
		}
	}
	parts, err := Partition(g.Nodes(), devs)
	if err != nil {
		t.Fatal(err)
	}
	checkPartition(t, g.Nodes(), devs, parts)
	got := Format(parts)
	path := filepath.Join("testdata", "linear.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("partitions differ from %s (run with -update to accept):\n%s", path, diffLines(string(want), got))
	}
}

// diffLines lists the lines only in want (-) and only in got (+).
func diffLines(want, got string) string {
	count := map[string]int{}
	for _, l := range strings.Split(want, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(got, "\n") {
		count[l]--
	}
	var out []string
	for l, c := range count {
		switch {
		case c > 0:
			out = append(out, "- "+l)
		case c < 0:
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// BenchmarkPartition partitions a 1000-node graph over three tasks, with
// an edge crossing tasks at every fourth node.
func BenchmarkPartition(b *testing.B) {
	s := graph.NewScope()
	outs := []graph.Output{constF(s, "c", 1, 2)}
	for i := range 999 {
		outs = append(outs, ops.Add(s, outs[len(outs)-1], outs[i/2]))
	}
	if err := s.Err(); err != nil {
		b.Fatal(err)
	}
	g := s.Graph()
	devs := map[*graph.Node]string{}
	names := []string{"ps", "w0", "w1"}
	for i, n := range g.Nodes() {
		devs[n] = testDevices[names[(i/4)%3]]
	}
	for b.Loop() {
		if _, err := Partition(g.Nodes(), devs); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSubgraphByDevice cuts one task's step between its CPU and its GPU:
// a fed input read on the GPU, a variable on the CPU read there, and the
// result fetched on the CPU, with the pairs named by device.
func TestSubgraphByDevice(t *testing.T) {
	s := graph.NewScope()
	cpu, gpu := "/job:w/task:0/cpu:0", "/job:w/task:0/gpu:0"
	x := ops.Placeholder(s.WithDevice(gpu), "x", tensor.Float32, tensor.MakeShape(2))
	w := ops.NewVariable(s.WithDevice(cpu), "w", tensor.Float32, []int{2}, ops.ZerosInit())
	y := ops.Mul(s.WithDevice(gpu), x, w.Value())
	z := ops.Neg(s.WithDevice(cpu), y)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sub, err := graph.NewSubgraph(s.Graph(), graph.Signature{Feeds: []graph.Output{x}, Fetches: []graph.Output{z}})
	if err != nil {
		t.Fatal(err)
	}
	devices := map[*graph.Node]string{}
	for _, n := range sub.AllNodes() {
		devices[n] = n.Device()
	}
	parts, err := SubgraphByDevice(sub, devices)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 || parts[cpu] == nil || parts[gpu] == nil {
		t.Fatalf("parts %v, want one for %s and one for %s", slices.Sorted(maps.Keys(parts)), cpu, gpu)
	}
	for _, want := range []struct{ part, node, op string }{
		{gpu, FeedName(x), "Placeholder"},
		{gpu, "_recv/w_0/from/job_w/task_0/cpu_0", "Recv"},
		{gpu, "_send/Mul_0/to/job_w/task_0/cpu_0", "Send"},
		{cpu, "_send/w_0/to/job_w/task_0/gpu_0", "Send"},
		{cpu, "_recv/Mul_0/from/job_w/task_0/gpu_0", "Recv"},
		{cpu, "Neg", "Neg"},
	} {
		n := parts[want.part].Node(want.node)
		if n == nil || n.Op() != want.op {
			t.Errorf("%s has no %s node %q:\n%s", want.part, want.op, want.node, Format(parts))
		}
	}
	if _, err := DeviceOf("/job:w/task:0"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("DeviceOf a task: %v, want ErrNoDevice", err)
	}
}

// TestSubgraphByDeviceKeepsFloat32Reads: a variable of the task's CPU
// read on its GPU by a node of a half-read collection crosses the device
// cut as float32, with no Cast: the collections halve what crosses tasks,
// and a model on a GPU computes with the values it would on the CPU.
func TestSubgraphByDeviceKeepsFloat32Reads(t *testing.T) {
	for _, key := range []string{Float16ReadsCollection, BFloat16ReadsCollection} {
		s := graph.NewScope()
		cpu, gpu := "/job:w/task:0/cpu:0", "/job:w/task:0/gpu:0"
		x := ops.Placeholder(s.WithDevice(gpu), "x", tensor.Float32, tensor.MakeShape(2))
		w := ops.NewVariable(s.WithDevice(cpu), "w", tensor.Float32, []int{2}, ops.ZerosInit())
		y := ops.Mul(s.WithDevice(gpu), x, w.Value())
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Graph().AddToCollection(key, y.Node)
		sub, err := graph.NewSubgraph(s.Graph(), graph.Signature{Feeds: []graph.Output{x}, Fetches: []graph.Output{y}})
		if err != nil {
			t.Fatal(err)
		}
		devices := map[*graph.Node]string{}
		for _, n := range sub.AllNodes() {
			devices[n] = n.Device()
		}
		parts, err := SubgraphByDevice(sub, devices)
		if err != nil {
			t.Fatal(err)
		}
		for dev, g := range parts {
			for _, n := range g.Nodes() {
				if n.Op() == "Cast" {
					t.Errorf("%s: %s casts %s across the device cut:\n%s", key, dev, n.Name(), Format(parts))
				}
			}
		}
		if n := parts[gpu].Node("_recv/w_0/from/job_w/task_0/cpu_0"); n == nil || n.AttrDType("dtype") != tensor.Float32 {
			t.Errorf("%s: the GPU receives w as %v, want float32:\n%s", key, n, Format(parts))
		}
	}
}

// TestSubgraphByDeviceCheckpointRefs: a checkpoint op on a task's GPU
// takes a variable of the same task's CPU by ref as a copy of the
// Variable node in the GPU's partition, still on the CPU (the runner
// finds it in the task's resources); a ref from another task, or to any
// other op, still may not cross.
func TestSubgraphByDeviceCheckpointRefs(t *testing.T) {
	s := graph.NewScope()
	cpu, gpu := "/job:w/task:0/cpu:0", "/job:w/task:0/gpu:0"
	step := ops.Placeholder(s.WithDevice(cpu), "step", tensor.Int64, tensor.ScalarShape())
	w := ops.NewVariable(s.WithDevice(gpu), "w", tensor.Float32, []int{2}, ops.ZerosInit())
	c := ops.NewVariable(s.WithDevice(cpu), "c", tensor.Float32, []int{2}, ops.ZerosInit())
	save := ops.SaveVariables(s.WithDevice(gpu), step, []graph.Output{w.Value(), c.Value()}, "/tmp/ckpt", "model.ckpt", 0, 1)
	assign := ops.Assign(s.WithDevice(gpu), c.Value(), ops.Const(s.WithDevice(gpu), []float32{1, 2}))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	cut := func(fetch graph.Output, keyOf func(string) (string, error)) (map[string]*graph.Graph, error) {
		sub, err := graph.NewSubgraph(s.Graph(), graph.Signature{Feeds: []graph.Output{step}, Fetches: []graph.Output{fetch}})
		if err != nil {
			t.Fatal(err)
		}
		devices := map[*graph.Node]string{}
		for _, n := range sub.AllNodes() {
			devices[n] = n.Device()
		}
		return partition(sub.AllNodes(), sub, devices, keyOf, true)
	}
	parts, err := cut(save, DeviceOf)
	if err != nil {
		t.Fatal(err)
	}
	v := parts[gpu].Node("c")
	if v == nil || v.Op() != "Variable" || v.Device() != cpu {
		t.Fatalf("the GPU's partition has no copy of c on %s:\n%s", cpu, Format(parts))
	}
	if in := parts[gpu].Node("SaveVariables").Input(2); in.Node != v {
		t.Errorf("SaveVariables takes %s, want the copy of c", in)
	}
	if _, err := cut(assign, DeviceOf); !errors.Is(err, ErrRefCrossesTasks) {
		t.Errorf("an Assign on the GPU of the CPU's variable: %v, want ErrRefCrossesTasks", err)
	}
	if _, err := cut(save, TaskOf); err != nil {
		t.Errorf("the task's one partition: %v", err)
	}
}
