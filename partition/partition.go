package partition

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
)

// Sentinel errors callers test with errors.Is.
var (
	// ErrNoDevice is wrapped when a node has no device in the placement or
	// its device names no job and task.
	ErrNoDevice = errors.New("node has no task device")
	// ErrRefCrossesTasks is wrapped when a ref input (a variable's storage)
	// comes from another task: placement must colocate them.
	ErrRefCrossesTasks = errors.New("ref edge crosses tasks")
	// ErrMissingInput is wrapped when a node's input or control input is not
	// among the nodes to partition.
	ErrMissingInput = errors.New("input is not among the nodes to partition")
)

// Graph collections that ask for a variable's value to cross tasks in half
// the bytes. A node in one of them reads each float32 Variable of another
// task that it takes as a (non-ref) input through a Cast to the half type
// on the variable's device, the Send and Recv of that, and a Cast back to
// float32 on its own device: the parameter pulls of mixed-precision data
// parallel training, where the ps keeps the float32 master copy. Nodes
// outside them (a checkpoint, a fetch of the variable, a summary) read the
// float32 value, through a transfer of their own.
const (
	Float16ReadsCollection  = "_float16_reads"
	BFloat16ReadsCollection = "_bfloat16_reads"
)

// Partition splits nodes into one graph per task, given each node's full
// device ("/job:ps/task:0/cpu:0"). The result is keyed by task name
// ("/job:ps/task:0"); a task gets a graph only if it holds a node.
//
// Every node keeps its name, op, attributes and control inputs, and gets its
// full device. Nodes are added in creation order, so each partition's
// creation order is topological. A data edge src:i -> dst that crosses from
// task A to task B becomes a Send of src:i in A and a Recv in B; every
// consumer of src:i in B shares that Recv, so a tensor moves at most once per
// destination task per step and wire type (see Float16ReadsCollection). A
// control edge from A to B becomes a control input on a Recv in B that
// completes only after the source ran: the Recv of one of the source's
// outputs if one is sent to B anyway, else a dedicated Recv of a dummy int32
// Const in A (which takes a control input on the source), shared by every
// control consumer of the source in B. Both sides of a pair carry the same
// tensor_name ("src:i", or "^src" for a control edge), send_device and
// recv_device, from which the kernels compute the rendezvous key.
//
// Send nodes have no outputs, so whoever runs a partition must run them as
// targets (see Sends). Partition fails, naming the nodes and devices, if a
// node has no device or one without a job and task, if an input or control
// input is not among nodes (the node set must be closed under inputs, as
// graph pruning makes it), or if a ref input crosses tasks. It is a pure
// function: the input graph is not modified, and equal inputs give equal
// outputs.
func Partition(nodes []*graph.Node, devices map[*graph.Node]string) (map[string]*graph.Graph, error) {
	return partition(nodes, nil, devices, TaskOf, true)
}

// Subgraph partitions the subgraph of one step (graph.NewSubgraph): its
// nodes and the variables they take by ref, as Partition does, with every
// fed tensor an input: a Placeholder named FeedName(tensor) in each task
// that reads it, on the device of its first reader there. Control inputs
// that the feeds satisfy are dropped. devices must hold a device for every
// node of sub.AllNodes().
func Subgraph(sub *graph.Subgraph, devices map[*graph.Node]string) (map[string]*graph.Graph, error) {
	return partition(sub.AllNodes(), sub, devices, TaskOf, true)
}

// SubgraphByDevice is Subgraph with one graph per device rather than per
// task, keyed by the canonical device name ("/job:worker/task:0/gpu:0"):
// the cut within a task between its CPU and its accelerators, whose pairs
// meet in the task's own rendezvous. Added nodes are named as by Subgraph,
// with the device in place of the task ("_recv/x_0/from/job_worker/task_0/cpu_0").
// A checkpoint op (SaveVariables, RestoreVariables) on an accelerator may
// take variables of its task's CPU by ref: its partition gets a copy of
// each such Variable node, still on the CPU, which the accelerator's runner
// finds by name in the task's resources; no other ref crosses devices.
// The half-read collections (Float16ReadsCollection) do not apply: they
// halve what crosses tasks, and a variable read across this cut is the
// task's own, so that a model computes with the same values on its GPU as
// on its CPU.
func SubgraphByDevice(sub *graph.Subgraph, devices map[*graph.Node]string) (map[string]*graph.Graph, error) {
	return partition(sub.AllNodes(), sub, devices, DeviceOf, false)
}

