package master

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
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/gopool"
	"github.com/distflow/distflow/internal/stepctx"
	"github.com/distflow/distflow/placement"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/service"
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
	// ErrTooManySessions is wrapped when a session or a graph would take
	// its caller past Config.MaxSessions or Config.MaxGraphBytes.
	ErrTooManySessions = errors.New("caller holds too many sessions or graphs")
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
	Workers service.Workers
	// Logger receives plan building and step failures at debug level; nil
	// means slog.Default().
	Logger *slog.Logger

	// MaxSessions bounds the sessions one caller (the task or client the
	// transport names, service.Caller; callers it does not name count as
	// one) may hold open; 0 means DefaultMaxSessions, a negative value no
	// bound.
	MaxSessions int
	// MaxGraphBytes bounds the memory that the sessions of one caller hold
	// in graphs: their graphs and the partitions of their plans, as
	// worker.GraphMemory estimates them (a decoded graph holds up to about
	// 9 times its serialised size); 0 means DefaultMaxGraphBytes, a
	// negative value no bound.
	MaxGraphBytes int64
	// SessionIdle is how long a session may go without a step or an
	// extension before the master closes it (as CloseSession would, on
	// the tasks too); 0 means DefaultSessionIdle, a negative value never.
	SessionIdle time.Duration
	// BuildShare bounds the time the master spends decoding one caller's
	// graphs (CreateSession): at most this share of one core over time,
	// and BuildBurst of it at once, so that a caller sending large graphs
	// cannot take the task's CPU from its training; a caller past it is
	// refused until its share has come back. 0 means DefaultBuildShare and
	// DefaultBuildBurst, a negative BuildShare no bound.
	BuildShare float64
	BuildBurst time.Duration
	// Now is the clock of SessionIdle and BuildShare; nil means time.Now.
	Now func() time.Time
}

// Defaults of Config's limits.
const (
	DefaultMaxSessions   = 256
	DefaultMaxGraphBytes = 2 << 30 // 2 GiB held in memory
	DefaultSessionIdle   = 24 * time.Hour
	DefaultBuildShare    = 0.25
	DefaultBuildBurst    = 10 * time.Second
)

// withDefaults returns c with its zero limits replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxGraphBytes == 0 {
		c.MaxGraphBytes = DefaultMaxGraphBytes
	}
	if c.SessionIdle == 0 {
		c.SessionIdle = DefaultSessionIdle
	}
	if c.BuildShare == 0 {
		c.BuildShare = DefaultBuildShare
	}
	if c.BuildBurst == 0 {
		c.BuildBurst = DefaultBuildBurst
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Master holds client sessions and runs their steps on the cluster's
// workers. It implements Service and is safe for concurrent use; steps of
// one session may run concurrently, each with its own step ID.
type Master struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session
	callers  map[string]*callerUse // by service.Caller, while it holds sessions
	// builds is each caller's budget of graph-building time (BuildShare),
	// by service.Caller, while it is spent in part.
	builds map[string]*buildBudget
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
	cfg = cfg.withDefaults()
	if len(cfg.Devices) == 0 && cfg.Workers != nil {
		for _, t := range cfg.Workers.Tasks() {
			cfg.Devices = append(cfg.Devices, t+"/cpu:0")
		}
	}
	return &Master{cfg: cfg, log: log.With("task", cfg.Task), sessions: map[string]*session{},
		callers: map[string]*callerUse{}, builds: map[string]*buildBudget{}, gen: map[string]uint64{}, inc: map[string]uint64{}}
}

// session is a client's graph and the plans of the signatures it ran.
type session struct {
	handle  string
	devices []string // after the session's device filters
	deflt   string   // default device
	soft    bool
	timeout time.Duration

	// Guarded by Master.mu: for the limits of the caller that created the
	// session, the graph memory it holds (its graph and its plans') and
	// when it was last used.
	caller   string
	bytes    int64
	lastUsed time.Time

	mu     sync.RWMutex // guards g against Import while steps resolve names
	g      *graph.Graph
	plans  map[string]*plan
	names  graph.NameCache[resolved] // requests resolved, without a lookup per name at every step
	tasks  map[string]bool           // every task a partition was registered on
	closed bool
}

