package cpu

import (
	"math"
	"slices"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// Element-wise unary ops, Cast, Select, SelectV2 and AddN.

type mathUnaryOp int

const (
	mathNeg mathUnaryOp = iota
	mathAbs
	mathSign
	mathSquare
	mathExp
	mathLog
	mathSqrt
	mathRsqrt
	mathReciprocal
)

// mathUnarySigned computes o = op(x) for the ops defined on every signed
// type. The switch is outside the loops so that each loop is tight.
func mathUnarySigned[T mathSigned](op mathUnaryOp, o, x []T) {
	x = x[:len(o)]
	switch op {
	case mathNeg:
		for i, v := range x {
			o[i] = -v
		}
	case mathAbs:
		for i, v := range x {
			if v < 0 {
				v = -v
			}
			o[i] = v
		}
	case mathSign:
		for i, v := range x {
			switch {
			case v > 0:
				o[i] = 1
			case v < 0:
				o[i] = T(0) - 1
			default:
				o[i] = v // keeps 0 and NaN
			}
		}
	case mathSquare:
		for i, v := range x {
			o[i] = v * v
		}
	}
}

// mathUnaryFloat computes o = op(x) for any unary op on a float type.
func mathUnaryFloat[T mathFloat](op mathUnaryOp, o, x []T) {
	x = x[:len(o)]
	switch op {
	case mathExp:
		for i, v := range x {
			o[i] = T(math.Exp(float64(v)))
		}
	case mathLog:
		for i, v := range x {
			o[i] = T(math.Log(float64(v)))
		}
	case mathSqrt:
		for i, v := range x {
			o[i] = T(math.Sqrt(float64(v)))
		}
	case mathRsqrt:
		for i, v := range x {
			o[i] = T(1 / math.Sqrt(float64(v)))
		}
	case mathReciprocal:
		for i, v := range x {
			o[i] = 1 / v
		}
	default:
		mathUnarySigned(op, o, x)
	}
}

// mathUnaryCost is a rough cost per element, for ParallelFor.
func mathUnaryCost(op mathUnaryOp) int {
	if op >= mathExp {
		return 20
	}
	return 1
}

func mathRegisterUnary(name string, op mathUnaryOp) {
	cost := mathUnaryCost(op)
	kernel.Register(name, kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		x := c.Inputs[0]
		o := c.Alloc(0, x.DType(), x.Shape()...)
		n := x.NumElements()
		switch x.DType() {
		case tensor.Float32:
			xs, os := x.Float32s(), o.Float32s()
			if kernel.Serial(n, cost) { // no closure to allocate
				mathUnaryFloat(op, os, xs)
			} else {
				kernel.ParallelFor(n, cost, func(lo, hi int) { mathUnaryFloat(op, os[lo:hi], xs[lo:hi]) })
			}
		case tensor.Float64:
			xs, os := x.Float64s(), o.Float64s()
			if kernel.Serial(n, cost) {
				mathUnaryFloat(op, os, xs)
			} else {
				kernel.ParallelFor(n, cost, func(lo, hi int) { mathUnaryFloat(op, os[lo:hi], xs[lo:hi]) })
			}
		case tensor.Int32:
			if op >= mathExp {
				return c.Errorf("%s: unsupported dtype %v", name, x.DType())
			}
			mathUnarySigned(op, o.Int32s(), x.Int32s())
		case tensor.Int64:
			if op >= mathExp {
				return c.Errorf("%s: unsupported dtype %v", name, x.DType())
			}
			mathUnarySigned(op, o.Int64s(), x.Int64s())
		default:
			return c.Errorf("%s: unsupported dtype %v", name, x.DType())
		}
		return nil
	}))
}

// mathCastSlice converts between numeric slices with Go conversion rules
// (floats to integers truncate toward zero).
func mathCastSlice[D, S mathNumber](dst []D, src []S) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = D(v)
	}
}

// mathCastTo converts src (any dtype) into dst.
func mathCastTo[D mathNumber](dst []D, src *tensor.Tensor) {
	switch s := src.Data().(type) {
	case []float32:
		mathCastSlice(dst, s)
	case []float64:
		mathCastSlice(dst, s)
	case []int32:
		mathCastSlice(dst, s)
	case []int64:
		mathCastSlice(dst, s)
	case []uint8:
		mathCastSlice(dst, s)
	case []bool:
		for i, v := range s {
			if v {
				dst[i] = 1
			} else {
				dst[i] = 0
			}
		}
	}
}

