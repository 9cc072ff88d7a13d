package graph

import (
	"fmt"
	"slices"
	"sync"

	pb "github.com/distflow/distflow/proto/distflowpb"
)

// NamedStep is a request that names a step's feeds, fetches and targets:
// a session's step (pb.RunStepRequest) or a partition's (pb.RunGraphRequest).
type NamedStep interface {
	GetFeeds() []*pb.NamedTensor
	GetFetches() []string
	GetTargets() []string
}

// Resolve looks req's names up in g: the tensors fed and fetched and the
// nodes run. The error names the first name not in g, or a tensor fed
// twice.
func (g *Graph) Resolve(req NamedStep) (Signature, error) {
	var sig Signature
	for _, f := range req.GetFeeds() {
		o, err := g.Output(f.GetName())
		if err != nil {
			return Signature{}, fmt.Errorf("feed %q: %w", f.GetName(), err)
		}
		if slices.Contains(sig.Feeds, o) {
			return Signature{}, fmt.Errorf("feed %q: tensor %s is fed twice", f.GetName(), o)
		}
		sig.Feeds = append(sig.Feeds, o)
	}
	for _, name := range req.GetFetches() {
		o, err := g.Output(name)
		if err != nil {
			return Signature{}, fmt.Errorf("fetch %q: %w", name, err)
		}
		sig.Fetches = append(sig.Fetches, o)
	}
	for _, name := range req.GetTargets() {
		n := g.Node(name)
		if n == nil {
			return Signature{}, fmt.Errorf("target %q: no node of that name in the graph (%w)", name, ErrNotFound)
		}
		sig.Targets = append(sig.Targets, n)
	}
	return sig, nil
}

// NameCache remembers what was resolved from the names of the last few
// requests a hot path served (their Signature and what came with it), so
// that a training loop, which names the same tensors step after step,
// looks up no name in the graph and allocates nothing for it. Names are
// compared in order: a request naming the same tensors in another order
// is another entry. A value is shared by every hit: treat it as read-only.
// It is safe for concurrent use.
type NameCache[V any] struct {
	mu     sync.Mutex
	recent [nameCacheSize]namedEntry[V]
	next   int
}

// nameCacheSize is how many requests a cache remembers: a training loop
// runs a few (the step, a checkpoint's save, an evaluation).
const nameCacheSize = 8

type namedEntry[V any] struct {
	feeds, fetches, targets []string
	v                       V
	set                     bool
}

// Get returns the value put for req's names, if the cache still has it.
func (c *NameCache[V]) Get(req NamedStep) (v V, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.recent {
		if e := &c.recent[i]; e.set && e.names(req) {
			return e.v, true
		}
	}
	return v, false
}

// Put remembers v for req's names, in place of the least recently put.
func (c *NameCache[V]) Put(req NamedStep, v V) {
	// The request's slices belong to its caller.
	e := namedEntry[V]{feeds: make([]string, len(req.GetFeeds())), fetches: slices.Clone(req.GetFetches()),
		targets: slices.Clone(req.GetTargets()), v: v, set: true}
	for i, f := range req.GetFeeds() {
		e.feeds[i] = f.GetName()
	}
	c.mu.Lock()
	c.recent[c.next] = e
	c.next = (c.next + 1) % nameCacheSize
	c.mu.Unlock()
}

// names reports whether req names e's tensors and nodes, in e's order.
func (e *namedEntry[V]) names(req NamedStep) bool {
	feeds := req.GetFeeds()
	if len(feeds) != len(e.feeds) || !slices.Equal(req.GetFetches(), e.fetches) || !slices.Equal(req.GetTargets(), e.targets) {
		return false
	}
	for i, f := range feeds {
		if f.GetName() != e.feeds[i] {
			return false
		}
	}
	return true
}