// plan is a Plan and its registration: a graph handle per part. It is
// immutable once ready is closed.
type plan struct {
	ready chan struct{}
	err   error

	*Plan
	bytes int64     // its partitions' worker.GraphMemory, counted for its session
	regs  []reg     // per part
	calls sync.Pool // of *partCalls, so that a step builds no requests
}

// partCalls is what one step of a plan calls its tasks with: the
// partitions' requests, which only their step ID, trace flag and fed
// values change from step to step, and the channel of their results.
type partCalls struct {
	m       *Master
	p       *plan
	reqs    []*pb.RunGraphRequest
	results chan partResult
	// The tasks' answers (service.RunGraphInto), kept step after step:
	// the step's response keeps the fetched TensorProtos, not these.
	resps []pb.RunGraphResponse
	runs  []func() // runs[i] calls partition i: made once, not at every step

	// The step's, for runs.
	ctx context.Context
	st  *stepTrace
}

// run calls partition i of the step and sends the result.
func (c *partCalls) run(i int) {
	task := c.p.Parts[i].Task
	w, err := c.m.cfg.Workers.Worker(task)
	if err == nil {
		var start time.Time
		if c.st != nil {
			start = time.Now()
		}
		resp := &c.resps[i]
		if err = service.RunGraphInto(c.ctx, w, c.reqs[i], resp); err != nil {
			resp = nil
		}
		if c.st != nil {
			c.st.call(i, task, start, c.reqs[i], resp, err)
		}
	}
	c.results <- partResult{i, err}
}

type partResult struct {
	i   int
	err error
}

// getCalls returns p's calls for a step, made on first use.
func (p *plan) getCalls(m *Master, session string) *partCalls {
	if c, ok := p.calls.Get().(*partCalls); ok {
		return c
	}
	c := &partCalls{m: m, p: p, reqs: make([]*pb.RunGraphRequest, len(p.Parts)), results: make(chan partResult, len(p.Parts)),
		resps: make([]pb.RunGraphResponse, len(p.Parts)), runs: make([]func(), len(p.Parts))}
	for i, pt := range p.Parts {
		c.runs[i] = func() { c.run(i) }
		c.reqs[i] = &pb.RunGraphRequest{SessionHandle: session, GraphHandle: p.regs[i].handle, Targets: pt.Targets, Fetches: pt.Fetches}
		if len(pt.Feeds) > 0 {
			c.reqs[i].Feeds = make([]*pb.NamedTensor, len(pt.Feeds))
			for j, name := range pt.Feeds {
				c.reqs[i].Feeds[j] = &pb.NamedTensor{Name: name}
			}
		}
	}
	return c
}

// putCalls gives c back to p once no call of its step runs any more: the
// requests keep no fed value, the results nothing of the step.
func (p *plan) putCalls(c *partCalls) {
	for _, r := range c.reqs {
		for _, f := range r.Feeds {
			f.Tensor = nil
		}
	}
	for i := range c.resps {
		service.ForgetResponse(&c.resps[i])
	}
	c.ctx, c.st = nil, nil
	p.calls.Put(c)
}

// reg is the registration of one part of a plan.
type reg struct {
	handle string
	gen    uint64 // the task's generation when the partition was registered
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
	caller, size := callerOf(ctx), worker.GraphMemory(gd)
	// Refuse past the limits before building anything from the request.
	m.mu.Lock()
	m.expireIdleLocked()
	err := m.checkLimitsLocked(caller, true, size)
	m.mu.Unlock()
	if err != nil {
		return nil, m.errorf("create session: %w", err)
	}
	built, err := m.buildTurn(ctx, caller)
	if err != nil {
		return nil, m.errorf("create session: %w", err)
	}
	start := time.Now()
	g, err := graph.FromProto(gd)
	built(time.Since(start))
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
	// Checked again: other sessions of the caller may have been made.
	if err := m.checkLimitsLocked(caller, true, size); err != nil {
		m.mu.Unlock()
		return nil, m.errorf("create session: %w", err)
	}
	for {
		s.handle = newHandle("s")
		if _, taken := m.sessions[s.handle]; !taken {
			break
		}
	}
	m.sessions[s.handle] = s
	m.addSessionLocked(s, caller, size)
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
	now := m.cfg.Now()
	if m.idle(s, now) {
		m.expireLocked(s, now)
		return nil, m.errorf("session %q: %w (closed after %v without use, master.Config.SessionIdle)", handle, ErrNoSession, m.cfg.SessionIdle)
	}
	s.lastUsed = now
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
		size := worker.GraphMemory(req.GetGraph())
		if err := m.charge(s, size); err != nil {
			return nil, m.errorf("extend session %q: %w", s.handle, err)
		}
		if err := graph.Import(s.g, req.GetGraph()); err != nil {
			m.release(s, size)
			return nil, m.errorf("extend session %q: %w", s.handle, err)
		}
	}
	return &pb.ExtendSessionResponse{NewGraphVersion: int64(s.g.NumNodes())}, nil
}

