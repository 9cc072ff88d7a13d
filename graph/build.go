package graph

import (
	"fmt"
	"strconv"

	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// NodeSpec describes a node to add.
type NodeSpec struct {
	Op      string
	Name    string // full, unique name; the Scope derives it
	Inputs  []Output
	Control []*Node
	Attrs   map[string]any
	Device  string
}

// AddNode validates spec against its op declaration (input count and dtypes,
// attribute types, defaults), infers the output shapes and appends the node.
// Errors name the node and the op.
func (g *Graph) AddNode(spec NodeSpec) (*Node, error) {
	def, ok := op.Lookup(spec.Op)
	if !ok {
		return nil, fmt.Errorf("graph: node %q: unknown op %q", spec.Name, spec.Op)
	}
	where := fmt.Sprintf("node %q (%s)", spec.Name, spec.Op)
	if err := checkInputCount(def, len(spec.Inputs)); err != nil {
		return nil, fmt.Errorf("graph: %s: %v", where, err)
	}
	attrs := make(map[string]any, len(def.Attrs))
	for _, a := range def.Attrs {
		v, set := spec.Attrs[a.Name]
		if !set {
			if a.Default == nil {
				return nil, fmt.Errorf("graph: %s: required attribute %q (%v) is not set", where, a.Name, a.Type)
			}
			v = a.Default
		}
		if err := op.CheckAttrType(a.Type, v); err != nil {
			return nil, fmt.Errorf("graph: %s: attribute %q: %v", where, a.Name, err)
		}
		attrs[a.Name] = v
	}
	for k := range spec.Attrs {
		if def.Attr(k) == nil {
			return nil, fmt.Errorf("graph: %s: op has no attribute %q", where, k)
		}
	}
	ic := &op.InferContext{Attrs: attrs}
	for i, in := range spec.Inputs {
		if in.Node == nil {
			return nil, fmt.Errorf("graph: %s: input %d is missing", where, i)
		}
		if in.Node.g != g {
			return nil, fmt.Errorf("graph: %s: input %d (%s) belongs to another graph", where, i, in.Name())
		}
		if i < len(def.Inputs) && def.Inputs[i].Ref || i >= len(def.Inputs) && def.Inputs[len(def.Inputs)-1].Ref {
			if in.Node.Op() != "Variable" {
				return nil, fmt.Errorf("graph: %s: input %d must be a variable, got %s", where, i, in.Node)
			}
		}
		ic.Inputs = append(ic.Inputs, in.Node.outputs[in.Index])
		var c *tensor.Tensor
		if in.Node.Op() == "Const" {
			c = in.Node.AttrTensor("value")
		}
		ic.Consts = append(ic.Consts, c)
	}
	for _, c := range spec.Control {
		if c == nil || c.g != g {
			return nil, fmt.Errorf("graph: %s: control input is missing or from another graph", where)
		}
	}
	if err := def.Infer(ic); err != nil {
		return nil, fmt.Errorf("graph: %s: %w", where, err)
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	if _, dup := g.byName[spec.Name]; dup || spec.Name == "" {
		return nil, fmt.Errorf("graph: %s: the name is empty or already used", where)
	}
	n := &Node{
		g: g, id: len(g.nodes), name: spec.Name, def: def,
		inputs:  append([]Output(nil), spec.Inputs...),
		control: append([]*Node(nil), spec.Control...),
		attrs:   attrs, device: spec.Device, outputs: ic.Outputs,
		names: make([]string, len(ic.Outputs)),
	}
	for i := range n.names {
		n.names[i] = n.name + ":" + strconv.Itoa(i)
	}
	g.nodes = append(g.nodes, n)
	g.byName[n.name] = n
	if _, seen := g.names[n.name]; !seen {
		g.names[n.name] = 0
	}
	return n, nil
}

func checkInputCount(def *op.Def, n int) error {
	want := len(def.Inputs)
	if want > 0 && def.Inputs[want-1].Variadic {
		if n < want-1 {
			return fmt.Errorf("takes at least %d inputs, got %d", want-1, n)
		}
		return nil
	}
	if n != want {
		return fmt.Errorf("takes %d inputs, got %d", want, n)
	}
	return nil
}
