package master

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/partition"
	"github.com/distflow/distflow/placement"
)

// Plan is how one signature runs on a cluster: the graph each task runs
// and where the step's feeds go and its fetches come from. NewPlan makes
// it without talking to anyone; the master registers its parts on the
// tasks and runs them. A Plan is immutable.
type Plan struct {
	// Sig is the signature planned, in the graph planned.
	Sig graph.Signature
	// Parts are the tasks' partitions, sorted by task.
	Parts []Part
	// Feeds has, for each feed of Sig, the partitions that read it (none
	// when nothing the step runs does): Index is its place in the part's
	// Feeds.
	Feeds [][]Route
	// Fetches has, for each fetch of Sig, where it comes from: Index is its
	// place in the part's Fetches, or, when Part is -1 (a fed tensor), in
	// Sig.Feeds.
	Fetches []Route
}

// Part is one task's partition of a plan and its own signature, by name.
type Part struct {
	Task  string
	Graph *graph.Graph
	// Feeds, Fetches and Targets name the partition's fed tensors (sorted),
	// fetched tensors (sorted, distinct: one executor per plan on the
	// worker) and targets (the nodes no other node consumes, so that
	// running them runs the whole partition).
	Feeds, Fetches, Targets []string
}

// Route locates a feed or a fetch of a plan.
type Route struct {
	Part  int
	Index int
}

// NewPlan plans sig on a cluster: graph.NewSubgraph prunes the graph to the
// step, placement.Place puts every node on one of opts.Devices, and
// partition.Subgraph cuts the result into one graph per task, with a Send
// and a Recv on every edge that crosses tasks and a Placeholder for every
// fed tensor in each task that reads it. It is a pure function of g, sig
// and opts: it only reads g, and equal inputs give equal plans.
func NewPlan(g *graph.Graph, sig graph.Signature, opts placement.Options) (*Plan, error) {
	run := sig
	run.Targets = ungroup(sig.Targets)
	sub, err := graph.NewSubgraph(g, run)
	if err != nil {
		return nil, err
	}
	sub.Signature.Targets = slices.Clone(sig.Targets) // the plan is of sig
	devices, err := placement.Place(sub.AllNodes(), opts)
	if err != nil {
		return nil, err
	}
	parts, err := partition.Subgraph(sub, devices)
	if err != nil {
		return nil, err
	}
	p := &Plan{Sig: sub.Signature, Feeds: make([][]Route, len(sub.Feeds)), Fetches: make([]Route, len(sub.Fetches))}
	index := map[string]int{}
	for _, t := range slices.Sorted(maps.Keys(parts)) {
		index[t] = len(p.Parts)
		p.Parts = append(p.Parts, Part{Task: t, Graph: parts[t], Targets: sinks(parts[t])})
	}
	for i, f := range sub.Feeds {
		for j := range p.Parts {
			pt := &p.Parts[j]
			if pt.Graph.Node(partition.FeedName(f)) != nil {
				p.Feeds[i] = append(p.Feeds[i], Route{Part: j})
				pt.Feeds = append(pt.Feeds, partition.FeedName(f)+":0")
			}
		}
	}
	for i, f := range sub.Fetches {
		if k, ok := sub.FeedIndex(f); ok {
			p.Fetches[i] = Route{Part: -1, Index: k}
			continue
		}
		dev, err := placement.ParseDevice(devices[f.Node])
		if err != nil {
			return nil, fmt.Errorf("fetch %s: %w", f, err)
		}
		j, ok := index[dev.TaskName()]
		if !ok {
			return nil, fmt.Errorf("fetch %s: its task %s has no partition", f, dev.TaskName())
		}
		p.Fetches[i] = Route{Part: j}
		p.Parts[j].Fetches = append(p.Parts[j].Fetches, f.Name())
	}
	for j := range p.Parts {
		pt := &p.Parts[j]
		slices.Sort(pt.Feeds)
		slices.Sort(pt.Fetches)
		pt.Fetches = slices.Compact(pt.Fetches)
	}
	for i, rs := range p.Feeds {
		for k, r := range rs {
			rs[k].Index, _ = slices.BinarySearch(p.Parts[r.Part].Feeds, partition.FeedName(sub.Feeds[i])+":0")
		}
	}
	for i, r := range p.Fetches {
		if r.Part >= 0 {
			p.Fetches[i].Index, _ = slices.BinarySearch(p.Parts[r.Part].Fetches, sub.Fetches[i].Name())
		}
	}
	return p, nil
}

// ungroup returns targets with every NoOp that only groups other nodes (a
// train op, ops.Group: no data inputs, some control inputs) replaced by
// the nodes it groups, recursively, without duplicates. Running those is
// running it, since a NoOp does nothing; and a group placed on one task
// (a worker's train op) over nodes on another (the ps's updates) would
// otherwise make the step send a control edge between them, one
// RecvTensor round trip per step. A group that another node of the step
// waits for is still run, as that node's dependency.
func ungroup(targets []*graph.Node) []*graph.Node {
	var out []*graph.Node
	seen := map[*graph.Node]bool{}
	var add func(n *graph.Node)
	add = func(n *graph.Node) {
		if seen[n] {
			return
		}
		seen[n] = true
		if n.Op() == "NoOp" && n.NumInputs() == 0 && len(n.ControlInputs()) > 0 {
			for _, c := range n.ControlInputs() {
				add(c)
			}
			return
		}
		out = append(out, n)
	}
	for _, t := range targets {
		add(t)
	}
	return out
}

// sinks returns the names of the nodes of g that no node consumes: running
// them runs the whole partition.
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

// String renders the plan for logs and golden files: the signature, the
// routes of feeds and fetches, then each task's partition (partition.Format).
func (p *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "signature %s\n", p.Sig)
	for i, rs := range p.Feeds {
		fmt.Fprintf(&b, "feed %s ->", p.Sig.Feeds[i].Name())
		if len(rs) == 0 {
			b.WriteString(" (unread)")
		}
		for _, r := range rs {
			fmt.Fprintf(&b, " %s[%d]", p.Parts[r.Part].Task, r.Index)
		}
		b.WriteByte('\n')
	}
	for i, r := range p.Fetches {
		if r.Part < 0 {
			fmt.Fprintf(&b, "fetch %s <- feed %d\n", p.Sig.Fetches[i].Name(), r.Index)
			continue
		}
		fmt.Fprintf(&b, "fetch %s <- %s[%d]\n", p.Sig.Fetches[i].Name(), p.Parts[r.Part].Task, r.Index)
	}
	parts := map[string]*graph.Graph{}
	for _, pt := range p.Parts {
		fmt.Fprintf(&b, "task %s: feeds %v fetches %v targets %v\n", pt.Task, pt.Feeds, pt.Fetches, pt.Targets)
		parts[pt.Task] = pt.Graph
	}
	b.WriteString(partition.Format(parts))
	return b.String()
}