// resolved is a request's names resolved in a session's graph: its
// signature, and the signature's key, under which its plan is cached.
type resolved struct {
	sig graph.Signature
	key string
}

// resolve looks up the request's names in the session's graph.
func (s *session) resolve(req *pb.RunStepRequest) (resolved, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return resolved{}, fmt.Errorf("session %q: %w", s.handle, ErrNoSession)
	}
	// Names once resolved stay valid: Import only adds nodes.
	if res, ok := s.names.Get(req); ok {
		return res, nil
	}
	sig, err := s.g.Resolve(req)
	if err != nil {
		return resolved{}, err
	}
	res := resolved{sig: sig, key: sig.Key()}
	s.names.Put(req, res)
	return res, nil
}

// RunStep runs one step: it feeds, fetches and runs targets by name,
// building and registering the plan of the signature on first use. The
// step has a fresh random ID; its partitions run concurrently on their
// tasks under the step's deadline (the session's step timeout, or ctx's).
// The first failure cancels the others and aborts the step's rendezvous on
// every task, so no wait of the step outlives it; the error names the task
// that failed first (and, from the worker, the node).
func (m *Master) RunStep(ctx context.Context, req *pb.RunStepRequest) (*pb.RunStepResponse, error) {
	var st *stepTrace
	if req.GetOptions().GetTrace() {
		st = newStepTrace()
	}
	s, err := m.session(req.GetSessionHandle())
	if err != nil {
		return nil, err
	}
	// Plans are cached by signature key, whose feeds are sorted by name.
	feeds := req.GetFeeds()
	if byName := func(a, b *pb.NamedTensor) int { return strings.Compare(a.GetName(), b.GetName()) }; !slices.IsSortedFunc(feeds, byName) {
		feeds = slices.Clone(feeds)
		slices.SortFunc(feeds, byName)
		req = &pb.RunStepRequest{SessionHandle: req.GetSessionHandle(), Feeds: feeds, Fetches: req.GetFetches(), Targets: req.GetTargets(), Options: req.GetOptions()}
	}
	res, err := s.resolve(req)
	if err != nil {
		return nil, m.errorf("run step in session %q: %w", s.handle, err)
	}
	sig := res.sig
	for i, f := range req.GetFeeds() {
		t := f.GetTensor()
		if t == nil {
			return nil, m.errorf("run step in session %q: feed %q: no value", s.handle, f.GetName())
		}
		var buf [8]int // the common case allocates nothing
		if err := graph.CheckFeed(sig.Feeds[i], tensor.DType(t.GetDtype()), dims(buf[:0], t)); err != nil {
			return nil, m.errorf("run step in session %q: %w", s.handle, err)
		}
	}
	// The step's one cancellable context: its deadline, and the end of
	// every partition at the first failure (runPartitions). A
	// stepctx.Context: the step's contexts on this task's worker and its
	// calls to the others derive from it without an allocation. It lives
	// in the step's response, made now, not apart.
	var deadline time.Time
	if s.timeout > 0 {
		deadline = time.Now().Add(s.timeout)
	}
	ss := newStepState(len(sig.Fetches))
	sctx := &ss.ctx
	sctx.Init(ctx, deadline)
	defer sctx.Cancel(nil)
	ctx = sctx
	p, err := m.plan(ctx, s, res)
	if err != nil {
		return nil, m.errorf("run step in session %q: %w", s.handle, err)
	}

	// Requests per partition.
	stepID := int64(rand.Uint64() >> 1)
	calls := p.getCalls(m, s.handle)
	defer p.putCalls(calls)
	for _, r := range calls.reqs {
		r.StepId, r.Trace = stepID, st != nil
	}
	for i, f := range req.GetFeeds() {
		for _, r := range p.Feeds[i] {
			calls.reqs[r.Part].Feeds[r.Index].Tensor = f.GetTensor()
		}
	}

	if st != nil {
		st.calls = make([]rpcCall, len(calls.reqs))
	}
	resps, err := m.runPartitions(sctx, stepID, p, calls, st)
	if err != nil {
		return nil, m.errorf("step %d in session %q: %w", stepID, s.handle, err)
	}
	out := &ss.resp
	for i, r := range p.Fetches {
		var t *pb.TensorProto
		if r.Part < 0 {
			t = req.GetFeeds()[r.Index].GetTensor()
		} else if fs := resps[r.Part].Fetches; r.Index < len(fs) {
			t = fs[r.Index].GetTensor()
		} else {
			return nil, m.errorf("step %d in session %q: task %s returned %d fetches, want %d", stepID, s.handle, p.Parts[r.Part].Task, len(fs), len(p.Parts[r.Part].Fetches))
		}
		out.Tensors[i].Name, out.Tensors[i].Tensor = req.GetFetches()[i], t
	}
	if st != nil {
		out.StepStats = st.stats(m.cfg.Task, stepID)
	}
	return out, nil
}