// DeviceOf returns the canonical form of a full device name, or an error
// wrapping ErrNoDevice if it names no job, task, type and index.
func DeviceOf(device string) (string, error) {
	d, err := placement.ParseDevice(device)
	if err != nil {
		return "", fmt.Errorf("%w: %w", err, ErrNoDevice)
	}
	if d.TaskName() == "" || d.Type == "" || d.Index < 0 {
		return "", fmt.Errorf("device %q is not a full device name: %w", device, ErrNoDevice)
	}
	return d.String(), nil
}

// FeedName returns the name of the Placeholder that stands for the fed
// tensor o in a step's partitions: "_feed/x_0" for "x:0". Its output 0
// takes the fed value.
func FeedName(o graph.Output) string { return "_feed/" + sanitize(o.Name()) }

// partition cuts nodes into one graph per key of their devices (keyOf:
// TaskOf or DeviceOf); halves: the half-read collections apply.
func partition(nodes []*graph.Node, sub *graph.Subgraph, devices map[*graph.Node]string, keyOf func(string) (string, error), halves bool) (map[string]*graph.Graph, error) {
	p := &partitioner{
		sub:     sub,
		devices: devices,
		taskOf:  make(map[*graph.Node]string, len(nodes)),
		parts:   map[string]*part{},
		recvs:   map[edgeKey]*graph.Node{},
		ctrls:   map[ctrlKey]*graph.Node{},
		data:    map[ctrlKey]wireOutput{},
	}
	sorted := append([]*graph.Node(nil), nodes...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].ID() < sorted[j].ID() })
	if len(sorted) > 0 && halves {
		p.halfReads = halfReads(sorted[0].Graph())
	}
	for _, n := range sorted {
		if n.Graph() != sorted[0].Graph() {
			return nil, fmt.Errorf("partition: nodes %s and %s belong to different graphs", sorted[0], n)
		}
		dev := devices[n]
		if dev == "" {
			return nil, fmt.Errorf("partition: node %s: %w", n, ErrNoDevice)
		}
		task, err := keyOf(dev)
		if err != nil {
			return nil, fmt.Errorf("partition: node %s: %w", n, err)
		}
		p.taskOf[n] = task
	}
	for _, n := range sorted {
		for i, in := range n.Inputs() {
			if p.isFed(in) {
				continue
			}
			k := ctrlKey{in.Node, p.taskOf[n]}
			if _, seen := p.data[k]; !seen && p.taskOf[in.Node] != "" && p.taskOf[in.Node] != k.task {
				p.data[k] = wireOutput{in, p.wireType(n, i)}
			}
		}
	}
	for _, n := range sorted {
		if err := p.add(n); err != nil {
			return nil, err
		}
	}
	out := make(map[string]*graph.Graph, len(p.parts))
	for task, pt := range p.parts {
		out[task] = pt.g
	}
	return out, nil
}

// hostVariable returns, for a checkpoint op n (SaveVariables,
// RestoreVariables) on an accelerator that takes by ref a Variable v of
// its own task's CPU, a copy of v in n's partition, on v's device, made
// once: the partitions of one task run in one process over one resource
// container, where the accelerator's runner finds the host's variable by
// name, so that one checkpoint shard may hold variables of the host and
// of the device (package device/taskgraph). It returns nil for any other
// ref edge, which may not cross.
func (p *partitioner) hostVariable(n, v *graph.Node, key string) *graph.Node {
	if n.Op() != "SaveVariables" && n.Op() != "RestoreVariables" || v.Op() != "Variable" {
		return nil
	}
	vd, err1 := placement.ParseDevice(p.devices[v])
	nd, err2 := placement.ParseDevice(p.devices[n])
	if err1 != nil || err2 != nil || vd.Type != "cpu" || nd.Type == "cpu" || vd.TaskName() != nd.TaskName() || vd.TaskName() == "" {
		return nil
	}
	pt := p.parts[key]
	if c := pt.copies[v]; c != nil {
		return c
	}
	spec := graph.NodeSpec{Op: "Variable", Name: v.Name(), Device: p.devices[v], Attrs: map[string]any{}}
	for _, a := range v.AttrNames() {
		spec.Attrs[a], _ = v.Attr(a)
	}
	c, err := pt.g.AddNode(spec)
	if err != nil {
		return nil
	}
	pt.copies[v] = c
	return c
}

