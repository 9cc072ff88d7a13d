package graph

import "sort"

// Prune returns the minimal set of nodes that fetching fetches and running
// targets needs when feeds are given, in creation (topological) order. It
// is the walk the master does before placing a step; the executor does the
// same walk on each partition.
//
// The walk goes back from fetches and targets through data and control
// inputs. A fed output cuts it: the producer of a fed tensor is included, so
// that its name exists wherever the step's nodes are sent, but its inputs
// are not, unless the node is needed for another reason (an output that is
// not fed, or a target whose outputs are not all fed). A control input on a
// node whose outputs are all fed is satisfied by the feeds in the same way.
//
// A ref input (the variable of an Assign) pulls in its Variable node only when
// includeRefProducers is set: the master needs the Variable node in the
// partition where its ref consumers run, whereas the executor resolves ref
// inputs in its resource container and never runs the Variable node for
// them.
//
// Invalid outputs and nil nodes are ignored. All nodes must belong to one
// graph. The caller owns the returned slice.
func Prune(feeds []Output, fetches []Output, targets []*Node, includeRefProducers bool) []*Node {
	fed := make(map[Output]bool, len(feeds))
	fedPerNode := map[*Node]int{}
	for _, f := range feeds {
		if f.Node == nil || fed[f] {
			continue
		}
		fed[f] = true
		fedPerNode[f.Node]++
	}
	allFed := func(n *Node) bool { return n.NumOutputs() > 0 && fedPerNode[n] == n.NumOutputs() }

	included := map[*Node]bool{}
	expanded := map[*Node]bool{}
	var stack []*Node
	expand := func(n *Node) {
		if n != nil && !expanded[n] {
			stack = append(stack, n)
		}
	}
	source := func(n *Node) {
		if n != nil {
			included[n] = true
		}
	}
	for _, f := range fetches {
		if f.Node == nil {
			continue
		}
		if fed[f] {
			source(f.Node)
		} else {
			expand(f.Node)
		}
	}
	for _, t := range targets {
		if t == nil {
			continue
		}
		if allFed(t) {
			source(t)
		} else {
			expand(t)
		}
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if expanded[n] {
			continue
		}
		expanded[n] = true
		included[n] = true
		for i, in := range n.inputs {
			switch {
			case fed[in]:
				source(in.Node)
			case n.IsRefInput(i):
				if includeRefProducers {
					expand(in.Node)
				}
			default:
				expand(in.Node)
			}
		}
		for _, c := range n.control {
			if allFed(c) {
				source(c)
			} else {
				expand(c)
			}
		}
	}
	out := make([]*Node, 0, len(included))
	for n := range included {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}