// stepState is what one step of RunStep makes, in one allocation: its
// context, and its response with room for the fetches of most steps (its
// list and its entries). It is not reused: the response goes to the
// caller, and the contexts derived from the step's (its worker's here,
// whose batches may read theirs after the step) may read it after
// RunStep returned.
type stepState struct {
	ctx   stepctx.Context
	resp  pb.RunStepResponse
	list  [2]*pb.NamedTensor
	named [2]pb.NamedTensor
}

// newStepState returns a step's state whose response has n fetches, each
// pointing at its entry of named; ctx is left for the caller to Init.
func newStepState(n int) *stepState {
	ss := new(stepState)
	list, named := slices.Grow(ss.list[:0], n)[:n], slices.Grow(ss.named[:0], n)[:n]
	for i := range list {
		list[i] = &named[i]
	}
	ss.resp.Tensors = list
	return ss
}

// dims appends the shape of a tensor proto to dst.
func dims(dst []int, t *pb.TensorProto) []int {
	for _, d := range t.GetDims() {
		dst = append(dst, int(d))
	}
	return dst
}

// runPartitions runs every partition of a step concurrently and cleans the
// step up on every task. The first failure cancels ctx: it ends the step
// everywhere. The responses are calls.resps.
func (m *Master) runPartitions(ctx *stepctx.Context, stepID int64, p *plan, calls *partCalls, st *stepTrace) ([]pb.RunGraphResponse, error) {
	reqs, results := calls.reqs, calls.results
	calls.ctx, calls.st = ctx, st
	// One partition runs on this goroutine: one handoff less per step. It
	// is a remote one when there is one, so that the request that starts
	// the step on another task goes out at once; a new goroutine waits its
	// turn for a core (tens of microseconds on a busy machine), which the
	// partition of this task, whose Recvs wait for the others anyway, can
	// better afford.
	inline := len(reqs) - 1
	for i := range reqs {
		if p.Parts[i].Task != m.cfg.Task {
			inline = i
			break
		}
	}
	for i := range reqs {
		if i != inline {
			// A kept goroutine: the partition's call stack (the executor
			// under the worker's RunGraph) grew a new one's at every step.
			gopool.Go(calls.runs[i])
		}
	}
	if inline >= 0 {
		calls.run(inline)
	}
	var errs []error // in arrival order
	for range reqs {
		r := <-results
		if r.err != nil {
			if len(errs) == 0 {
				ctx.Cancel(nil) // the first failure ends the step everywhere
			}
			task := p.Parts[r.i].Task
			errs = append(errs, fmt.Errorf("task %s: %w", task, r.err))
			if lost(r.err) {
				m.lose(task, p.regs[r.i].gen, r.err)
			}
		}
	}
	var first error
	if len(errs) > 0 {
		first = rootCause(errs)
		m.log.Debug("master: step failed", "step", stepID, "err", first)
	}
	m.cleanup(stepID, p, first)
	return calls.resps, first
}

