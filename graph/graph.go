package graph

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// Graph is a dataflow graph. Nodes are appended only, so the creation order is
// a topological order. A Graph is safe for concurrent reads; building it from
// several goroutines at once must be serialised by the caller.
type Graph struct {
	mu          sync.RWMutex
	nodes       []*Node
	byName      map[string]*Node
	collections map[string][]string
	names       map[string]int // next suffix per base name, for unique names
}

// New returns an empty graph.
func New() *Graph {
	return &Graph{byName: map[string]*Node{}, collections: map[string][]string{}, names: map[string]int{}}
}

// Node is one instantiation of an op. Its fields are fixed once added, except
// the device, which placement may assign.
type Node struct {
	g       *Graph
	id      int
	name    string
	def     *op.Def
	inputs  []Output
	control []*Node
	attrs   map[string]any
	device  string
	outputs []op.TensorInfo
	names   []string // the outputs' names ("node:index"), made once: hot paths name tensors at every step
}

// Output is one output of a node: the edge type of the graph. The zero
// Output is "no tensor" (for example a gradient that does not exist).
type Output struct {
	Node  *Node
	Index int
}

// ID returns the node's position in creation order, unique within its graph.
func (n *Node) ID() int { return n.id }

// Graph returns the graph the node belongs to.
func (n *Node) Graph() *Graph { return n.g }

// Name returns the unique, scoped name ("dense1/MatMul").
func (n *Node) Name() string { return n.name }

// Op returns the op type name ("MatMul").
func (n *Node) Op() string { return n.def.Name }

// Def returns the op declaration.
func (n *Node) Def() *op.Def { return n.def }

// NumInputs returns the number of data inputs.
func (n *Node) NumInputs() int { return len(n.inputs) }

// Input returns data input i.
func (n *Node) Input(i int) Output { return n.inputs[i] }

// Inputs returns the data inputs. The slice must not be modified.
func (n *Node) Inputs() []Output { return n.inputs }

// ControlInputs returns the nodes that must run before this one.
// The slice must not be modified.
func (n *Node) ControlInputs() []*Node { return n.control }

// IsRefInput reports whether data input i refers to a variable's storage.
func (n *Node) IsRefInput(i int) bool {
	in := n.def.Inputs
	if len(in) == 0 {
		return false
	}
	if i >= len(in) {
		return in[len(in)-1].Variadic && in[len(in)-1].Ref
	}
	return in[i].Ref
}

// NumOutputs returns the number of outputs.
func (n *Node) NumOutputs() int { return len(n.outputs) }

// Output returns output i.
func (n *Node) Output(i int) Output { return Output{Node: n, Index: i} }

// Device returns the requested device ("/job:ps/task:0"), or "".
func (n *Node) Device() string { return n.device }

// SetDevice sets the node's device; placement uses it.
func (n *Node) SetDevice(d string) { n.device = d }

// Attr returns attribute name (defaults applied) and whether it exists.
func (n *Node) Attr(name string) (any, bool) { v, ok := n.attrs[name]; return v, ok }

