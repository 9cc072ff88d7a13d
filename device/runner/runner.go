// Package runner runs one graph partition on an accelerator: each step it
// walks the partition's nodes in order and enqueues their kernels on the
// device's stream, so that the host never waits for the device except
// where a value must cross to the host.
//
//	r, err := runner.New(part, dev, runner.Options{Fetches: []string{"loss:0"}})
//	out, err := r.Run(ctx, rv, feeds) // rv: the step's rendezvous
//
// The partition comes from partition.SubgraphByDevice: every node runs on
// the device, except that a Recv takes a host tensor from the step's
// rendezvous and copies it in, a Send copies its input out and leaves it
// there, a Const is a host value, and a fed Placeholder (partition.FeedName)
// takes its value from the caller's feeds, and a Variable is a variable of
// the device's store (Options.Variables: see variables.go), which kernels
// read and update in place from step to step. Values move to the device
// only when a device kernel reads them, and to the host only when a Send,
// a fetch or a kernel's host input does; Transfers counts the copies.
//
// Output shapes are inferred on the host before each launch
// (device.Launch), the outputs allocated from the device's caching
// allocator, and a value's memory is freed as soon as its last reader has
// been queued: the stream runs the reader before any later kernel that
// reuses the memory. A step's device memory is all freed when it ends,
// whether it succeeds or fails.
//
// A Runner is safe for concurrent Runs, which the stream serialises.
package runner

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
)

// Options configures a Runner.
type Options struct {
	// Feeds are the names of the partition's fed Placeholders, in the
	// order Run takes their values.
	Feeds []string
	// Fetches are the tensors ("node:index") Run returns, on the host.
	Fetches []string
	// Eager turns whole-step replay off: every step launches its kernels
	// one by one (see the package doc).
	Eager bool
	// Variables is the device's store of variables, which the partition's
	// Variable nodes live in (see the package doc); nil for a partition
	// without variables.
	Variables *device.Variables
	// Resources is the task's resource container, whose policy the
	// checkpoint ops of device variables obey (the directories they may
	// write); nil: no confinement.
	Resources *kernel.Resources
}

// Runner runs a partition on a device.
type Runner struct {
	dev   device.Device
	nodes []*step // in creation (topological) order
	// slots: one per node output; consumers counts the readers of each.
	consumers []int
	producer  []*step // of each slot
	fetches   []int   // slot of each fetch
	feeds     map[string]int
	mu        sync.Mutex // one step at a time on the stream

	// Whole-step replay (replay.go): whether the partition allows it, the
	// graphs captured by the shapes of the step's inputs, and the keys
	// that could not be captured.
	replayable bool
	graphs     []*replay
	eagerKeys  [][]inputSig
	keyBuf     []inputSig
	stepsRun   int
	closed     bool

	vars   *device.Variables
	res    *kernel.Resources
	copies transfers
}

// step is one node as the runner runs it.
type step struct {
	n       *graph.Node
	kind    kind
	def     device.KernelDef
	k       device.Kernel
	inputs  []int // slot of each input
	outputs int   // first slot of its outputs
	key     string
	value   *tensor.Tensor // a Const's
	feed    int            // a fed Placeholder's index in Run's feeds
	v       *device.Variable
	// snapshot: a Variable whose value is read after the step updates it
	// in place (variables.go).
	snapshot bool
	// host is the CPU kernel of a checkpoint op of device variables.
	host kernel.Kernel
}

type kind int

const (
	launch kind = iota
	recv
	send
	constant
	feed
	noop
	variable    // a Variable node: the store's buffer (variables.go)
	initialized // IsVariableInitialized, on the host
	save        // SaveVariables, through the host
	restore     // RestoreVariables, through the host
	hostVar     // a variable of the host, taken by a checkpoint op by ref
)

