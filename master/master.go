package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/partition"
	"github.com/distflow/distflow/placement"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// Sentinel errors wrapped by the master's errors.
var (
	// ErrNoSession is wrapped when a session handle is unknown or closed.
	ErrNoSession = errors.New("no such session")
	// ErrStaleGraph is wrapped when ExtendSession's current_graph_version
	// is not the version the master holds (another client extended the
	// session, or the client lost track).
	ErrStaleGraph = errors.New("stale graph version")
)

// cleanupTimeout bounds the CleanupStep calls that end a step; they run
// after RunStep has returned.
const cleanupTimeout = 10 * time.Second

// Config configures a Master.
type Config struct {
	// Task is the task the master runs in ("/job:worker/task:0"); its CPU
	// is where nodes without a device go unless a session says otherwise.
	Task string
	// Devices are the cluster's devices ("/job:ps/task:0/cpu:0", ...);
	// empty means one CPU per task of Workers.
	Devices []string
	// Workers reaches every task's worker service; required.
	Workers worker.Cache
	// Logger receives plan building and step failures at debug level; nil
	// means slog.Default().
	Logger *slog.Logger
}

// Master holds client sessions and runs their steps on the cluster's
// workers. It implements Service and is safe for concurrent use; steps of
// one session may run concurrently, each with its own step ID.
type Master struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session
	// gen counts, per task, how often the task was found lost (unreachable,
	// or restarted without the graphs registered on it). A partition
	// registered under an older generation is stale: its plan is dropped,
	// and the next step of its signature registers it again.
	gen map[string]uint64
	// inc is the incarnation each task reported when a partition was last
	// registered on it; forgotten when the task is found lost.
	inc map[string]uint64
}

var _ Service = (*Master)(nil)

// New returns a master for cfg.
func New(cfg Config) *Master {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if len(cfg.Devices) == 0 && cfg.Workers != nil {
		for _, t := range cfg.Workers.Tasks() {
			cfg.Devices = append(cfg.Devices, t+"/cpu:0")
		}
	}
	return &Master{cfg: cfg, log: log.With("task", cfg.Task), sessions: map[string]*session{},
		gen: map[string]uint64{}, inc: map[string]uint64{}}
}

// session is a client's graph and the plans of the signatures it ran.
type session struct {
	handle  string
	devices []string // after the session's device filters
	deflt   string   // default device
	soft    bool
	timeout time.Duration

	mu     sync.RWMutex // guards g against Import while steps resolve names
	g      *graph.Graph
	plans  map[string]*plan
	tasks  map[string]bool // every task a partition was registered on
	closed bool
}

// plan is how one signature runs: a registered partition per task and the
// routes of the feeds and fetches. It is immutable once ready is closed.
type plan struct {
	ready chan struct{}
	err   error

	parts   []*part
	feeds   map[string]route // by tensor name ("x:0")
	fetches map[string]route // by tensor name
}

// part is one task's partition of a plan.
type part struct {
	task    string
	handle  string
	gen     uint64 // the task's generation when the partition was registered
	targets []string
	fetches []string // sorted, distinct; a fixed order keeps one executor per plan on the worker
}

// route says which partition takes a feed or yields a fetch, under which
// tensor name, and (for fetches) at which index of the partition's fetches.
type route struct {
	part  int
	name  string
	index int
}

func (m *Master) errorf(format string, args ...any) error {
	return fmt.Errorf("master: "+format, args...)
}

func newHandle(prefix string) string {
	return prefix + strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36)
}

