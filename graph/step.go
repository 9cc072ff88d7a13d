package graph

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/distflow/distflow/tensor"
)

// ErrBadFeed is wrapped by the errors of CheckFeed: a fed value whose dtype
// or shape the tensor it replaces cannot take.
var ErrBadFeed = errors.New("bad feed")

// Signature is what one step asks of a graph: the tensors it feeds, the
// tensors it fetches (results come back in this order) and the nodes it
// runs for their effects. A session, the master and a worker each cache
// what they derive from a signature (an executor, a plan) under Key.
type Signature struct {
	Feeds   []Output
	Fetches []Output
	Targets []*Node
}

// Key returns the canonical key of the signature: feeds and targets sorted
// and without duplicates (a client's feeds often come from a map), fetches
// in order (they say where results go). Two signatures with the same key
// derive the same subgraph. Key allocates; hot paths keep it.
func (s Signature) Key() string {
	var b strings.Builder
	names := make([]string, 0, max(len(s.Feeds), len(s.Targets)))
	set := func(names []string) {
		slices.Sort(names)
		for _, n := range slices.Compact(names) {
			b.WriteString(n)
			b.WriteByte(0)
		}
		b.WriteByte(1)
	}
	for _, f := range s.Feeds {
		names = append(names, f.Name())
	}
	set(names)
	for _, f := range s.Fetches {
		b.WriteString(f.Name())
		b.WriteByte(0)
	}
	b.WriteByte(1)
	names = names[:0]
	for _, t := range s.Targets {
		names = append(names, t.Name())
	}
	set(names)
	return b.String()
}

// String renders the signature for logs and golden files.
func (s Signature) String() string {
	var b strings.Builder
	b.WriteString("feeds[")
	for i, f := range s.Feeds {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.Name())
	}
	b.WriteString("] fetches[")
	for i, f := range s.Fetches {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.Name())
	}
	b.WriteString("] targets[")
	for i, t := range s.Targets {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t.Name())
	}
	b.WriteString("]")
	return b.String()
}

// CheckFeed checks a value of dtype dt and shape dims fed to o: the dtype
// must be o's and the shape compatible with o's build-time shape (a
// Placeholder's "shape" attribute). The error names the node and wraps
// ErrBadFeed. It is the one feed check of the runtime: the executor calls
// it on every step's values, the master on a step's requests before any
// task runs.
func CheckFeed(o Output, dt tensor.DType, dims []int) error {
	if dt != o.DType() || !o.Shape().AcceptsDims(dims) {
		return fmt.Errorf("feed %s (node %s): expected %v%v, got %v%v: %w", o.Name(), o.Node.Name(), o.DType(), o.Shape(), dt, tensor.MakeShape(dims...), ErrBadFeed)
	}
	return nil
}

// Subgraph is the part of a graph one step runs, derived from a signature
// by NewSubgraph. It is immutable; its slices belong to it.
//
// Fed tensors are the step's inputs: a consumer of a fed output reads the
// fed value, and the producer is in Nodes only if the step needs it for
// another reason (an output that is not fed, or a control dependency of a
// node whose outputs are not all fed).
type Subgraph struct {
	Signature
	// Graph is the graph the nodes belong to.
	Graph *Graph
	// Nodes are the nodes the step runs, in creation order, which is
	// topological: every data input of a node is the output of an earlier
	// node, a fed tensor, or (for a ref input) a node of Vars.
	Nodes []*Node
	// Vars are the nodes (variables) that nodes of Nodes take ref inputs
	// from and that are not in Nodes: the step uses their storage and does
	// not run them. In creation order.
	Vars []*Node

	fed  map[Output]int
	runs map[*Node]bool
}

