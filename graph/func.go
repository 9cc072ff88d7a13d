package graph

import (
	"errors"
	"fmt"
	"strings"

	"github.com/distflow/distflow/op"
	pb "github.com/distflow/distflow/proto/distflowpb"
)

// Func is a function: a graph of its own with typed arguments and results,
// the branch or body of a control-flow op (If, While), carried as an
// attribute of type op.AttrFunc. Arguments are outputs of Placeholder nodes
// of Graph, fed when the function runs; results are outputs of Graph,
// fetched. A Func is immutable once it is an attribute: many nodes (and the
// partitions of their graph) may share it.
type Func struct {
	Graph *Graph
	Args  []Output
	Rets  []Output
}

// maxFuncDepth bounds the nesting of functions in a decoded graph (a loop
// in a loop in a loop...), so that a hostile GraphDef cannot make the
// recursion of FromProto, and of the kernels that run it, unbounded.
const maxFuncDepth = 64

// ErrBadFunc is wrapped by the errors of a malformed function: its
// arguments or results missing, not in its graph, or not Placeholders.
var ErrBadFunc = errors.New("malformed function")

// ArgTypes returns the dtype and shape of each argument (op.Func).
func (f *Func) ArgTypes() []op.TensorInfo { return infos(f.Args) }

// RetTypes returns the dtype and shape of each result (op.Func).
func (f *Func) RetTypes() []op.TensorInfo { return infos(f.Rets) }

// IsNil reports whether f is nil (op.Func).
func (f *Func) IsNil() bool { return f == nil }

// String summarises the function for logs and golden files.
func (f *Func) String() string {
	if f == nil || f.Graph == nil {
		return "func(<nil>)"
	}
	return fmt.Sprintf("func(%d args -> %d rets, %d nodes)", len(f.Args), len(f.Rets), f.Graph.NumNodes())
}

func infos(os []Output) []op.TensorInfo {
	out := make([]op.TensorInfo, len(os))
	for i, o := range os {
		out[i] = op.TensorInfo{DType: o.DType(), Shape: o.Shape()}
	}
	return out
}

// Validate checks that the arguments are distinct Placeholder outputs of
// Graph and the results are outputs of Graph; the error wraps ErrBadFunc.
func (f *Func) Validate() error {
	if f == nil || f.Graph == nil {
		return fmt.Errorf("graph: function has no graph: %w", ErrBadFunc)
	}
	seen := map[Output]bool{}
	for i, a := range f.Args {
		switch {
		case a.Node == nil || a.Node.g != f.Graph:
			return fmt.Errorf("graph: function argument %d is not a tensor of its graph: %w", i, ErrBadFunc)
		case a.Node.Op() != "Placeholder":
			return fmt.Errorf("graph: function argument %d (%s) is not a Placeholder: %w", i, a.Node, ErrBadFunc)
		case seen[a]:
			return fmt.Errorf("graph: function argument %d (%s) is listed twice: %w", i, a, ErrBadFunc)
		}
		seen[a] = true
	}
	for i, r := range f.Rets {
		if r.Node == nil || r.Node.g != f.Graph || r.Index >= r.Node.NumOutputs() {
			return fmt.Errorf("graph: function result %d is not a tensor of its graph: %w", i, ErrBadFunc)
		}
	}
	return nil
}

// funcToProto serialises f.
func funcToProto(f *Func) *pb.FunctionDef {
	fd := &pb.FunctionDef{Graph: f.Graph.ToProto()}
	for _, a := range f.Args {
		fd.Arg = append(fd.Arg, a.Name())
	}
	for _, r := range f.Rets {
		fd.Ret = append(fd.Ret, r.Name())
	}
	return fd
}