// CreateSession takes a graph and a config and returns a session handle.
func (m *Master) CreateSession(ctx context.Context, req *pb.CreateSessionRequest) (*pb.CreateSessionResponse, error) {
	gd := req.GetGraph()
	if gd == nil {
		gd = &pb.GraphDef{}
	}
	g, err := graph.FromProto(gd)
	if err != nil {
		return nil, m.errorf("create session: %w", err)
	}
	cfg := req.GetConfig()
	devices := m.cfg.Devices
	if len(cfg.GetDeviceFilters()) > 0 {
		if devices, err = placement.FilterDevices(m.cfg.Devices, cfg.GetDeviceFilters()); err != nil {
			return nil, m.errorf("create session: %w", err)
		}
	}
	s := &session{
		devices: devices,
		deflt:   cfg.GetDefaultDevice(),
		soft:    !cfg.GetDisableSoftPlacement(),
		timeout: time.Duration(cfg.GetStepTimeoutMs()) * time.Millisecond,
		g:       g,
		plans:   map[string]*plan{},
		tasks:   map[string]bool{},
	}
	if s.deflt == "" && m.cfg.Task != "" {
		s.deflt = m.cfg.Task + "/cpu:0"
	}
	m.mu.Lock()
	for {
		s.handle = newHandle("s")
		if _, taken := m.sessions[s.handle]; !taken {
			break
		}
	}
	m.sessions[s.handle] = s
	m.mu.Unlock()
	m.log.Debug("master: created session", "session", s.handle, "nodes", g.NumNodes(), "devices", devices)
	return &pb.CreateSessionResponse{SessionHandle: s.handle, GraphVersion: int64(g.NumNodes())}, nil
}

func (m *Master) session(handle string) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[handle]
	if !ok {
		return nil, m.errorf("session %q: %w", handle, ErrNoSession)
	}
	return s, nil
}

// ExtendSession appends nodes to a session's graph. The request's
// current_graph_version must be the version the master holds (its node
// count); the new version is returned.
func (m *Master) ExtendSession(ctx context.Context, req *pb.ExtendSessionRequest) (*pb.ExtendSessionResponse, error) {
	s, err := m.session(req.GetSessionHandle())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, m.errorf("extend session %q: %w", s.handle, ErrNoSession)
	}
	if v := int64(s.g.NumNodes()); req.GetCurrentGraphVersion() != v {
		return nil, m.errorf("extend session %q: %w: the request extends version %d, the master holds version %d", s.handle, ErrStaleGraph, req.GetCurrentGraphVersion(), v)
	}
	if req.GetGraph() != nil {
		if err := graph.Import(s.g, req.GetGraph()); err != nil {
			return nil, m.errorf("extend session %q: %w", s.handle, err)
		}
	}
	return &pb.ExtendSessionResponse{NewGraphVersion: int64(s.g.NumNodes())}, nil
}

// signature is a step's resolved names.
type signature struct {
	feeds   []graph.Output
	fetches []graph.Output
	targets []*graph.Node
	key     string
}

// resolve looks up the request's names in the session's graph.
func (s *session) resolve(req *pb.RunStepRequest) (*signature, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("session %q: %w", s.handle, ErrNoSession)
	}
	sig := &signature{}
	seen := map[graph.Output]bool{}
	var feedNames, fetchNames, targetNames []string
	for _, f := range req.GetFeeds() {
		o, err := s.g.Output(f.GetName())
		if err != nil {
			return nil, fmt.Errorf("feed %q: %w", f.GetName(), err)
		}
		if seen[o] {
			return nil, fmt.Errorf("feed %q: tensor %s is fed twice", f.GetName(), o)
		}
		seen[o] = true
		sig.feeds = append(sig.feeds, o)
		feedNames = append(feedNames, o.Name())
	}
	for _, name := range req.GetFetches() {
		o, err := s.g.Output(name)
		if err != nil {
			return nil, fmt.Errorf("fetch %q: %w", name, err)
		}
		sig.fetches = append(sig.fetches, o)
		fetchNames = append(fetchNames, o.Name())
	}
	for _, name := range req.GetTargets() {
		n := s.g.Node(name)
		if n == nil {
			return nil, fmt.Errorf("target %q: no node of that name in the graph (%w)", name, graph.ErrNotFound)
		}
		sig.targets = append(sig.targets, n)
		targetNames = append(targetNames, name)
	}
	// The key does not depend on the order of names: a client's feeds often
	// come from a map.
	var b strings.Builder
	for _, names := range [][]string{feedNames, fetchNames, targetNames} {
		names = slices.Clone(names)
		slices.Sort(names)
		for _, n := range slices.Compact(names) {
			b.WriteString(n)
			b.WriteByte(0)
		}
		b.WriteByte(1)
	}
	b.WriteString(strconv.Itoa(s.g.NumNodes()))
	sig.key = b.String()
	return sig, nil
}

