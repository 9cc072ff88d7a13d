package cpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// Kernels of the state family: assignments and the optimizers' update rules.
// Updates run in place under the variable's exclusive lock, as one fused
// loop per op, split across cores for large variables.

func init() {
	// These kernels read their inputs only during Compute (Assign stores a
	// copy, or takes the storage of an input the step lets it overwrite),
	// so the executor may recycle the buffers they read.
	kernel.Register("Assign", kernel.CPU, func(*graph.Node) (kernel.Kernel, error) { return stateAssignKernel{}, nil })
	kernel.Register("AssignAdd", kernel.CPU, kernel.Borrowing(kernel.Simple(func(c *kernel.Context) error { return stateAssignUpdate(c, 1) })))
	kernel.Register("AssignSub", kernel.CPU, kernel.Borrowing(kernel.Simple(func(c *kernel.Context) error { return stateAssignUpdate(c, -1) })))
	kernel.Register("IsVariableInitialized", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		c.Alloc(0, tensor.Bool).Bools()[0] = c.Ref(0).Initialized()
		return nil
	}))

	// The float32 updates of GradientDescent and Adam read the old value
	// from vals[3] when the variable moves (stateApply).
	stateRegisterApplyChecked("ApplyGradientDescent", 1, 2, true, stateGradientDescentFinite, func(*graph.Node) stateUpdate {
		return func(v [4]*tensor.Tensor, g *tensor.Tensor, sc [8]float64) {
			if g.DType() == tensor.Float32 {
				stateGradientDescent(v[0].Float32s(), stateSrc(v[3]), g.Float32s(), float32(sc[0]))
			} else {
				stateGradientDescent(v[0].Float64s(), nil, g.Float64s(), sc[0])
			}
		}
	})
	stateRegisterApply("ApplyMomentum", 2, 3, false, func(n *graph.Node) stateUpdate {
		nesterov := n.AttrBool("use_nesterov")
		return func(v [4]*tensor.Tensor, g *tensor.Tensor, sc [8]float64) {
			if g.DType() == tensor.Float32 {
				stateMomentum(v[0].Float32s(), v[1].Float32s(), g.Float32s(), float32(sc[0]), float32(sc[1]), nesterov)
			} else {
				stateMomentum(v[0].Float64s(), v[1].Float64s(), g.Float64s(), sc[0], sc[1], nesterov)
			}
		}
	})
	stateRegisterApply("ApplyAdagrad", 2, 3, false, func(*graph.Node) stateUpdate {
		return func(v [4]*tensor.Tensor, g *tensor.Tensor, sc [8]float64) {
			if g.DType() == tensor.Float32 {
				stateAdagrad(v[0].Float32s(), v[1].Float32s(), g.Float32s(), float32(sc[0]))
			} else {
				stateAdagrad(v[0].Float64s(), v[1].Float64s(), g.Float64s(), sc[0])
			}
		}
	})
	stateRegisterApply("ApplyRMSProp", 3, 7, false, func(*graph.Node) stateUpdate {
		return func(v [4]*tensor.Tensor, g *tensor.Tensor, sc [8]float64) {
			// sc: lr, rho, momentum, epsilon.
			if g.DType() == tensor.Float32 {
				stateRMSProp(v[0].Float32s(), v[1].Float32s(), v[2].Float32s(), g.Float32s(),
					float32(sc[0]), float32(sc[1]), float32(sc[2]), float32(sc[3]))
			} else {
				stateRMSProp(v[0].Float64s(), v[1].Float64s(), v[2].Float64s(), g.Float64s(), sc[0], sc[1], sc[2], sc[3])
			}
		}
	})
	stateRegisterApplyChecked("ApplyAdam", 3, 9, true, stateAdamFinite, func(*graph.Node) stateUpdate {
		return func(v [4]*tensor.Tensor, g *tensor.Tensor, sc [8]float64) {
			// sc: beta1_power, beta2_power, lr, beta1, beta2, epsilon. The
			// bias-corrected step size is computed once, in float64.
			lrT := sc[2] * math.Sqrt(1-sc[1]) / (1 - sc[0])
			if g.DType() == tensor.Float32 {
				stateAdamF32(v[0].Float32s(), stateSrc(v[3]), v[1].Float32s(), v[2].Float32s(), g.Float32s(),
					float32(lrT), float32(sc[3]), float32(sc[4]), float32(sc[5]))
			} else {
				stateAdam(v[0].Float64s(), v[1].Float64s(), v[2].Float64s(), g.Float64s(), lrT, sc[3], sc[4], sc[5])
			}
		}
	})
}

