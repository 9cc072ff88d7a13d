package cpu

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/distflow/distflow/graph"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// Broadcasting binary ops.
//
// Every broadcast is reduced to "runs": contiguous stretches of the innermost
// (collapsed) axis where each operand is either a vector or a single scalar.
// Same-shape and scalar-with-tensor operands collapse to one run split across
// the cores; [n,k] op [k] becomes n runs of k; anything else walks the outer
// axes with precomputed strides, once per run, never per element.

// Element type constraints of the math kernels.
type (
	mathElem interface {
		~float32 | ~float64 | ~int32 | ~int64 | ~uint8 | ~bool
	}
	mathNumber interface {
		~float32 | ~float64 | ~int32 | ~int64 | ~uint8
	}
	mathSigned interface {
		~float32 | ~float64 | ~int32 | ~int64
	}
	mathFloat interface{ ~float32 | ~float64 }
)

// mathBcast is the plan of a numpy broadcast of two shapes: the output shape,
// and the collapsed axes (adjacent axes that broadcast alike merged, size-1
// output axes dropped) with each operand's element stride (0 = broadcast).
type mathBcast struct {
	out    []int
	n      int
	dims   []int
	sa, sb []int
}

// mathNewBcast plans the broadcast of shapes a and b.
func mathNewBcast(a, b []int) (*mathBcast, error) {
	bp, err := tensor.PlanBroadcast(a, b)
	if err != nil {
		return nil, err
	}
	return &mathBcast{out: bp.Out, n: tensor.NumElements(bp.Out), dims: bp.Dims, sa: bp.StrideA, sb: bp.StrideB}, nil
}

// runLen is the length of one run (the innermost collapsed axis).
func (p *mathBcast) runLen() int { return p.dims[len(p.dims)-1] }

// forRuns calls fn with the output, a and b offsets of runs [lo, hi).
func (p *mathBcast) forRuns(lo, hi int, fn func(o, a, b int)) {
	outer := len(p.dims) - 1
	L := p.dims[outer]
	var idxBuf [8]int
	var idx []int
	if outer <= len(idxBuf) {
		idx = idxBuf[:outer]
	} else {
		idx = make([]int, outer)
	}
	ao, bo := 0, 0
	for i, r := outer-1, lo; i >= 0; i-- {
		idx[i] = r % p.dims[i]
		r /= p.dims[i]
		ao += idx[i] * p.sa[i]
		bo += idx[i] * p.sb[i]
	}
	for run := lo; run < hi; run++ {
		fn(run*L, ao, bo)
		for i := outer - 1; i >= 0; i-- {
			idx[i]++
			ao += p.sa[i]
			bo += p.sb[i]
			if idx[i] < p.dims[i] {
				break
			}
			ao -= idx[i] * p.sa[i]
			bo -= idx[i] * p.sb[i]
			idx[i] = 0
		}
	}
}

// mathVec holds the three run loops of a binary op: vector-vector,
// scalar-vector and vector-scalar. Each writes len(o) results.
type mathVec[T, O any] struct {
	vv   func(o []O, a, b []T)
	sv   func(o []O, a T, b []T)
	vs   func(o []O, a []T, b T)
	cost int // rough cost per element, for ParallelFor
}

// mathApply computes o = a op b under plan p. Small ops run inline
// without building the closure ParallelFor needs (a heap allocation).
func mathApply[T, O any](p *mathBcast, v mathVec[T, O], o []O, a, b []T) {
	if p.n == 0 {
		return
	}
	if len(p.dims) == 1 {
		if kernel.Serial(p.n, v.cost) {
			mathApplyFlat(p, v, o, a, b, 0, p.n)
			return
		}
		kernel.ParallelFor(p.n, v.cost, func(lo, hi int) { mathApplyFlat(p, v, o, a, b, lo, hi) })
		return
	}
	L := p.runLen()
	if kernel.Serial(p.n/L, L*v.cost) {
		mathApplyRuns(p, v, o, a, b, 0, p.n/L)
		return
	}
	kernel.ParallelFor(p.n/L, L*v.cost, func(lo, hi int) { mathApplyRuns(p, v, o, a, b, lo, hi) })
}