// RunStep runs one step: it feeds, fetches and runs targets by name,
// building and registering the plan of the signature on first use. The
// step has a fresh random ID; its partitions run concurrently on their
// tasks under the step's deadline (the session's step timeout, or ctx's).
// The first failure cancels the others and aborts the step's rendezvous on
// every task, so no wait of the step outlives it; the error names the task
// that failed first (and, from the worker, the node).
func (m *Master) RunStep(ctx context.Context, req *pb.RunStepRequest) (*pb.RunStepResponse, error) {
	s, err := m.session(req.GetSessionHandle())
	if err != nil {
		return nil, err
	}
	sig, err := s.resolve(req)
	if err != nil {
		return nil, m.errorf("run step in session %q: %w", s.handle, err)
	}
	for i, f := range req.GetFeeds() {
		if err := checkFeed(sig.feeds[i], f.GetTensor()); err != nil {
			return nil, m.errorf("run step in session %q: feed %q: %w", s.handle, f.GetName(), err)
		}
	}
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	p, err := m.plan(ctx, s, sig)
	if err != nil {
		return nil, m.errorf("run step in session %q: %w", s.handle, err)
	}

	// Requests per partition.
	stepID := int64(rand.Uint64() >> 1)
	reqs := make([]*pb.RunGraphRequest, len(p.parts))
	for i, pt := range p.parts {
		reqs[i] = &pb.RunGraphRequest{SessionHandle: s.handle, GraphHandle: pt.handle, StepId: stepID, Targets: pt.targets}
	}
	for i, f := range req.GetFeeds() {
		r := p.feeds[sig.feeds[i].Name()]
		reqs[r.part].Feeds = append(reqs[r.part].Feeds, &pb.NamedTensor{Name: r.name, Tensor: f.GetTensor()})
	}
	for i, r := range reqs {
		slices.SortFunc(r.Feeds, func(a, b *pb.NamedTensor) int { return strings.Compare(a.GetName(), b.GetName()) })
		r.Fetches = p.parts[i].fetches
	}

	resps, err := m.runPartitions(ctx, stepID, p, reqs)
	if err != nil {
		return nil, m.errorf("step %d in session %q: %w", stepID, s.handle, err)
	}
	out := &pb.RunStepResponse{Tensors: make([]*pb.NamedTensor, len(sig.fetches))}
	for i, o := range sig.fetches {
		r := p.fetches[o.Name()]
		fs := resps[r.part].GetFetches()
		if r.index >= len(fs) {
			return nil, m.errorf("step %d in session %q: task %s returned %d fetches, want %d", stepID, s.handle, p.parts[r.part].task, len(fs), len(p.parts[r.part].fetches))
		}
		out.Tensors[i] = &pb.NamedTensor{Name: req.GetFetches()[i], Tensor: fs[r.index].GetTensor()}
	}
	return out, nil
}

// checkFeed checks a fed value against the tensor's dtype and build-time
// shape before any task runs, as the local session does.
func checkFeed(o graph.Output, t *pb.TensorProto) error {
	if t == nil {
		return errors.New("no value")
	}
	if dt := tensor.DType(t.GetDtype()); dt != o.DType() {
		return fmt.Errorf("value of dtype %v fed to tensor %s of dtype %v", dt, o, o.DType())
	}
	dims := make([]int, len(t.GetDims()))
	for i, d := range t.GetDims() {
		dims[i] = int(d)
	}
	if sh := tensor.MakeShape(dims...); !o.Shape().IsCompatibleWith(sh) {
		return fmt.Errorf("value of shape %v fed to tensor %s of shape %v", sh, o, o.Shape())
	}
	return nil
}