// stateAssignKernel replaces the variable's value. Its output is the new
// value: the value input, which then equals the variable but does not
// alias its storage; or, when the input was the step's own to overwrite
// (a tensor received off the wire, an intermediate result), the
// variable's buffer itself, shared, the variable having taken the input's
// storage rather than copy it (kernel.Variable.Exchange).
type stateAssignKernel struct{}

// BorrowsInputs reports that Assign keeps no input.
func (stateAssignKernel) BorrowsInputs() bool { return true }

// OverwritesInputs reports that Assign takes an input's storage when it may.
func (stateAssignKernel) OverwritesInputs() bool { return true }

func (stateAssignKernel) Compute(c *kernel.Context) error {
	v, t := c.Ref(0), c.Input(1)
	if t.DType() != v.DType() || !v.Shape().Equal(t.StaticShape()) {
		return c.Errorf("cannot assign %v%v to variable %q of %v%v", t.DType(), t.StaticShape(), v.Name(), v.DType(), v.Shape())
	}
	if c.RefusesNonFinite() {
		if err := stateCheckInputs(c, v, 1); err != nil {
			return err
		}
	}
	if len(c.Overwritable) > 1 && c.Overwritable[1] {
		value, l, err := v.Exchange(t)
		if err != nil {
			return stateWrap(c, err)
		}
		if value != nil {
			c.ShareOutput(0, value, l)
			return nil
		}
	} else if err := v.Assign(t); err != nil {
		return stateWrap(c, err)
	}
	c.SetOutput(0, t)
	return nil
}

// stateAssignUpdate adds sign*value to the variable and outputs a copy of
// the new value.
func stateAssignUpdate(c *kernel.Context, sign int) error {
	v, t := c.Ref(0), c.Input(1)
	if t.DType() != v.DType() || !v.Shape().Equal(t.StaticShape()) {
		return c.Errorf("cannot add %v%v to variable %q of %v%v", t.DType(), t.StaticShape(), v.Name(), v.DType(), v.Shape())
	}
	guard := c.RefusesNonFinite() && v.DType().IsFloat()
	if guard {
		if err := stateCheckInputs(c, v, 1); err != nil {
			return err
		}
	}
	switch v.DType() {
	case tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64:
	default:
		return c.Errorf("%s does not support %v variables", c.Node.Op(), v.DType())
	}
	out := c.AllocUninit(0, v.DType(), t.Shape()...)
	val, err := v.LockValue()
	if err != nil {
		return stateWrap(c, err)
	}
	defer v.UnlockValue()
	add := func() {
		switch val.DType() {
		case tensor.Float32:
			stateAddScaled(val.Float32s(), t.Float32s(), float32(sign))
		case tensor.Float64:
			stateAddScaled(val.Float64s(), t.Float64s(), float64(sign))
		case tensor.Int32:
			stateAddScaled(val.Int32s(), t.Int32s(), int32(sign))
		case tensor.Int64:
			stateAddScaled(val.Int64s(), t.Int64s(), int64(sign))
		}
	}
	if guard {
		if err := stateGuarded(c, []*kernel.Variable{v}, []*tensor.Tensor{val}, make([]*tensor.Tensor, 1), add); err != nil {
			return err
		}
	} else {
		add()
	}
	return stateWrap(c, out.CopyFrom(val))
}