// NewSubgraph returns the subgraph of g that sig needs: it walks back from
// the fetches and targets through data and control inputs. A fed output
// cuts the walk; a control input on a node whose outputs are all fed is
// satisfied by the feeds; a ref input does not pull its producer into
// Nodes but into Vars. It is the one pruning function of the runtime: the
// executor (for sessions and workers) and the master's plan call it.
//
// It fails, naming the tensor or node, when an output or target is missing
// or not in g, a tensor is fed twice, or a fetch is of a node without
// outputs. It only reads g.
func NewSubgraph(g *Graph, sig Signature) (*Subgraph, error) {
	fed, err := sig.check(g, true)
	if err != nil {
		return nil, err
	}
	all := g.Nodes()
	sg := &Subgraph{Signature: Signature{
		Feeds: slices.Clone(sig.Feeds), Fetches: slices.Clone(sig.Fetches), Targets: slices.Clone(sig.Targets),
	}, Graph: g, fed: fed}
	fedPerNode := map[*Node]int{}
	for _, f := range sig.Feeds {
		fedPerNode[f.Node]++
	}
	allFed := func(n *Node) bool { return n.NumOutputs() > 0 && fedPerNode[n] == n.NumOutputs() }

	needed := make([]bool, len(all))
	refs := map[*Node]bool{}
	var stack []*Node
	for _, f := range sig.Fetches {
		if _, ok := sg.fed[f]; !ok {
			stack = append(stack, f.Node)
		}
	}
	for _, t := range sig.Targets {
		if !allFed(t) {
			stack = append(stack, t)
		}
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if needed[n.id] {
			continue
		}
		needed[n.id] = true
		for i, in := range n.inputs {
			if n.IsRefInput(i) {
				refs[in.Node] = true
				continue
			}
			if _, ok := sg.fed[in]; !ok {
				stack = append(stack, in.Node)
			}
		}
		for _, c := range n.control {
			if !allFed(c) {
				stack = append(stack, c)
			}
		}
	}
	sg.runs = map[*Node]bool{}
	for _, n := range all {
		switch {
		case needed[n.id]:
			sg.Nodes = append(sg.Nodes, n)
			sg.runs[n] = true
		case refs[n]:
			sg.Vars = append(sg.Vars, n)
		}
	}
	return sg, nil
}

// maxFeedScan is the most feeds check looks through for duplicates
// without a map.
const maxFeedScan = 32

// Check checks that the signature's tensors and nodes are in g, that no
// tensor is fed twice and that every fetch is of a node with outputs; the
// error names the tensor or node. NewSubgraph checks the same.
func (s Signature) Check(g *Graph) error {
	_, err := s.check(g, false)
	return err
}

// check is Check, returning the index of each feed when index is set.
func (s Signature) check(g *Graph, index bool) (map[Output]int, error) {
	if g == nil {
		return nil, errors.New("graph: nil graph")
	}
	n := g.NumNodes()
	inGraph := func(nd *Node) bool { return nd != nil && nd.g == g && nd.id < n }
	checkOutput := func(what string, o Output) error {
		switch {
		case o.Node == nil:
			return fmt.Errorf("graph: a %s is the zero Output (a missing tensor)", what)
		case !inGraph(o.Node):
			return fmt.Errorf("graph: %s %s belongs to another graph", what, o)
		case o.Node.NumOutputs() == 0:
			return fmt.Errorf("graph: cannot %s %s: node %s has no outputs (run it as a target)", what, o, o.Node)
		case o.Index < 0 || o.Index >= o.Node.NumOutputs():
			return fmt.Errorf("graph: %s %s: node %s has %d outputs", what, o, o.Node, o.Node.NumOutputs())
		}
		return nil
	}
	var fed map[Output]int // a few feeds are searched: Check runs at every remote step
	if index || len(s.Feeds) > maxFeedScan {
		fed = make(map[Output]int, len(s.Feeds))
	}
	for i, f := range s.Feeds {
		if err := checkOutput("feed", f); err != nil {
			return nil, err
		}
		dup := false
		if fed != nil {
			_, dup = fed[f]
			fed[f] = i
		} else {
			dup = slices.Contains(s.Feeds[:i], f)
		}
		if dup {
			return nil, fmt.Errorf("graph: tensor %s is fed twice", f)
		}
	}
	for _, f := range s.Fetches {
		if err := checkOutput("fetch", f); err != nil {
			return nil, err
		}
	}
	for i, t := range s.Targets {
		if !inGraph(t) {
			return nil, fmt.Errorf("graph: target %d is missing or belongs to another graph", i)
		}
	}
	return fed, nil
}

// FeedIndex returns the index in Feeds of a fed output.
func (sg *Subgraph) FeedIndex(o Output) (int, bool) {
	i, ok := sg.fed[o]
	return i, ok
}

// Runs reports whether n is one of the nodes the step runs.
func (sg *Subgraph) Runs(n *Node) bool { return sg.runs[n] }

// AllNodes returns Nodes and Vars together in creation order: every node
// the step needs a device for. The caller owns the slice.
func (sg *Subgraph) AllNodes() []*Node {
	out := make([]*Node, 0, len(sg.Nodes)+len(sg.Vars))
	out = append(out, sg.Nodes...)
	out = append(out, sg.Vars...)
	slices.SortFunc(out, func(a, b *Node) int { return a.id - b.id })
	return out
}
