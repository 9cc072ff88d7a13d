package ops

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// Graph collections kept by NewVariable. They hold node names, so they
// survive graph serialisation.
const (
	// VariablesCollection lists every Variable node made by NewVariable.
	VariablesCollection = "variables"
	// TrainableVariablesCollection lists the variables optimizers update.
	TrainableVariablesCollection = "trainable_variables"
	// VariableInitializersCollection lists each variable's initializer (its
	// Assign node), in the order of VariablesCollection.
	VariableInitializersCollection = "variable_initializers"
)

// Variable is a handle on a variable of the graph: its Variable node and
// the Assign node that initialises it. It is a view on the graph and holds
// no state of its own.
//
// A nil (or zero) *Variable, which NewVariable returns after a build
// error, is safe to use: Value is the zero Output, which builders take as a
// missing input (the scope keeps the first error), Node and Initializer
// are nil, Name is "", DType is tensor.Invalid and Shape is unknown.
type Variable struct {
	node *graph.Node
	init *graph.Node
}

// Value returns the variable's value as read at the start of each use (the
// zero Output for a nil Variable).
func (v *Variable) Value() graph.Output {
	if v == nil || v.node == nil {
		return graph.Output{}
	}
	return v.node.Output(0)
}

// Node returns the Variable node (nil for a nil Variable).
func (v *Variable) Node() *graph.Node {
	if v == nil {
		return nil
	}
	return v.node
}

// Initializer returns the node that assigns the initial value (run it as a
// target), or nil for a variable found without one.
func (v *Variable) Initializer() *graph.Node {
	if v == nil {
		return nil
	}
	return v.init
}

// Name returns the Variable node's name ("dense1/W").
func (v *Variable) Name() string {
	if v.Node() == nil {
		return ""
	}
	return v.node.Name()
}

// DType returns the element type.
func (v *Variable) DType() tensor.DType {
	if v.Node() == nil {
		return tensor.Invalid
	}
	return v.node.AttrDType("dtype")
}

// Shape returns the shape (fully defined; unknown for a nil Variable).
func (v *Variable) Shape() tensor.Shape {
	if v.Node() == nil {
		return tensor.UnknownShape()
	}
	return v.node.AttrShape("shape")
}

// String returns the name, dtype and shape.
func (v *Variable) String() string {
	if v.Node() == nil {
		return "<missing variable>"
	}
	return fmt.Sprintf("%s %v%v", v.Name(), v.DType(), v.Shape())
}

// VariableOption modifies NewVariable.
type VariableOption func(*variableConfig)

type variableConfig struct{ trainable bool }

// NotTrainable keeps the variable out of the trainable variables, so
// optimizers leave it alone (counters, optimizer slots, statistics).
func NotTrainable() VariableOption { return func(c *variableConfig) { c.trainable = false } }

// NewVariable adds a variable called name (within the scope's variable
// prefix) of the given dtype and shape, its initial value built by init
// under "<name>/Initializer", and the Assign node "<name>/Assign" that
// initialises it. It records the variable in the graph's collections (see
// VariablesCollection). All nodes get the scope's device (through its
// device function, if any) and none of its control dependencies. On error
// it records it in the scope and returns nil, which is safe to use (see
// Variable): check the scope's Err once after building.
//
// A name that a variable of the graph already has is refused, as
// tf.get_variable refuses it, rather than made unique: in a scope that
// reuses variables (graph.Scope.ReuseVariables) the same call returns that
// variable instead, so a model function builds the same variables in
// every tower.
//
// Inside a loop body or a branch (see WhileLoop), the variable is created
// in the graph that holds the loop, once, and the body reads it.
func NewVariable(s *graph.Scope, name string, dt tensor.DType, shape []int, init Initializer, opts ...VariableOption) *Variable {
	s = s.OutsideFunctions()
	cfg := variableConfig{trainable: true}
	for _, o := range opts {
		o(&cfg)
	}
	if s.Err() != nil {
		return nil
	}
	if s.Reusing() {
		return reuseVariable(s, s.VariablePrefix()+name, dt, shape)
	}
	if init == nil {
		s.SetErr(fmt.Errorf("ops: variable %q: no initializer", s.VariablePrefix()+name))
		return nil
	}
	if LookupVariable(s.Graph(), s.VariablePrefix()+name) != nil {
		s.SetErr(fmt.Errorf("ops: variable %q already exists: to share it, build in a scope that reuses variables (Scope.ReuseVariables); for another variable, give it another name", s.VariablePrefix()+name))
		return nil
	}
	n, assign := variableNodes(s, "variable", s.VariablePrefix()+name, dt, shape, init)
	if n == nil {
		return nil
	}
	g := s.Graph()
	g.AddToCollection(VariablesCollection, n)
	g.AddToCollection(VariableInitializersCollection, assign)
	if cfg.trainable {
		g.AddToCollection(TrainableVariablesCollection, n)
	}
	return &Variable{node: n, init: assign}
}