// stateWrap adds the node to an error of the variable (nil stays nil),
// keeping kernel.ErrUninitialized visible to errors.Is.
func stateWrap(c *kernel.Context, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("kernel: node %s: %w", c.Node, err)
}

type stateNumber interface {
	~float32 | ~float64 | ~int32 | ~int64
}

type stateFloat interface{ ~float32 | ~float64 }

// stateCost is the estimated cost of one element of an update loop, in the
// units of kernel.ParallelFor.
const stateCost = 8

// The update loops below run inline when kernel.Serial says so, building
// the closure for kernel.ParallelFor (a heap allocation) only when the loop
// is split.

func stateAddScaled[T stateNumber](dst, src []T, sign T) {
	src = src[:len(dst)]
	if kernel.Serial(len(dst), 1) {
		stateAddScaledRange(dst, src, sign)
		return
	}
	kernel.ParallelFor(len(dst), 1, func(lo, hi int) { stateAddScaledRange(dst[lo:hi], src[lo:hi], sign) })
}

func stateAddScaledRange[T stateNumber](dst, src []T, sign T) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += sign * src[i]
	}
}

// stateChunk is how many elements an update that moves its variable copies
// from the old buffer before updating them: few enough that the update
// finds them in cache, so that moving costs about no extra memory traffic.
const stateChunk = 4096

// stateSrc returns the old value of a variable that moved, or nil.
func stateSrc(t *tensor.Tensor) []float32 {
	if t == nil {
		return nil
	}
	return t.Float32s()
}

func stateSub[T any](s []T, lo, hi int) []T {
	if s == nil {
		return nil
	}
	return s[lo:hi]
}

func stateGradientDescent[T stateFloat](v, src, g []T, alpha T) {
	g = g[:len(v)]
	if kernel.Serial(len(v), 2) {
		stateGradientDescentFrom(v, src, g, alpha)
		return
	}
	j, _ := gdJobs.Get().(*gdJob[T])
	if j == nil {
		j = new(gdJob[T])
	}
	*j = gdJob[T]{v, src, g, alpha}
	kernel.ParallelRange(len(v), 2, j)
	*j = gdJob[T]{}
	gdJobs.Put(j)
}

// gdJob is stateGradientDescent's split loop, pooled like rangeJob2.
type gdJob[T stateFloat] struct {
	v, src, g []T
	alpha     T
}

func (j *gdJob[T]) Range(lo, hi int) {
	stateGradientDescentFrom(j.v[lo:hi], stateSub(j.src, lo, hi), j.g[lo:hi], j.alpha)
}

// stateGradientDescentFrom is stateGradientDescentRange on v, first copied
// from src if the variable moved.
func stateGradientDescentFrom[T stateFloat](v, src, g []T, alpha T) {
	if src == nil {
		stateGradientDescentRange(v, g, alpha)
		return
	}
	src = src[:len(v)]
	for lo := 0; lo < len(v); lo += stateChunk {
		hi := min(lo+stateChunk, len(v))
		copy(v[lo:hi], src[lo:hi])
		stateGradientDescentRange(v[lo:hi], g[lo:hi], alpha)
	}
}

var gdJobs sync.Pool

func stateGradientDescentRange[T stateFloat](v, g []T, alpha T) {
	if v32, ok := any(v).([]float32); ok {
		nnSubScaledF32(v32, any(g).([]float32), any(alpha).(float32))
		return
	}
	g = g[:len(v)]
	for i := range v {
		v[i] -= alpha * g[i]
	}
}

func stateMomentum[T stateFloat](v, accum, g []T, lr, momentum T, nesterov bool) {
	accum, g = accum[:len(v)], g[:len(v)]
	kernel.ParallelFor(len(v), stateCost, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a := accum[i]*momentum + g[i]
			accum[i] = a
			if nesterov {
				v[i] -= g[i]*lr + a*momentum*lr
			} else {
				v[i] -= lr * a
			}
		}
	})
}