// Sends returns the Send nodes of a partition, in creation order. They have
// no outputs, so an executor of the partition must take them as targets.
func Sends(g *graph.Graph) []*graph.Node {
	var out []*graph.Node
	for _, n := range g.Nodes() {
		if n.Op() == "Send" {
			out = append(out, n)
		}
	}
	return out
}

// TaskOf returns the task ("/job:ps/task:0") of a device in the short
// ("/job:ps/task:0/cpu:0") or long ("/job:ps/replica:0/task:0/device:CPU:0")
// form, or an error wrapping ErrNoDevice if it names no job or task.
func TaskOf(device string) (string, error) {
	d, err := placement.ParseDevice(device)
	if err != nil {
		return "", fmt.Errorf("%w: %w", err, ErrNoDevice)
	}
	if t := d.TaskName(); t != "" {
		return t, nil
	}
	return "", fmt.Errorf("device %q names no job and task: %w", device, ErrNoDevice)
}

// SendSpec returns the spec of a Send node that sends in under tensorName
// from sendDevice (where the node runs) to recvDevice. Add it with
// graph.AddNode to the graph that holds in.
func SendSpec(name string, in graph.Output, tensorName, sendDevice, recvDevice string) graph.NodeSpec {
	return graph.NodeSpec{
		Op: "Send", Name: name, Inputs: []graph.Output{in}, Device: sendDevice,
		Attrs: map[string]any{"tensor_name": tensorName, "send_device": sendDevice, "recv_device": recvDevice},
	}
}

// RecvSpec returns the spec of a Recv node, run on recvDevice, that receives
// the tensor (of dtype dt and build-time shape shape) sent under tensorName
// from sendDevice.
func RecvSpec(name, tensorName, sendDevice, recvDevice string, dt tensor.DType, shape tensor.Shape) graph.NodeSpec {
	return graph.NodeSpec{
		Op: "Recv", Name: name, Device: recvDevice,
		Attrs: map[string]any{"tensor_name": tensorName, "send_device": sendDevice, "recv_device": recvDevice,
			"dtype": dt, "shape": shape},
	}
}

// part is one task's graph under construction.
type part struct {
	g      *graph.Graph
	copies map[*graph.Node]*graph.Node // original node -> its copy in g
}

// edgeKey identifies one transfer of a tensor to a task.
type edgeKey struct {
	out  graph.Output
	task string
	wire tensor.DType // the type it crosses as: Invalid for its own
}

// wireOutput is a tensor and the type it crosses tasks as (Invalid: its
// own).
type wireOutput struct {
	out  graph.Output
	wire tensor.DType
}

// ctrlKey identifies one control transfer from a node to a task.
type ctrlKey struct {
	src  *graph.Node
	task string
}

type partitioner struct {
	sub     *graph.Subgraph // the step's subgraph, or nil
	devices map[*graph.Node]string
	taskOf  map[*graph.Node]string
	parts   map[string]*part
	recvs   map[edgeKey]*graph.Node // the Recv in task of out (or its Cast back)
	ctrls   map[ctrlKey]*graph.Node // the control Recv in task of src
	data    map[ctrlKey]wireOutput  // the first output of src with a consumer in task
	// halfReads is the half type each node of the graph's half-read
	// collections reads other tasks' float32 variables as.
	halfReads map[*graph.Node]tensor.DType
}

// halfReads returns the nodes of g's Float16ReadsCollection and
// BFloat16ReadsCollection with their half type; a node in both reads as
// binary16.
func halfReads(g *graph.Graph) map[*graph.Node]tensor.DType {
	var m map[*graph.Node]tensor.DType
	for _, c := range []struct {
		key string
		dt  tensor.DType
	}{{BFloat16ReadsCollection, tensor.BFloat16}, {Float16ReadsCollection, tensor.Float16}} {
		for _, n := range g.Collection(c.key) {
			if m == nil {
				m = map[*graph.Node]tensor.DType{}
			}
			m[n] = c.dt
		}
	}
	return m
}