// lost reports whether a call's error says that its task is lost: it could
// not be reached, or it no longer knows the graph registered on it (it was
// restarted). A task that reports a peer unreachable counts too: which of
// them is gone is not known here, and re-registering costs little.
func lost(err error) bool {
	return errors.Is(err, service.ErrNoGraph) || errors.Is(err, service.ErrUnavailable)
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
		var stale []*plan
		s.mu.Lock()
		for key, q := range s.plans {
			select {
			case <-q.ready:
			default:
				continue // being built: its registrations are fresh, or fail
			}
			if q.err != nil || !q.registeredOn(task, cur) {
				continue
			}
			delete(s.plans, key)
			stale = append(stale, q)
		}
		s.mu.Unlock()
		for _, q := range stale {
			m.release(s, q.bytes)
		}
		if len(stale) > 0 {
			go func() {
				for _, q := range stale {
					m.deregister(s.handle, q, len(q.Parts))
				}
			}()
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
	if stepErr != nil {
		// Every task at once: their pending waits must end now.
		req := &pb.CleanupStepRequest{StepId: stepID, AbortReason: stepErr.Error()}
		for _, pt := range p.Parts {
			go m.cleanupOn(pt.Task, req)
		}
		return
	}
	// A task that ended the step itself (service.StepFinisher: the local
	// worker when nothing of the step is pending on it, a remote one whose
	// answer said so) needs no call, nor a goroutine: at this point every
	// partition has returned, so each is asked once, here.
	var rest []string
	for _, pt := range p.Parts {
		w, err := m.cfg.Workers.Worker(pt.Task)
		if err == nil {
			if f, ok := w.(service.StepFinisher); ok && f.FinishStep(stepID) {
				continue
			}
		}
		rest = append(rest, pt.Task)
	}
	if len(rest) == 0 {
		return
	}
	req := &pb.CleanupStepRequest{StepId: stepID}
	go func() {
		for _, task := range rest {
			m.cleanupOn(task, req)
		}
	}()
}

// cleanupOn asks task to clean up the step of req, logging a failure.
func (m *Master) cleanupOn(task string, req *pb.CleanupStepRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	w, err := m.cfg.Workers.Worker(task)
	if err == nil {
		_, err = w.CleanupStep(ctx, req)
	}
	if err != nil {
		m.log.Debug("master: cleaning up a step failed", "step", req.GetStepId(), "peer", task, "err", err)
	}
}

// plan returns the session's plan for res's signature, building and
// registering it on first use. Concurrent first uses wait for one build; a
// failed build is not cached.
func (m *Master) plan(ctx context.Context, s *session, res resolved) (*plan, error) {
	key := res.key
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("session %q: %w", s.handle, ErrNoSession)
	}
	p, ok := s.plans[key]
	if !ok {
		p = &plan{ready: make(chan struct{})}
		s.plans[key] = p
	}
	s.mu.Unlock()
	if ok {
		select {
		case <-p.ready: // built: no Done channel made for ctx
			return p, p.err
		default:
		}
		select {
		case <-p.ready:
			return p, p.err
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the step's plan: %w", ctx.Err())
		}
	}
	p.err = m.buildPlan(ctx, s, res.sig, p)
	if p.err != nil {
		s.mu.Lock()
		if s.plans[key] == p {
			delete(s.plans, key)
		}
		s.mu.Unlock()
		m.release(s, p.bytes)
	}
	close(p.ready)
	return p, p.err
}

// buildPlan plans the step (NewPlan) and registers its partitions.
func (m *Master) buildPlan(ctx context.Context, s *session, sig graph.Signature, p *plan) error {
	start := time.Now()
	s.mu.RLock()
	pl, err := NewPlan(s.g, sig, placement.Options{Devices: s.devices, Default: s.deflt, SoftPlacement: s.soft, Logger: m.log})
	s.mu.RUnlock()
	if err != nil {
		return err
	}
	p.Plan, p.regs = pl, make([]reg, len(pl.Parts))
	gds := make([]*pb.GraphDef, len(pl.Parts))
	var size int64
	for i, pt := range pl.Parts {
		gds[i] = pt.Graph.ToProto()
		size += worker.GraphMemory(gds[i])
	}
	if err := m.charge(s, size); err != nil {
		return err
	}
	p.bytes = size
	for i := range pl.Parts {
		if err := m.register(ctx, s, p, i, gds[i]); err != nil {
			m.deregister(s.handle, p, i+1)
			return fmt.Errorf("registering the partition of task %s: %w", pl.Parts[i].Task, err)
		}
	}
	if m.log.Enabled(ctx, slog.LevelDebug) {
		sizes := make([]string, len(pl.Parts))
		for i, pt := range pl.Parts {
			sizes[i] = fmt.Sprintf("%s:%d", pt.Task, pt.Graph.NumNodes())
		}
		m.log.Debug("master: built plan", "session", s.handle, "partitions", strings.Join(sizes, " "),
			"signature", sig, "took", time.Since(start))
	}
	return nil
}