func stateAdagrad[T stateFloat](v, accum, g []T, lr T) {
	accum, g = accum[:len(v)], g[:len(v)]
	kernel.ParallelFor(len(v), stateCost, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a := accum[i] + g[i]*g[i]
			accum[i] = a
			v[i] -= lr * g[i] / T(math.Sqrt(float64(a)))
		}
	})
}

func stateRMSProp[T stateFloat](v, ms, mom, g []T, lr, rho, momentum, epsilon T) {
	ms, mom, g = ms[:len(v)], mom[:len(v)], g[:len(v)]
	kernel.ParallelFor(len(v), stateCost, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			m := rho*ms[i] + (1-rho)*g[i]*g[i]
			ms[i] = m
			u := momentum*mom[i] + lr*g[i]/T(math.Sqrt(float64(m+epsilon)))
			mom[i] = u
			v[i] -= u
		}
	})
}

func stateAdam[T stateFloat](v, m, vv, g []T, lrT, beta1, beta2, epsilon T) {
	m, vv, g = m[:len(v)], vv[:len(v)], g[:len(v)]
	if kernel.Serial(len(v), stateCost) {
		stateAdamRange(v, m, vv, g, lrT, beta1, beta2, epsilon)
		return
	}
	kernel.ParallelFor(len(v), stateCost, func(lo, hi int) {
		stateAdamRange(v[lo:hi], m[lo:hi], vv[lo:hi], g[lo:hi], lrT, beta1, beta2, epsilon)
	})
}

// stateAdamF32 is stateAdam for float32, on the vectorised loop. The
// reference CNN's fc1 weight alone has 3.2M elements.
// src is the variable's old value if it moved (else nil).
func stateAdamF32(v, src, m, vv, g []float32, lrT, beta1, beta2, epsilon float32) {
	m, vv, g = m[:len(v)], vv[:len(v)], g[:len(v)]
	if kernel.Serial(len(v), stateAdamF32Cost) {
		stateAdamFromF32(v, src, m, vv, g, lrT, beta1, beta2, epsilon)
		return
	}
	kernel.ParallelFor(len(v), stateAdamF32Cost, func(lo, hi int) {
		stateAdamFromF32(v[lo:hi], stateSub(src, lo, hi), m[lo:hi], vv[lo:hi], g[lo:hi], lrT, beta1, beta2, epsilon)
	})
}

// stateAdamFromF32 is stateAdamRangeF32 on v, first copied from src if the
// variable moved.
func stateAdamFromF32(v, src, m, vv, g []float32, lrT, beta1, beta2, epsilon float32) {
	if src == nil {
		stateAdamRangeF32(v, m, vv, g, lrT, beta1, beta2, epsilon)
		return
	}
	src = src[:len(v)]
	for lo := 0; lo < len(v); lo += stateChunk {
		hi := min(lo+stateChunk, len(v))
		copy(v[lo:hi], src[lo:hi])
		stateAdamRangeF32(v[lo:hi], m[lo:hi], vv[lo:hi], g[lo:hi], lrT, beta1, beta2, epsilon)
	}
}

// stateAdamF32Cost is the cost of one element of the vectorised loop, in
// the units of kernel.ParallelFor: seven streams of memory per element.
const stateAdamF32Cost = 2

func stateAdamRange[T stateFloat](v, m, vv, g []T, lrT, beta1, beta2, epsilon T) {
	m, vv, g = m[:len(v)], vv[:len(v)], g[:len(v)]
	for i := range v {
		gi := g[i]
		a := m[i] + (gi-m[i])*(1-beta1)
		b := vv[i] + (gi*gi-vv[i])*(1-beta2)
		m[i], vv[i] = a, b
		v[i] -= lrT * a / (T(math.Sqrt(float64(b))) + epsilon)
	}
}