// New prepares g, a partition whose nodes all run on dev, for Run.
func New(g *graph.Graph, dev device.Device, opts Options) (*Runner, error) {
	platform := dev.Info().Platform
	r := &Runner{dev: dev, feeds: map[string]int{}, vars: opts.Variables, res: opts.Resources}
	for i, name := range opts.Feeds {
		r.feeds[name] = i
	}
	first := map[*graph.Node]int{}
	nslots := 0
	for _, n := range g.Nodes() {
		first[n] = nslots
		nslots += n.NumOutputs()
	}
	r.consumers = make([]int, nslots)
	r.producer = make([]*step, nslots)
	for _, n := range g.Nodes() {
		st := &step{n: n, outputs: first[n]}
		for i, in := range n.Inputs() {
			if n.IsRefInput(i) && (in.Node.Op() != "Variable" || r.vars == nil && !onHost(in.Node)) {
				return nil, fmt.Errorf("runner: node %s on %s takes %s by reference, which is not a variable of the device", n, dev.Info().Name, in.Node)
			}
			if n.IsRefInput(i) && onHost(in.Node) && n.Op() != "SaveVariables" && n.Op() != "RestoreVariables" {
				return nil, fmt.Errorf("runner: node %s on %s takes the host's variable %s by reference: only a checkpoint op may", n, dev.Info().Name, in.Node)
			}
			slot := first[in.Node] + in.Index
			st.inputs = append(st.inputs, slot)
			r.consumers[slot]++
		}
		switch n.Op() {
		case "Recv":
			st.kind = recv
			st.key = rendezvous.Key(n.AttrString("send_device"), n.AttrString("recv_device"), n.AttrString("tensor_name"))
		case "Send":
			st.kind = send
			st.key = rendezvous.Key(n.AttrString("send_device"), n.AttrString("recv_device"), n.AttrString("tensor_name"))
		case "Const":
			st.kind, st.value = constant, n.AttrTensor("value")
		case "NoOp":
			st.kind = noop
		case "Variable", "IsVariableInitialized", "SaveVariables", "RestoreVariables":
			if err := r.prepareVariableOp(st); err != nil {
				return nil, err
			}
		case "Placeholder":
			i, ok := r.feeds[n.Name()]
			if !ok {
				return nil, fmt.Errorf("runner: placeholder %s on %s is not fed", n, dev.Info().Name)
			}
			st.kind, st.feed = feed, i
		default:
			def, err := device.LookupKernel(platform, n.Op())
			if err != nil {
				return nil, fmt.Errorf("runner: node %s on %s: %w", n, dev.Info().Name, err)
			}
			k, err := def.Factory(n)
			if err != nil {
				return nil, fmt.Errorf("runner: node %s on %s: %w", n, dev.Info().Name, err)
			}
			st.def, st.k = def, k
		}
		r.nodes = append(r.nodes, st)
		for i := range n.NumOutputs() {
			r.producer[st.outputs+i] = st
		}
	}
	for _, name := range opts.Fetches {
		o, err := g.Output(name)
		if err != nil {
			return nil, fmt.Errorf("runner: fetch %q: %w", name, err)
		}
		slot := first[o.Node] + o.Index
		r.fetches = append(r.fetches, slot)
		r.consumers[slot]++ // kept to the end of the step
	}
	r.markSnapshots()
	_, capturer := dev.Stream().(device.Capturer)
	r.replayable = capturer && !opts.Eager && replayable(r.nodes)
	return r, nil
}

// Device returns the runner's device.
func (r *Runner) Device() device.Device { return r.dev }

// Run runs one step: its Recvs and Sends meet the other partitions in rv,
// feeds are the values of Options.Feeds, and the result holds the
// Options.Fetches, on the host. On an error the step's device memory is
// freed and nothing is returned; the caller aborts rv so that the other
// partitions do not wait.
func (r *Runner) Run(ctx context.Context, rv kernel.Rendezvous, feeds []*tensor.Tensor) ([]*tensor.Tensor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("runner: %s: %w", r.dev.Info().Name, device.ErrClosed)
	}
	s := &run{r: r, ctx: ctx, rv: rv, feeds: feeds, vals: make([]*device.Tensor, len(r.consumers)), left: slices.Clone(r.consumers)}
	defer s.freeAll()
	r.stepsRun++
	if r.replayable {
		// The step's inputs first: they never wait for this partition's
		// Sends, which all come after them.
		if err := s.receive(); err != nil {
			return nil, err
		}
		key := s.inputKey()
		g, eager := r.lookup(key)
		if g != nil {
			return s.replay(g)
		}
		// The first step runs eagerly (it loads the kernels); later ones
		// capture a graph for their shapes, once.
		if r.stepsRun > 1 && !eager && len(r.graphs) < maxGraphs && len(r.eagerKeys) < maxGraphs {
			out, captured, err := s.capture(key)
			if captured || err != nil {
				return out, err
			}
			r.eagerKeys = append(r.eagerKeys, cloneKey(key))
		}
	}
	return s.eager()
}