// wireType returns the type n's input i crosses tasks as: a half type for
// a float32 Variable read by a node of a half-read collection, Invalid
// (its own type) otherwise.
func (p *partitioner) wireType(n *graph.Node, i int) tensor.DType {
	dt, ok := p.halfReads[n]
	if in := n.Input(i); !ok || n.IsRefInput(i) || in.Node.Op() != "Variable" || in.DType() != tensor.Float32 {
		return tensor.Invalid
	}
	return dt
}

func (p *partitioner) part(task string) *part {
	pt := p.parts[task]
	if pt == nil {
		pt = &part{g: graph.New(), copies: map[*graph.Node]*graph.Node{}}
		p.parts[task] = pt
	}
	return pt
}

// add copies n into its task's graph, creating the transfers it needs first.
func (p *partitioner) add(n *graph.Node) error {
	task, dev := p.taskOf[n], p.devices[n]
	pt := p.part(task)
	spec := graph.NodeSpec{Op: n.Op(), Name: n.Name(), Device: dev, Attrs: map[string]any{}}
	for _, a := range n.AttrNames() {
		spec.Attrs[a], _ = n.Attr(a)
	}
	for i, in := range n.Inputs() {
		if p.isFed(in) && !n.IsRefInput(i) {
			ph, err := p.feed(in, task, dev)
			if err != nil {
				return err
			}
			spec.Inputs = append(spec.Inputs, ph.Output(0))
			continue
		}
		srcTask, ok := p.taskOf[in.Node]
		if !ok {
			return fmt.Errorf("partition: node %s: input %d (%s): %w", n, i, in.Name(), ErrMissingInput)
		}
		if srcTask == task {
			spec.Inputs = append(spec.Inputs, p.parts[task].copies[in.Node].Output(in.Index))
			continue
		}
		if n.IsRefInput(i) {
			if v := p.hostVariable(n, in.Node, task); v != nil {
				spec.Inputs = append(spec.Inputs, v.Output(in.Index))
				continue
			}
			return fmt.Errorf("partition: node %s on %s takes ref input %d from %s on %s: %w",
				n, dev, i, in.Node, p.devices[in.Node], ErrRefCrossesTasks)
		}
		recv, err := p.recv(wireOutput{in, p.wireType(n, i)}, task, dev)
		if err != nil {
			return err
		}
		spec.Inputs = append(spec.Inputs, recv.Output(0))
	}
	for _, c := range n.ControlInputs() {
		srcTask, ok := p.taskOf[c]
		if !ok && p.sub != nil && !p.sub.Runs(c) {
			continue // its outputs are all fed
		}
		if !ok {
			return fmt.Errorf("partition: node %s: control input %s: %w", n, c, ErrMissingInput)
		}
		if srcTask == task {
			spec.Control = append(spec.Control, p.parts[task].copies[c])
			continue
		}
		recv, err := p.controlRecv(c, task, dev)
		if err != nil {
			return err
		}
		spec.Control = append(spec.Control, recv)
	}
	cp, err := pt.g.AddNode(spec)
	if err != nil {
		return fmt.Errorf("partition: copying node %s to %s: %w", n, task, err)
	}
	pt.copies[n] = cp
	return nil
}

// isFed reports whether o is a fed tensor of the step.
func (p *partitioner) isFed(o graph.Output) bool {
	if p.sub == nil {
		return false
	}
	_, ok := p.sub.FeedIndex(o)
	return ok
}

// feed returns the Placeholder of the fed tensor o in task, creating it on
// first use on dev.
func (p *partitioner) feed(o graph.Output, task, dev string) (*graph.Node, error) {
	pt := p.part(task)
	name := FeedName(o)
	if n := pt.g.Node(name); n != nil {
		return n, nil
	}
	n, err := pt.g.AddNode(graph.NodeSpec{Op: "Placeholder", Name: name, Device: dev,
		Attrs: map[string]any{"dtype": o.DType(), "shape": o.Shape()}})
	if err != nil {
		return nil, fmt.Errorf("partition: feeding %s to %s: %w", o, task, err)
	}
	return n, nil
}