// stateUpdate applies one update rule to the locked values of the refs (the
// variable first), given the gradient and the scalar inputs in input order.
// They are passed as arrays, by value, so that they stay on the stack. A
// rule registered as moving gets in vals[3] the variable's old value when
// the variable moved to another buffer (readers shared the old one), and
// must then compute vals[0] from it; vals[3] is nil for an update in place.
type stateUpdate func(vals [4]*tensor.Tensor, grad *tensor.Tensor, scalars [8]float64)

// stateRegisterApply registers the kernel of an Apply op whose first nRefs
// inputs are refs and whose input gradIdx has the variable's shape; every
// other input is a scalar. moving says that the rule reads a moved float32
// variable's old value from vals[3] (see stateUpdate) rather than needing a
// copy of it first.
func stateRegisterApply(op string, nRefs, gradIdx int, moving bool, build func(n *graph.Node) stateUpdate) {
	stateRegisterApplyChecked(op, nRefs, gradIdx, moving, nil, build)
}

// stateFiniteCheck tells, without storing anything, whether an update
// rule's results (the variable's and its slots') would all be finite,
// computed bit for bit as the rule computes them (its arguments are the
// rule's); ok is false when it cannot tell (then statePreflight does).
type stateFiniteCheck func(vals [4]*tensor.Tensor, grad *tensor.Tensor, scalars [8]float64) (finite, ok bool)

// stateRegisterApplyChecked is stateRegisterApply with a check of the
// rule's results for kernel.Policy.RefuseNonFiniteWrites.
func stateRegisterApplyChecked(op string, nRefs, gradIdx int, moving bool, check stateFiniteCheck, build func(n *graph.Node) stateUpdate) {
	kernel.Register(op, kernel.CPU, kernel.Borrowing(func(n *graph.Node) (kernel.Kernel, error) {
		update := build(n)
		return kernel.Func(func(c *kernel.Context) error {
			return stateApply(c, nRefs, gradIdx, moving, update, check)
		}), nil
	}))
}

// stateGradientDescentFinite is the stateFiniteCheck of
// ApplyGradientDescent for float32 (from the old value when the variable
// moved).
func stateGradientDescentFinite(v [4]*tensor.Tensor, g *tensor.Tensor, sc [8]float64) (finite, ok bool) {
	if g.DType() != tensor.Float32 {
		return false, false
	}
	at, _, ok := stateSubScaledFinite32(stateOld(v).Float32s(), g.Float32s(), float32(sc[0]))
	return at < 0, ok
}

// stateAdamFinite is the stateFiniteCheck of ApplyAdam for float32.
func stateAdamFinite(v [4]*tensor.Tensor, g *tensor.Tensor, sc [8]float64) (finite, ok bool) {
	if g.DType() != tensor.Float32 {
		return false, false
	}
	lrT := sc[2] * math.Sqrt(1-sc[1]) / (1 - sc[0]) // as the rule computes it
	return stateAdamFinite32(stateOld(v).Float32s(), v[1].Float32s(), v[2].Float32s(), g.Float32s(),
		float32(lrT), float32(sc[3]), float32(sc[4]), float32(sc[5]))
}

// stateOld is the variable's value before an update: vals[3] when it
// moved (see stateUpdate), else vals[0].
func stateOld(vals [4]*tensor.Tensor) *tensor.Tensor {
	if vals[3] != nil {
		return vals[3]
	}
	return vals[0]
}