// runPartitions runs every partition of a step concurrently and cleans the
// step up on every task.
func (m *Master) runPartitions(ctx context.Context, stepID int64, p *plan, reqs []*pb.RunGraphRequest) ([]*pb.RunGraphResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		i    int
		resp *pb.RunGraphResponse
		err  error
	}
	results := make(chan result, len(reqs))
	run := func(i int) {
		w, err := m.cfg.Workers.Worker(p.parts[i].task)
		var resp *pb.RunGraphResponse
		if err == nil {
			resp, err = w.RunGraph(ctx, reqs[i])
		}
		results <- result{i, resp, err}
	}
	// The last partition runs on this goroutine: one handoff less per step.
	for i := range len(reqs) - 1 {
		go run(i)
	}
	if len(reqs) > 0 {
		run(len(reqs) - 1)
	}
	resps := make([]*pb.RunGraphResponse, len(reqs))
	var errs []error // in arrival order
	for range reqs {
		r := <-results
		if r.err != nil {
			if len(errs) == 0 {
				cancel() // the first failure ends the step everywhere
			}
			pt := p.parts[r.i]
			errs = append(errs, fmt.Errorf("task %s: %w", pt.task, r.err))
			if lost(r.err) {
				m.lose(pt.task, pt.gen, r.err)
			}
			continue
		}
		resps[r.i] = r.resp
	}
	var first error
	if len(errs) > 0 {
		first = rootCause(errs)
		m.log.Debug("master: step failed", "step", stepID, "err", first)
	}
	m.cleanup(stepID, p, first)
	return resps, first
}

// lost reports whether a call's error says that its task is lost: it could
// not be reached, or it no longer knows the graph registered on it (it was
// restarted). A task that reports a peer unreachable counts too: which of
// them is gone is not known here, and re-registering costs little.
func lost(err error) bool {
	return errors.Is(err, worker.ErrNoGraph) || errors.Is(err, worker.ErrUnavailable)
}

// lose handles a task found lost by a call, which reports the loss with
// cause: the task's stale plans are dropped and its incarnation forgotten,
// so that the next registration takes the task as it then is.
func (m *Master) lose(task string, seen uint64, cause error) {
	m.invalidate(task, seen, cause)
	m.mu.Lock()
	delete(m.inc, task)
	m.mu.Unlock()
}

// invalidate records that task was found lost by a call to a partition
// registered on it under generation seen: the task's generation moves on
// (once per loss, however many steps saw it), and every plan of every
// session with a partition registered on the task under an older
// generation is dropped, so that the next step of its signature registers
// it again (on the restarted task) instead of failing on it. The dropped
// plans' partitions on the other tasks are deregistered in the background.
func (m *Master) invalidate(task string, seen uint64, cause error) {
	m.mu.Lock()
	if seen == m.gen[task] {
		m.gen[task]++
		m.log.Info("master: lost a task; its partitions will be registered again", "peer", task, "err", cause)
	}
	cur := m.gen[task]
	sessions := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		sessions = append(sessions, s)
	}
	m.mu.Unlock()
	for _, s := range sessions {
		var stale []*part
		s.mu.Lock()
		for key, q := range s.plans {
			select {
			case <-q.ready:
			default:
				continue // being built: its registrations are fresh, or fail
			}
			if q.err != nil || !slices.ContainsFunc(q.parts, func(pt *part) bool { return pt.task == task && pt.gen < cur }) {
				continue
			}
			delete(s.plans, key)
			stale = append(stale, q.parts...)
		}
		s.mu.Unlock()
		if len(stale) > 0 {
			go m.deregister(s.handle, stale)
		}
	}
}

// rootCause picks, among a failed step's errors in arrival order, the first
// that is not a consequence of the abort (a cancelled context or an aborted
// rendezvous), or else the first.
func rootCause(errs []error) error {
	for _, err := range errs {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, rendezvous.ErrAborted) && !errors.Is(err, rendezvous.ErrStepDone) {
			return err
		}
	}
	return errs[0]
}

// cleanup ends a step on every task of its plan, in the background: with
// an abort reason when the step failed, so that every pending wait of the
// step ends.
func (m *Master) cleanup(stepID int64, p *plan, stepErr error) {
	req := &pb.CleanupStepRequest{StepId: stepID}
	if stepErr != nil {
		req.AbortReason = stepErr.Error()
	}
	cleanOne := func(task string) {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		w, err := m.cfg.Workers.Worker(task)
		if err == nil {
			_, err = w.CleanupStep(ctx, req)
		}
		if err != nil {
			m.log.Debug("master: cleaning up a step failed", "step", stepID, "peer", task, "err", err)
		}
	}
	if stepErr != nil {
		// Every task at once: their pending waits must end now.
		for _, pt := range p.parts {
			go cleanOne(pt.task)
		}
		return
	}
	go func() {
		for _, pt := range p.parts {
			cleanOne(pt.task)
		}
	}()
}

