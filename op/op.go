package op

import (
	"fmt"
	"sort"
	"sync"

	"github.com/distflow/distflow/tensor"
)

// AttrType is the type of an attribute value.
type AttrType int

// Attribute value types and the Go types that carry them.
const (
	AttrInt     AttrType = iota + 1 // int
	AttrFloat                       // float32
	AttrBool                        // bool
	AttrString                      // string
	AttrDType                       // tensor.DType
	AttrShape                       // tensor.Shape
	AttrInts                        // []int
	AttrFloats                      // []float32
	AttrStrings                     // []string
	AttrTensor                      // *tensor.Tensor
	AttrFunc                        // Func (a *graph.Func)
)

var attrTypeNames = map[AttrType]string{AttrInt: "int", AttrFloat: "float", AttrBool: "bool",
	AttrString: "string", AttrDType: "dtype", AttrShape: "shape", AttrInts: "list(int)",
	AttrFloats: "list(float)", AttrStrings: "list(string)", AttrTensor: "tensor",
	AttrFunc: "func"}

func (t AttrType) String() string { return attrTypeNames[t] }

// Func is the value of an AttrFunc attribute: a subgraph with typed
// arguments and results, the branch or body of a control-flow op. Package
// graph implements it (*graph.Func); op sees only its signature, which is
// what shape inference needs.
type Func interface {
	// ArgTypes returns the dtype and shape of each argument, in order.
	ArgTypes() []TensorInfo
	// RetTypes returns the dtype and shape of each result, in order.
	RetTypes() []TensorInfo
	// IsNil reports whether the value is a nil pointer.
	IsNil() bool
}

// Arg declares one input of an op.
type Arg struct {
	Name string
	// Variadic marks the last input as a list of zero or more tensors.
	Variadic bool
	// Ref marks an input that refers to a variable's storage rather than its
	// value: the producer must be a Variable node, and the kernel receives the
	// variable itself (kernel.Context.Ref) instead of a tensor.
	Ref bool
}

// Attr declares one attribute of an op.
type Attr struct {
	Name string
	Type AttrType
	// Default is used when the attribute is not set; nil means required.
	Default any
}

// Def declares an op: its inputs, attributes and how to infer its outputs.
// Kernels and gradients are registered separately, by op name.
type Def struct {
	Name   string
	Inputs []Arg
	Attrs  []Attr
	// Infer sets the dtype and shape of every output from the inputs and
	// attributes, and rejects invalid combinations. Its error should name the
	// shapes involved; the graph adds the node and op names.
	Infer func(c *InferContext) error
	// Stateful ops have side effects or non-deterministic results (variables,
	// random numbers, queues): they are never folded or deduplicated.
	Stateful bool
	// Remote allows the op in graphs that arrive from other processes: a
	// worker refuses to register a graph with a node of an op without it.
	// It is an allowlist: every op a training or serving graph needs sets
	// it (file-touching ones, SaveVariables and RestoreVariables, are then
	// confined to the task's directories by kernel.Policy); an op that
	// reaches into the host in other ways (runs commands, reads arbitrary
	// files, talks to the network) leaves it unset and runs only in the
	// sessions of the process that builds its graph.
	Remote bool
	// Summary is a one-line description for documentation and errors.
	Summary string
}

// Attr returns the declaration of attribute name, or nil.
func (d *Def) Attr(name string) *Attr {
	for i := range d.Attrs {
		if d.Attrs[i].Name == name {
			return &d.Attrs[i]
		}
	}
	return nil
}

var (
	mu       sync.RWMutex
	registry = map[string]*Def{}
)

// Register adds an op declaration. It panics on a duplicate or malformed
// declaration, which is a programmer error caught at init.
func Register(d Def) {
	if d.Name == "" || d.Infer == nil {
		panic(fmt.Sprintf("op.Register: op %q needs a name and an Infer function", d.Name))
	}
	for i, a := range d.Inputs {
		if a.Variadic && i != len(d.Inputs)-1 {
			panic(fmt.Sprintf("op.Register: %s: only the last input may be variadic", d.Name))
		}
	}
	for _, a := range d.Attrs {
		if a.Default != nil {
			if err := CheckAttrType(a.Type, a.Default); err != nil {
				panic(fmt.Sprintf("op.Register: %s: default of attr %q: %v", d.Name, a.Name, err))
			}
		}
	}
	d.Infer = checkOutputShapes(d.Infer)
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[d.Name]; dup {
		panic(fmt.Sprintf("op.Register: op %q registered twice", d.Name))
	}
	registry[d.Name] = &d
}

// checkOutputShapes wraps an Infer function so that no op declares an output
// whose element count overflows int (a variable, placeholder or Fill of
// [65536, 65536, 65536, 65536]): such a shape is refused when the node is
// added, for every op at once, instead of being taken as the wrapped-around
// count.
func checkOutputShapes(infer func(c *InferContext) error) func(c *InferContext) error {
	return func(c *InferContext) error {
		if err := infer(c); err != nil {
			return err
		}
		for i, o := range c.Outputs {
			if err := o.Shape.Check(); err != nil {
				return fmt.Errorf("output %d: %w", i, err)
			}
		}
		return nil
	}
}

// Lookup returns the declaration of the named op.
func Lookup(name string) (*Def, bool) {
	mu.RLock()
	defer mu.RUnlock()
	d, ok := registry[name]
	return d, ok
}

// List returns the names of all registered ops, sorted.
func List() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// CheckAttrType reports whether v is a valid Go value for an attribute of type t.
func CheckAttrType(t AttrType, v any) error {
	ok := false
	switch t {
	case AttrInt:
		_, ok = v.(int)
	case AttrFloat:
		_, ok = v.(float32)
	case AttrBool:
		_, ok = v.(bool)
	case AttrString:
		_, ok = v.(string)
	case AttrDType:
		_, ok = v.(tensor.DType)
	case AttrShape:
		_, ok = v.(tensor.Shape)
	case AttrInts:
		_, ok = v.([]int)
	case AttrFloats:
		_, ok = v.([]float32)
	case AttrStrings:
		_, ok = v.([]string)
	case AttrTensor:
		_, ok = v.(*tensor.Tensor)
	case AttrFunc:
		f, isFunc := v.(Func)
		ok = isFunc && f != nil && !f.IsNil()
	}
	if !ok {
		return fmt.Errorf("want %v, got %T", t, v)
	}
	return nil
}