func stateApply(c *kernel.Context, nRefs, gradIdx int, moving bool, update stateUpdate, check stateFiniteCheck) error {
	v := c.Ref(0)
	dt, shape := v.DType(), v.Shape()
	if !dt.IsFloat() {
		return c.Errorf("variable %q must be float32 or float64, got %v", v.Name(), dt)
	}
	// Fixed-size arrays keep a step's updates free of allocations (at most
	// three refs and six scalars, ApplyRMSProp's and ApplyAdam's).
	var refsBuf [4]*kernel.Variable
	var scalarsBuf [8]float64
	var valsBuf [4]*tensor.Tensor
	refs := refsBuf[:nRefs]
	if err := matchRefs(c, refs); err != nil {
		return err
	}
	g := c.Input(gradIdx)
	if g.DType() != dt || !shape.Equal(g.StaticShape()) {
		return c.Errorf("gradient %v%v does not match variable %q of %v%v", g.DType(), g.StaticShape(), v.Name(), dt, shape)
	}
	guard := c.RefusesNonFinite()
	if guard && check == nil {
		// Inputs named first; statePreflight then finds the overflows.
		if err := stateCheckInputs(c, v, nRefs); err != nil {
			return err
		}
	}
	scalars := scalarsBuf[:0]
	for i := nRefs; i < len(c.Inputs); i++ {
		if i == gradIdx {
			continue
		}
		t := c.Input(i)
		if t.DType() != dt || t.NumElements() != 1 {
			return c.Errorf("input %d must be a %v scalar, got %v%v", i, dt, t.DType(), t.StaticShape())
		}
		scalars = append(scalars, t.Float64At(0))
	}
	vals := valsBuf[:nRefs]
	moving = moving && dt == tensor.Float32
	for i, r := range refs {
		var val, src *tensor.Tensor
		var err error
		if i == 0 && moving {
			// The variable is the tensor readers share (the slots are
			// private): if it moves, the rule reads its old value
			// instead of a copy.
			val, src, err = r.LockValueMoving()
			if src != val {
				valsBuf[3] = src
			}
		} else {
			val, err = r.LockValue()
		}
		if err != nil {
			for _, locked := range refs[:i] {
				locked.UnlockValue()
			}
			return stateWrap(c, err)
		}
		vals[i] = val
	}
	defer stateUnlockAll(refs)
	if guard {
		if err := stateGuardApply(c, refs, valsBuf, g, scalarsBuf, update, check); err != nil {
			if valsBuf[3] != nil {
				// The variable moved to a buffer the update has not
				// written: it gets its old value back.
				_ = valsBuf[0].CopyFrom(valsBuf[3])
			}
			return err
		}
	}
	update(valsBuf, g, scalarsBuf)
	return nil
}

// stateGuardApply tells, before an update writes anything, whether it
// may: an error naming a non-finite input (for a check that stores
// nothing, only once it finds a bad result), or the variable or slot and
// the element that finite inputs would make non-finite.
func stateGuardApply(c *kernel.Context, refs []*kernel.Variable, vals [4]*tensor.Tensor, g *tensor.Tensor, sc [8]float64,
	update stateUpdate, check stateFiniteCheck) error {
	if check != nil {
		if finite, ok := check(vals, g, sc); ok && finite {
			return nil
		}
		// Not finite, or cannot tell: the inputs are named first, and
		// statePreflight finds what would overflow.
		if err := stateCheckInputs(c, refs[0], len(refs)); err != nil {
			return err
		}
	}
	if ref, at, bad := statePreflight(vals, len(refs), g, sc, update); ref >= 0 {
		return stateOverflow(c, refs, ref, at, bad)
	}
	return nil
}

func stateUnlockAll(refs []*kernel.Variable) {
	for _, r := range refs {
		r.UnlockValue()
	}
}

// matchRefs fills refs with the node's first len(refs) ref inputs, which
// must be distinct variables (locking one twice would deadlock) of the
// dtype and shape of the first: an update's variable and its slots.
func matchRefs(c *kernel.Context, refs []*kernel.Variable) error {
	v := c.Ref(0)
	dt, shape := v.DType(), v.Shape()
	for i := range refs {
		r := c.Ref(i)
		if r.DType() != dt || !r.Shape().Equal(shape) {
			return c.Errorf("input %d: variable %q of %v%v does not match variable %q of %v%v",
				i, r.Name(), r.DType(), r.Shape(), v.Name(), dt, shape)
		}
		for _, prev := range refs[:i] {
			if prev == r {
				return c.Errorf("variable %q is passed twice", r.Name())
			}
		}
		refs[i] = r
	}
	return nil
}
