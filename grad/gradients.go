package grad

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
)

// Gradients adds to the graph the nodes that compute the gradients of
// sum(ys) with respect to each of xs, and returns them (one per x; the zero
// Output where no path leads from x to ys, or only through integer tensors).
// dys optionally weights each y (nil or a zero Output means ones: d y/d y = 1).
//
// It walks the nodes that lie on a path from some x to some y in reverse
// creation order (a reverse topological order), sums the gradients arriving
// at each output, and calls the op's registered Func. Each gradient node is
// placed on the device of the node it differentiates, so a partitioned graph
// keeps forward and backward work together. An op on the path with no
// registered gradient is an error naming the node; ops declared with
// RegisterNone stop the flow.
func Gradients(s *graph.Scope, ys, xs, dys []graph.Output) ([]graph.Output, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(dys) != 0 && len(dys) != len(ys) {
		return nil, fmt.Errorf("grad: %d initial gradients for %d ys", len(dys), len(ys))
	}
	for i, o := range append(append([]graph.Output(nil), ys...), xs...) {
		if !o.Valid() {
			return nil, fmt.Errorf("grad: tensor %d of ys/xs is missing", i)
		}
	}
	g := s.Graph()
	nodes := g.Nodes()
	between := nodesBetween(nodes, ys, xs)
	gs := s.SubScope("gradients")

	// pending[node ID][output] collects the gradients flowing into an output.
	pending := map[int][][]graph.Output{}
	add := func(o graph.Output, d graph.Output) {
		p := pending[o.Node.ID()]
		if p == nil {
			p = make([][]graph.Output, o.Node.NumOutputs())
			pending[o.Node.ID()] = p
		}
		p[o.Index] = append(p[o.Index], d)
	}
	for i, y := range ys {
		if len(dys) > 0 && dys[i].Valid() {
			add(y, dys[i])
		} else {
			add(y, ops.OnesLike(gs, y))
		}
	}

	for id := len(nodes) - 1; id >= 0; id-- {
		n := nodes[id]
		if !between[id] || pending[id] == nil || !hasBetweenInput(n, between) {
			continue
		}
		ns := gs.SubScope(n.Name() + "_grad").WithDevice(n.Device())
		dy := make([]graph.Output, n.NumOutputs())
		for i, contribs := range pending[id] {
			switch {
			case len(contribs) == 0:
				dy[i] = ops.ZerosLike(ns, n.Output(i))
			default:
				dy[i] = sum(ns, contribs)
			}
		}
		fn, ok := Lookup(n.Op())
		if !ok {
			return nil, fmt.Errorf("grad: no gradient is registered for op %s (node %q); it cannot be differentiated", n.Op(), n.Name())
		}
		if fn == nil {
			continue // declared non-differentiable: the flow stops here
		}
		dxs, err := fn(ns, n, dy)
		if err == nil {
			err = ns.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("grad: gradient of node %q (%s): %w", n.Name(), n.Op(), err)
		}
		if len(dxs) != n.NumInputs() {
			return nil, fmt.Errorf("grad: gradient of %s returned %d gradients for %d inputs", n, len(dxs), n.NumInputs())
		}
		for i, dx := range dxs {
			in := n.Input(i)
			if !dx.Valid() || n.IsRefInput(i) || !in.DType().IsFloat() || !between[in.Node.ID()] {
				continue
			}
			add(in, dx)
		}
	}

	out := make([]graph.Output, len(xs))
	for i, x := range xs {
		p := pending[x.Node.ID()]
		if p == nil || len(p[x.Index]) == 0 {
			continue
		}
		out[i] = sum(gs.SubScope(x.Node.Name()+"_grad").WithDevice(x.Node.Device()), p[x.Index])
	}
	return out, gs.Err()
}

// nodesBetween marks (by node ID) the nodes reachable backwards from ys along
// data edges that are also reachable forwards from xs.
func nodesBetween(nodes []*graph.Node, ys, xs []graph.Output) []bool {
	back := make([]bool, len(nodes))
	stack := make([]*graph.Node, 0, len(ys))
	for _, y := range ys {
		stack = append(stack, y.Node)
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if back[n.ID()] {
			continue
		}
		back[n.ID()] = true
		for _, in := range n.Inputs() {
			stack = append(stack, in.Node)
		}
	}
	fwd := make([]bool, len(nodes))
	for _, x := range xs {
		fwd[x.Node.ID()] = true
	}
	// Creation order is topological, so one forward pass propagates reachability.
	for _, n := range nodes {
		if fwd[n.ID()] {
			continue
		}
		for _, in := range n.Inputs() {
			if fwd[in.Node.ID()] {
				fwd[n.ID()] = true
				break
			}
		}
	}
	for id := range back {
		back[id] = back[id] && fwd[id]
	}
	return back
}

// hasBetweenInput reports whether gradients of n flow anywhere useful: only
// nodes with an input on an x-to-y path need their gradient function called.
func hasBetweenInput(n *graph.Node, between []bool) bool {
	for _, in := range n.Inputs() {
		if between[in.Node.ID()] {
			return true
		}
	}
	return false
}

// sum adds the gradient contributions of one tensor.
func sum(s *graph.Scope, xs []graph.Output) graph.Output {
	if len(xs) == 1 {
		return xs[0]
	}
	return ops.AddN(s, xs...)
}