// recv returns the Recv of w.out in task, creating it and its Send in
// w.out's task on first use. recvDev is the device of the first consumer.
// For a half wire type, the Send takes a Cast of w.out to it, and what is
// returned is the Cast of the Recv back to w.out's type.
func (p *partitioner) recv(w wireOutput, task, recvDev string) (*graph.Node, error) {
	k := edgeKey{w.out, task, w.wire}
	if r := p.recvs[k]; r != nil {
		return r, nil
	}
	out := w.out
	srcTask, sendDev := p.taskOf[out.Node], p.devices[out.Node]
	name := out.Name()
	src := p.parts[srcTask].copies[out.Node].Output(out.Index)
	if w.wire != tensor.Invalid {
		cast, err := p.parts[srcTask].g.AddNode(castSpec(
			"_cast/"+sanitize(out.Name())+"/"+w.wire.String()+"/to/"+sanitize(task), src, w.wire, sendDev))
		if err != nil {
			return nil, fmt.Errorf("partition: casting %s to %v on %s: %w", name, w.wire, sendDev, err)
		}
		src = cast.Output(0)
		name = src.Name()
	}
	if _, err := p.parts[srcTask].g.AddNode(SendSpec(
		"_send/"+sanitize(name)+"/to/"+sanitize(task), src, name, sendDev, recvDev)); err != nil {
		return nil, fmt.Errorf("partition: sending %s from %s to %s: %w", name, sendDev, recvDev, err)
	}
	r, err := p.parts[task].g.AddNode(RecvSpec(
		"_recv/"+sanitize(name)+"/from/"+sanitize(srcTask), name, sendDev, recvDev, src.DType(), out.Shape()))
	if err != nil {
		return nil, fmt.Errorf("partition: receiving %s from %s on %s: %w", name, sendDev, recvDev, err)
	}
	if w.wire != tensor.Invalid {
		if r, err = p.parts[task].g.AddNode(castSpec(
			"_cast/"+sanitize(out.Name())+"/"+out.DType().String()+"/from/"+sanitize(srcTask), r.Output(0), out.DType(), recvDev)); err != nil {
			return nil, fmt.Errorf("partition: casting %s back to %v on %s: %w", name, out.DType(), recvDev, err)
		}
	}
	p.recvs[k] = r
	return r, nil
}

// castSpec returns the spec of a Cast of in to dt on device.
func castSpec(name string, in graph.Output, dt tensor.DType, device string) graph.NodeSpec {
	return graph.NodeSpec{Op: "Cast", Name: name, Inputs: []graph.Output{in}, Device: device,
		Attrs: map[string]any{"dtype": dt}}
}

// controlRecv returns a Recv in task that completes after src. If an output
// of src is also sent to task, its Recv serves; otherwise a dummy Const, its
// Send and a Recv are created on first use.
func (p *partitioner) controlRecv(src *graph.Node, task, recvDev string) (*graph.Node, error) {
	k := ctrlKey{src, task}
	if r := p.ctrls[k]; r != nil {
		return r, nil
	}
	if w, ok := p.data[k]; ok {
		r, err := p.recv(w, task, recvDev)
		p.ctrls[k] = r
		return r, err
	}
	srcTask, sendDev := p.taskOf[src], p.devices[src]
	sp := p.parts[srcTask]
	tensorName := "^" + src.Name()
	base := sanitize(src.Name()) + "/control"
	dummy, err := sp.g.AddNode(graph.NodeSpec{
		Op: "Const", Name: "_ctrl/" + sanitize(src.Name()) + "/to/" + sanitize(task), Device: sendDev,
		Control: []*graph.Node{sp.copies[src]},
		Attrs:   map[string]any{"value": tensor.Scalar(int32(0))},
	})
	if err == nil {
		_, err = sp.g.AddNode(SendSpec("_send/"+base+"/to/"+sanitize(task), dummy.Output(0), tensorName, sendDev, recvDev))
	}
	if err != nil {
		return nil, fmt.Errorf("partition: sending control edge of %s from %s to %s: %w", src, sendDev, recvDev, err)
	}
	r, err := p.parts[task].g.AddNode(RecvSpec("_recv/"+base+"/from/"+sanitize(srcTask),
		tensorName, sendDev, recvDev, tensor.Int32, tensor.ScalarShape()))
	if err != nil {
		return nil, fmt.Errorf("partition: receiving control edge of %s from %s on %s: %w", src, sendDev, recvDev, err)
	}
	p.ctrls[k] = r
	return r, nil
}

// sanitize makes a tensor or task name usable inside a node name:
// "w:0" -> "w_0", "/job:ps/task:0" -> "job_ps/task_0".
func sanitize(s string) string {
	return strings.ReplaceAll(strings.TrimPrefix(s, "/"), ":", "_")
}
