package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/executor"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	_ "github.com/distflow/distflow/kernel/cpu" // every CPU kernel
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
)

// ErrClosed is wrapped by the error of Run on a closed session.
var ErrClosed = errors.New("session is closed")

// Session runs a graph in process, on the CPU. It keeps the variables (and
// other resources) across runs. It is safe for concurrent use.
type Session struct {
	g   *graph.Graph
	res *kernel.Resources
	// ownsRes: res is the session's own (not WithResources'), and its
	// device variables end with the session.
	ownsRes bool

	mu        sync.Mutex
	closed    bool
	executors map[string]stepExec // by signature
	// devices, when set (WithDevices), runs steps over the process's
	// accelerators too.
	devices *taskgraph.Config

	// last is the signature of the last local Run, checked by identity
	// first so that a training loop's repeated steps skip building the
	// signature key (names, sorting), which allocates.
	last atomic.Pointer[lastSig]

	// traceNext, when set, is taken by the next Run, which is then traced
	// (TraceNextRun).
	traceNext atomic.Pointer[traceRequest]

	remote *rpcRemote        // set when a master runs the steps (remote.go)
	rpcCfg *pb.SessionConfig // WithConfig, for Open
}

// Option configures a Session.
type Option func(*Session)

// WithResources makes the session use res for its variables instead of a
// fresh container: sessions sharing res share state.
func WithResources(res *kernel.Resources) Option {
	return func(s *Session) { s.res = res }
}

// WithDevices makes the session run each step over the process's CPU and
// the accelerators of cfg (package device/taskgraph): a node placed on
// "/gpu:i" runs on cfg.Devices[i] when that has a kernel for it. cfg.Task
// names the process's task (DeviceTask when empty). The
// session does not close the devices.
func WithDevices(cfg taskgraph.Config) Option {
	return func(s *Session) {
		if cfg.Task == "" {
			cfg.Task = DeviceTask
		}
		s.devices = &cfg
	}
}

// DeviceTask is the task an in-process session's devices belong to, as
// TensorFlow names them: "/job:localhost/task:0/gpu:0".
const DeviceTask = "/job:localhost/task:0"

// stepExec runs the steps of one signature: an executor.Executor, or a
// taskgraph.Executor over the process's devices.
type stepExec interface {
	Run(ctx context.Context, feeds []*tensor.Tensor) ([]*tensor.Tensor, error)
}

// New returns a session that runs g. The graph may keep growing after New;
// each run sees the nodes present when it starts.
func New(g *graph.Graph, opts ...Option) (*Session, error) {
	if g == nil {
		return nil, errors.New("session: nil graph")
	}
	s := &Session{g: g, executors: map[string]stepExec{}}
	for _, o := range opts {
		o(s)
	}
	if s.res == nil {
		s.res, s.ownsRes = kernel.NewResources(), true
	}
	return s, nil
}

// Resources returns the session's resource container (its variables).
func (s *Session) Resources() *kernel.Resources { return s.res }

// Graph returns the session's graph.
func (s *Session) Graph() *graph.Graph { return s.g }

// Close releases the session's cached executors. Runs after Close fail with
// an error wrapping ErrClosed; runs in progress complete. Close is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	wasClosed := s.closed
	s.closed = true
	execs := s.executors
	s.executors = nil
	s.last.Store(nil)
	s.mu.Unlock()
	for _, e := range execs {
		if c, ok := e.(io.Closer); ok {
			c.Close() // the memory its captured steps hold on a device, once a running one ends
		}
	}
	if s.ownsRes && s.devices != nil && !wasClosed {
		// The variables its steps kept in device memory
		// (taskgraph.Config.VariablesOnDevice); shared resources keep theirs.
		if err := taskgraph.ReleaseVariables(s.res); err != nil && s.remote == nil {
			return fmt.Errorf("session: close: %w", err)
		}
	}
	if s.remote != nil && !wasClosed {
		return s.remote.close() // CloseSession on the master, then the connection
	}
	return nil
}

