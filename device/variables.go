package device

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// ErrUninitialized is wrapped by the error of a read of a device variable
// that was never assigned: kernel.ErrUninitialized, the host's, so that a
// caller that runs the initializer when a variable is not initialized
// finds it wherever the variable lives.
var ErrUninitialized = kernel.ErrUninitialized

// Variables is one device's store of variables: TensorFlow's resource
// manager of a GPU, where a GPU worker keeps its model's weights. Each
// variable is one buffer of the device's allocator, made when its Variable
// node first runs and kept, at the same address, until Close: steps read
// it and update it in place (device.Updates, Assign), and a step captured
// as a graph reads and writes that buffer at every replay. A step never
// frees or moves it. Variables is safe for concurrent use; the device's
// stream orders the reads and writes of the work queued on it.
type Variables struct {
	dev Device

	mu     sync.Mutex
	vars   map[string]*Variable
	closed bool
}

// Variable is a variable in device memory. Its buffer is the store's:
// hold the Tensor, never free it.
type Variable struct {
	name string
	t    Tensor

	mu          sync.Mutex
	initialized bool
}

// NewVariables returns an empty store of d's variables.
func NewVariables(d Device) *Variables {
	return &Variables{dev: d, vars: map[string]*Variable{}}
}

// Device returns the store's device.
func (s *Variables) Device() Device { return s.dev }

// Get returns the variable name, making it (uninitialized, its memory
// allocated from the device's allocator) if it does not exist. It fails if
// the existing variable has another dtype or shape, or if the store is
// closed.
func (s *Variables) Get(name string, dt tensor.DType, shape []int) (*Variable, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("device: variable %q on %s: %w", name, s.dev.Info().Name, ErrClosed)
	}
	if v, ok := s.vars[name]; ok {
		if v.t.DType != dt || !slices.Equal(v.t.Shape, shape) {
			return nil, fmt.Errorf("device: variable %q on %s exists as %v%v, asked for as %v%v",
				name, s.dev.Info().Name, v.t.DType, v.t.Shape, dt, shape)
		}
		return v, nil
	}
	v := &Variable{name: name, t: Tensor{DType: dt, Shape: slices.Clone(shape)}}
	// Never a zero-byte allocation: every variable has an address of its own.
	buf, err := s.dev.Allocator().Alloc(max(v.t.Bytes(), 1))
	if err != nil {
		return nil, fmt.Errorf("device: variable %q (%v%v) on %s: %w", name, dt, shape, s.dev.Info().Name, err)
	}
	v.t.Buf = buf
	s.vars[name] = v
	return v, nil
}

// Lookup returns an existing variable.
func (s *Variables) Lookup(name string) (*Variable, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[name]
	return v, ok
}

// Names returns the names of the store's variables, sorted.
func (s *Variables) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.vars))
	for n := range s.vars {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close waits for the device's queued work and frees every variable's
// memory. Work that reads them (a captured graph) must be gone first; the
// store then refuses new variables.
func (s *Variables) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var first error
	if st := s.dev.Stream(); st != nil {
		first = st.Synchronize(context.Background())
	}
	for _, v := range s.vars {
		if err := s.dev.Allocator().Free(v.t.Buf); err != nil && first == nil {
			first = err
		}
	}
	s.vars = nil
	return first
}

// Name returns the variable's name: its Variable node's.
func (v *Variable) Name() string { return v.name }

// Tensor returns the variable's value in device memory: a tensor whose
// buffer the store owns. Kernels read it, and an update's ref input
// writes it in place.
func (v *Variable) Tensor() *Tensor {
	t := v.t
	return &t
}

// Initialized reports whether the variable was assigned: an assignment
// counts once it is queued, since every later read is queued after it.
func (v *Variable) Initialized() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.initialized
}

// SetInitialized marks the variable assigned.
func (v *Variable) SetInitialized() {
	v.mu.Lock()
	v.initialized = true
	v.mu.Unlock()
}

// CheckInitialized returns an error naming the variable and wrapping
// ErrUninitialized if it was never assigned.
func (v *Variable) CheckInitialized() error {
	if v.Initialized() {
		return nil
	}
	return fmt.Errorf("device: variable %q: %w: run its initializer (or restore a checkpoint) first", v.name, ErrUninitialized)
}

// VariableOps are the ops that take a variable by ref which every GPU
// platform runs next to a device variable, besides the updates of Updates
// and SparseUpdates: Assign (AssignFactory, a copy within the device), and
// AssignAdd and AssignSub (a global step's increment, a metric's sums),
// which add the value to the variable in place and give its new value, for
// float32, int32 and int64 variables (AssignDTypes). The runner itself
// runs the Variable node, IsVariableInitialized and the checkpoint ops
// (SaveVariables, RestoreVariables, through the host). A variable placed
// on an accelerator stays there only if every op that takes it by ref is
// one of these or of the runner's (package device/taskgraph). The
// conformance suite checks AssignAdd and AssignSub against the CPU's.
var VariableOps = []string{"Assign", "AssignAdd", "AssignSub"}

// AssignDTypes are the variable dtypes of every platform's AssignAdd and
// AssignSub.
var AssignDTypes = []tensor.DType{tensor.Float32, tensor.Int32, tensor.Int64}

// CheckAssign checks that val can be assigned to the variable ref: the
// same dtype and shape, both in device memory. Every platform's Assign
// kernel checks it first.
func CheckAssign(ref, val *Tensor) error {
	if ref.DType != val.DType || !slices.Equal(ref.Shape, val.Shape) {
		return fmt.Errorf("cannot assign %v%v to a variable of %v%v", val.DType, val.Shape, ref.DType, ref.Shape)
	}
	if ref.Host != nil || val.Host != nil {
		return fmt.Errorf("the variable and the value must be in device memory")
	}
	return nil
}

// AssignFactory is the kernel of Assign on every platform: the value is
// copied within the device into the variable's memory (the ref input) and
// into the node's output, which holds the new value.
func AssignFactory(n *graph.Node) (Kernel, error) {
	if n.Op() != "Assign" {
		return nil, fmt.Errorf("device: node %s: %s is not Assign", n, n.Op())
	}
	return KernelFunc(func(c *Context) error {
		ref, val, out := c.Inputs[0], c.Inputs[1], c.Outputs[0]
		if err := CheckAssign(ref, val); err != nil {
			return err
		}
		n := ref.Bytes()
		if n == 0 {
			return nil
		}
		if err := c.Stream.Copy(ref.Buf.Ptr, val.Buf.Ptr, n); err != nil {
			return err
		}
		return c.Stream.Copy(out.Buf.Ptr, val.Buf.Ptr, n)
	}), nil
}