// plan returns the session's plan for sig, building and registering it on
// first use. Concurrent first uses wait for one build; a failed build is
// not cached.
func (m *Master) plan(ctx context.Context, s *session, sig *signature) (*plan, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("session %q: %w", s.handle, ErrNoSession)
	}
	p, ok := s.plans[sig.key]
	if !ok {
		p = &plan{ready: make(chan struct{})}
		s.plans[sig.key] = p
	}
	s.mu.Unlock()
	if ok {
		select {
		case <-p.ready:
			return p, p.err
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the step's plan: %w", ctx.Err())
		}
	}
	p.err = m.buildPlan(ctx, s, sig, p)
	if p.err != nil {
		s.mu.Lock()
		if s.plans[sig.key] == p {
			delete(s.plans, sig.key)
		}
		s.mu.Unlock()
	}
	close(p.ready)
	return p, p.err
}

// buildPlan prunes, places, partitions and registers the step's graph.
func (m *Master) buildPlan(ctx context.Context, s *session, sig *signature, p *plan) error {
	start := time.Now()
	nodes := graph.Prune(sig.feeds, sig.fetches, sig.targets, true)
	nodes, translate, err := substituteFeeds(nodes, sig.feeds)
	if err != nil {
		return err
	}
	devices, err := placement.Place(nodes, placement.Options{Devices: s.devices, Default: s.deflt, SoftPlacement: s.soft, Logger: m.log})
	if err != nil {
		return err
	}
	parts, err := partition.Partition(nodes, devices)
	if err != nil {
		return err
	}
	tasks := make([]string, 0, len(parts))
	for t := range parts {
		tasks = append(tasks, t)
	}
	sort.Strings(tasks)
	index := map[string]int{}
	for i, t := range tasks {
		index[t] = i
		pg := parts[t]
		p.parts = append(p.parts, &part{task: t, targets: sinks(pg)})
	}
	taskOf := func(o graph.Output) (int, string, error) {
		o = translate(o)
		d, ok := devices[o.Node]
		if !ok {
			return 0, "", fmt.Errorf("tensor %s was not placed", o)
		}
		dev, err := placement.ParseDevice(d)
		if err != nil {
			return 0, "", err
		}
		i, ok := index[dev.TaskName()]
		if !ok {
			return 0, "", fmt.Errorf("tensor %s: its task %s has no partition", o, dev.TaskName())
		}
		return i, o.Name(), nil
	}
	p.feeds = map[string]route{}
	for _, f := range sig.feeds {
		i, name, err := taskOf(f)
		if err != nil {
			return err
		}
		p.feeds[f.Name()] = route{part: i, name: name}
	}
	p.fetches = map[string]route{}
	for _, f := range sig.fetches {
		i, name, err := taskOf(f)
		if err != nil {
			return err
		}
		p.fetches[f.Name()] = route{part: i, name: name}
		p.parts[i].fetches = append(p.parts[i].fetches, name)
	}
	for _, pt := range p.parts {
		slices.Sort(pt.fetches)
		pt.fetches = slices.Compact(pt.fetches)
	}
	for k, r := range p.fetches {
		r.index, _ = slices.BinarySearch(p.parts[r.part].fetches, r.name)
		p.fetches[k] = r
	}

	// Register the partitions; undo on failure.
	for i, t := range tasks {
		if err := m.register(ctx, s, parts[t], p.parts[i]); err != nil {
			m.deregister(s.handle, p.parts[:i+1])
			return fmt.Errorf("registering the partition of task %s: %w", t, err)
		}
	}
	if m.log.Enabled(ctx, slog.LevelDebug) {
		sizes := make([]string, len(tasks))
		for i, t := range tasks {
			sizes[i] = fmt.Sprintf("%s:%d", t, parts[t].NumNodes())
		}
		m.log.Debug("master: built plan", "session", s.handle, "nodes", len(nodes), "partitions", strings.Join(sizes, " "),
			"feeds", len(sig.feeds), "fetches", len(sig.fetches), "targets", len(sig.targets), "took", time.Since(start))
	}
	return nil
}