// reuseVariable returns the variable called name of s's graph, which must
// have the dtype and shape asked for (see graph.Scope.ReuseVariables).
func reuseVariable(s *graph.Scope, name string, dt tensor.DType, shape []int) *Variable {
	v := LookupVariable(s.Graph(), name)
	switch {
	case v == nil:
		s.SetErr(fmt.Errorf("ops: variable %q does not exist, and the scope reuses variables: create it first in a scope that does not", name))
		return nil
	case v.DType() != dt || !v.Shape().Equal(tensor.MakeShape(shape...)):
		s.SetErr(fmt.Errorf("ops: variable %q is %v%v; reusing it as %v%v", name, v.DType(), v.Shape(), dt, tensor.MakeShape(shape...)))
		return nil
	}
	return v
}

// GlobalVariables returns the variables of g made by NewVariable, in
// creation order.
func GlobalVariables(g *graph.Graph) []*Variable {
	return stateVariables(g, g.Collection(VariablesCollection))
}

// TrainableVariables returns the variables of g that optimizers update, in
// creation order.
func TrainableVariables(g *graph.Graph) []*Variable {
	return stateVariables(g, g.Collection(TrainableVariablesCollection))
}

// LookupVariable returns the variable whose Variable node is called name,
// or nil if there is none.
func LookupVariable(g *graph.Graph, name string) *Variable {
	n := g.Node(name)
	if n == nil || n.Op() != "Variable" {
		return nil
	}
	return stateVariables(g, []*graph.Node{n})[0]
}

// stateVariables wraps Variable nodes, pairing each with its initializer:
// the entry of the initializers collection at the same position as the node
// in the variables collection.
func stateVariables(g *graph.Graph, nodes []*graph.Node) []*Variable {
	inits := map[*graph.Node]*graph.Node{}
	vars, assigns := g.Collection(VariablesCollection), g.Collection(VariableInitializersCollection)
	for i, v := range vars {
		if i < len(assigns) && assigns[i].NumInputs() > 0 && assigns[i].Input(0).Node == v {
			inits[v] = assigns[i]
		}
	}
	out := make([]*Variable, 0, len(nodes))
	for _, n := range nodes {
		if n.Op() == "Variable" {
			out = append(out, &Variable{node: n, init: inits[n]})
		}
	}
	return out
}

// GlobalVariablesInitializer returns a no-op named "init" that runs the
// initializer of every variable of the scope's graph.
func GlobalVariablesInitializer(s *graph.Scope) *graph.Node {
	return VariablesInitializer(s, GlobalVariables(s.Graph())...)
}

// VariablesInitializer returns a no-op named "init" that runs the
// initializers of vars.
func VariablesInitializer(s *graph.Scope, vars ...*Variable) *graph.Node {
	deps := make([]*graph.Node, 0, len(vars))
	for _, v := range vars {
		if v == nil || v.init == nil {
			s.SetErr(fmt.Errorf("ops: VariablesInitializer: variable %v has no initializer", v))
			return nil
		}
		deps = append(deps, v.init)
	}
	return Group(s, "init", deps...)
}

// variableNodes adds a Variable node named name and the Assign of its
// initial value, or records the error in s (kind names the variable in it)
// and returns nils. Like TensorFlow's variables, the nodes ignore the
// scope's control dependencies: a variable is read whenever a step needs
// it, and its initializer runs once, on its own. Sub-names derive from the
// node's unique name, so a second local variable "w" (named "w_1") gets
// "w_1/Assign".
func variableNodes(s *graph.Scope, kind, name string, dt tensor.DType, shape []int, init Initializer) (n, assign *graph.Node) {
	is := graph.NewScopeWithGraph(s.Graph()).WithDevice(s.Device()).WithDeviceFunc(s.DeviceFunc())
	n = is.AddNode("Variable", name, nil, map[string]any{"dtype": dt, "shape": tensor.MakeShape(shape...)})
	if n == nil {
		s.SetErr(is.Err())
		return nil, nil
	}
	value := init(is.SubScope(n.Name()+"/Initializer"), dt, shape)
	assign = is.AddNode("Assign", n.Name()+"/Assign", []graph.Output{n.Output(0), value}, nil)
	if err := is.Err(); err != nil {
		s.SetErr(fmt.Errorf("ops: initializer of %s %q: %w", kind, n.Name(), err))
		return nil, nil
	}
	return n, assign
}