func mathCastKernel(c *kernel.Context) error {
	x := c.Inputs[0]
	dt := c.Node.AttrDType("dtype")
	if !dt.Valid() {
		return c.Errorf("Cast: invalid target dtype %v", dt)
	}
	if dt == x.DType() {
		c.SetOutput(0, x) // tensors are immutable once produced: share it
		return nil
	}
	if dt.IsHalf() || x.DType().IsHalf() {
		return castHalf(c, x, dt)
	}
	o := c.Alloc(0, dt, x.Shape()...)
	switch d := o.Data().(type) {
	case []float32:
		mathCastTo(d, x)
	case []float64:
		mathCastTo(d, x)
	case []int32:
		mathCastTo(d, x)
	case []int64:
		mathCastTo(d, x)
	case []uint8:
		mathCastTo(d, x)
	case []bool:
		for i := range d {
			d[i] = x.Float64At(i) != 0
		}
	}
	return nil
}

// mathBroadcastTensor returns x broadcast to shape, or x itself when it
// already has that shape.
func mathBroadcastTensor(x *tensor.Tensor, shape []int) (*tensor.Tensor, error) {
	if slices.Equal(x.Shape(), shape) {
		return x, nil
	}
	p, err := mathNewBcast(x.Shape(), shape)
	if err != nil || !slices.Equal(p.out, shape) {
		return nil, mathErrBroadcastTo(x.Shape(), shape)
	}
	o := tensor.New(x.DType(), shape...)
	mathBroadcastInto(p, x, o)
	return o, nil
}

// mathBroadcastInto writes x broadcast under plan p into o.
func mathBroadcastInto(p *mathBcast, x, o *tensor.Tensor) {
	switch d := o.Data().(type) {
	case []float32:
		mathBroadcastCopy(p, d, x.Float32s())
	case []float64:
		mathBroadcastCopy(p, d, x.Float64s())
	case []int32:
		mathBroadcastCopy(p, d, x.Int32s())
	case []int64:
		mathBroadcastCopy(p, d, x.Int64s())
	case []uint8:
		mathBroadcastCopy(p, d, x.Uint8s())
	case []bool:
		mathBroadcastCopy(p, d, x.Bools())
	}
}

func mathSelect[T any](o []T, cond []bool, a, b []T) {
	cond, a, b = cond[:len(o)], a[:len(o)], b[:len(o)]
	for i, c := range cond {
		if c {
			o[i] = a[i]
		} else {
			o[i] = b[i]
		}
	}
}

// mathSelectTypes checks the dtypes of Select and SelectV2.
func mathSelectTypes(c *kernel.Context, name string) error {
	cond, t, e := c.Inputs[0], c.Inputs[1], c.Inputs[2]
	if cond.DType() != tensor.Bool || t.DType() != e.DType() {
		return c.Errorf("%s: want a bool condition and values of one dtype, got %v, %v and %v", name, cond.DType(), t.DType(), e.DType())
	}
	return nil
}

// mathSelectKernel is Select with TensorFlow 1's rules (see
// op.MathSelectRows): a scalar cond picks all of t or e, a vector cond
// rows of them, a cond of their shape elements. It never broadcasts.
func mathSelectKernel(c *kernel.Context) error {
	if err := mathSelectTypes(c, "Select"); err != nil {
		return err
	}
	cond, t, e := c.Inputs[0], c.Inputs[1], c.Inputs[2]
	if !slices.Equal(t.Shape(), e.Shape()) {
		return c.Errorf("Select: t and e must have the same shape, got %v and %v", t.StaticShape(), e.StaticShape())
	}
	rows, err := op.MathSelectRows(cond.StaticShape(), t.StaticShape())
	if err != nil {
		return c.Errorf("Select: %w", err)
	}
	o := c.AllocUninit(0, t.DType(), t.Shape()...)
	if cond.Rank() == 0 || rows {
		// Whole rows (one row when cond is a scalar) of t or e.
		ob, tb, eb := arrayBytes(o), arrayBytes(t), arrayBytes(e)
		cs := cond.Bools()
		if len(cs) == 0 {
			return nil
		}
		row := len(ob) / len(cs)
		for i, v := range cs {
			src := eb
			if v {
				src = tb
			}
			copy(ob[i*row:(i+1)*row], src[i*row:(i+1)*row])
		}
		return nil
	}
	mathSelectElems(o, cond.Bools(), t, e)
	return nil
}