// registeredOn reports whether a part of p was registered on task under a
// generation older than cur.
func (p *plan) registeredOn(task string, cur uint64) bool {
	for i, pt := range p.Parts {
		if pt.Task == task && p.regs[i].gen < cur {
			return true
		}
	}
	return false
}

// register registers part i of p on its task and records its handle, the
// task's generation and its incarnation. A call that finds the task lost,
// or an incarnation that says it was restarted, invalidates the task's
// stale plans (see lose and checkIncarnation).
func (m *Master) register(ctx context.Context, s *session, p *plan, i int, gd *pb.GraphDef) error {
	task := p.Parts[i].Task
	m.mu.Lock()
	gen := m.gen[task]
	m.mu.Unlock()
	w, err := m.cfg.Workers.Worker(task)
	if err != nil {
		return err
	}
	// The session's partitions are the master's on every task, whoever
	// called it: a remote task names this one (its certificate), so the
	// local worker is told the same.
	ctx = service.WithCaller(ctx, m.cfg.Task)
	resp, err := w.RegisterGraph(ctx, &pb.RegisterGraphRequest{SessionHandle: s.handle, Graph: gd})
	if err != nil {
		if lost(err) {
			m.lose(task, gen, err)
		}
		return err
	}
	p.regs[i] = reg{handle: resp.GetGraphHandle(), gen: gen}
	s.mu.Lock()
	s.tasks[task] = true
	s.mu.Unlock()
	return m.checkIncarnation(task, gen, resp.GetIncarnation())
}

// checkIncarnation records the incarnation a task reported when a
// partition was registered on it under generation gen. Another one than
// before means the task was restarted, and the variables the session used
// there are gone: its stale plans are dropped, and the error (wrapping
// service.ErrNoGraph, as the stale plans' steps would fail) tells the
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
	err := fmt.Errorf("task %s was restarted (incarnation %x, was %x): the graphs and variables it held are gone: %w", task, inc, old, service.ErrNoGraph)
	m.invalidate(task, gen, err)
	return err
}

// deregister drops the first n registered partitions of p, best effort.
func (m *Master) deregister(session string, p *plan, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for i, r := range p.regs[:n] {
		if r.handle == "" {
			continue
		}
		task := p.Parts[i].Task
		w, err := m.cfg.Workers.Worker(task)
		if err == nil {
			_, err = w.DeregisterGraph(ctx, &pb.DeregisterGraphRequest{SessionHandle: session, GraphHandle: r.handle})
		}
		if err != nil {
			m.log.Debug("master: deregistering a graph failed", "session", session, "peer", task, "err", err)
		}
	}
}

// CloseSession deregisters the session's partitions and closes the
// session on every task that held one. Steps in flight finish or fail.
func (m *Master) CloseSession(ctx context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	m.mu.Lock()
	s, ok := m.sessions[req.GetSessionHandle()]
	if ok {
		m.removeSessionLocked(s)
	}
	m.mu.Unlock()
	if !ok {
		return nil, m.errorf("close session %q: %w", req.GetSessionHandle(), ErrNoSession)
	}
	if err := m.closeSession(ctx, s); err != nil {
		return nil, err
	}
	return &pb.CloseSessionResponse{}, nil
}

// closeSession closes s, already out of the master's sessions, on every
// task that holds a partition of it.
func (m *Master) closeSession(ctx context.Context, s *session) error {
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
			return m.errorf("close session %q: %w", s.handle, ctx.Err())
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
		return m.errorf("close session %q: %w", s.handle, err)
	}
	return nil
}

// ListDevices lists the cluster's devices.
func (m *Master) ListDevices(ctx context.Context, req *pb.ListDevicesRequest) (*pb.ListDevicesResponse, error) {
	return &pb.ListDevicesResponse{Devices: append([]string(nil), m.cfg.Devices...)}, nil
}