// sinks returns the names of the nodes of g that no node consumes: running
// them runs the whole partition (except what feeds cut off).
func sinks(g *graph.Graph) []string {
	var out []string
	cons := g.Consumers()
	for _, n := range g.Nodes() {
		if len(cons[n.ID()]) == 0 {
			out = append(out, n.Name())
		}
	}
	return out
}

// register registers g, the partition of pt.task, and records its handle,
// the task's generation and its incarnation in pt. A call that finds the
// task lost, or an incarnation that says it was restarted, invalidates the
// task's stale plans (see lose and checkIncarnation).
func (m *Master) register(ctx context.Context, s *session, g *graph.Graph, pt *part) error {
	m.mu.Lock()
	gen := m.gen[pt.task]
	m.mu.Unlock()
	w, err := m.cfg.Workers.Worker(pt.task)
	if err != nil {
		return err
	}
	resp, err := w.RegisterGraph(ctx, &pb.RegisterGraphRequest{SessionHandle: s.handle, Graph: g.ToProto()})
	if err != nil {
		if lost(err) {
			m.lose(pt.task, gen, err)
		}
		return err
	}
	pt.handle, pt.gen = resp.GetGraphHandle(), gen
	s.mu.Lock()
	s.tasks[pt.task] = true
	s.mu.Unlock()
	return m.checkIncarnation(pt.task, gen, resp.GetIncarnation())
}

// checkIncarnation records the incarnation a task reported when a
// partition was registered on it under generation gen. Another one than
// before means the task was restarted, and the variables the session used
// there are gone: its stale plans are dropped, and the error (wrapping
// worker.ErrNoGraph, as the stale plans' steps would fail) tells the
// caller, which must ready the model again before it goes on.
func (m *Master) checkIncarnation(task string, gen, inc uint64) error {
	if inc == 0 {
		return nil // a worker that does not tell
	}
	m.mu.Lock()
	old, known := m.inc[task]
	m.inc[task] = inc
	m.mu.Unlock()
	if !known || old == inc {
		return nil
	}
	err := fmt.Errorf("task %s was restarted (incarnation %x, was %x): the graphs and variables it held are gone: %w", task, inc, old, worker.ErrNoGraph)
	m.invalidate(task, gen, err)
	return err
}

// deregister drops registered partitions, best effort.
func (m *Master) deregister(session string, parts []*part) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for _, pt := range parts {
		if pt.handle == "" {
			continue
		}
		w, err := m.cfg.Workers.Worker(pt.task)
		if err == nil {
			_, err = w.DeregisterGraph(ctx, &pb.DeregisterGraphRequest{SessionHandle: session, GraphHandle: pt.handle})
		}
		if err != nil {
			m.log.Debug("master: deregistering a graph failed", "session", session, "peer", pt.task, "err", err)
		}
	}
}

// CloseSession deregisters the session's partitions and closes the
// session on every task that held one. Steps in flight finish or fail.
func (m *Master) CloseSession(ctx context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	m.mu.Lock()
	s, ok := m.sessions[req.GetSessionHandle()]
	delete(m.sessions, req.GetSessionHandle())
	m.mu.Unlock()
	if !ok {
		return nil, m.errorf("close session %q: %w", req.GetSessionHandle(), ErrNoSession)
	}
	s.mu.Lock()
	s.closed = true
	plans := s.plans
	s.plans = nil
	s.mu.Unlock()
	// Closing the session on a task drops all its graphs there, so the
	// partitions need no separate deregistration: one call per task that
	// holds some (including those of plans dropped after a lost task), all
	// at once, so that a task that is gone costs one timeout, not one per
	// plan.
	for _, p := range plans {
		select {
		case <-p.ready:
		case <-ctx.Done():
			return nil, m.errorf("close session %q: %w", s.handle, ctx.Err())
		}
	}
	s.mu.Lock()
	tasks := maps.Clone(s.tasks)
	s.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for t := range tasks {
		wg.Add(1)
		go func(t string) {
			defer wg.Done()
			w, err := m.cfg.Workers.Worker(t)
			if err == nil {
				_, err = w.CloseSession(ctx, &pb.WorkerCloseSessionRequest{SessionHandle: s.handle})
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("task %s: %w", t, err))
				mu.Unlock()
			}
		}(t)
	}
	wg.Wait()
	m.log.Debug("master: closed session", "session", s.handle, "tasks", len(tasks))
	if err := errors.Join(errs...); err != nil {
		return nil, m.errorf("close session %q: %w", s.handle, err)
	}
	return &pb.CloseSessionResponse{}, nil
}

