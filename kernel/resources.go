package kernel

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/distflow/distflow/tensor"
)

// ErrUninitialized is wrapped by errors about reading a variable that has
// never been assigned.
var ErrUninitialized = errors.New("variable is not initialized")

// Resources is the state of one session or worker that outlives steps:
// variables by name. It is safe for concurrent use.
type Resources struct {
	mu        sync.Mutex
	variables map[string]*Variable
	others    map[string]any
}

// NewResources returns an empty resource container.
func NewResources() *Resources { return &Resources{variables: map[string]*Variable{}} }

// Variable returns the variable called name, creating it (uninitialized) with
// the given dtype and shape if it does not exist. It fails if an existing
// variable has another dtype or shape.
func (r *Resources) Variable(name string, dt tensor.DType, shape tensor.Shape) (*Variable, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.variables[name]; ok {
		if v.dtype != dt || !v.shape.Equal(shape) {
			return nil, fmt.Errorf("kernel: variable %q exists as %v%v, requested as %v%v", name, v.dtype, v.shape, dt, shape)
		}
		return v, nil
	}
	v := &Variable{name: name, dtype: dt, shape: shape}
	r.variables[name] = v
	return v, nil
}

// Resource returns the resource stored under key, first storing create()
// there if there is none. Kernels keep state other than variables (queues,
// accumulators) this way; key should name the kind of resource, so that
// kinds do not collide. create runs at most once per key, under a lock, so
// it must not call back into r.
func (r *Resources) Resource(key string, create func() any) any {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.others[key]; ok {
		return v
	}
	if r.others == nil {
		r.others = map[string]any{}
	}
	v := create()
	r.others[key] = v
	return v
}

// Lookup returns an existing variable.
func (r *Resources) Lookup(name string) (*Variable, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.variables[name]
	return v, ok
}

// VariableNames returns the names of all variables, sorted.
func (r *Resources) VariableNames() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.variables))
	for n := range r.variables {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Variable is mutable state with a fixed dtype and shape. Reads return a
// copy, so a reader never sees a half-applied update; updates run under an
// exclusive lock.
type Variable struct {
	name  string
	dtype tensor.DType
	shape tensor.Shape

	mu    sync.RWMutex
	value *tensor.Tensor // nil until initialized
}

// Name returns the variable's name (its Variable node's name).
func (v *Variable) Name() string { return v.name }

// DType returns the element type.
func (v *Variable) DType() tensor.DType { return v.dtype }

// Shape returns the shape.
func (v *Variable) Shape() tensor.Shape { return v.shape }

// Initialized reports whether the variable holds a value.
func (v *Variable) Initialized() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.value != nil
}

// Read returns a copy of the value.
func (v *Variable) Read() (*tensor.Tensor, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.value == nil {
		return nil, fmt.Errorf("kernel: variable %q: %w: run its initializer first (e.g. the global variables initializer)", v.name, ErrUninitialized)
	}
	return v.value.Clone(), nil
}

// ReadInto copies the value into dst, which must have the variable's dtype
// and size; it lets callers reuse buffers.
func (v *Variable) ReadInto(dst *tensor.Tensor) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.value == nil {
		return fmt.Errorf("kernel: variable %q: %w: run its initializer first (e.g. the global variables initializer)", v.name, ErrUninitialized)
	}
	return dst.CopyFrom(v.value)
}

// Assign replaces the value with a copy of t, which must match the
// variable's dtype and shape.
func (v *Variable) Assign(t *tensor.Tensor) error {
	if t.DType() != v.dtype || !v.shape.IsCompatibleWith(t.StaticShape()) {
		return fmt.Errorf("kernel: cannot assign %v%v to variable %q of %v%v", t.DType(), tensor.MakeShape(t.Shape()...), v.name, v.dtype, v.shape)
	}
	c := t.Clone()
	v.mu.Lock()
	v.value = c
	v.mu.Unlock()
	return nil
}

// Update runs f on the value in place under the exclusive lock. It fails if
// the variable is not initialized.
func (v *Variable) Update(f func(value *tensor.Tensor) error) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.value == nil {
		return fmt.Errorf("kernel: variable %q: %w: run its initializer first (e.g. the global variables initializer)", v.name, ErrUninitialized)
	}
	return f(v.value)
}