// mathApplyFlat computes elements [lo, hi) of a plan with a single axis.
func mathApplyFlat[T, O any](p *mathBcast, v mathVec[T, O], o []O, a, b []T, lo, hi int) {
	aVec, bVec := p.sa[0] != 0, p.sb[0] != 0
	switch {
	case aVec && bVec:
		v.vv(o[lo:hi], a[lo:hi], b[lo:hi])
	case bVec:
		v.sv(o[lo:hi], a[0], b[lo:hi])
	default:
		v.vs(o[lo:hi], a[lo:hi], b[0])
	}
}

// mathApplyRuns computes runs [lo, hi) of plan p.
func mathApplyRuns[T, O any](p *mathBcast, v mathVec[T, O], o []O, a, b []T, lo, hi int) {
	last := len(p.dims) - 1
	L := p.dims[last]
	aVec, bVec := p.sa[last] != 0, p.sb[last] != 0
	p.forRuns(lo, hi, func(oo, ao, bo int) {
		switch {
		case aVec && bVec:
			v.vv(o[oo:oo+L], a[ao:ao+L], b[bo:bo+L])
		case bVec:
			v.sv(o[oo:oo+L], a[ao], b[bo:bo+L])
		default:
			v.vs(o[oo:oo+L], a[ao:ao+L], b[bo])
		}
	})
}

// mathBroadcastCopy writes a, broadcast under plan p (whose b side is the
// target shape itself), into o.
func mathBroadcastCopy[T any](p *mathBcast, o, a []T) {
	if p.n == 0 {
		return
	}
	L := p.runLen()
	if kernel.Serial(p.n/L, L) {
		mathBroadcastRuns(p, o, a, 0, p.n/L)
		return
	}
	kernel.ParallelFor(p.n/L, L, func(lo, hi int) { mathBroadcastRuns(p, o, a, lo, hi) })
}

func mathBroadcastRuns[T any](p *mathBcast, o, a []T, lo, hi int) {
	L := p.runLen()
	aVec := p.sa[len(p.dims)-1] != 0
	p.forRuns(lo, hi, func(oo, ao, _ int) {
		if aVec {
			copy(o[oo:oo+L], a[ao:ao+L])
			return
		}
		s, v := o[oo:oo+L], a[ao]
		for i := range s {
			s[i] = v
		}
	})
}

// mathPlans caches the broadcast plan of one node: its input shapes are
// usually the same step after step, and planning allocates.
type mathPlans struct{ last atomic.Pointer[mathPlanEntry] }

type mathPlanEntry struct {
	a, b []int
	p    *mathBcast
}

// plan returns the plan of shapes a and b (immutable, shared by steps).
func (c *mathPlans) plan(a, b []int) (*mathBcast, error) {
	if e := c.last.Load(); e != nil && slices.Equal(e.a, a) && slices.Equal(e.b, b) {
		return e.p, nil
	}
	p, err := mathNewBcast(a, b)
	if err != nil {
		return nil, err
	}
	c.last.Store(&mathPlanEntry{a: slices.Clone(a), b: slices.Clone(b), p: p})
	return p, nil
}

// mathVecOf builds the run loops of an op from its scalar function. The
// function call per element makes it the choice for the less frequent ops;
// the training hot paths have hand-written loops below.
func mathVecOf[T, O any](f func(a, b T) O, cost int) mathVec[T, O] {
	return mathVec[T, O]{
		vv: func(o []O, a, b []T) {
			b = b[:len(o)]
			a = a[:len(o)]
			for i := range o {
				o[i] = f(a[i], b[i])
			}
		},
		sv: func(o []O, a T, b []T) {
			b = b[:len(o)]
			for i := range o {
				o[i] = f(a, b[i])
			}
		},
		vs: func(o []O, a []T, b T) {
			a = a[:len(o)]
			for i := range o {
				o[i] = f(a[i], b)
			}
		},
		cost: cost,
	}
}

