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
		sv := tensor.UnknownShape()
		if c == nil {
			sv = shapeValue(in, 0)
		}
		ic.ShapeValues = append(ic.ShapeValues, sv)
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

// maxShapeValueDepth bounds how far shapeValue walks back through a
// graph: shapes are computed in a few ops.
const maxShapeValueDepth = 8

// shapeValue is what is known at build time of the value of o, a 1-D
// int32 or int64 tensor, as a shape: a constant's values (a negative one
// unknown), a Shape's input's dimensions, and what Cast, Identity, Slice,
// StridedSlice (constant bounds, stride 1, no masks but begin's and end's)
// and Concat make of those. The unknown shape when nothing is known.
func shapeValue(o Output, depth int) tensor.Shape {
	unknown := tensor.UnknownShape()
	if depth > maxShapeValueDepth || o.Node == nil {
		return unknown
	}
	info := o.Node.outputs[o.Index]
	if info.DType != tensor.Int32 && info.DType != tensor.Int64 || !info.Shape.KnownRank() || info.Shape.Rank() != 1 {
		return unknown
	}
	n := o.Node
	switch n.Op() {
	case "Const":
		t := n.AttrTensor("value")
		if t == nil {
			return unknown
		}
		dims := make([]int, t.NumElements())
		for i := range dims {
			dims[i] = int(t.Float64At(i)) // MakeShape makes a negative one unknown
		}
		return tensor.MakeShape(dims...)
	case "Shape":
		in := n.inputs[0]
		return in.Node.outputs[in.Index].Shape
	case "Cast", "Identity", "StopGradient":
		return shapeValue(n.inputs[0], depth+1)
	case "Slice":
		v := shapeValue(n.inputs[0], depth+1)
		begin, size := n.AttrInts("begin"), n.AttrInts("size")
		if !v.KnownRank() || len(begin) != 1 || len(size) != 1 {
			return unknown
		}
		b, e := begin[0], begin[0]+size[0]
		if size[0] == -1 {
			e = v.Rank()
		}
		if b < 0 || b > e || e > v.Rank() {
			return unknown
		}
		return tensor.MakeShape(v.Dims()[b:e]...)
	case "StridedSlice":
		return stridedShapeValue(n, depth)
	case "Concat":
		if axis := n.AttrInt("axis"); axis != 0 && axis != -1 {
			return unknown
		}
		var dims []int
		for _, in := range n.inputs {
			v := shapeValue(in, depth+1)
			if !v.KnownRank() {
				return unknown
			}
			dims = append(dims, v.Dims()...)
		}
		return tensor.MakeShape(dims...)
	}
	return unknown
}

// stridedShapeValue is shapeValue of a StridedSlice n of one subscript
// with constant bounds and stride 1, its begin and end optionally masked.
func stridedShapeValue(n *Node, depth int) tensor.Shape {
	unknown := tensor.UnknownShape()
	for _, m := range []string{"ellipsis_mask", "new_axis_mask", "shrink_axis_mask"} {
		if n.AttrInt(m) != 0 {
			return unknown
		}
	}
	v := shapeValue(n.inputs[0], depth+1)
	if !v.KnownRank() {
		return unknown
	}
	var bes [3]int
	for i := range bes {
		in := n.inputs[i+1]
		if in.Node.Op() != "Const" {
			return unknown
		}
		t := in.Node.AttrTensor("value")
		if t == nil || t.NumElements() != 1 {
			return unknown
		}
		bes[i] = int(t.Float64At(0))
	}
	begin, end, rank := bes[0], bes[1], v.Rank()
	if bes[2] != 1 {
		return unknown
	}
	if n.AttrInt("begin_mask")&1 != 0 {
		begin = 0
	}
	if n.AttrInt("end_mask")&1 != 0 {
		end = rank
	}
	clamp := func(i int) int {
		if i < 0 {
			i += rank
		}
		return min(max(i, 0), rank)
	}
	begin, end = clamp(begin), clamp(end)
	if begin > end {
		end = begin
	}
	return tensor.MakeShape(v.Dims()[begin:end]...)
}