// Run feeds feeds, computes fetches and runs targets (nodes run for their
// effects, such as an optimizer's update), and returns the fetched values in
// the order of fetches. Only the nodes these need run. The returned tensors
// belong to the caller; a fetch listed twice returns the same tensor twice.
// Feed tensors are read, never modified. Errors name the tensor or node
// involved: a nil or mistyped feed, a fetch of a node without outputs, an
// unfed placeholder, an uninitialized variable (wrapping
// kernel.ErrUninitialized), a failing kernel, a cancelled ctx (wrapping
// ctx.Err()).
func (s *Session) Run(ctx context.Context, feeds map[graph.Output]*tensor.Tensor, fetches []graph.Output, targets []*graph.Node) ([]*tensor.Tensor, error) {
	if s.traceNext.Load() != nil {
		if req := s.takeTrace(ctx); req != nil {
			return s.runTracedFor(ctx, req, feeds, fetches, targets)
		}
	}
	if l := s.last.Load(); l != nil && len(feeds) <= len(l.vals) && l.matches(feeds, fetches, targets) {
		var vals [len(lastSig{}.vals)]*tensor.Tensor
		for i, o := range l.feeds {
			vals[i] = feeds[o]
		}
		if s.remote != nil {
			return s.runRemote(ctx, graph.Signature{Feeds: l.feeds, Fetches: l.fetches, Targets: l.targets}, vals[:len(l.feeds)])
		}
		return runLocal(ctx, l.e, vals[:len(l.feeds)])
	}
	sig, vals, err := signature(feeds, fetches, targets)
	if err != nil {
		return nil, err
	}
	if s.remote != nil {
		if len(sig.Feeds) <= len(lastSig{}.vals) {
			s.last.Store(newLastSig(sig, nil))
		}
		return s.runRemote(ctx, sig, vals)
	}
	e, err := s.executor(sig)
	if err != nil {
		return nil, err
	}
	if len(sig.Feeds) <= len(lastSig{}.vals) {
		s.last.Store(newLastSig(sig, e))
	}
	return runLocal(ctx, e, vals)
}

// runLocal runs a step on e with feeds, its fetches apart from the feeds.
func runLocal(ctx context.Context, e stepExec, feeds []*tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := e.Run(ctx, feeds)
	if err != nil {
		return nil, err
	}
	apartFromFeeds(out, feeds)
	return out, nil
}

// apartFromFeeds copies each fetch that shares storage with a feed (the
// feed itself, fetched back, or a view of it), so that the caller's
// feeds and fetches are apart on every back end.
func apartFromFeeds(out, feeds []*tensor.Tensor) {
	for i, t := range out {
		for _, f := range feeds {
			if t.SharesStorage(f) {
				out[i] = t.Clone()
				break
			}
		}
	}
}

// signature returns the signature of a Run, its feeds sorted by name (map
// order is random), and the feed values in that order.
func signature(feeds map[graph.Output]*tensor.Tensor, fetches []graph.Output, targets []*graph.Node) (graph.Signature, []*tensor.Tensor, error) {
	sig := graph.Signature{Feeds: make([]graph.Output, 0, len(feeds)), Fetches: fetches, Targets: targets}
	for o, v := range feeds {
		if v == nil {
			return sig, nil, fmt.Errorf("session: feed %s is nil", o)
		}
		if !o.Valid() {
			return sig, nil, errors.New("session: a feed is the zero Output (a missing tensor)")
		}
		sig.Feeds = append(sig.Feeds, o)
	}
	slices.SortFunc(sig.Feeds, func(a, b graph.Output) int { return strings.Compare(a.Name(), b.Name()) })
	vals := make([]*tensor.Tensor, len(sig.Feeds))
	for i, o := range sig.Feeds {
		vals[i] = feeds[o]
	}
	return sig, vals, nil
}

// lastSig is a signature and its executor (nil in a remote session, whose
// master checks it), and the names a remote step sends.
type lastSig struct {
	feeds   []graph.Output // in the executor's order
	fetches []graph.Output
	targets []*graph.Node
	e       stepExec
	vals    [8]struct{} // only its length is used: the most feeds taken this way

	fetchNames, targetNames []string
}

// newLastSig returns sig's lastSig, with copies of the caller's slices.
func newLastSig(sig graph.Signature, e stepExec) *lastSig {
	l := &lastSig{feeds: slices.Clone(sig.Feeds), fetches: slices.Clone(sig.Fetches), targets: slices.Clone(sig.Targets), e: e}
	if e == nil {
		l.fetchNames, l.targetNames = stepNames(sig)
	}
	return l
}