func mathAddVec[T mathNumber]() mathVec[T, T] {
	return mathVec[T, T]{
		vv: func(o, a, b []T) {
			a, b = a[:len(o)], b[:len(o)]
			for i := range o {
				o[i] = a[i] + b[i]
			}
		},
		sv: func(o []T, a T, b []T) {
			b = b[:len(o)]
			for i := range o {
				o[i] = a + b[i]
			}
		},
		vs: func(o, a []T, b T) {
			a = a[:len(o)]
			for i := range o {
				o[i] = a[i] + b
			}
		},
		cost: 1,
	}
}

func mathSubVec[T mathNumber]() mathVec[T, T] {
	return mathVec[T, T]{
		vv: func(o, a, b []T) {
			a, b = a[:len(o)], b[:len(o)]
			for i := range o {
				o[i] = a[i] - b[i]
			}
		},
		sv: func(o []T, a T, b []T) {
			b = b[:len(o)]
			for i := range o {
				o[i] = a - b[i]
			}
		},
		vs: func(o, a []T, b T) {
			a = a[:len(o)]
			for i := range o {
				o[i] = a[i] - b
			}
		},
		cost: 1,
	}
}

func mathMulVec[T mathNumber]() mathVec[T, T] {
	return mathVec[T, T]{
		vv: func(o, a, b []T) {
			a, b = a[:len(o)], b[:len(o)]
			for i := range o {
				o[i] = a[i] * b[i]
			}
		},
		sv: func(o []T, a T, b []T) {
			b = b[:len(o)]
			for i := range o {
				o[i] = a * b[i]
			}
		},
		vs: func(o, a []T, b T) {
			a = a[:len(o)]
			for i := range o {
				o[i] = a[i] * b
			}
		},
		cost: 1,
	}
}

// mathDivVec divides; integer callers must have rejected zero divisors.
func mathDivVec[T mathNumber]() mathVec[T, T] {
	return mathVec[T, T]{
		vv: func(o, a, b []T) {
			a, b = a[:len(o)], b[:len(o)]
			for i := range o {
				o[i] = a[i] / b[i]
			}
		},
		sv: func(o []T, a T, b []T) {
			b = b[:len(o)]
			for i := range o {
				o[i] = a / b[i]
			}
		},
		vs: func(o, a []T, b T) {
			a = a[:len(o)]
			for i := range o {
				o[i] = a[i] / b
			}
		},
		cost: 2,
	}
}

func mathSquaredDiffVec[T mathNumber]() mathVec[T, T] {
	return mathVec[T, T]{
		vv: func(o, a, b []T) {
			a, b = a[:len(o)], b[:len(o)]
			for i := range o {
				d := a[i] - b[i]
				o[i] = d * d
			}
		},
		sv: func(o []T, a T, b []T) {
			b = b[:len(o)]
			for i := range o {
				d := a - b[i]
				o[i] = d * d
			}
		},
		vs: func(o, a []T, b T) {
			a = a[:len(o)]
			for i := range o {
				d := a[i] - b
				o[i] = d * d
			}
		},
		cost: 1,
	}
}

func mathMaximumVec[T mathNumber]() mathVec[T, T] {
	return mathVec[T, T]{
		vv: func(o, a, b []T) {
			a, b = a[:len(o)], b[:len(o)]
			for i := range o {
				o[i] = max(a[i], b[i])
			}
		},
		sv: func(o []T, a T, b []T) {
			b = b[:len(o)]
			for i := range o {
				o[i] = max(a, b[i])
			}
		},
		vs: func(o, a []T, b T) {
			a = a[:len(o)]
			for i := range o {
				o[i] = max(a[i], b)
			}
		},
		cost: 1,
	}
}

