// Package taskgraph runs one task's graph over the task's devices: its CPU
// and its accelerators. It places each node of a step on the device it
// asks for when that device has a kernel for it (else on the CPU, under
// soft placement), cuts the step's subgraph per device with Send/Recv
// pairs (partition.SubgraphByDevice), and runs each step as the CPU
// executor of the host's partition and a runner per accelerator partition,
// concurrently, meeting in the step's rendezvous: TensorFlow's
// intra-process Send/Recv, where the copies between host and device
// memory happen.
//
//	e, err := taskgraph.New(g, sig, res, taskgraph.Config{
//		Task: "/job:worker/task:0", Devices: gpus, SoftPlacement: true,
//	})
//	out, err := e.RunStep(ctx, step, feeds) // as executor.Executor's
//
// Feeds arrive on the host and go to a device only when a device kernel
// reads them; fetches come back to the host. A step none of whose nodes
// runs on an accelerator is the CPU executor alone, with nothing added.
//
// Variables live on the host unless Config.VariablesOnDevice (or
// DISTFLOW_GPU_VARIABLES=1) keeps those placed on an accelerator in its
// memory, updated there in place by their optimizer (variables.go); then a
// training step copies in its batch and out its fetches, and nothing else.
// A Gather (an embedding's lookup) runs on an accelerator only when its
// params are there too (a device variable, a value computed there): from
// a table on the host it reads the rows there, so that only they cross.
package taskgraph

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/runner"
	"github.com/distflow/distflow/executor"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/partition"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
)

// Config is a task's devices.
type Config struct {
	// Task names the task ("/job:worker/task:0"; "/job:localhost/task:0"
	// in process): the host's device is Task+"/cpu:0".
	Task string
	// Devices are the task's accelerators, GPU:0 onward: a node placed on
	// "/gpu:i" runs on Devices[i].
	Devices []device.Device
	// SoftPlacement runs on the CPU a node that asks for an accelerator
	// the task lacks, or whose op has no kernel there; without it such a
	// node is an error naming it.
	SoftPlacement bool
	// Logger gets a line naming the ops asked for on a GPU that fell back
	// to the CPU, each with why: each op once per task and process, as
	// TensorFlow logs a soft placement (nil: slog.Default()).
	Logger *slog.Logger
	// Eager launches every step kernel by kernel instead of replaying a
	// captured whole step (package device/runner); DISTFLOW_GPU_REPLAY=0
	// in the environment sets it for every task graph of the process.
	Eager bool
	// RandomOnDevice runs the random ops of device.Random that are placed
	// on an accelerator there, drawing from the devices' Philox stream
	// (device.PhiloxUniform), so that a step with dropout replays whole;
	// DISTFLOW_GPU_RANDOM=1 in the environment sets it for every task
	// graph of the process. Off, they run on the host, whose CPU kernels
	// draw other numbers for the same seed: a model then draws the same
	// numbers wherever its compute is placed, as it did before the devices
	// had random kernels.
	RandomOnDevice bool
	// VariablesOnDevice keeps a Variable placed on an accelerator in that
	// device's memory (device.Variables, one store per device in the
	// task's resources), with the ops that take it by ref: its Assign,
	// AssignAdd and AssignSub (a global step's increment), its optimizer's
	// dense or sparse update, IsVariableInitialized and the checkpoint ops
	// (see variables.go); DISTFLOW_GPU_VARIABLES=1 in the environment sets
	// it for every task graph of the process. Off, variables live on the
	// host and a device step reads them from there at every step.
	VariablesOnDevice bool
}

// loggedFallback holds the task and op of every node soft-placed on the
// CPU that was logged: each is logged once per process.
var loggedFallback sync.Map

// Executor runs a signature's steps over the task's devices.
type Executor struct {
	cpu      *executor.Executor
	cpuFeeds []int // index in the signature's feeds of each of the CPU's
	placed   map[string]string
	runners  []*part
	// feeds are the signature's fed tensors, whose values RunStep checks
	// against them before a runner reads one: the CPU executor checks
	// only its own.
	feeds []graph.Output
	// route says where each fetch comes from: the CPU's result (runner -1)
	// or a runner's, at index.
	route []source
}

type part struct {
	r     *runner.Runner
	feeds []int // index in the signature's feeds of each of the runner's
}

type source struct{ runner, index int }

// fedFetch is the runner of a fetch that is also fed: its index is the
// feed's.
const fedFetch = -3