// ListDevices lists the cluster's devices.
func (m *Master) ListDevices(ctx context.Context, req *pb.ListDevicesRequest) (*pb.ListDevicesResponse, error) {
	return &pb.ListDevicesResponse{Devices: append([]string(nil), m.cfg.Devices...)}, nil
}

// substituteFeeds makes the pruned node set self-contained. A fed tensor
// cuts the walk, so its producer may be in the set without its inputs; such
// a producer is replaced, in a copy of the set, by one Placeholder per fed
// output (named like the producer when it has a single output), and its
// consumers are rewired to them. translate maps an output of the original
// set to its counterpart in the returned one. Without such producers, nodes
// is returned as is.
func substituteFeeds(nodes []*graph.Node, feeds []graph.Output) (_ []*graph.Node, translate func(graph.Output) graph.Output, _ error) {
	in := make(map[*graph.Node]bool, len(nodes))
	for _, n := range nodes {
		in[n] = true
	}
	dangling := map[*graph.Node]bool{}
	for _, n := range nodes {
		for _, i := range n.Inputs() {
			if !in[i.Node] {
				dangling[n] = true
			}
		}
		for _, c := range n.ControlInputs() {
			if !in[c] {
				dangling[n] = true
			}
		}
	}
	if len(dangling) == 0 {
		return nodes, func(o graph.Output) graph.Output { return o }, nil
	}
	fedOf := map[*graph.Node][]graph.Output{}
	for _, f := range feeds {
		fedOf[f.Node] = append(fedOf[f.Node], f)
	}
	old := nodes[0].Graph()
	g := graph.New()
	outMap := map[graph.Output]graph.Output{}
	nodeMap := map[*graph.Node]*graph.Node{}
	renamed := map[graph.Output]graph.Output{}
	for _, n := range nodes {
		if dangling[n] {
			fs := fedOf[n]
			if len(fs) == 0 {
				return nil, nil, fmt.Errorf("node %s is needed without its inputs but none of its outputs is fed", n)
			}
			sort.Slice(fs, func(i, j int) bool { return fs[i].Index < fs[j].Index })
			for _, f := range fs {
				name := n.Name()
				if n.NumOutputs() > 1 {
					name = fmt.Sprintf("%s/_feed_%d", n.Name(), f.Index)
					for k := 1; old.Node(name) != nil; k++ {
						name = fmt.Sprintf("%s/_feed_%d_%d", n.Name(), f.Index, k)
					}
				}
				ph, err := g.AddNode(graph.NodeSpec{Op: "Placeholder", Name: name, Device: n.Device(),
					Attrs: map[string]any{"dtype": f.DType(), "shape": f.Shape()}})
				if err != nil {
					return nil, nil, fmt.Errorf("substituting fed tensor %s: %w", f, err)
				}
				outMap[f] = ph.Output(0)
				renamed[f] = ph.Output(0)
				if nodeMap[n] == nil {
					nodeMap[n] = ph
				}
			}
			continue
		}
		spec := graph.NodeSpec{Op: n.Op(), Name: n.Name(), Device: n.Device(), Attrs: map[string]any{}}
		for _, k := range n.AttrNames() {
			spec.Attrs[k], _ = n.Attr(k)
		}
		for _, i := range n.Inputs() {
			o, ok := outMap[i]
			if !ok {
				o = nodeMap[i.Node].Output(i.Index)
			}
			spec.Inputs = append(spec.Inputs, o)
		}
		for _, c := range n.ControlInputs() {
			spec.Control = append(spec.Control, nodeMap[c])
		}
		nn, err := g.AddNode(spec)
		if err != nil {
			return nil, nil, fmt.Errorf("substituting fed tensors: %w", err)
		}
		nodeMap[n] = nn
	}
	translate = func(o graph.Output) graph.Output {
		if r, ok := renamed[o]; ok {
			return r
		}
		if n := nodeMap[o.Node]; n != nil {
			return n.Output(o.Index)
		}
		return o
	}
	return g.Nodes(), translate, nil
}
