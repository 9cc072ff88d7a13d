package graph

import (
	"fmt"
	"strings"

	"github.com/distflow/distflow/op"
)

// Scope is where graph-building code adds nodes: it carries a name prefix,
// a device, control dependencies, and the first error of the whole build.
//
// Builders never panic on user mistakes: the first error is kept, every later
// AddNode is a no-op returning a nil node, and Err reports it. Check Err once
// after building. Sub-scopes share the graph and the error.
type Scope struct {
	graph  *Graph
	prefix string
	// varPrefix prefixes the names of variables: the prefix without the
	// name scopes (see NameScope), as TensorFlow's variable scopes do.
	varPrefix string
	// reuse makes variable builders return the existing variable of the
	// same name instead of adding one (see ReuseVariables).
	reuse bool
	// seed is the graph-level seed layers mix into their initializers'
	// seeds (see WithSeed).
	seed     int64
	device   string
	deviceFn DeviceFunc
	control  []*Node
	err      *deferredErr
	// capture, set in the scopes of a function being built (FuncBuilder),
	// maps an input from an enclosing graph to its stand-in in the
	// function's graph.
	capture func(Output) (Output, error)
	// enclosing is, in the scopes of a function being built, the scope
	// the FuncBuilder was made from (see OutsideFunctions).
	enclosing *Scope
}

// DeviceFunc chooses the device of a node about to be added, given its spec
// (op, full name, inputs, attributes, and the device the scope requests,
// which may be ""). It returns the device to use. A replica device setter is
// a DeviceFunc that puts variables on parameter servers.
type DeviceFunc func(spec *NodeSpec) string

type deferredErr struct{ err error }

// NewScope returns the root scope of a new, empty graph.
func NewScope() *Scope { return NewScopeWithGraph(New()) }

// NewScopeWithGraph returns a root scope that adds to g.
func NewScopeWithGraph(g *Graph) *Scope { return &Scope{graph: g, err: &deferredErr{}} }

// Graph returns the graph being built.
func (s *Scope) Graph() *Graph { return s.graph }

// Err returns the first error of the build, or nil.
func (s *Scope) Err() error { return s.err.err }

// SetErr records err unless an earlier error is already recorded.
func (s *Scope) SetErr(err error) {
	if err != nil && s.err.err == nil {
		s.err.err = err
	}
}

// SubScope returns a scope whose node names are prefixed by name ("layer1/").
// A name already used at this level gets a suffix, as nodes do.
func (s *Scope) SubScope(name string) *Scope {
	c := *s
	c.prefix = s.graph.uniqueScope(s.prefix + name)
	c.varPrefix = s.varPrefix + c.prefix[len(s.prefix):]
	return &c
}

// NameScope returns a scope whose node names are prefixed by name, as
// SubScope's, but whose variables are named as in s: the towers of in-graph
// replication are built in name scopes ("tower_1/") over variables named
// once ("dense/W"), as with TensorFlow's tf.name_scope.
func (s *Scope) NameScope(name string) *Scope {
	c := *s
	c.prefix = s.graph.uniqueScope(s.prefix + name)
	return &c
}

// ReuseVariables returns a scope in which variable builders return the
// variable of the same name that the graph already has (its dtype and shape
// must match) instead of adding a new one, and fail when there is none, as
// TensorFlow's variable_scope(reuse=True): a model function called again
// for another tower or mode shares the first call's variables.
func (s *Scope) ReuseVariables() *Scope {
	c := *s
	c.reuse = true
	return &c
}

// VariableScope returns a scope whose node names are prefixed by name made
// unique, as SubScope's, but whose variables are named "<name>/..." exactly,
// as TensorFlow's variable_scope(name): a layer given a name builds the
// same variables each time it is called, so that a scope that reuses
// variables finds them.
func (s *Scope) VariableScope(name string) *Scope {
	c := *s
	c.prefix = s.graph.uniqueScope(s.prefix + name)
	c.varPrefix = s.varPrefix + strings.TrimSuffix(name, "/") + "/"
	return &c
}

// WithSeed returns a scope whose graph-level seed is seed (TensorFlow's
// tf.set_random_seed). Builders that draw random initial values (package
// layers) derive each op's seed from it and the variable's name, so a
// model is reproducible and its variables differ from each other.
func (s *Scope) WithSeed(seed int64) *Scope {
	c := *s
	c.seed = seed
	return &c
}

// Seed returns the scope's graph-level seed (0 unless set by WithSeed).
func (s *Scope) Seed() int64 { return s.seed }