// eager runs the step node by node.
func (s *run) eager() ([]*tensor.Tensor, error) {
	r := s.r
	for _, st := range r.nodes {
		if err := s.ctx.Err(); err != nil {
			return nil, fmt.Errorf("runner: %s: %w", r.dev.Info().Name, err)
		}
		if err := s.node(st); err != nil {
			return nil, err
		}
		s.done(st)
	}
	out := make([]*tensor.Tensor, len(r.fetches))
	for i, slot := range r.fetches {
		if err := s.readable(slot); err != nil {
			return nil, fmt.Errorf("runner: fetch %d: %w", i, err)
		}
		t, err := s.download(s.vals[slot])
		if err != nil {
			return nil, fmt.Errorf("runner: fetch %d: %w", i, err)
		}
		out[i] = t
	}
	if err := r.dev.Stream().Synchronize(s.ctx); err != nil {
		return nil, fmt.Errorf("runner: %s: %w", r.dev.Info().Name, err)
	}
	return out, nil
}

// done releases what st's run let go: its inputs' reads, and outputs that
// no one reads.
func (s *run) done(st *step) {
	for _, slot := range st.inputs {
		s.release(slot)
	}
	for i := range st.n.NumOutputs() {
		if s.left[st.outputs+i] == 0 {
			s.release(st.outputs + i)
		}
	}
}

// run is the state of one step.
type run struct {
	r     *Runner
	ctx   context.Context
	rv    kernel.Rendezvous
	feeds []*tensor.Tensor
	// received holds the Recvs' tensors taken before the step, by slot.
	received map[int]*tensor.Tensor
	// holding: the step's buffers belong to a graph being captured, and
	// are not freed; captured lists them.
	holding  bool
	captured []device.Buffer
	pending  []pendingUpload
	vals     []*device.Tensor
	left     []int // readers still to run, per slot
	// temps are device copies of host values made for one launch.
	temps []*device.Tensor
	// hold keeps host memory the stream still reads from, to the step's end.
	hold []*tensor.Tensor
}