func mathMinimumVec[T mathNumber]() mathVec[T, T] {
	return mathVec[T, T]{
		vv: func(o, a, b []T) {
			a, b = a[:len(o)], b[:len(o)]
			for i := range o {
				o[i] = min(a[i], b[i])
			}
		},
		sv: func(o []T, a T, b []T) {
			b = b[:len(o)]
			for i := range o {
				o[i] = min(a, b[i])
			}
		},
		vs: func(o, a []T, b T) {
			a = a[:len(o)]
			for i := range o {
				o[i] = min(a[i], b)
			}
		},
		cost: 1,
	}
}

// mathBinFn runs one binary op on concrete tensors of one dtype.
type mathBinFn func(p *mathBcast, a, b, o *tensor.Tensor)

func mathBin[T, O mathElem](v mathVec[T, O]) mathBinFn {
	return func(p *mathBcast, a, b, o *tensor.Tensor) {
		mathApply(p, v, o.Data().([]O), a.Data().([]T), b.Data().([]T))
	}
}

// mathArithFns instantiates a hot op for the arithmetic dtypes.
func mathArithFns(f32 mathVec[float32, float32], f64 mathVec[float64, float64],
	i32 mathVec[int32, int32], i64 mathVec[int64, int64]) map[tensor.DType]mathBinFn {
	return map[tensor.DType]mathBinFn{
		tensor.Float32: mathBin(f32), tensor.Float64: mathBin(f64),
		tensor.Int32: mathBin(i32), tensor.Int64: mathBin(i64),
	}
}

func mathGreater[T mathNumber](a, b T) bool      { return a > b }
func mathGreaterEqual[T mathNumber](a, b T) bool { return a >= b }
func mathLess[T mathNumber](a, b T) bool         { return a < b }
func mathLessEqual[T mathNumber](a, b T) bool    { return a <= b }
func mathEqual[T mathElem](a, b T) bool          { return a == b }
func mathNotEqual[T mathElem](a, b T) bool       { return a != b }

// mathCmpFns instantiates a comparison for the ordered dtypes, given one
// instantiation per dtype (Go cannot pass an uninstantiated generic function).
func mathCmpFns(f32 func(a, b float32) bool, f64 func(a, b float64) bool, i32 func(a, b int32) bool,
	i64 func(a, b int64) bool, u8 func(a, b uint8) bool) map[tensor.DType]mathBinFn {
	return map[tensor.DType]mathBinFn{
		tensor.Float32: mathBin(mathVecOf(f32, 1)), tensor.Float64: mathBin(mathVecOf(f64, 1)),
		tensor.Int32: mathBin(mathVecOf(i32, 1)), tensor.Int64: mathBin(mathVecOf(i64, 1)),
		tensor.Uint8: mathBin(mathVecOf(u8, 1)),
	}
}

// mathIntDivCheck rejects integer division by zero, which would panic.
func mathIntDivCheck(b *tensor.Tensor) error {
	if !b.DType().IsInteger() {
		return nil
	}
	for i := 0; i < b.NumElements(); i++ {
		if b.Float64At(i) == 0 {
			return fmt.Errorf("integer division by zero (element %d of the divisor)", i)
		}
	}
	return nil
}