// names returns the names of sig's fetches and targets: the last
// signature's when sig is it.
func (s *Session) names(sig graph.Signature) (fetches, targets []string) {
	if l := s.last.Load(); l != nil && l.e == nil && slices.Equal(l.fetches, sig.Fetches) && slices.Equal(l.targets, sig.Targets) {
		return l.fetchNames, l.targetNames
	}
	return stepNames(sig)
}

// stepNames returns the names of sig's fetches and targets, as a remote
// step sends them.
func stepNames(sig graph.Signature) (fetches, targets []string) {
	fetches, targets = make([]string, len(sig.Fetches)), make([]string, len(sig.Targets))
	for i, o := range sig.Fetches {
		fetches[i] = o.Name()
	}
	for i, n := range sig.Targets {
		targets[i] = n.Name()
	}
	return fetches, targets
}

// matches reports whether a Run of feeds, fetches and targets has this
// signature, with every feed value present and not nil.
func (l *lastSig) matches(feeds map[graph.Output]*tensor.Tensor, fetches []graph.Output, targets []*graph.Node) bool {
	if len(feeds) != len(l.feeds) || !slices.Equal(fetches, l.fetches) || !slices.Equal(targets, l.targets) {
		return false
	}
	for _, o := range l.feeds {
		if feeds[o] == nil {
			return false
		}
	}
	return true
}

// executor returns the cached executor of a signature, building it on first
// use. Nodes are immutable once added and only ever appended, so the
// subgraph of a signature does not change when the graph grows: its key
// alone is the cache key.
func (s *Session) executor(sig graph.Signature) (stepExec, error) {
	key := sig.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("session: run: %w", ErrClosed)
	}
	if e, ok := s.executors[key]; ok {
		return e, nil
	}
	var e stepExec
	var err error
	if s.devices != nil {
		e, err = taskgraph.New(s.g, sig, s.res, *s.devices)
	} else {
		e, err = executor.New(s.g, sig, s.res)
	}
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	s.executors[key] = e
	return e, nil
}

// RunNamed is Run with tensors named "node:index" (or "node" for output 0)
// and targets named by node ("node"; a ":index" suffix is ignored). An
// unknown name is an error naming it and wrapping graph.ErrNotFound.
func (s *Session) RunNamed(ctx context.Context, feeds map[string]*tensor.Tensor, fetches []string, targets []string) ([]*tensor.Tensor, error) {
	fm := make(map[graph.Output]*tensor.Tensor, len(feeds))
	for name, v := range feeds {
		o, err := s.lookupOutput("feed", name)
		if err != nil {
			return nil, err
		}
		if _, dup := fm[o]; dup {
			return nil, fmt.Errorf("session: tensor %s is fed twice (as %q)", o, name)
		}
		fm[o] = v
	}
	fo := make([]graph.Output, len(fetches))
	for i, name := range fetches {
		o, err := s.lookupOutput("fetch", name)
		if err != nil {
			return nil, err
		}
		fo[i] = o
	}
	tn := make([]*graph.Node, len(targets))
	for i, name := range targets {
		base := name
		if j := strings.LastIndexByte(name, ':'); j >= 0 {
			base = name[:j]
		}
		n := s.g.Node(base)
		if n == nil {
			return nil, fmt.Errorf("session: target %q: no such node (%w)", name, graph.ErrNotFound)
		}
		tn[i] = n
	}
	return s.Run(ctx, fm, fo, tn)
}

func (s *Session) lookupOutput(what, name string) (graph.Output, error) {
	base := name
	if j := strings.LastIndexByte(name, ':'); j >= 0 {
		base = name[:j]
	}
	if n := s.g.Node(base); n != nil && n.NumOutputs() == 0 {
		return graph.Output{}, fmt.Errorf("session: cannot %s %q: node %s has no outputs (run it as a target)", what, name, n)
	}
	o, err := s.g.Output(name)
	if err != nil {
		return graph.Output{}, fmt.Errorf("session: %s %q: %w", what, name, err)
	}
	return o, nil
}
