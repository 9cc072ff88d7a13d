package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/executor"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/gopool"
	"github.com/distflow/distflow/internal/stepctx"
	"github.com/distflow/distflow/kernel"
	_ "github.com/distflow/distflow/kernel/cpu" // every CPU kernel, Send and Recv included
	"github.com/distflow/distflow/placement"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/service"
	"github.com/distflow/distflow/tensor"
)

// Config configures a Worker.
type Config struct {
	// Task is the task this worker is ("/job:ps/task:0"); required. Its
	// device is Task + "/cpu:0".
	Task string
	// Workers resolves other tasks, to fetch the tensors their Send nodes
	// produce for this task's Recv nodes. It may be nil for a worker that
	// only runs self-contained partitions.
	Workers Cache
	// Logger receives debug logs of registrations and failed steps; nil
	// means slog.Default().
	Logger *slog.Logger
	// OnShutdown is called once, with the reason, by the first Shutdown
	// request. It runs on the caller's goroutine, so it must not wait for
	// that request to end (a server stops itself asynchronously). Nil means
	// Shutdown only records the request.
	OnShutdown func(reason string)
	// ShutdownFrom lists the tasks whose Shutdown requests are obeyed (the
	// cluster's chief); a request from another task, or whose caller the
	// transport did not name (service.Caller), fails with
	// service.ErrPermissionDenied. Empty: every request is obeyed, as
	// before callers were named.
	ShutdownFrom []string

	// FileRoots are the directories under which the graphs this task runs
	// may read and write files (the dir of SaveVariables and
	// RestoreVariables): the task's checkpoint and model directories.
	// Paths are made absolute, cleaned and their symlinks resolved before
	// the check (kernel.Policy). With no FileRoots, every file op is
	// refused, unless UnconfinedFiles is set.
	FileRoots []string
	// UnconfinedFiles lets the graphs read and write wherever the process
	// may, as before file roots existed: for launchers that do not pass
	// their directories. FileRoots are then ignored.
	UnconfinedFiles bool
	// MaxTensorBytes bounds every tensor the task's kernels allocate and
	// every tensor fed to it (kernel.Policy.MaxTensorBytes), and the
	// declared outputs of the graphs it registers: a larger one fails with
	// an error wrapping kernel.ErrOverBudget, before any allocation. 0
	// means DefaultMaxTensorBytes(); a negative value, no bound.
	MaxTensorBytes int64
	// MaxGraphs bounds the graphs one session may hold registered on the
	// task; 0 means DefaultMaxGraphs, a negative value no bound.
	MaxGraphs int
	// MaxGraphBytes bounds the memory the graphs of one session hold on
	// the task, as GraphMemory estimates it (a decoded graph holds up to
	// about 9 times its serialised size); 0 means DefaultMaxGraphBytes, a
	// negative value no bound.
	MaxGraphBytes int64
	// MaxCallerSessions bounds the sessions that hold graphs on the task
	// for one caller (the task or client the transport names,
	// service.Caller; callers it does not name count as one); 0 means
	// DefaultMaxCallerSessions, a negative value no bound.
	MaxCallerSessions int
	// MaxCallerGraphBytes bounds the memory the graphs of all sessions of
	// one caller hold on the task (GraphMemory); 0 means
	// DefaultMaxCallerGraphBytes, a negative value no bound.
	MaxCallerGraphBytes int64
	// SessionIdle is how long a session may go without registering or
	// running a graph before the task drops its graphs (as CloseSession
	// would); 0 means DefaultSessionIdle, a negative value never. A
	// session's master that comes back after that finds its graphs gone
	// (service.ErrNoGraph) and registers them again.
	SessionIdle time.Duration
	// Now is the clock of SessionIdle; nil means time.Now.
	Now func() time.Time
	// Devices are the task's accelerators, GPU:0 onward: a partition
	// with nodes placed on "/gpu:i" of the task runs those on Devices[i]
	// (package device/taskgraph), the rest on the CPU. The worker does not
	// close them.
	Devices []device.Device
	// DeviceOptions are how Devices run the task's steps (eagerly, random
	// draws and variables on the device).
	DeviceOptions taskgraph.Options
	// StrictPlacement refuses a node placed on an accelerator that the
	// task lacks or that has no kernel for it, instead of running it on
	// the CPU (soft placement, logged once per signature).
	StrictPlacement bool
}

// Defaults of Config's limits.
const (
	DefaultMaxGraphs           = 1024
	DefaultMaxGraphBytes       = 1 << 30 // 1 GiB held in memory
	DefaultMaxCallerSessions   = 1024
	DefaultMaxCallerGraphBytes = 2 << 30 // 2 GiB held in memory
	DefaultSessionIdle         = 24 * time.Hour
)

// ErrTooManyGraphs is wrapped by the error of a RegisterGraph past the
// session's Config.MaxGraphs or Config.MaxGraphBytes, or its caller's
// Config.MaxCallerSessions or Config.MaxCallerGraphBytes.
var ErrTooManyGraphs = errors.New("session holds too many graphs")

// ErrRemoteOp is wrapped by the error of a RegisterGraph whose graph has a
// node of an op not allowed in graphs from other processes (op.Def.Remote).
var ErrRemoteOp = errors.New("op not allowed in a remote graph")

// DefaultMaxTensorBytes returns the default Config.MaxTensorBytes: a
// quarter of the machine's physical memory (1 GiB where it is unknown).
func DefaultMaxTensorBytes() int64 {
	if m := physicalMemory(); m > 0 {
		return m / 4
	}
	return 1 << 30
}