// New prepares the steps of sig on g: it places, partitions and builds the
// executor and runners. With no node on an accelerator it is
// executor.New's executor, wrapped.
func New(g *graph.Graph, sig graph.Signature, res *kernel.Resources, cfg Config) (*Executor, error) {
	sub, err := graph.NewSubgraph(g, sig)
	if err != nil {
		return nil, err
	}
	hostDev := cfg.Task + "/cpu:0"
	var dv *deviceVariables
	var varDev map[*graph.Node]int
	if len(cfg.Devices) > 0 && (cfg.VariablesOnDevice || os.Getenv("DISTFLOW_GPU_VARIABLES") == "1") {
		dv = variablesOf(res)
		varDev = placeVariables(g, cfg)
		if err := dv.settle(sub, varDev, cfg); err != nil {
			return nil, err
		}
	}
	devices, fell, err := place(sub, hostDev, cfg, varDev)
	if err != nil {
		return nil, err
	}
	// Each op that fell back is logged once per task and process, with
	// its own reason.
	var fresh []string
	for _, op := range slices.Sorted(maps.Keys(fell)) {
		if _, seen := loggedFallback.LoadOrStore(cfg.Task+" "+op, true); !seen {
			fresh = append(fresh, op+": "+fell[op])
		}
	}
	if len(fresh) > 0 {
		log := cfg.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Info("taskgraph: nodes placed on a GPU run on the CPU (soft placement)", "task", cfg.Task, "ops", strings.Join(fresh, "; "))
	}
	onDevice := false
	for _, d := range devices {
		onDevice = onDevice || d != hostDev
	}
	if !onDevice {
		e, err := executor.New(g, sig, res)
		if err != nil {
			return nil, err
		}
		all := make([]int, len(sig.Feeds))
		for i := range all {
			all[i] = i
		}
		return &Executor{cpu: e, cpuFeeds: all, route: cpuRoute(len(sig.Fetches))}, nil
	}
	parts, err := partition.SubgraphByDevice(sub, devices)
	if err != nil {
		return nil, fmt.Errorf("taskgraph: %w", err)
	}
	hostKey, err := partition.DeviceOf(hostDev)
	if err != nil {
		return nil, fmt.Errorf("taskgraph: %w", err)
	}
	e := &Executor{route: make([]source, len(sig.Fetches)), placed: make(map[string]string, len(devices)), feeds: sig.Feeds}
	for n, d := range devices {
		e.placed[n.Name()] = d
	}
	host := parts[hostKey]
	if host == nil {
		host = graph.New()
	}
	var cpuSig graph.Signature
	feedIndex := map[string]int{}
	for i, f := range sig.Feeds {
		feedIndex[partition.FeedName(f)] = i
	}
	var cpuFeeds []int
	for i, f := range sig.Feeds {
		if n := host.Node(partition.FeedName(f)); n != nil {
			cpuSig.Feeds = append(cpuSig.Feeds, n.Output(0))
			cpuFeeds = append(cpuFeeds, i)
		}
	}
	for i, f := range sig.Fetches {
		// A fetched feed is the fed tensor, as the CPU executor returns it
		// (TensorFlow's fetch of a fed placeholder).
		if j, fed := sub.FeedIndex(f); fed {
			e.route[i] = source{fedFetch, j}
			continue
		}
		if n := host.Node(f.Node.Name()); n != nil {
			e.route[i] = source{-1, len(cpuSig.Fetches)}
			cpuSig.Fetches = append(cpuSig.Fetches, n.Output(f.Index))
		} else {
			e.route[i] = source{runner: -2}
		}
	}
	for _, t := range sig.Targets {
		if n := host.Node(t.Name()); n != nil {
			cpuSig.Targets = append(cpuSig.Targets, n)
		}
	}
	cpuSig.Targets = append(cpuSig.Targets, partition.Sends(host)...)
	keys := make([]string, 0, len(parts))
	for k := range parts {
		if k != hostKey {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		pg := parts[k]
		d, _ := placement.ParseDevice(k)
		p := &part{}
		var opts runner.Options
		for _, n := range pg.Nodes() {
			if i, ok := feedIndex[n.Name()]; ok && n.Op() == "Placeholder" {
				opts.Feeds = append(opts.Feeds, n.Name())
				p.feeds = append(p.feeds, i)
			}
		}
		for i, f := range sig.Fetches {
			if e.route[i].runner == -2 && pg.Node(f.Node.Name()) != nil {
				e.route[i] = source{len(e.runners), len(opts.Fetches)}
				opts.Fetches = append(opts.Fetches, f.Name())
			}
		}
		opts.Eager = cfg.Eager || os.Getenv("DISTFLOW_GPU_REPLAY") == "0"
		if dv != nil {
			if opts.Variables, err = dv.store(cfg.Devices[d.Index]); err != nil {
				return nil, fmt.Errorf("taskgraph: %w", err)
			}
			opts.Resources = res
		}
		if p.r, err = runner.New(pg, cfg.Devices[d.Index], opts); err != nil {
			return nil, fmt.Errorf("taskgraph: %w", err)
		}
		e.runners = append(e.runners, p)
	}
	if e.cpu, err = executor.New(host, cpuSig, res); err != nil {
		return nil, fmt.Errorf("taskgraph: the host's partition: %w", err)
	}
	e.cpuFeeds = cpuFeeds
	return e, nil
}

func cpuRoute(n int) []source {
	r := make([]source, n)
	for i := range r {
		r[i] = source{-1, i}
	}
	return r
}

// place returns the full device of every node of sub: the accelerator it
// asks for when that has a kernel for it, else the host. It also returns
// the ops that asked for an accelerator and run on the host, each with the
// reason of its first node.
func place(sub *graph.Subgraph, hostDev string, cfg Config, varDev map[*graph.Node]int) (map[*graph.Node]string, map[string]string, error) {
	devices := make(map[*graph.Node]string, len(sub.Nodes)+len(sub.Vars))
	fell := map[string]string{}
	randomOnDevice := cfg.RandomOnDevice || os.Getenv("DISTFLOW_GPU_RANDOM") == "1"
	for _, n := range sub.AllNodes() {
		devices[n] = hostDev
		// A device variable and the ops that take it by ref go together;
		// those of a variable on the host are placed as before, refused
		// on an accelerator without soft placement.
		if idx, ok := colocated(n, varDev); ok && idx >= 0 {
			devices[n] = cfg.Task + "/gpu:" + strconv.Itoa(idx)
			continue
		}
		d, err := placement.ParseDevice(n.Device())
		if err != nil {
			return nil, nil, fmt.Errorf("taskgraph: node %s: %w", n, err)
		}
		// A NoOp (a train op's group) does nothing: on the host it joins
		// its inputs' ends there, where on a device it would hold the
		// device's step open for them.
		if d.Type != "gpu" || n.Op() == "NoOp" {
			continue
		}
		idx := max(d.Index, 0)
		why := ""
		switch {
		case idx >= len(cfg.Devices):
			why = fmt.Sprintf("the task has %d GPUs", len(cfg.Devices))
		case !randomOnDevice && slices.Contains(device.Random, n.Op()):
			why = "random ops draw on the host unless taskgraph.Config.RandomOnDevice (or DISTFLOW_GPU_RANDOM=1)"
		case varDev != nil && n.Op() == "Variable":
			why = "an op that takes the variable by ref cannot run there (or takes it with a variable that cannot), so it lives on the host"
		case n.Op() == "Gather" && hostParams(n.Input(0).Node, varDev):
			why = "a Gather whose params are on the host (a variable there, a value received, fed or constant) reads its rows there rather than copying all of them to the device (taskgraph.Config.VariablesOnDevice keeps an embedding on its GPU)"
		default:
			why = supported(n, cfg.Devices[idx].Info().Platform)
		}
		if why == "" {
			devices[n] = cfg.Task + "/gpu:" + strconv.Itoa(idx)
			continue
		}
		if !cfg.SoftPlacement {
			return nil, nil, fmt.Errorf("taskgraph: node %s asks for %s: %s (soft placement would run it on the CPU): %w",
				n, n.Device(), why, placement.ErrNoDevice)
		}
		if _, ok := fell[n.Op()]; !ok {
			fell[n.Op()] = why
		}
	}
	return devices, fell, nil
}

// hostParams reports whether p, a Gather's params, is on the host: a
// Variable that lives there, or a value that arrives there (a Recv's from
// another task or device, a feed, a constant). A Gather of those runs on
// the host, which copies only the rows it looks up to the device.
func hostParams(p *graph.Node, varDev map[*graph.Node]int) bool {
	switch p.Op() {
	case "Variable":
		idx, ok := varDev[p]
		return !ok || idx < 0
	case "Recv", "Placeholder", "Const":
		return true
	}
	return false
}

// supported returns "" when n can run on platform, else why not.
func supported(n *graph.Node, platform string) string {
	switch n.Op() {
	case "Placeholder", "Const", "Send", "Recv":
		return "" // the runner's own
	}
	def, err := device.LookupKernel(platform, n.Op())
	if err != nil {
		return "no " + platform + " kernel for " + n.Op()
	}
	for i := range n.NumInputs() {
		if n.IsRefInput(i) {
			return n.Op() + " takes a variable by ref, and the variable lives on the host (taskgraph.Config.VariablesOnDevice keeps it on its GPU when every op that takes it by ref runs there)"
		}
	}
	if n.NumOutputs() > 0 && !def.Supports(n.Output(0).DType()) {
		return fmt.Sprintf("no %s kernel for %s of %v", platform, n.Op(), n.Output(0).DType())
	}
	if n.NumInputs() > 0 && !def.SupportsInput(n.Input(0).DType()) {
		return fmt.Sprintf("no %s kernel for %s of a %v input", platform, n.Op(), n.Input(0).DType())
	}
	return ""
}

// Placement returns the device of each node of the step's subgraph, by
// name, when a step runs on an accelerator (nil otherwise: everything is
// on the host). The map is the executor's: read it, do not change it.
func (e *Executor) Placement() map[string]string { return e.placed }

// Replays reports how many of the step's device partitions replay
// captured whole steps (package device/runner) rather than launching
// kernel by kernel.
func (e *Executor) Replays() int {
	n := 0
	for _, p := range e.runners {
		if p.r.Replays() > 0 {
			n++
		}
	}
	return n
}

// Close frees what the executor holds on its devices (the captured
// graphs' memory). It must not run steps afterwards.
func (e *Executor) Close() error {
	for _, p := range e.runners {
		p.r.Close()
	}
	return nil
}

// Transfers returns the copies between host and device memory that the
// executor's device partitions have queued so far (package device/runner).
func (e *Executor) Transfers() runner.Transfers {
	var t runner.Transfers
	for _, p := range e.runners {
		t = t.Add(p.r.Transfers())
	}
	return t
}

// Accelerated reports whether a step runs on an accelerator.
func (e *Executor) Accelerated() bool { return len(e.runners) > 0 }

// Run runs one step in process, as executor.Executor's Run.
func (e *Executor) Run(ctx context.Context, feeds []*tensor.Tensor) ([]*tensor.Tensor, error) {
	return e.RunStep(ctx, nil, feeds, executor.StepOptions{})
}

// RunStep runs one step with feeds (in the signature's order) and returns
// its fetches on the host. step.Rendezvous, when set, is the step's own (a
// worker's, which also meets other tasks); else the step gets a local one.
// opts.Context and opts.Canceler, when set, are the step's context and
// what cancels it, as executor.StepOptions says; opts.Trace records the
// host's part of a step over accelerators (not the kernels on their
// streams), and opts.Out and Owned are not used there. The first error of any device
// cancels the step's context, so that the others' waits end, and is
// returned.
func (e *Executor) RunStep(ctx context.Context, step *kernel.Step, feeds []*tensor.Tensor, opts executor.StepOptions) ([]*tensor.Tensor, error) {
	if len(e.runners) == 0 {
		return e.cpu.RunStepWith(ctx, step, feeds, opts)
	}
	if err := e.checkFeeds(feeds); err != nil {
		return nil, err
	}
	st := kernel.Step{}
	if step != nil {
		st = *step
	}
	if st.Rendezvous == nil {
		st.Rendezvous = rendezvous.NewLocal()
	}
	if opts.Context == nil || opts.Canceler == nil {
		c, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		opts.Context, opts.Canceler = c, executor.CancelFunc(cancel)
	}
	// The host's part is traced (its Recvs wait for the devices' values);
	// the devices' streams are not yet.
	opts.Out, opts.Owned = nil, nil
	var (
		once  sync.Once
		first error
	)
	fail := func(err error) {
		once.Do(func() { first = err })
		opts.Canceler.Cancel(err)
	}
	outs := make([][]*tensor.Tensor, len(e.runners))
	var wg sync.WaitGroup
	for i, p := range e.runners {
		wg.Go(func() {
			out, err := p.r.Run(opts.Context, st.Rendezvous, pick(feeds, p.feeds))
			if err != nil {
				fail(err)
				return
			}
			outs[i] = out
		})
	}
	cpuOut, err := e.cpu.RunStepWith(ctx, &st, pick(feeds, e.cpuFeeds), opts)
	if err != nil {
		fail(err)
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	result := make([]*tensor.Tensor, len(e.route))
	for i, src := range e.route {
		switch {
		case src.runner == fedFetch:
			result[i] = feeds[src.index]
		case src.runner < 0:
			result[i] = cpuOut[src.index]
		default:
			result[i] = outs[src.runner][src.index]
		}
	}
	return result, nil
}

// checkFeeds checks each value fed against its tensor's dtype and shape,
// as the CPU executor does: a runner would take a value of another dtype
// or rank as it is.
func (e *Executor) checkFeeds(vals []*tensor.Tensor) error {
	if len(vals) != len(e.feeds) {
		return fmt.Errorf("taskgraph: got %d feed values for %d fed tensors", len(vals), len(e.feeds))
	}
	for i, t := range vals {
		if t == nil {
			return fmt.Errorf("taskgraph: feed %s is nil", e.feeds[i])
		}
		if err := graph.CheckFeed(e.feeds[i], t.DType(), t.Shape()); err != nil {
			return fmt.Errorf("taskgraph: %w", err)
		}
	}
	return nil
}

func pick(feeds []*tensor.Tensor, idx []int) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(idx))
	for i, j := range idx {
		if j < len(feeds) {
			out[i] = feeds[j]
		}
	}
	return out
}