// mathSelectElems sets o[i] = cond[i] ? t[i] : e[i]; all have one size.
func mathSelectElems(o *tensor.Tensor, cs []bool, t, e *tensor.Tensor) {
	switch d := o.Data().(type) {
	case []float32:
		mathSelect(d, cs, t.Float32s(), e.Float32s())
	case []float64:
		mathSelect(d, cs, t.Float64s(), e.Float64s())
	case []int32:
		mathSelect(d, cs, t.Int32s(), e.Int32s())
	case []int64:
		mathSelect(d, cs, t.Int64s(), e.Int64s())
	case []uint8:
		mathSelect(d, cs, t.Uint8s(), e.Uint8s())
	case []bool:
		mathSelect(d, cs, t.Bools(), e.Bools())
	}
}

// mathSelectV2Kernel is SelectV2: cond, t and e broadcast together.
func mathSelectV2Kernel(c *kernel.Context) error {
	if err := mathSelectTypes(c, "SelectV2"); err != nil {
		return err
	}
	cond, t, e := c.Inputs[0], c.Inputs[1], c.Inputs[2]
	pte, err := mathNewBcast(t.Shape(), e.Shape())
	if err != nil {
		return c.Errorf("SelectV2: t and e: %w", err)
	}
	p, err := mathNewBcast(cond.Shape(), pte.out)
	if err != nil {
		return c.Errorf("SelectV2: cond: %w", err)
	}
	// Broadcasting is rare here: materialise the operands when shapes differ.
	var ts [3]*tensor.Tensor
	for i, x := range []*tensor.Tensor{cond, t, e} {
		if ts[i], err = mathBroadcastTensor(x, p.out); err != nil {
			return c.Errorf("SelectV2: %w", err)
		}
	}
	o := c.AllocUninit(0, t.DType(), p.out...)
	mathSelectElems(o, ts[0].Bools(), ts[1], ts[2])
	return nil
}

// mathAddN sums xs into o, several inputs per pass over o.
func mathAddN[T mathNumber](o []T, xs [][]T) {
	kernel.ParallelFor(len(o), len(xs), func(lo, hi int) {
		out := o[lo:hi]
		copy(out, xs[0][lo:hi])
		for _, x := range xs[1:] {
			x = x[lo:hi]
			for i := range out {
				out[i] += x[i]
			}
		}
	})
}

func mathAddNKernel(c *kernel.Context) error {
	in := c.Inputs
	if len(in) == 0 {
		return c.Errorf("AddN: no inputs")
	}
	for i, x := range in[1:] {
		if x.DType() != in[0].DType() || !slices.Equal(x.Shape(), in[0].Shape()) {
			return c.Errorf("AddN: input %d is %v%v, input 0 is %v%v", i+1,
				x.DType(), x.StaticShape(), in[0].DType(), in[0].StaticShape())
		}
	}
	if len(in) == 1 {
		c.SetOutput(0, in[0])
		return nil
	}
	o := c.Alloc(0, in[0].DType(), in[0].Shape()...)
	switch d := o.Data().(type) {
	case []float32:
		mathAddN(d, mathSlices[float32](in))
	case []float64:
		mathAddN(d, mathSlices[float64](in))
	case []int32:
		mathAddN(d, mathSlices[int32](in))
	case []int64:
		mathAddN(d, mathSlices[int64](in))
	default:
		return c.Errorf("AddN: unsupported dtype %v", in[0].DType())
	}
	return nil
}

// mathSlices returns the data of each tensor, all of element type T.
func mathSlices[T mathElem](ts []*tensor.Tensor) [][]T {
	out := make([][]T, len(ts))
	for i, t := range ts {
		out[i] = t.Data().([]T)
	}
	return out
}

func init() {
	for name, op := range map[string]mathUnaryOp{
		"Neg": mathNeg, "Abs": mathAbs, "Sign": mathSign, "Square": mathSquare, "Exp": mathExp,
		"Log": mathLog, "Sqrt": mathSqrt, "Rsqrt": mathRsqrt, "Reciprocal": mathReciprocal,
	} {
		mathRegisterUnary(name, op)
	}
	kernel.Register("LogicalNot", kernel.CPU, kernel.Simple(func(c *kernel.Context) error {
		x := c.Inputs[0]
		if x.DType() != tensor.Bool {
			return c.Errorf("LogicalNot: want bool, got %v", x.DType())
		}
		o := c.Alloc(0, tensor.Bool, x.Shape()...).Bools()
		for i, v := range x.Bools() {
			o[i] = !v
		}
		return nil
	}))
	kernel.Register("Cast", kernel.CPU, kernel.Simple(mathCastKernel))
	kernel.Register("Select", kernel.CPU, kernel.Simple(mathSelectKernel))
	kernel.Register("SelectV2", kernel.CPU, kernel.Simple(mathSelectV2Kernel))
	kernel.Register("AddN", kernel.CPU, kernel.Simple(mathAddNKernel))
}