// withDefaults returns c with its zero limits replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.MaxTensorBytes == 0 {
		c.MaxTensorBytes = DefaultMaxTensorBytes()
	}
	if c.MaxGraphs == 0 {
		c.MaxGraphs = DefaultMaxGraphs
	}
	if c.MaxGraphBytes == 0 {
		c.MaxGraphBytes = DefaultMaxGraphBytes
	}
	if c.MaxCallerSessions == 0 {
		c.MaxCallerSessions = DefaultMaxCallerSessions
	}
	if c.MaxCallerGraphBytes == 0 {
		c.MaxCallerGraphBytes = DefaultMaxCallerGraphBytes
	}
	if c.SessionIdle == 0 {
		c.SessionIdle = DefaultSessionIdle
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// policy is the kernel.Policy of c.
func (c Config) policy() kernel.Policy {
	return kernel.Policy{ConfineFiles: !c.UnconfinedFiles, FileRoots: c.FileRoots, MaxTensorBytes: max(c.MaxTensorBytes, 0),
		RefuseNonFiniteWrites: true}
}

// Worker runs graph partitions for masters and serves their tensors to
// other workers. It implements Service and is safe for concurrent use.
//
// One Worker is one task: it holds one kernel.Resources shared by all
// sessions, so variables placed on a ps task outlive the sessions that
// created them and are shared by every session that names them (the
// between-graph replication of TensorFlow's parameter servers). Graphs,
// by contrast, belong to their session and are dropped with it.
type Worker struct {
	cfg   Config
	log   *slog.Logger
	res   *kernel.Resources
	steps *rendezvous.Table
	// incarnation tells this run of the task from earlier and later ones.
	incarnation uint64

	mu       sync.Mutex
	graphs   map[string]*registered // by graph handle
	sessions map[string]*sessionUse // by session handle, while it holds graphs
	callers  map[string]*callerUse  // by service.Caller, while it holds graphs
	// dropped are the device executors of graphs dropped under mu, for
	// closeDropped to close after it.
	dropped []*taskgraph.Executor

	// states keeps the stepStates that nothing touches any more, for
	// later steps (see stepState.refs).
	states sync.Pool

	shutdown sync.Once
}

// registered is one partition installed by RegisterGraph, with an executor
// per signature seen so far.
type registered struct {
	session string
	handle  string
	g       *graph.Graph

	bytes int64 // GraphMemory, counted in its session's sessionUse

	mu    sync.Mutex
	execs map[string]*prepared       // by signature key
	names graph.NameCache[*resolved] // requests resolved, without a lookup per name at every step
}

// resolved is a RunGraph request's names resolved in its graph: the
// signature, feeds sorted by name as executors take them, where each of
// the request's feeds goes in it, and the signature's key, under which its
// executor is cached.
type resolved struct {
	sig   graph.Signature
	order []int // feed i of the request is sig.Feeds[order[i]]; nil when in order
	key   string
}

// prepared is an executor and the tensors its steps receive from other
// tasks, by task, for the batches of RunGraph.
type prepared struct {
	e       *executor.Executor
	batches []batchPlan // by task
	// dev, when set instead of e, runs the steps over the task's CPU and
	// accelerators.
	dev *taskgraph.Executor
}

// batchPlan is the tensors a step receives from one task, two or more,
// asked for in one request.
type batchPlan struct {
	task  string
	keys  []string       // rendezvous keys
	index map[string]int // key -> its place in keys
}

// sessionUse is what a session holds on the worker, for its limits.
type sessionUse struct {
	caller   string // who registered its first graph; only it may add more
	graphs   int
	bytes    int64
	lastUsed time.Time
}

var (
	_ Service    = (*Worker)(nil)
	_ RunnerInto = (*Worker)(nil)
)

// New returns a worker for cfg.Task.
func New(cfg Config) *Worker {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg = cfg.withDefaults()
	w := &Worker{
		cfg:         cfg,
		log:         log.With("task", cfg.Task),
		res:         kernel.NewResources(),
		steps:       rendezvous.NewTable(),
		incarnation: rand.Uint64() | 1, // never 0, which means "unknown"
		graphs:      map[string]*registered{},
		sessions:    map[string]*sessionUse{},
		callers:     map[string]*callerUse{},
	}
	if err := w.res.SetPolicy(cfg.policy()); err != nil {
		// Fail closed: a root that cannot be resolved allows nothing.
		w.log.Error("worker: file roots refused: file ops will be refused", "roots", cfg.FileRoots, "err", err)
		p := cfg.policy()
		p.ConfineFiles, p.FileRoots = true, nil
		_ = w.res.SetPolicy(p)
	}
	return w
}

// Task returns the task this worker is.
func (w *Worker) Task() string { return w.cfg.Task }

// Device returns the worker's CPU device ("/job:ps/task:0/cpu:0").
func (w *Worker) Device() string { return w.cfg.Task + "/cpu:0" }

// Devices returns the task's devices: its CPU, then its accelerators
// ("/job:worker/task:0/gpu:0", ...).
func (w *Worker) Devices() []string {
	out := []string{w.Device()}
	for i := range w.cfg.Devices {
		out = append(out, w.cfg.Task+"/gpu:"+strconv.Itoa(i))
	}
	return out
}

// Resources returns the worker's variables, shared by all its sessions.
func (w *Worker) Resources() *kernel.Resources { return w.res }

// Incarnation returns the random non-zero number chosen when the worker
// was made: a task that reports another one was restarted.
func (w *Worker) Incarnation() uint64 { return w.incarnation }

// errorf returns an error naming the worker's task.
func (w *Worker) errorf(format string, args ...any) error {
	return fmt.Errorf("worker: task %s: "+format, append([]any{w.cfg.Task}, args...)...)
}

// GetStatus reports the task, its incarnation, its devices and the
// variables it holds, on the host and then in its GPUs' memory.
func (w *Worker) GetStatus(ctx context.Context, req *pb.GetStatusRequest) (*pb.GetStatusResponse, error) {
	resp := &pb.GetStatusResponse{Task: w.cfg.Task, Devices: w.Devices(), Incarnation: w.incarnation}
	for _, name := range w.res.VariableNames() {
		v, ok := w.res.Lookup(name)
		if !ok {
			continue
		}
		vs := &pb.VariableStatus{Name: name, Dtype: pb.DataType(v.DType()), Initialized: v.Initialized()}
		shape := v.Shape()
		n := int64(1)
		for i := range shape.Rank() {
			d := int64(shape.Dim(i))
			vs.Dims = append(vs.Dims, d)
			n *= d
		}
		if n >= 0 {
			vs.Bytes = n * int64(v.DType().Size())
		}
		resp.Variables = append(resp.Variables, vs)
	}
	// Those kept in a GPU's memory (taskgraph.Config.VariablesOnDevice).
	for _, v := range taskgraph.DeviceVariables(w.res) {
		vs := &pb.VariableStatus{Name: v.Name, Dtype: pb.DataType(v.DType), Initialized: v.Initialized}
		n := int64(1)
		for _, d := range v.Shape {
			vs.Dims = append(vs.Dims, int64(d))
			n *= int64(d)
		}
		vs.Bytes = n * int64(v.DType.Size())
		resp.Variables = append(resp.Variables, vs)
	}
	return resp, nil
}

// RegisterGraph installs a partition and returns its handle and the
// worker's incarnation. Kernels are built lazily, once per signature, by
// the first RunGraph that uses it.
func (w *Worker) RegisterGraph(ctx context.Context, req *pb.RegisterGraphRequest) (*pb.RegisterGraphResponse, error) {
	if req.GetGraph() == nil {
		return nil, w.errorf("register graph of session %q: no graph", req.GetSessionHandle())
	}
	session := req.GetSessionHandle()
	caller := callerOf(ctx)
	size := GraphMemory(req.GetGraph())
	// Refuse past the limits before building anything from the request.
	defer w.closeDropped() // the idle sessions'
	w.mu.Lock()
	w.dropIdleLocked()
	err := w.checkGraphLimitsLocked(caller, session, w.sessions[session], size)
	w.mu.Unlock()
	if err != nil {
		return nil, err
	}
	g, err := graph.FromProto(req.GetGraph())
	if err != nil {
		return nil, w.errorf("register graph of session %q: %w", session, err)
	}
	if err := w.checkGraph(g); err != nil {
		return nil, w.errorf("register graph of session %q: %w", session, err)
	}
	r := &registered{session: session, g: g, bytes: size, execs: map[string]*prepared{}}
	w.mu.Lock()
	// Checked again: other registrations of the session may have run.
	if err := w.checkGraphLimitsLocked(caller, session, w.sessions[session], size); err != nil {
		w.mu.Unlock()
		return nil, err
	}
	w.addLocked(caller, session, size)
	for {
		r.handle = "g" + strconv.FormatUint(rand.Uint64(), 36)
		if _, taken := w.graphs[r.handle]; !taken {
			break
		}
	}
	w.graphs[r.handle] = r
	w.mu.Unlock()
	w.log.Debug("worker: registered graph", "session", r.session, "graph", r.handle, "nodes", g.NumNodes())
	return &pb.RegisterGraphResponse{GraphHandle: r.handle, Incarnation: w.incarnation}, nil
}

// DeregisterGraph drops a partition. Steps already running on it finish.
func (w *Worker) DeregisterGraph(ctx context.Context, req *pb.DeregisterGraphRequest) (*pb.DeregisterGraphResponse, error) {
	defer w.closeDropped()
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.graphs[req.GetGraphHandle()]
	if !ok || r.session != req.GetSessionHandle() {
		return nil, w.errorf("deregister graph %q of session %q: %w", req.GetGraphHandle(), req.GetSessionHandle(), ErrNoGraph)
	}
	w.dropLocked(r)
	w.log.Debug("worker: deregistered graph", "session", r.session, "graph", r.handle)
	return &pb.DeregisterGraphResponse{}, nil
}

func (w *Worker) lookup(session, handle string) (*registered, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.graphs[handle]
	if !ok || r.session != session {
		return nil, fmt.Errorf("graph %q of session %q: %w", handle, session, ErrNoGraph)
	}
	if use := w.sessions[session]; use != nil {
		use.lastUsed = w.cfg.Now()
	}
	return r, nil
}

// checkGraph refuses a graph with a node of an op not allowed remotely, or
// whose declared output exceeds the tensor budget.
// The nodes of the functions that control-flow nodes carry (loop bodies,
// branches) are checked as the graph's own (graph.Walk).
func (w *Worker) checkGraph(g *graph.Graph) error {
	return graph.Walk(g, func(n *graph.Node) error {
		if !n.Def().Remote {
			return fmt.Errorf("node %s: %w: op %s may only run in the process that builds its graph (op.Def.Remote)", n, ErrRemoteOp, n.Op())
		}
		for i := range n.NumOutputs() {
			o := n.Output(i)
			if sh := o.Shape(); sh.FullyDefined() {
				if err := w.res.CheckTensorBytes(fmt.Sprintf("node %s output %d", n, i), o.DType(), sh.Dims()); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// dropLocked forgets a registered graph and its share of its session's use.
func (w *Worker) dropLocked(r *registered) {
	delete(w.graphs, r.handle)
	r.mu.Lock()
	for _, p := range r.execs {
		if p.dev != nil {
			w.dropped = append(w.dropped, p.dev)
		}
	}
	r.mu.Unlock()
	w.releaseLocked(r.session, r.bytes)
}

// closeDropped closes the device executors of the graphs dropped so far,
// freeing the memory their captured steps hold on a device. It waits for a
// step still running on one to end, so it runs without the worker's lock,
// by the call that dropped them, before it answers.
func (w *Worker) closeDropped() {
	w.mu.Lock()
	dropped := w.dropped
	w.dropped = nil
	w.mu.Unlock()
	for _, e := range dropped {
		e.Close()
	}
}

// dropIdleLocked drops the graphs of the sessions idle for longer than
// Config.SessionIdle.
func (w *Worker) dropIdleLocked() {
	if w.cfg.SessionIdle < 0 {
		return
	}
	now := w.cfg.Now()
	for session, use := range w.sessions {
		if now.Sub(use.lastUsed) > w.cfg.SessionIdle {
			n := w.closeSessionLocked(session)
			w.log.Info("worker: dropped the graphs of an idle session", "session", session, "graphs", n, "idle", now.Sub(use.lastUsed))
		}
	}
}

// closeSessionLocked drops every graph of session and returns how many.
func (w *Worker) closeSessionLocked(session string) int {
	n := 0
	for _, r := range w.graphs {
		if r.session == session {
			w.dropLocked(r)
			n++
		}
	}
	delete(w.sessions, session)
	return n
}

// RunGraph runs one step of a registered partition: it feeds the request's
// tensors, runs its targets and returns its fetches. The step's Send and
// Recv nodes meet in the rendezvous of req.StepId on this worker; a Recv
// whose tensor comes from another task asks that task's RecvTensor. When
// the step fails, its rendezvous here is aborted, so the Recvs of other
// tasks that wait for this one fail too; the master then cleans up the step
// everywhere. RunGraph returns when the step ends or ctx does.
func (w *Worker) RunGraph(ctx context.Context, req *pb.RunGraphRequest) (*pb.RunGraphResponse, error) {
	resp := newResponse(len(req.GetFetches()))
	if err := w.RunGraphInto(ctx, req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// RunGraphInto is RunGraph answering into resp (service.RunnerInto).
func (w *Worker) RunGraphInto(ctx context.Context, req *pb.RunGraphRequest, resp *pb.RunGraphResponse) error {
	stepID := req.GetStepId()
	var st *stepTrace
	if req.GetTrace() {
		st = &stepTrace{start: time.Now()}
	}
	fail := func(err error) error {
		err = w.errorf("step %d: %w", stepID, err)
		w.steps.Abort(stepID, err)
		w.log.Debug("worker: step failed", "step", stepID, "err", err)
		return err
	}
	r, err := w.lookup(req.GetSessionHandle(), req.GetGraphHandle())
	if err != nil {
		return fail(err)
	}
	for _, f := range req.GetFeeds() { // before anything else is looked at
		if f.GetTensor() == nil {
			return fail(fmt.Errorf("feed %q: no value", f.GetName()))
		}
		if err := w.checkFeedBytes(f); err != nil {
			return fail(err)
		}
	}
	res, ok := r.names.Get(req)
	if !ok {
		if res, err = r.resolve(req); err != nil {
			return fail(err)
		}
		r.names.Put(req, res)
	}
	vals := make([]*tensor.Tensor, len(req.GetFeeds()))
	for i, f := range req.GetFeeds() {
		j := i
		if res.order != nil {
			j = res.order[i]
		}
		// A view, not a copy: the request's bytes are this step's own (a
		// copy off the wire) or, in process, the client's fed tensor, which
		// the step treats as a local session treats its feeds (the executor
		// never writes into a fed tensor's buffer).
		if vals[j], err = graph.TensorViewFromProto(f.GetTensor()); err != nil {
			return fail(fmt.Errorf("feed %q: %w", f.GetName(), err))
		}
	}
	pe, err := r.executor(w, res)
	if err != nil {
		return fail(err)
	}
	ss := w.newStepState(stepID, st)
	defer w.endStep(ss, ctx)
	opts := executor.StepOptions{Out: ss.out[:0], Owned: ss.owned[:]}
	if n := len(req.GetFetches()); n > len(opts.Owned) {
		opts.Owned = make([]bool, n) // as Out grows
	}
	if st != nil {
		opts.Trace = &st.exec
	}
	if pe.dev != nil {
		// The step's context, ended by endStep before the router closes,
		// is what the devices' waits and the CPU's fetches hang on.
		ss.ctx.Init(ctx, time.Time{})
		ss.ctxLive = true
		opts.Context, opts.Canceler = &ss.ctx, &ss.ctx
		out, err := pe.dev.RunStep(ctx, &ss.step, vals, opts)
		if err != nil {
			return fail(err)
		}
		setFetches(resp, req.GetFetches(), out, nil)
		return nil
	}
	if _, free := stepctx.Of(ctx); free || len(pe.batches) > 0 || pe.e.Blocking() {
		// One context for the step's batches and its kernels, under which
		// its Recvs also fetch: the executor cancels it at the step's
		// first error, when the batches are of no more use, and RunGraph
		// when it returns. It is the step's state's, not one more
		// allocation, and under a stepctx.Context (a master's step, a
		// tensor-channel request) it costs none at all: the kernels then
		// get a stepctx.Context itself, from which a standard context
		// derives without a goroutine (not through the request's
		// values).
		ss.ctx.Init(ctx, time.Time{})
		ss.ctxLive = true // endStep cancels it
		opts.Context, opts.Canceler = &ss.ctx, &ss.ctx
		if len(pe.batches) > 0 {
			w.startBatches(ss, pe.batches)
		}
	}
	out, err := pe.e.RunStepWith(ctx, &ss.step, vals, opts)
	if err != nil {
		if tasks := ss.recvs.waitingFor(); len(tasks) > 0 && ctx.Err() != nil {
			err = fmt.Errorf("%w (waiting for tensors from %s)", err, strings.Join(tasks, ", "))
		}
		return fail(err)
	}
	setFetches(resp, req.GetFetches(), out, opts.Owned)
	if st != nil {
		resp.StepStats = st.stats(w.cfg.Task)
	}
	return nil
}

// setFetches resets resp to the fetches out, named names, in the entries
// of its Fetches where it has some. A fetch that the step owned (owned[i],
// when owned has room for every fetch: executor.StepOptions) goes out as
// it is, the response's content aliasing it: the step made it, and no one
// else holds it. The others are copied: they may be a feed, the
// caller's, or a tensor of another task in this process.
func setFetches(resp *pb.RunGraphResponse, names []string, out []*tensor.Tensor, owned []bool) {
	fetches := resp.Fetches
	resp.Reset()
	fetches = slices.Grow(fetches[:0], len(out))[:len(out)]
	if len(owned) < len(out) {
		owned = nil // not filled in
	}
	for i, t := range out {
		if fetches[i] == nil {
			fetches[i] = new(pb.NamedTensor)
		}
		var tp *pb.TensorProto
		if owned != nil && owned[i] {
			tp = graph.TensorToProtoView(t)
		} else {
			tp = graph.TensorToProto(t)
		}
		fetches[i].Name, fetches[i].Tensor = names[i], tp
	}
	resp.Fetches = fetches
}

// stepState is what one RunGraph step needs beyond its tensors, in one
// allocation reused by later steps: how it receives from other tasks, its
// rendezvous and its kernel.Step, its context, and room for its fetches.
type stepState struct {
	ctx     stepctx.Context
	ctxLive bool // ctx was Init'd: endStep cancels it
	recvs   stepRecvs
	router  rendezvous.Router
	step    kernel.Step
	out     [fewFetches]*tensor.Tensor // the executor's fetches, for a few
	owned   [fewFetches]bool           // which of them the step owned

	// refs counts who may still touch the state: RunGraph, and each
	// batch's goroutine until its ask returns. The last to drop one puts
	// the state back in Worker.states, unless reuse is false: a state
	// that something else may still touch (endStep) is left to the
	// garbage collector.
	refs  atomic.Int32
	reuse bool // written by RunGraph before it drops its reference
}

// newStepState returns a state for step stepID, reused or new, holding
// RunGraph's reference.
func (w *Worker) newStepState(stepID int64, st *stepTrace) *stepState {
	ss, _ := w.states.Get().(*stepState)
	if ss == nil {
		ss = new(stepState) // the step's one allocation, until reused
		ss.recvs.w = w
		ss.recvs.batchStore = ss.recvs.batchBuf[:0]
		ss.recvs.waiting = ss.recvs.waitBuf[:0]
	}
	ss.refs.Store(1)
	ss.reuse = true
	ss.recvs.stepID, ss.recvs.st = stepID, st
	ss.router.Init(w.steps.Get(stepID), w.cfg.Task, &ss.recvs)
	ss.step = kernel.Step{ID: stepID, Rendezvous: &ss.router}
	return ss
}

// endStep ends RunGraph's use of ss: it ends the step's context and drops
// RunGraph's reference.
func (w *Worker) endStep(ss *stepState, ctx context.Context) {
	if ss.ctxLive {
		ss.ctx.Cancel(nil)
	}
	// Not reused when ctx ended (the executor returns at its end without
	// waiting for its kernels, and ctx's end may still be ending ss.ctx),
	// nor when the step's Local is aborting into the router.
	ss.reuse = ctx.Err() == nil && ss.router.Close()
	ss.unref()
}

// unref drops a reference to ss; the last one puts it back in the pool.
func (ss *stepState) unref() {
	if ss.refs.Add(-1) != 0 || !ss.reuse {
		return
	}
	// Nothing of the step may be kept: not its tensors, errors, context
	// or rendezvous.
	for i := range ss.recvs.batches {
		b := &ss.recvs.batches[i]
		for j := range b.items {
			it := &b.items[j]
			it.t, it.err, it.hook = nil, nil, stepctx.Hook{}
		}
		b.plan, b.items, b.br = nil, nil, nil
	}
	ss.recvs.batches = nil
	ss.recvs.st = nil
	clear(ss.recvs.waiting)
	ss.recvs.waiting = ss.recvs.waiting[:0]
	// New ones, not Init'd over the last step's: nothing holds those now.
	ss.ctx, ss.ctxLive = stepctx.Context{}, false
	ss.router = rendezvous.Router{}
	ss.step = kernel.Step{}
	clear(ss.out[:])
	ss.recvs.w.states.Put(ss)
}

// fewFetches is the number of fetches up to which a RunGraphResponse
// takes one allocation (newResponse).
const fewFetches = 4

// response is a RunGraphResponse with the storage of a few fetches.
type response struct {
	resp  pb.RunGraphResponse
	ptrs  [fewFetches]*pb.NamedTensor
	named [fewFetches]pb.NamedTensor
}

// newResponse returns a response whose n Fetches are set and empty: one
// allocation for a few, three for more.
func newResponse(n int) *pb.RunGraphResponse {
	r := new(response)
	ptrs, named := slices.Grow(r.ptrs[:0], n)[:n], slices.Grow(r.named[:0], n)[:n]
	for i := range ptrs {
		ptrs[i] = &named[i]
	}
	r.resp.Fetches = ptrs
	return &r.resp
}

// checkFeedBytes refuses a fed tensor over the budget before it is decoded.
func (w *Worker) checkFeedBytes(f *pb.NamedTensor) error {
	tp := f.GetTensor()
	var buf [8]int // the common case allocates nothing
	dims := buf[:0]
	for _, d := range tp.GetDims() {
		if d < 0 || d > 1<<40 {
			return nil // TensorFromProto names the bad dimension
		}
		dims = append(dims, int(d))
	}
	if err := w.res.CheckTensorBytes("fed tensor", tensor.DType(tp.GetDtype()), dims); err != nil {
		return fmt.Errorf("feed %q: %w", f.GetName(), err)
	}
	return nil
}

func byName(a, b graph.Output) int { return strings.Compare(a.Name(), b.Name()) }

// resolve looks up req's names in r's graph.
func (r *registered) resolve(req *pb.RunGraphRequest) (*resolved, error) {
	res := &resolved{}
	var err error
	if res.sig, err = r.g.Resolve(req); err != nil {
		return nil, fmt.Errorf("graph %s: %w", r.handle, err)
	}
	sig := &res.sig
	if !slices.IsSortedFunc(sig.Feeds, byName) { // the master sorts them
		sorted := make([]int, len(sig.Feeds)) // request indexes, in name order
		for i := range sorted {
			sorted[i] = i
		}
		slices.SortFunc(sorted, func(a, b int) int { return byName(sig.Feeds[a], sig.Feeds[b]) })
		feeds := slices.Clone(sig.Feeds)
		res.order = make([]int, len(sorted))
		for i, j := range sorted {
			sig.Feeds[i] = feeds[j]
			res.order[j] = i
		}
	}
	res.key = sig.Key()
	return res, nil
}

// stepRecvs is how one step receives from other tasks: from its batches,
// or by RecvTensor. It records the tasks asked and not yet answered, so
// that a step that times out says whom it waited for. It is the step's
// rendezvous.Fetcher.
type stepRecvs struct {
	w       *Worker
	stepID  int64
	st      *stepTrace
	batches []batch // see startBatches

	mu      sync.Mutex
	waiting []string // tasks, distinct

	// The storage of batches, kept for the state's later steps, and of
	// waiting: batchBuf and waitBuf for a step that receives from few
	// tasks, no allocation of their own.
	batchStore []batch
	batchBuf   [2]batch
	waitBuf    [2]string
}

// Fetch receives key from sendTask (rendezvous.Fetcher). The tensor is
// the step's own when the peer's client decodes it off the wire
// (service.FreshReceiver), by RecvTensor or in a batch.
func (s *stepRecvs) Fetch(ctx context.Context, sendTask, key string) (*tensor.Tensor, bool, error) {
	if s.w.cfg.Workers == nil {
		return nil, false, fmt.Errorf("recv %q from %s: %w", key, sendTask, ErrNoWorkers)
	}
	peer, err := s.w.cfg.Workers.Worker(sendTask)
	if err != nil {
		return nil, false, fmt.Errorf("recv %q from %s: %w", key, sendTask, err)
	}
	s.mu.Lock()
	if !slices.Contains(s.waiting, sendTask) {
		s.waiting = append(s.waiting, sendTask)
	}
	s.mu.Unlock()
	var start time.Time
	if s.st != nil {
		start = time.Now()
	}
	var t *tensor.Tensor
	batched := false
	for i := range s.batches {
		if b := &s.batches[i]; b.plan.task == sendTask {
			t, batched, err = b.take(ctx, key)
			break
		}
	}
	if !batched {
		t, err = peer.RecvTensor(ctx, s.stepID, key)
	}
	if s.st != nil {
		s.st.recvTensor(sendTask, key, start, t, err)
	}
	if err == nil {
		s.mu.Lock()
		if i := slices.Index(s.waiting, sendTask); i >= 0 {
			s.waiting = slices.Delete(s.waiting, i, i+1)
		}
		s.mu.Unlock()
	}
	return t, err == nil && service.ReceivesFresh(peer), err
}

// waitingFor returns the tasks asked for tensors and not yet answered,
// sorted.
func (s *stepRecvs) waitingFor() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.waiting))
}

// executor returns the cached executor of res's signature, building it on
// first use. Its feeds are sorted by name, as the executor of the key
// takes them.
func (r *registered) executor(w *Worker, res *resolved) (*prepared, error) {
	sig, key := res.sig, res.key
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.execs[key]; ok {
		return p, nil
	}
	if len(w.cfg.Devices) > 0 && onAccelerator(r.g) {
		t, err := taskgraph.New(r.g, sig, w.res, taskgraph.Config{Task: w.cfg.Task, Devices: w.cfg.Devices,
			SoftPlacement: !w.cfg.StrictPlacement, Logger: w.log}.With(w.cfg.DeviceOptions))
		if err != nil {
			return nil, err
		}
		p := &prepared{dev: t}
		r.execs[key] = p
		return p, nil
	}
	e, err := executor.New(r.g, sig, w.res)
	if err != nil {
		return nil, err
	}
	p := &prepared{e: e}
	recvs := map[string][]string{} // task -> keys
	for _, n := range e.Nodes() {
		if n.Op() != "Recv" {
			continue
		}
		send, recv, name := n.AttrString("send_device"), n.AttrString("recv_device"), n.AttrString("tensor_name")
		dev, err := placement.ParseDevice(send)
		if err != nil || dev.TaskName() == "" || dev.TaskName() == w.cfg.Task || recv == "" || name == "" {
			continue // received here, or malformed: the kernel says so
		}
		recvs[dev.TaskName()] = append(recvs[dev.TaskName()], rendezvous.Key(send, recv, name))
	}
	for _, task := range slices.Sorted(maps.Keys(recvs)) {
		keys := recvs[task]
		if len(keys) < 2 {
			continue // one key: RecvTensor costs the same
		}
		b := batchPlan{task: task, keys: keys, index: make(map[string]int, len(keys))}
		for i, k := range keys {
			b.index[k] = i
		}
		p.batches = append(p.batches, b)
	}
	r.execs[key] = p
	w.log.Debug("worker: built executor", "graph", r.handle, "signature", sig)
	return p, nil
}

// onAccelerator reports whether a node of g is placed on a GPU.
func onAccelerator(g *graph.Graph) bool {
	for _, n := range g.Nodes() {
		if d, err := placement.ParseDevice(n.Device()); err == nil && d.Type == "gpu" {
			return true
		}
	}
	return false
}

// batch is the tensors of one step asked of one peer in one request
// (service.BatchReceiver), for the step's Recvs to take.
type batch struct {
	plan      *batchPlan
	items     []batchItem  // by the plan's keys; nil when the peer could not be asked
	itemStore []batchItem  // items' storage, kept for the state's later steps
	itemBuf   [4]batchItem // itemStore for a few keys

	// The request's goroutine and its delivery, method values bound once
	// to the batch (self) rather than closures made at every step; the
	// step's state and its peer are fields.
	ss      *stepState
	br      BatchReceiver
	run     func()
	deliver func(i int, t *tensor.Tensor, err error)
	self    *batch // what run and deliver are bound to: b, unless b moved
}

// batchItem is one tensor of a batch: its Recv (take) waits for ready,
// which is done once, by whichever comes first of the tensor's delivery
// (ask) and the end of the Recv's context (Wake). A WaitGroup in the
// step's state where a channel per item was an allocation, and the
// context watched with a Hook where selecting on its Done made one.
type batchItem struct {
	ready     sync.WaitGroup // Add(1) by startBatches; Done by settle
	state     atomic.Uint32  // itemPending, then itemDelivered or itemAbandoned
	hook      stepctx.Hook   // the Recv's watch of its context
	t         *tensor.Tensor // set before state becomes itemDelivered
	err       error
	delivered bool // by the peer; only the request's goroutine uses it
}

// The states of a batchItem.
const (
	itemPending   = iota
	itemDelivered // t and err are set: take returns them
	itemAbandoned // the Recv's context ended first: take returns its error
)

// settle moves it from itemPending to state, and wakes its Recv, unless
// it has moved already.
func (it *batchItem) settle(state uint32) {
	if it.state.CompareAndSwap(itemPending, state) {
		it.ready.Done()
	}
}

// Wake abandons it: its Recv's context ended (stepctx.Waker).
func (it *batchItem) Wake() { it.settle(itemAbandoned) }

// startBatches asks, for each plan whose peer's client can
// (service.BatchReceiver), for all of its tensors in one request, on a
// goroutine each until ss.ctx ends, which holds a reference to ss until
// its ask returns. It sets ss.recvs.batches, in the order of plans, in
// the state's storage: they must not move, the goroutines write to them.
// A peer that cannot be asked leaves its batch without items, and its keys
// to RecvTensor.
func (w *Worker) startBatches(ss *stepState, plans []batchPlan) {
	if w.cfg.Workers == nil {
		return
	}
	rs := &ss.recvs
	rs.batchStore = slices.Grow(rs.batchStore[:0], len(plans))
	rs.batches = rs.batchStore[:len(plans)]
	for i := range plans {
		plan, b := &plans[i], &rs.batches[i]
		b.plan, b.items, b.ss = plan, nil, ss
		if b.self != b { // new, or moved by Grow
			b.run, b.deliver, b.self = b.ask, b.receive, b
			b.itemStore = b.itemBuf[:0]
		}
		peer, err := w.cfg.Workers.Worker(plan.task)
		if err != nil {
			continue // RecvTensor reports it
		}
		br, ok := peer.(BatchReceiver)
		if !ok {
			continue
		}
		b.br = br
		b.itemStore = slices.Grow(b.itemStore[:0], len(plan.keys))
		b.items = b.itemStore[:len(plan.keys)]
		// A wait per item, not per batch: each Recv waits for its own
		// tensor alone, which may come before or after the others.
		for i := range b.items {
			it := &b.items[i]
			it.state.Store(itemPending)
			it.t, it.err, it.delivered = nil, nil, false
			it.ready.Add(1)
		}
		ss.refs.Add(1)
		gopool.Go(b.run)
	}
}

// ask asks b's peer for its tensors and hands each to its Recv as it
// comes; then it drops its reference to the step's state. A
// BatchReceiver delivers nothing after RecvTensors returned.
func (b *batch) ask() {
	ss := b.ss
	err := b.br.RecvTensors(&ss.ctx, ss.recvs.stepID, b.plan.keys, b.deliver)
	for i := range b.items {
		if it := &b.items[i]; !it.delivered {
			if err == nil { // made only when needed: not at every step
				err = fmt.Errorf("recv from %s: %w: the batch ended early", b.plan.task, rendezvous.ErrAborted)
			}
			it.t, it.err = nil, err
			it.settle(itemDelivered)
		}
	}
	ss.unref() // b may be another step's from here
}

// receive hands tensor i of b, from its peer, to its Recv (b.deliver).
func (b *batch) receive(i int, t *tensor.Tensor, err error) {
	if i >= 0 && i < len(b.items) && !b.items[i].delivered {
		it := &b.items[i]
		it.delivered, it.t, it.err = true, t, err
		it.settle(itemDelivered)
	}
}

// take waits for key's tensor in b; ok is false when the batch could not
// be asked for (the caller then uses RecvTensor).
func (b *batch) take(ctx context.Context, key string) (t *tensor.Tensor, ok bool, err error) {
	i, in := b.plan.index[key]
	if !in || b.items == nil {
		return nil, false, nil
	}
	it := &b.items[i]
	if it.state.Load() == itemPending {
		// The step's Recvs fetch under the Router's stepctx.Context:
		// watched with the item's Hook, without an allocation.
		if sc, isStep := ctx.(*stepctx.Context); isStep {
			sc.WatchWaker(&it.hook, it)
			it.ready.Wait()
			sc.Unwatch(&it.hook)
		} else {
			stop := context.AfterFunc(ctx, it.Wake)
			it.ready.Wait()
			stop()
		}
	}
	if it.state.Load() != itemDelivered {
		return nil, true, ctx.Err()
	}
	if errors.Is(it.err, service.ErrNoBatch) {
		return nil, false, nil
	}
	return it.t, true, it.err
}

// RecvTensor waits until key is sent in step stepID on this worker and
// returns the tensor. It fails when ctx ends, when the step is aborted, or
// at once when the step was already cleaned up, or when it has not started
// here and rendezvous.MaxWaitingSteps such steps have requests waiting.
func (w *Worker) RecvTensor(ctx context.Context, stepID int64, key string) (*tensor.Tensor, error) {
	t, err := w.steps.Recv(ctx, stepID, key)
	if err != nil {
		return nil, w.errorf("step %d: %w", stepID, err)
	}
	return t, nil
}

// LendTensor is RecvTensor for a caller that writes the tensor out and is
// then done with it (the rpc package's tensor channel): it also returns
// the function to call then, which hands a variable's buffer sent by Send
// back to the variable (see rendezvous.Local.SendLent).
func (w *Worker) LendTensor(ctx context.Context, stepID int64, key string) (*tensor.Tensor, func(), error) {
	t, release, err := w.steps.RecvLent(ctx, stepID, key)
	if err != nil {
		return nil, nil, w.errorf("step %d: %w", stepID, err)
	}
	return t, release, nil
}

// LendTensors is LendTensor for several keys of a step, with one waiter
// (see service.BatchLender and rendezvous.Local.RecvManyLent).
func (w *Worker) LendTensors(ctx context.Context, stepID int64, keys []string, got func([]rendezvous.Lent)) error {
	if err := w.steps.RecvManyLent(ctx, stepID, keys, got); err != nil {
		return w.errorf("step %d: %w", stepID, err)
	}
	return nil
}

// FinishStep forgets the rendezvous of a step whose partition ran here,
// if nothing in it is pending, and reports whether it did: the step's
// CleanupStep without an abort reason is then needless (see
// service.StepFinisher). A late RecvTensor of the step fails at once.
func (w *Worker) FinishStep(stepID int64) bool { return w.steps.CleanupIfIdle(stepID) }

// CleanupStep forgets a step's rendezvous. With an abort reason, every
// pending Recv and RecvTensor of the step fails with it.
func (w *Worker) CleanupStep(ctx context.Context, req *pb.CleanupStepRequest) (*pb.CleanupStepResponse, error) {
	var abort error
	if reason := req.GetAbortReason(); reason != "" {
		abort = errors.New(reason)
	}
	w.steps.Cleanup(req.GetStepId(), abort)
	return &pb.CleanupStepResponse{}, nil
}

// CloseSession drops every graph of the session. Variables stay: they
// belong to the task, not to the session.
func (w *Worker) CloseSession(ctx context.Context, req *pb.WorkerCloseSessionRequest) (*pb.WorkerCloseSessionResponse, error) {
	defer w.closeDropped()
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.closeSessionLocked(req.GetSessionHandle())
	w.log.Debug("worker: closed session", "session", req.GetSessionHandle(), "graphs", n)
	return &pb.WorkerCloseSessionResponse{}, nil
}

// Shutdown asks the task to exit: the first call runs Config.OnShutdown.
// With Config.ShutdownFrom, only those tasks may ask (service.Caller).
func (w *Worker) Shutdown(ctx context.Context, req *pb.ShutdownRequest) (*pb.ShutdownResponse, error) {
	caller, ok := service.Caller(ctx)
	if !ok {
		caller = "an unnamed caller"
	}
	if len(w.cfg.ShutdownFrom) > 0 {
		if !ok || !slices.Contains(w.cfg.ShutdownFrom, caller) {
			w.log.Warn("worker: shutdown refused", "caller", caller, "reason", req.GetReason())
			return nil, w.errorf("shutdown from %s: %w: only %s may stop this task", caller, service.ErrPermissionDenied, strings.Join(w.cfg.ShutdownFrom, ", "))
		}
	}
	w.shutdown.Do(func() {
		w.log.Info("worker: shutdown requested", "caller", caller, "reason", req.GetReason())
		if w.cfg.OnShutdown != nil {
			w.cfg.OnShutdown(req.GetReason())
		}
	})
	return &pb.ShutdownResponse{}, nil
}

// NumGraphs returns the number of registered graphs (for tests and status).
func (w *Worker) NumGraphs() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.graphs)
}

// LiveSteps returns the number of steps whose rendezvous the worker holds:
// those a partition ran here, until cleaned up, and those that receives
// wait for (for tests and status).
func (w *Worker) LiveSteps() int { return w.steps.Len() }