// AttrNames returns the node's attribute names, sorted.
func (n *Node) AttrNames() []string {
	names := make([]string, 0, len(n.attrs))
	for k := range n.attrs {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// AttrInt returns an int attribute (0 if absent).
func (n *Node) AttrInt(name string) int { v, _ := n.attrs[name].(int); return v }

// AttrFloat returns a float attribute (0 if absent).
func (n *Node) AttrFloat(name string) float32 { v, _ := n.attrs[name].(float32); return v }

// AttrBool returns a bool attribute (false if absent).
func (n *Node) AttrBool(name string) bool { v, _ := n.attrs[name].(bool); return v }

// AttrString returns a string attribute ("" if absent).
func (n *Node) AttrString(name string) string { v, _ := n.attrs[name].(string); return v }

// AttrInts returns a list(int) attribute (nil if absent).
func (n *Node) AttrInts(name string) []int { v, _ := n.attrs[name].([]int); return v }

// AttrDType returns a dtype attribute (Invalid if absent).
func (n *Node) AttrDType(name string) tensor.DType { v, _ := n.attrs[name].(tensor.DType); return v }

// AttrShape returns a shape attribute (unknown if absent).
func (n *Node) AttrShape(name string) tensor.Shape { v, _ := n.attrs[name].(tensor.Shape); return v }

// AttrTensor returns a tensor attribute (nil if absent).
func (n *Node) AttrTensor(name string) *tensor.Tensor {
	v, _ := n.attrs[name].(*tensor.Tensor)
	return v
}

// String returns "name (Op)".
func (n *Node) String() string { return n.name + " (" + n.def.Name + ")" }

// DType returns the dtype of the output.
func (o Output) DType() tensor.DType { return o.Node.outputs[o.Index].DType }

// Shape returns the build-time shape of the output.
func (o Output) Shape() tensor.Shape { return o.Node.outputs[o.Index].Shape }

// Name returns "node:index", the name used for feeds and fetches.
func (o Output) Name() string {
	if o.Index >= 0 && o.Index < len(o.Node.names) {
		return o.Node.names[o.Index]
	}
	return o.Node.name + ":" + strconv.Itoa(o.Index)
}

// Valid reports whether o refers to a tensor.
func (o Output) Valid() bool { return o.Node != nil }

// String returns Name().
func (o Output) String() string {
	if o.Node == nil {
		return "<none>"
	}
	return o.Name()
}

// Nodes returns the nodes in creation (topological) order. The slice must
// not be modified.
func (g *Graph) Nodes() []*Node {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.nodes[:len(g.nodes):len(g.nodes)]
}

// NumNodes returns the number of nodes.
func (g *Graph) NumNodes() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.nodes)
}

// Node returns the node with the given name, or nil.
func (g *Graph) Node(name string) *Node {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.byName[name]
}

// Output parses "name:index" (or "name", meaning index 0) into an Output.
func (g *Graph) Output(name string) (Output, error) {
	nodeName, idx := name, 0
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		v, err := strconv.Atoi(name[i+1:])
		if err != nil || v < 0 {
			return Output{}, fmt.Errorf("graph: bad tensor name %q: want node:index", name)
		}
		nodeName, idx = name[:i], v
	}
	n := g.Node(nodeName)
	if n == nil {
		return Output{}, fmt.Errorf("graph: no node named %q in the graph (%w)", nodeName, ErrNotFound)
	}
	if idx >= n.NumOutputs() {
		return Output{}, fmt.Errorf("graph: node %s has %d outputs, no output %d", n, n.NumOutputs(), idx)
	}
	return n.Output(idx), nil
}

// AddToCollection appends node names to the named collection (variables,
// trainable_variables, ...). Collections survive serialisation.
func (g *Graph) AddToCollection(key string, nodes ...*Node) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range nodes {
		g.collections[key] = append(g.collections[key], n.name)
	}
}

// Collection returns the nodes of the named collection, in insertion order.
func (g *Graph) Collection(key string) []*Node {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []*Node
	for _, name := range g.collections[key] {
		if n := g.byName[name]; n != nil {
			out = append(out, n)
		}
	}
	return out
}

// CollectionKeys returns the names of all collections, sorted.
func (g *Graph) CollectionKeys() []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	keys := make([]string, 0, len(g.collections))
	for k := range g.collections {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Consumers returns, for every node, the nodes that take one of its outputs
// as a data or control input, indexed by node ID.
func (g *Graph) Consumers() [][]*Node {
	nodes := g.Nodes()
	out := make([][]*Node, len(nodes))
	for _, n := range nodes {
		for _, in := range n.inputs {
			out[in.Node.id] = append(out[in.Node.id], n)
		}
		for _, c := range n.control {
			out[c.id] = append(out[c.id], n)
		}
	}
	return out
}

// uniqueName returns base, or base_1, base_2... if taken.
func (g *Graph) uniqueName(base string) string {
	if _, taken := g.byName[base]; !taken {
		if _, used := g.names[base]; !used {
			g.names[base] = 0
			return base
		}
	}
	for {
		g.names[base]++
		cand := base + "_" + strconv.Itoa(g.names[base])
		if _, taken := g.byName[cand]; !taken {
			return cand
		}
	}
}
