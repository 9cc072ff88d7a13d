package graph

// Prune returns the nodes a step of feeds, fetches and targets needs plus
// the producers of the fed tensors it reads, in creation (topological)
// order: a node set closed under inputs once fed producers stand for their
// feeds, which is what an export of the step's graph writes. Steps
// themselves use NewSubgraph, whose walk this is. Ref producers (the
// Variable of an Assign) are included when includeRefProducers is set.
//
// Invalid outputs and nil nodes are ignored. All nodes must belong to one
// graph. The caller owns the returned slice.
func Prune(feeds []Output, fetches []Output, targets []*Node, includeRefProducers bool) []*Node {
	var g *Graph
	var sig Signature
	seen := map[Output]bool{}
	for _, f := range feeds {
		if f.Node != nil && !seen[f] {
			seen[f] = true
			sig.Feeds = append(sig.Feeds, f)
			g = f.Node.g
		}
	}
	for _, f := range fetches {
		if f.Node != nil && f.Index >= 0 && f.Index < f.Node.NumOutputs() {
			sig.Fetches = append(sig.Fetches, f)
			g = f.Node.g
		}
	}
	for _, t := range targets {
		if t != nil {
			sig.Targets = append(sig.Targets, t)
			g = t.g
		}
	}
	if g == nil {
		return nil
	}
	sg, err := NewSubgraph(g, sig)
	if err != nil {
		return nil
	}
	include := map[*Node]bool{}
	for _, n := range sg.Nodes {
		include[n] = true
	}
	if includeRefProducers {
		for _, n := range sg.Vars {
			include[n] = true
		}
	}
	// The producers of the feeds the step reads.
	source := func(o Output) {
		if _, ok := sg.fed[o]; ok {
			include[o.Node] = true
		}
	}
	for _, f := range sg.Fetches {
		source(f)
	}
	fedNode := map[*Node]bool{}
	for _, f := range sg.Feeds {
		fedNode[f.Node] = true
	}
	for _, t := range sg.Targets {
		if fedNode[t] && !sg.runs[t] {
			include[t] = true
		}
	}
	for _, n := range sg.Nodes {
		for _, in := range n.inputs {
			source(in)
		}
		for _, c := range n.control {
			if fedNode[c] && !sg.runs[c] {
				include[c] = true
			}
		}
	}
	out := make([]*Node, 0, len(include))
	for _, n := range g.Nodes() {
		if include[n] {
			out = append(out, n)
		}
	}
	return out
}