func init() {
	type binary struct {
		name  string
		out   tensor.DType // Invalid: the input dtype
		fns   map[tensor.DType]mathBinFn
		check func(b *tensor.Tensor) error
	}
	eq := mathCmpFns(mathEqual[float32], mathEqual[float64], mathEqual[int32], mathEqual[int64], mathEqual[uint8])
	eq[tensor.Bool] = mathBin(mathVecOf(mathEqual[bool], 1))
	ne := mathCmpFns(mathNotEqual[float32], mathNotEqual[float64], mathNotEqual[int32], mathNotEqual[int64], mathNotEqual[uint8])
	ne[tensor.Bool] = mathBin(mathVecOf(mathNotEqual[bool], 1))
	for _, op := range []binary{
		{name: "Add", fns: mathArithFns(mathAddVec[float32](), mathAddVec[float64](), mathAddVec[int32](), mathAddVec[int64]())},
		{name: "Sub", fns: mathArithFns(mathSubVec[float32](), mathSubVec[float64](), mathSubVec[int32](), mathSubVec[int64]())},
		{name: "Mul", fns: mathArithFns(mathMulVec[float32](), mathMulVec[float64](), mathMulVec[int32](), mathMulVec[int64]())},
		{name: "Div", fns: mathArithFns(mathDivVec[float32](), mathDivVec[float64](), mathDivVec[int32](), mathDivVec[int64]()),
			check: mathIntDivCheck},
		{name: "Maximum", fns: mathArithFns(mathMaximumVec[float32](), mathMaximumVec[float64](), mathMaximumVec[int32](), mathMaximumVec[int64]())},
		{name: "Minimum", fns: mathArithFns(mathMinimumVec[float32](), mathMinimumVec[float64](), mathMinimumVec[int32](), mathMinimumVec[int64]())},
		{name: "SquaredDifference", fns: mathArithFns(mathSquaredDiffVec[float32](), mathSquaredDiffVec[float64](),
			mathSquaredDiffVec[int32](), mathSquaredDiffVec[int64]())},
		{name: "Pow", fns: map[tensor.DType]mathBinFn{
			tensor.Float32: mathBin(mathVecOf(func(a, b float32) float32 { return float32(math.Pow(float64(a), float64(b))) }, 20)),
			tensor.Float64: mathBin(mathVecOf(math.Pow, 20)),
		}},
		{name: "Greater", out: tensor.Bool, fns: mathCmpFns(mathGreater[float32], mathGreater[float64], mathGreater[int32], mathGreater[int64], mathGreater[uint8])},
		{name: "GreaterEqual", out: tensor.Bool, fns: mathCmpFns(mathGreaterEqual[float32], mathGreaterEqual[float64],
			mathGreaterEqual[int32], mathGreaterEqual[int64], mathGreaterEqual[uint8])},
		{name: "Less", out: tensor.Bool, fns: mathCmpFns(mathLess[float32], mathLess[float64], mathLess[int32], mathLess[int64], mathLess[uint8])},
		{name: "LessEqual", out: tensor.Bool, fns: mathCmpFns(mathLessEqual[float32], mathLessEqual[float64],
			mathLessEqual[int32], mathLessEqual[int64], mathLessEqual[uint8])},
		{name: "Equal", out: tensor.Bool, fns: eq},
		{name: "NotEqual", out: tensor.Bool, fns: ne},
		{name: "LogicalAnd", out: tensor.Bool, fns: map[tensor.DType]mathBinFn{
			tensor.Bool: mathBin(mathVecOf(func(a, b bool) bool { return a && b }, 1))}},
		{name: "LogicalOr", out: tensor.Bool, fns: map[tensor.DType]mathBinFn{
			tensor.Bool: mathBin(mathVecOf(func(a, b bool) bool { return a || b }, 1))}},
	} {
		kernel.Register(op.name, kernel.CPU, func(*graph.Node) (kernel.Kernel, error) {
			plans := new(mathPlans)
			return kernel.Func(func(c *kernel.Context) error {
				a, b := c.Inputs[0], c.Inputs[1]
				fn := op.fns[a.DType()]
				if fn == nil || b.DType() != a.DType() {
					return c.Errorf("%s: unsupported dtypes %v and %v", op.name, a.DType(), b.DType())
				}
				p, err := plans.plan(a.Shape(), b.Shape())
				if err != nil {
					return c.Errorf("%s: %w", op.name, err)
				}
				if op.check != nil {
					if err := op.check(b); err != nil {
						return c.Errorf("%s: %w", op.name, err)
					}
				}
				dt := op.out
				if dt == tensor.Invalid {
					dt = a.DType()
				}
				fn(p, a, b, c.AllocUninit(0, dt, p.out...))
				return nil
			}), nil
		})
	}
}