func (s *run) node(st *step) error {
	d := s.r.dev
	switch st.kind {
	case noop:
		return nil
	case variable, initialized, save, restore, hostVar:
		return s.variableOp(st)
	case constant:
		s.vals[st.outputs] = host(st.value)
		return nil
	case feed:
		if st.feed >= len(s.feeds) || s.feeds[st.feed] == nil {
			return fmt.Errorf("runner: placeholder %s on %s: no value fed", st.n, d.Info().Name)
		}
		s.vals[st.outputs] = host(s.feeds[st.feed])
		return nil
	case recv:
		t, ok := s.received[st.outputs]
		var err error
		if !ok {
			t, err = s.rv.Recv(s.ctx, st.key)
		}
		if err != nil {
			return fmt.Errorf("runner: node %s on %s: %w", st.n, d.Info().Name, err)
		}
		// Received values stay on the host until a kernel reads them: a
		// tensor only passed on is never copied in.
		s.vals[st.outputs] = host(t)
		return nil
	case send:
		if err := s.readable(st.inputs[0]); err != nil {
			return fmt.Errorf("runner: node %s on %s: %w", st.n, d.Info().Name, err)
		}
		t, err := s.toHost(s.vals[st.inputs[0]])
		if err != nil {
			return fmt.Errorf("runner: node %s on %s: %w", st.n, d.Info().Name, err)
		}
		if err := s.rv.Send(st.key, t); err != nil {
			return fmt.Errorf("runner: node %s on %s: %w", st.n, d.Info().Name, err)
		}
		return nil
	}
	c := &device.Context{Ctx: s.ctx, Node: st.n, Device: d, Stream: d.Stream(), Inputs: make([]*device.Tensor, len(st.inputs))}
	if s.holding {
		c.Hold = func(b device.Buffer) { s.captured = append(s.captured, b) }
	}
	for i, slot := range st.inputs {
		v := s.vals[slot]
		if v == nil {
			return fmt.Errorf("runner: node %s on %s: input %d has no value", st.n, d.Info().Name, i)
		}
		// Every read of a variable needs a value; Assign's ref gives one.
		if !(st.n.Op() == "Assign" && i == 0) {
			if err := s.readable(slot); err != nil {
				return fmt.Errorf("runner: node %s on %s: input %d: %w", st.n, d.Info().Name, i, err)
			}
		}
		if st.n.IsRefInput(i) {
			v = s.r.variableOf(slot).Tensor() // the variable itself, not a snapshot
		}
		switch {
		case st.def.IsHostInput(i) && v.Host == nil:
			t, err := s.toHost(v)
			if err != nil {
				return fmt.Errorf("runner: node %s: host input %d: %w", st.n, i, err)
			}
			v = host(t)
		case !st.def.IsHostInput(i) && v.Host != nil && s.holding:
			// A capture cannot record the copy: the buffer is made now
			// and filled when the capture ends (see capture).
			buf, err := d.Allocator().Alloc(v.Bytes())
			if err != nil {
				return fmt.Errorf("runner: node %s on %s: input %d: %w", st.n, d.Info().Name, i, err)
			}
			up := &device.Tensor{DType: v.DType, Shape: v.Shape, Buf: buf}
			s.captured = append(s.captured, buf)
			s.pending = append(s.pending, pendingUpload{dev: up, host: v.Host})
			if s.left[slot] > 1 {
				s.vals[slot] = up
			}
			v = up
		case !st.def.IsHostInput(i) && v.Host != nil:
			up, err := s.upload(v.Host)
			if err != nil {
				return fmt.Errorf("runner: node %s on %s: copying input %d in: %w", st.n, d.Info().Name, i, err)
			}
			s.hold = append(s.hold, v.Host)
			if s.left[slot] > 1 {
				s.vals[slot] = up // later readers on the device use the copy
			} else {
				s.temps = append(s.temps, up)
			}
			v = up
		}
		c.Inputs[i] = v
	}
	if err := device.Launch(c, st.def, st.k); err != nil {
		return err
	}
	if st.n.Op() == "Assign" {
		// Queued: every later read of the variable is queued after it.
		if v := s.r.variableOf(st.inputs[0]); v != nil {
			v.SetInitialized()
		}
	}
	for i, o := range c.Outputs {
		s.vals[st.outputs+i] = o
		if s.holding && o.Host == nil {
			s.captured = append(s.captured, o.Buf)
		}
	}
	if !s.holding {
		device.FreeAll(d.Allocator(), s.temps)
		s.temps = s.temps[:0]
	}
	return nil
}

// toHost returns v's value on the host, waiting for the stream if it is on
// the device.
func (s *run) toHost(v *device.Tensor) (*tensor.Tensor, error) {
	if v == nil {
		return nil, fmt.Errorf("no value")
	}
	if v.Host != nil {
		return v.Host, nil
	}
	t, err := s.download(v)
	if err != nil {
		return nil, err
	}
	if err := s.r.dev.Stream().Synchronize(s.ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// release counts one reader of slot done, and frees its device memory after
// the last.
func (s *run) release(slot int) {
	s.left[slot]--
	if s.left[slot] > 0 {
		return
	}
	if v := s.vals[slot]; v != nil && v.Host == nil && !s.holding && !s.stored(slot, v) {
		s.r.dev.Allocator().Free(v.Buf)
	}
	s.vals[slot] = nil
}

// freeAll frees what the step still holds, after its queued work is done
// (a failed step's stream may still be reading its memory).
func (s *run) freeAll() {
	s.r.dev.Stream().Synchronize(context.WithoutCancel(s.ctx)) // errors were reported by the step
	a := s.r.dev.Allocator()
	device.FreeAll(a, s.temps)
	for i, v := range s.vals {
		if v != nil && v.Host == nil && !s.stored(i, v) {
			a.Free(v.Buf)
		}
		s.vals[i] = nil
	}
}

func host(t *tensor.Tensor) *device.Tensor {
	return &device.Tensor{DType: t.DType(), Shape: t.Shape(), Host: t}
}