// funcFromProto rebuilds a function, validating its graph as FromProto
// does and its signature as Validate does. depth is the nesting of the
// function in the graph being decoded.
func funcFromProto(fd *pb.FunctionDef, depth int) (*Func, error) {
	if depth > maxFuncDepth {
		return nil, fmt.Errorf("graph: functions nested more than %d deep: %w", maxFuncDepth, ErrBadFunc)
	}
	if fd.GetGraph() == nil {
		return nil, fmt.Errorf("graph: function has no graph: %w", ErrBadFunc)
	}
	g, err := fromProto(fd.GetGraph(), depth)
	if err != nil {
		return nil, fmt.Errorf("graph: function body: %w", err)
	}
	f := &Func{Graph: g}
	for _, name := range fd.GetArg() {
		o, err := g.Output(name)
		if err != nil {
			return nil, fmt.Errorf("graph: function argument %q: %w (%w)", name, err, ErrBadFunc)
		}
		f.Args = append(f.Args, o)
	}
	for _, name := range fd.GetRet() {
		o, err := g.Output(name)
		if err != nil {
			return nil, fmt.Errorf("graph: function result %q: %w (%w)", name, err, ErrBadFunc)
		}
		f.Rets = append(f.Rets, o)
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// Walk calls fn on every node of g and, depth first, on every node of the
// functions its nodes carry as attributes (the bodies of loops and the
// branches of conditionals), stopping at the first error. A check that
// must hold of everything a graph can run (which ops a remote graph may
// use) walks it rather than g.Nodes().
func Walk(g *Graph, fn func(n *Node) error) error {
	for _, n := range g.Nodes() {
		if err := fn(n); err != nil {
			return err
		}
		for _, name := range n.AttrNames() {
			if f, ok := n.attrs[name].(*Func); ok && f != nil && f.Graph != nil {
				if err := Walk(f.Graph, fn); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// FuncBuilder builds a Func from inside an enclosing scope: the function's
// nodes are added through Scope, whose builders may take tensors of the
// enclosing graph (or of the graphs enclosing it) as inputs. Such a tensor
// is captured: it becomes an argument of the function, and the caller
// passes the outer tensor as an explicit input of the op that runs the
// function (Captures), so that a cross-device capture is an ordinary edge
// of the outer graph. An outer Const is copied into the function instead,
// so that shape inference inside sees its value.
//
// Errors are deferred on the enclosing scope: Scope shares it. A
// FuncBuilder is used by one goroutine, as scopes are.
type FuncBuilder struct {
	outer    *Scope
	g        *Graph
	scope    *Scope
	args     []Output
	captures []Output          // outer tensors captured, in the enclosing graph
	capArgs  []Output          // their arguments
	memo     map[Output]Output // any tensor met (of any enclosing graph) -> its stand-in here
}

// NewFuncBuilder returns a builder of a function whose nodes are named
// under prefix.
func NewFuncBuilder(outer *Scope, prefix string) *FuncBuilder {
	b := &FuncBuilder{outer: outer, g: New(), memo: map[Output]Output{}}
	b.scope = &Scope{graph: b.g, err: outer.err, capture: b.capture, seed: outer.seed,
		varPrefix: outer.varPrefix, reuse: outer.reuse, enclosing: outer}
	if prefix != "" {
		b.scope = b.scope.NameScope(prefix)
	}
	return b
}

// Scope returns the scope that adds to the function's graph.
func (b *FuncBuilder) Scope() *Scope { return b.scope }

// Arg adds an explicit argument of the given dtype and shape (a loop
// variable, a branch input) and returns it. Explicit arguments come first,
// in the order they were added, then the captures.
func (b *FuncBuilder) Arg(in op.TensorInfo) Output {
	o := b.scope.Out("Placeholder", "arg", nil, map[string]any{"dtype": in.DType, "shape": in.Shape})
	if o.Valid() {
		b.args = append(b.args, o)
	}
	return o
}

// Captures returns the tensors of the enclosing graph captured so far, in
// the order of their arguments. The caller owns the slice.
func (b *FuncBuilder) Captures() []Output { return append([]Output(nil), b.captures...) }

// Capture returns the argument standing for outer (a tensor of the
// enclosing graph or of one enclosing it), capturing it if it is new.
func (b *FuncBuilder) Capture(outer Output) Output {
	o, err := b.capture(outer)
	b.outer.SetErr(err)
	return o
}

// capture is the Scope hook: it maps a tensor of another graph to its
// stand-in in b's graph.
func (b *FuncBuilder) capture(o Output) (Output, error) {
	if o.Node == nil || o.Node.g == b.g {
		return o, nil
	}
	if r, ok := b.memo[o]; ok {
		return r, nil
	}
	outer := o
	if o.Node.g != b.outer.graph {
		if b.outer.capture == nil {
			return Output{}, fmt.Errorf("graph: tensor %s belongs to a graph that does not enclose the function being built", o)
		}
		var err error
		if outer, err = b.outer.capture(o); err != nil {
			return Output{}, err
		}
	}
	if r, ok := b.memo[outer]; ok {
		b.memo[o] = r
		return r, nil
	}
	var r Output
	if outer.Node.Op() == "Const" && len(outer.Node.control) == 0 {
		r = b.scope.Out("Const", "captured_const", nil, map[string]any{"value": outer.Node.AttrTensor("value")})
	} else {
		r = b.scope.Out("Placeholder", "capture", nil, map[string]any{"dtype": outer.DType(), "shape": outer.Shape()})
		if r.Valid() {
			b.captures = append(b.captures, outer)
			b.capArgs = append(b.capArgs, r)
		}
	}
	if !r.Valid() {
		return Output{}, b.scope.Err()
	}
	b.memo[o], b.memo[outer] = r, r
	return r, nil
}

// Finish returns the function with the given results. Its arguments are
// the explicit ones, then one per tensor of captures, in that order:
// captures must list every tensor b captured (Captures), and may list more
// (those another branch captured), which become unused arguments. It
// returns nil after an error, which is recorded on the enclosing scope.
func (b *FuncBuilder) Finish(rets []Output, captures []Output) *Func {
	if b.outer.Err() != nil {
		return nil
	}
	for i, r := range rets {
		if r.Node == nil {
			b.outer.SetErr(fmt.Errorf("graph: %sresult %d of the function is missing", b.scope.prefix, i))
			return nil
		}
		if r.Node.g != b.g {
			// A result that is an outer tensor (a branch returning x) is
			// captured, then returned.
			var err error
			if rets[i], err = b.capture(r); err != nil {
				b.outer.SetErr(err)
				return nil
			}
		}
	}
	want := map[Output]bool{}
	for _, c := range captures {
		want[c] = true
	}
	for _, c := range b.captures {
		if !want[c] {
			b.outer.SetErr(fmt.Errorf("graph: the function captured %s, which is not among the captures given", c))
			return nil
		}
	}
	args := append([]Output(nil), b.args...)
	for _, c := range captures {
		a := b.Capture(c)
		if !a.Valid() || a.Node.Op() != "Placeholder" {
			// A Const is copied rather than captured: its argument is a
			// fresh, unused placeholder.
			a = b.scope.Out("Placeholder", "unused_capture", nil, map[string]any{"dtype": c.DType(), "shape": c.Shape()})
		}
		args = append(args, a)
	}
	f := &Func{Graph: b.g, Args: args, Rets: append([]Output(nil), rets...)}
	if err := f.Validate(); err != nil {
		b.outer.SetErr(err)
		return nil
	}
	if b.outer.Err() != nil {
		return nil
	}
	return f
}

// Inline adds the nodes of f to s's graph as a call would run them, with
// args (tensors of s's graph, or of graphs enclosing the function s
// builds) standing for f's arguments, and returns the tensors standing for
// its results. Nodes keep their names under s's prefix. The gradients of
// control flow use it to recompute a branch or a loop body next to its
// gradient.
func Inline(s *Scope, f *Func, args []Output) ([]Output, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(args) != len(f.Args) {
		return nil, fmt.Errorf("graph: inlining %v: %d arguments for %d", f, len(args), len(f.Args))
	}
	// Arguments from an enclosing graph (in a function being built) are
	// captured first, so that a result that is an argument, or a control
	// input on one, is a tensor of s's graph.
	args = append([]Output(nil), args...)
	for i, a := range args {
		if args[i] = s.Capture(a); !args[i].Valid() {
			return nil, s.Err()
		}
	}
	mapped := make(map[*Node][]Output, f.Graph.NumNodes())
	isArg := map[Output]int{}
	for i, a := range f.Args {
		isArg[a] = i
	}
	nodes := map[*Node]*Node{}
	for _, n := range f.Graph.Nodes() {
		if n.Op() == "Placeholder" {
			if i, ok := isArg[n.Output(0)]; ok {
				mapped[n] = []Output{args[i]}
				continue
			}
		}
		ins := make([]Output, len(n.inputs))
		for i, in := range n.inputs {
			ins[i] = mapped[in.Node][in.Index]
		}
		ns := s
		if len(n.control) > 0 {
			var deps []*Node
			for _, c := range n.control {
				if d := nodes[c]; d != nil {
					deps = append(deps, d)
				} else if outs := mapped[c]; len(outs) > 0 && outs[0].Node != nil {
					deps = append(deps, outs[0].Node)
				}
			}
			ns = s.WithControlDependencies(deps...)
		}
		attrs := make(map[string]any, len(n.attrs))
		for k, v := range n.attrs {
			attrs[k] = v
		}
		name := n.name
		if i := strings.LastIndexByte(name, '/'); i >= 0 {
			name = name[i+1:]
		}
		c := ns.AddNode(n.Op(), name, ins, attrs)
		if c == nil {
			return nil, s.Err()
		}
		nodes[n] = c
		outs := make([]Output, c.NumOutputs())
		for i := range outs {
			outs[i] = c.Output(i)
		}
		mapped[n] = outs
	}
	rets := make([]Output, len(f.Rets))
	for i, r := range f.Rets {
		rets[i] = mapped[r.Node][r.Index]
	}
	return rets, s.Err()
}

// Capture returns the stand-in of o in s's graph: o itself when it is a
// tensor of s's graph, else, in the scope of a function being built
// (FuncBuilder), the argument that captures it. Builders that must name a
// tensor of the function (gradients taken inside a loop body) use it; the
// zero Output after an error.
func (s *Scope) Capture(o Output) Output {
	if s.err.err != nil || o.Node == nil {
		return Output{}
	}
	if o.Node.g == s.graph {
		return o
	}
	if s.capture == nil {
		s.SetErr(fmt.Errorf("graph: tensor %s belongs to another graph", o))
		return Output{}
	}
	c, err := s.capture(o)
	s.SetErr(err)
	return c
}

// OutsideFunctions returns the scope in which state is created for s: s
// itself, or, when s builds a function (a loop body, a branch), the scope
// of the outermost graph enclosing it, with s's variable prefix and reuse.
// Variable builders use it, so that a layer called inside a loop body
// creates its variables once, in the graph that holds the loop, and the
// body reads them (a capture), as TensorFlow lifts variables out of
// control flow.
func (s *Scope) OutsideFunctions() *Scope {
	if s.enclosing == nil {
		return s
	}
	root := s.enclosing
	for root.enclosing != nil {
		root = root.enclosing
	}
	c := *root
	c.varPrefix, c.reuse = s.varPrefix, s.reuse
	return &c
}