// Reusing reports whether variable builders reuse existing variables.
func (s *Scope) Reusing() bool { return s.reuse }

// VariablePrefix returns the prefix of variable names: Prefix without the
// name scopes.
func (s *Scope) VariablePrefix() string { return s.varPrefix }

// WithDevice returns a scope that requests the device for its nodes
// ("/job:ps/task:0"). Placement honours it.
func (s *Scope) WithDevice(device string) *Scope {
	c := *s
	c.device = device
	return &c
}

// WithDeviceFunc returns a scope whose nodes get their device from f.
// f sees the device requested with WithDevice (if any) in spec.Device.
func (s *Scope) WithDeviceFunc(f DeviceFunc) *Scope {
	c := *s
	c.deviceFn = f
	return &c
}

// Device returns the scope's requested device.
func (s *Scope) Device() string { return s.device }

// DeviceFunc returns the scope's device function, or nil. Builders that
// start a fresh root scope (variables ignore the caller's control
// dependencies) pass it on, so a replica device setter still applies.
func (s *Scope) DeviceFunc() DeviceFunc { return s.deviceFn }

// WithControlDependencies returns a scope whose nodes run after deps.
func (s *Scope) WithControlDependencies(deps ...*Node) *Scope {
	c := *s
	c.control = append(append([]*Node(nil), s.control...), deps...)
	return &c
}

// Prefix returns the name prefix ("layer1/" or "").
func (s *Scope) Prefix() string { return s.prefix }

// AddNode adds a node of the given op. name is the node's base name within
// the scope ("" means the op name); it is made unique. On error (now or
// earlier) it records the error and returns nil.
func (s *Scope) AddNode(opName, name string, inputs []Output, attrs map[string]any) *Node {
	if s.err.err != nil {
		return nil
	}
	for i, in := range inputs {
		if in.Node == nil {
			s.SetErr(fmt.Errorf("graph: %s%s (%s): input %d is missing", s.prefix, name, opName, i))
			return nil
		}
	}
	if s.capture != nil {
		var err error
		if inputs, err = s.captureInputs(opName, name, inputs); err != nil {
			s.SetErr(err)
			return nil
		}
	}
	if name == "" {
		name = opName
	}
	spec := NodeSpec{
		Op: opName, Name: s.graph.uniqueNameLocked(s.prefix + name),
		Inputs: inputs, Control: s.control, Attrs: attrs, Device: s.device,
	}
	if s.deviceFn != nil {
		spec.Device = s.deviceFn(&spec)
	}
	n, err := s.graph.AddNode(spec)
	s.SetErr(err)
	return n
}

// captureInputs replaces the inputs from enclosing graphs by their
// stand-ins in the function being built; it copies inputs rather than
// changing the caller's slice.
func (s *Scope) captureInputs(opName, name string, inputs []Output) ([]Output, error) {
	var out []Output
	for i, in := range inputs {
		if in.Node.g == s.graph {
			continue
		}
		if def, ok := op.Lookup(opName); ok && refArg(def, i) {
			return nil, fmt.Errorf("graph: %s%s (%s): input %d is the variable %s of an enclosing graph: a function (a loop body, a branch) reads variables but cannot update them", s.prefix, name, opName, i, in.Node.Name())
		}
		if out == nil {
			out = append([]Output(nil), inputs...)
		}
		c, err := s.capture(in)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	if out == nil {
		return inputs, nil
	}
	return out, nil
}

// refArg reports whether input i of def is a ref input.
func refArg(def *op.Def, i int) bool {
	in := def.Inputs
	if len(in) == 0 {
		return false
	}
	if i >= len(in) {
		return in[len(in)-1].Variadic && in[len(in)-1].Ref
	}
	return in[i].Ref
}

// Out is AddNode for single-output ops: it returns output 0, or the zero
// Output after an error.
func (s *Scope) Out(opName, name string, inputs []Output, attrs map[string]any) Output {
	n := s.AddNode(opName, name, inputs, attrs)
	if n == nil || n.NumOutputs() == 0 {
		return Output{}
	}
	return n.Output(0)
}

func (g *Graph) uniqueNameLocked(base string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.uniqueName(base)
}

// uniqueScope returns a scope prefix ending in "/" that no earlier scope used.
func (g *Graph) uniqueScope(base string) string {
	base = strings.TrimSuffix(base, "/")
	g.mu.Lock()
	defer g.mu.Unlock()
	name := g.uniqueName(base)
	return name + "/"
}
