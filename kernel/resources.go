package kernel

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/distflow/distflow/tensor"
)

// ErrUninitialized is wrapped by errors about reading a variable that has
// never been assigned.
var ErrUninitialized = errors.New("variable is not initialized")

// Resources is the state of one session or worker that outlives steps:
// variables by name. It is safe for concurrent use.
type Resources struct {
	policyFields

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

// Variable is mutable state with a fixed dtype and shape. Updates run under
// an exclusive lock; a reader never sees a value change under it.
//
// Reads by the graph (Share) are copy-on-write: they hand out the
// variable's own buffer and count a share of it. An in-place update of a
// buffer with outstanding shares first moves the variable to another buffer
// (a spare, else a fresh one) holding a copy of the value, and the old
// buffer is retired: it never changes again, so every reader keeps its
// snapshot. A share is handed back with Lease.Release once its holder is
// done (the executor does so when the last tensor aliasing the buffer is
// dead, and a peer that a Send lent it to once it is written to the wire,
// see InputLeaser); a share never handed back (a tensor enqueued, or sent
// to a receiver in the same process) keeps the buffer retired-on-update
// forever. A retired buffer whose last share comes
// back becomes the variable's spare, so that a copy-on-write in steady state
// allocates nothing.
//
// Invariants: shares of a buffer are taken only while it is current, under
// the read lock; a buffer is retired, or written in place, only under the
// exclusive lock; so once a retired buffer's count reaches zero no one holds
// it and it may be reused.
type Variable struct {
	name  string
	dtype tensor.DType
	shape tensor.Shape

	mu    sync.RWMutex
	value *varBuffer // nil until initialized
	spare atomic.Pointer[varBuffer]
}

// varBuffer is one buffer a variable holds or held.
type varBuffer struct {
	t       *tensor.Tensor
	shares  atomic.Int32 // outstanding Leases
	retired atomic.Bool  // no longer the variable's value: never written again
	release func()       // Release of a Lease of it (see Lease.ReleaseFunc)
}

// newBuffer returns a buffer of v holding t.
func (v *Variable) newBuffer(t *tensor.Tensor) *varBuffer {
	b := &varBuffer{t: t}
	b.release = Lease{v, b}.Release
	return b
}

// Lease is a reader's share of a variable's buffer, from Variable.Share.
// The zero Lease is valid and releases nothing.
type Lease struct {
	v *Variable
	b *varBuffer
}

// Valid reports whether l holds a share.
func (l Lease) Valid() bool { return l.b != nil }

// Release hands the share back: the caller and everyone it gave the tensor
// to must not use it any more. It must be called at most once per Lease;
// never calling it is safe (the variable copies on its next update).
func (l Lease) Release() {
	if l.b == nil {
		return
	}
	if l.b.shares.Add(-1) == 0 && l.b.retired.Load() {
		// No one holds the retired buffer any more: keep it for the next
		// copy-on-write. A release racing with the retirement may miss
		// it, which only costs an allocation.
		l.v.spare.Store(l.b)
	}
}

// ReleaseFunc returns Release as a function, made once per buffer, for
// APIs that take one: the method value l.Release allocates at every use.
func (l Lease) ReleaseFunc() func() {
	if l.b == nil {
		return func() {}
	}
	return l.b.release
}

// Dup returns another share of l's buffer, to be released on its own. l
// must be held (not yet released).
func (l Lease) Dup() Lease {
	if l.b != nil {
		l.b.shares.Add(1)
	}
	return l
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

func (v *Variable) uninitialized() error {
	return fmt.Errorf("kernel: variable %q: %w: run its initializer first (e.g. the global variables initializer)", v.name, ErrUninitialized)
}

// Read returns a copy of the value.
func (v *Variable) Read() (*tensor.Tensor, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.value == nil {
		return nil, v.uninitialized()
	}
	return v.value.t.Clone(), nil
}

// Share returns the value without a copy, with a share of its buffer. The
// tensor never changes (a later update moves the variable to another
// buffer) and must not be modified. Release the lease when no one holds the
// tensor any more, so that updates can run in place again; a tensor that
// escapes to holders one cannot track must keep its lease unreleased.
func (v *Variable) Share() (*tensor.Tensor, Lease, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	b := v.value
	if b == nil {
		return nil, Lease{}, v.uninitialized()
	}
	b.shares.Add(1)
	return b.t, Lease{v, b}, nil
}

// ReadInto copies the value into dst, which must have the variable's dtype
// and size; it lets callers reuse buffers.
func (v *Variable) ReadInto(dst *tensor.Tensor) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.value == nil {
		return v.uninitialized()
	}
	return dst.CopyFrom(v.value.t)
}

// Assign replaces the value with a copy of t, which must match the
// variable's dtype and shape.
func (v *Variable) Assign(t *tensor.Tensor) error {
	if err := v.checkAssign(t); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.assignLocked(t)
}

// Exchange is Assign for a t that its caller owns and may see
// overwritten (see InputOverwriter): if no reader shares the value's
// buffer, the variable takes t's storage and t gets the old value's, so
// that nothing is copied, and Exchange returns the new value with a share
// of it, as Share does. Otherwise it assigns a copy of t, as Assign, and
// returns a nil value.
func (v *Variable) Exchange(t *tensor.Tensor) (value *tensor.Tensor, l Lease, err error) {
	if err := v.checkAssign(t); err != nil {
		return nil, Lease{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if b := v.value; b != nil && b.shares.Load() == 0 && b.t.SwapData(t) == nil {
		b.shares.Add(1)
		return b.t, Lease{v, b}, nil
	}
	return nil, Lease{}, v.assignLocked(t)
}

func (v *Variable) checkAssign(t *tensor.Tensor) error {
	if t.DType() != v.dtype || !v.shape.IsCompatibleWith(t.StaticShape()) {
		return fmt.Errorf("kernel: cannot assign %v%v to variable %q of %v%v", t.DType(), tensor.MakeShape(t.Shape()...), v.name, v.dtype, v.shape)
	}
	return nil
}

// assignLocked is Assign under v.mu, held exclusively.
func (v *Variable) assignLocked(t *tensor.Tensor) error {
	if old := v.value; old != nil && old.shares.Load() == 0 && slices.Equal(old.t.Shape(), t.Shape()) {
		// No reader holds the buffer: overwrite it in place.
		return old.t.CopyFrom(t)
	}
	v.retire()
	b := v.takeSpare(t.Shape())
	if b == nil {
		v.value = v.newBuffer(t.Clone())
		return nil
	}
	v.value = b
	return b.t.CopyFrom(t)
}

// retire marks the current buffer as no longer the value. Held by v.mu.
func (v *Variable) retire() {
	if b := v.value; b != nil {
		b.retired.Store(true)
		if b.shares.Load() == 0 {
			v.spare.Store(b)
		}
	}
}

// takeSpare returns the spare buffer, reset, if it has the given shape.
// Held by v.mu.
func (v *Variable) takeSpare(shape []int) *varBuffer {
	b := v.spare.Swap(nil)
	if b == nil || b == v.value || b.shares.Load() != 0 || !slices.Equal(b.t.Shape(), shape) {
		return nil
	}
	b.retired.Store(false)
	return b
}

// own makes the value's buffer writable in place: if a reader shares it,
// the variable moves to another buffer, holding a copy of the value if
// copy is set (else its contents are unspecified), and own returns the old
// value; otherwise it returns the value itself. Held by v.mu exclusively.
func (v *Variable) own(copy bool) *tensor.Tensor {
	b := v.value
	if b.shares.Load() == 0 {
		return b.t
	}
	v.retire()
	nb := v.takeSpare(b.t.Shape())
	switch {
	case nb == nil && copy:
		nb = v.newBuffer(b.t.Clone())
	case nb == nil:
		nb = v.newBuffer(tensor.New(b.t.DType(), b.t.Shape()...))
	case copy:
		_ = nb.t.CopyFrom(b.t) // same dtype and shape
	}
	v.value = nb
	return b.t
}

// Update runs f on the value in place under the exclusive lock. It fails if
// the variable is not initialized.
func (v *Variable) Update(f func(value *tensor.Tensor) error) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.value == nil {
		return v.uninitialized()
	}
	v.own(true)
	return f(v.value.t)
}
