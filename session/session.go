package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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

	mu        sync.Mutex
	closed    bool
	executors map[string]*executor.Executor // by signature

	// last is the signature of the last local Run, checked by identity
	// first so that a training loop's repeated steps skip building the
	// signature key (names, sorting), which allocates.
	last atomic.Pointer[lastSig]

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

// New returns a session that runs g. The graph may keep growing after New;
// each run sees the nodes present when it starts.
func New(g *graph.Graph, opts ...Option) (*Session, error) {
	if g == nil {
		return nil, errors.New("session: nil graph")
	}
	s := &Session{g: g, executors: map[string]*executor.Executor{}}
	for _, o := range opts {
		o(s)
	}
	if s.res == nil {
		s.res = kernel.NewResources()
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
	s.executors = nil
	s.last.Store(nil)
	s.mu.Unlock()
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
	if l := s.last.Load(); l != nil && len(feeds) <= len(l.vals) && l.matches(feeds, fetches, targets) {
		var vals [len(lastSig{}.vals)]*tensor.Tensor
		for i, o := range l.feeds {
			vals[i] = feeds[o]
		}
		return l.e.Run(ctx, vals[:len(l.feeds)])
	}
	type feed struct {
		name string
		out  graph.Output
		val  *tensor.Tensor
	}
	fs := make([]feed, 0, len(feeds))
	for o, v := range feeds {
		if err := s.checkOutput("feed", o); err != nil {
			return nil, err
		}
		if v == nil {
			return nil, fmt.Errorf("session: feed %s is nil", o)
		}
		fs = append(fs, feed{o.Name(), o, v})
	}
	slices.SortFunc(fs, func(a, b feed) int { return strings.Compare(a.name, b.name) })
	for _, o := range fetches {
		if err := s.checkOutput("fetch", o); err != nil {
			return nil, err
		}
	}
	for i, t := range targets {
		if t == nil || t.Graph() != s.g {
			return nil, fmt.Errorf("session: target %d is missing or belongs to another graph", i)
		}
	}

	// The signature: feed names sorted (map order is random), fetches in
	// order (they map to results), targets sorted.
	var key strings.Builder
	for _, f := range fs {
		key.WriteString(f.name)
		key.WriteByte(',')
	}
	key.WriteByte('|')
	for _, o := range fetches {
		key.WriteString(o.Name())
		key.WriteByte(',')
	}
	key.WriteByte('|')
	tnames := make([]string, len(targets))
	for i, t := range targets {
		tnames[i] = t.Name()
	}
	slices.Sort(tnames)
	for _, n := range tnames {
		key.WriteString(n)
		key.WriteByte(',')
	}

	feedOuts := make([]graph.Output, len(fs))
	vals := make([]*tensor.Tensor, len(fs))
	for i, f := range fs {
		feedOuts[i], vals[i] = f.out, f.val
	}
	if s.remote != nil {
		return s.runRemote(ctx, feedOuts, vals, fetches, tnames)
	}
	e, err := s.executor(key.String(), feedOuts, fetches, targets)
	if err != nil {
		return nil, err
	}
	if len(feedOuts) <= len(lastSig{}.vals) {
		s.last.Store(&lastSig{feeds: feedOuts, fetches: slices.Clone(fetches), targets: slices.Clone(targets), e: e})
	}
	return e.Run(ctx, vals)
}

// lastSig is a validated signature and its executor.
type lastSig struct {
	feeds   []graph.Output // in the executor's order
	fetches []graph.Output
	targets []*graph.Node
	e       *executor.Executor
	vals    [8]struct{} // only its length is used: the most feeds taken this way
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
// use. Nodes are immutable once added and only ever appended, so the pruned
// subgraph of a signature does not change when the graph grows: the
// signature alone is the cache key.
func (s *Session) executor(key string, feeds, fetches []graph.Output, targets []*graph.Node) (*executor.Executor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("session: run: %w", ErrClosed)
	}
	if e, ok := s.executors[key]; ok {
		return e, nil
	}
	e, err := executor.New(s.g, feeds, fetches, targets, s.res)
	if err != nil {
		return nil, err
	}
	s.executors[key] = e
	return e, nil
}

func (s *Session) checkOutput(what string, o graph.Output) error {
	switch {
	case o.Node == nil:
		return fmt.Errorf("session: a %s is the zero Output (a missing tensor)", what)
	case o.Node.Graph() != s.g:
		return fmt.Errorf("session: %s %s belongs to another graph", what, o)
	case o.Node.NumOutputs() == 0:
		return fmt.Errorf("session: cannot %s %s: node %s has no outputs (run it as a target)", what, o, o.Node)
	case o.Index < 0 || o.Index >= o.Node.NumOutputs():
		return fmt.Errorf("session: %s %s: node %s has %d outputs", what, o, o.Node, o.Node.NumOutputs())
	}
	return nil
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
