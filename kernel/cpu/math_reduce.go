package cpu

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// Reductions, ArgMax/ArgMin, BroadcastTo and SumToShape.
//
// A reduction first merges adjacent axes that are alike (all reduced or all
// kept) and drops size-1 axes, so that most reductions become one view
// [A, R, B] reduced over R: last axis (B = 1: one contiguous row per output)
// or first axis (A = 1: rows of B accumulated element-wise). Reductions over
// several separate groups of axes reduce one group after the other.

type mathReduceKind int

const (
	mathRedSum mathReduceKind = iota
	mathRedProd
	mathRedMax
	mathRedMin
)

// mathIdentity returns the value of reducing nothing.
func mathIdentity[T mathNumber](k mathReduceKind) T {
	var z T
	switch k {
	case mathRedProd:
		return 1
	case mathRedMax:
		return mathLowest[T]()
	case mathRedMin:
		return mathHighest[T]()
	}
	return z
}

func mathLowest[T mathNumber]() T {
	var z T
	switch any(z).(type) {
	case float32:
		return T(float32(math.Inf(-1)))
	case float64:
		return T(math.Inf(-1))
	case int32:
		v := int32(math.MinInt32)
		return T(v)
	case int64:
		v := int64(math.MinInt64)
		return T(v)
	}
	return z // uint8
}

func mathHighest[T mathNumber]() T {
	var z T
	switch any(z).(type) {
	case float32:
		return T(float32(math.Inf(1)))
	case float64:
		return T(math.Inf(1))
	case int32:
		v := int32(math.MaxInt32)
		return T(v)
	case int64:
		v := int64(math.MaxInt64)
		return T(v)
	}
	return T(255)
}

// mathReduceRow reduces a contiguous row. Sums use four accumulators,
// which shortens the dependency chain and the rounding error.
func mathReduceRow[T mathNumber](k mathReduceKind, x []T) T {
	switch k {
	case mathRedSum:
		var s0, s1, s2, s3 T
		i := 0
		for ; i+4 <= len(x); i += 4 {
			s0 += x[i]
			s1 += x[i+1]
			s2 += x[i+2]
			s3 += x[i+3]
		}
		for ; i < len(x); i++ {
			s0 += x[i]
		}
		return (s0 + s1) + (s2 + s3)
	case mathRedProd:
		p := T(1)
		for _, v := range x {
			p *= v
		}
		return p
	case mathRedMax:
		m := mathLowest[T]()
		for _, v := range x {
			if v > m {
				m = v
			}
		}
		return m
	default:
		m := mathHighest[T]()
		for _, v := range x {
			if v < m {
				m = v
			}
		}
		return m
	}
}

// mathCombine folds x into acc element-wise.
func mathCombine[T mathNumber](k mathReduceKind, acc, x []T) {
	x = x[:len(acc)]
	switch k {
	case mathRedSum:
		for i, v := range x {
			acc[i] += v
		}
	case mathRedProd:
		for i, v := range x {
			acc[i] *= v
		}
	case mathRedMax:
		for i, v := range x {
			acc[i] = max(acc[i], v)
		}
	default:
		for i, v := range x {
			acc[i] = min(acc[i], v)
		}
	}
}

// mathReduceARB reduces x, viewed as [A, R, B], over R into out [A, B].
func mathReduceARB[T mathNumber](k mathReduceKind, x []T, A, R, B int, out []T) {
	if A*B == 0 {
		return
	}
	if R == 0 {
		id := mathIdentity[T](k)
		for i := range out {
			out[i] = id
		}
		return
	}
	switch {
	case B == 1 && A == 1 && R >= 1<<15:
		// One long row: reduce parts in parallel, then the partial results
		// (an empty trailing part reduces to the identity).
		parts := runtime.GOMAXPROCS(0)
		partial := make([]T, parts)
		chunk := (R + parts - 1) / parts
		kernel.ParallelFor(parts, chunk, func(lo, hi int) {
			for p := lo; p < hi; p++ {
				partial[p] = mathReduceRow(k, x[min(p*chunk, R):min((p+1)*chunk, R)])
			}
		})
		out[0] = mathReduceRow(k, partial)
	case B == 1 && kernel.Serial(A, R):
		for a := range A { // inline, without a closure to allocate
			out[a] = mathReduceRow(k, x[a*R:(a+1)*R])
		}
	case B == 1:
		kernel.ParallelFor(A, R, func(lo, hi int) {
			for a := lo; a < hi; a++ {
				out[a] = mathReduceRow(k, x[a*R:(a+1)*R])
			}
		})
	case A == 1:
		// Split the columns across cores; each pass reads contiguous segments.
		kernel.ParallelFor(B, R, func(lo, hi int) { mathReduceCols(k, x, R, B, lo, hi, out[lo:hi]) })
	default:
		kernel.ParallelFor(A, R*B, func(lo, hi int) {
			for a := lo; a < hi; a++ {
				mathReduceCols(k, x[a*R*B:(a+1)*R*B], R, B, 0, B, out[a*B:(a+1)*B])
			}
		})
	}
}

// mathReduceCols reduces columns [lo, hi) of x viewed as [R, B] into acc.
func mathReduceCols[T mathNumber](k mathReduceKind, x []T, R, B, lo, hi int, acc []T) {
	copy(acc, x[lo:hi])
	for r := 1; r < R; r++ {
		mathCombine(k, acc, x[r*B+lo:r*B+hi])
	}
}

// mathReduce reduces x of the given shape over the sorted, normalized axes
// into out (the reduced elements in row-major order).
func mathReduce[T mathNumber](k mathReduceKind, x []T, shape, axes []int, out []T) {
	// Merge alike neighbours; size-1 axes belong to either kind, so skip them.
	type group struct {
		size    int
		reduced bool
	}
	var groups []group
	for i, d := range shape {
		if d == 1 {
			continue
		}
		red := slices.Contains(axes, i)
		if n := len(groups); n > 0 && groups[n-1].reduced == red {
			groups[n-1].size *= d
			continue
		}
		groups = append(groups, group{d, red})
	}
	cur := x
	for {
		gi := slices.IndexFunc(groups, func(g group) bool { return g.reduced })
		if gi < 0 {
			copy(out, cur)
			return
		}
		A, B := 1, 1
		for _, g := range groups[:gi] {
			A *= g.size
		}
		for _, g := range groups[gi+1:] {
			B *= g.size
		}
		R := groups[gi].size
		last := !slices.ContainsFunc(groups[gi+1:], func(g group) bool { return g.reduced })
		dst := out
		if !last {
			dst = make([]T, A*B)
		}
		mathReduceARB(k, cur, A, R, B, dst)
		if last {
			return
		}
		cur = dst
		groups = slices.Delete(groups, gi, gi+1)
		// The kept neighbours of the removed group are now adjacent: merge them.
		if gi > 0 && gi < len(groups) {
			groups[gi-1].size *= groups[gi].size
			groups = slices.Delete(groups, gi, gi+1)
		}
	}
}

// mathMeanScale divides the sums in out by count (truncating for integers;
// an empty integer mean stays 0).
func mathMeanScale[T mathNumber](out []T, count int) {
	if count == 0 {
		var z T
		if _, ok := any(z).(float32); !ok {
			if _, ok := any(z).(float64); !ok {
				return
			}
		}
	}
	c := T(count)
	for i := range out {
		out[i] /= c
	}
}

// mathReduceTensor reduces x over the sorted axes into o, with o's element
// count equal to the reduced element count.
func mathReduceTensor(k mathReduceKind, mean bool, x, o *tensor.Tensor, axes []int) error {
	count := 1
	for _, a := range axes {
		count *= x.Shape()[a]
	}
	switch d := o.Data().(type) {
	case []float32:
		mathReduce(k, x.Float32s(), x.Shape(), axes, d)
		if mean {
			// Scale in float64 so that large counts stay exact.
			inv := 1 / float64(count)
			for i := range d {
				d[i] = float32(float64(d[i]) * inv)
			}
		}
	case []float64:
		mathReduce(k, x.Float64s(), x.Shape(), axes, d)
		if mean {
			mathMeanScale(d, count)
		}
	case []int32:
		mathReduce(k, x.Int32s(), x.Shape(), axes, d)
		if mean {
			mathMeanScale(d, count)
		}
	case []int64:
		mathReduce(k, x.Int64s(), x.Shape(), axes, d)
		if mean {
			mathMeanScale(d, count)
		}
	default:
		return fmt.Errorf("unsupported dtype %v", x.DType())
	}
	return nil
}

// reducePlan is what a reduction derives from its input shape; immutable
// once built.
type reducePlan struct {
	in, axes, out []int
}

func mathReduceFactory(name string, k mathReduceKind, mean bool) kernel.Factory {
	return func(n *graph.Node) (kernel.Kernel, error) {
		axisAttr, keep := n.AttrInts("axis"), n.AttrBool("keep_dims")
		// The axes and output shape of the last input shape, kept so that a
		// step with the same shapes as the one before allocates nothing here.
		var last atomic.Pointer[reducePlan]
		return kernel.Func(func(c *kernel.Context) error {
			x := c.Inputs[0]
			plan := last.Load()
			if plan == nil || !slices.Equal(plan.in, x.Shape()) {
				axes, err := op.MathNormalizeAxes(axisAttr, x.Rank())
				if err != nil {
					return c.Errorf("%s: %v (input shape %v)", name, err, x.StaticShape())
				}
				plan = &reducePlan{
					in:   slices.Clone(x.Shape()),
					axes: axes,
					out:  op.MathReducedShape(x.StaticShape(), axes, keep).Dims(),
				}
				last.Store(plan)
			}
			axes := plan.axes
			o := c.Alloc(0, x.DType(), plan.out...)
			if err := mathReduceTensor(k, mean, x, o, axes); err != nil {
				return c.Errorf("%s: %w", name, err)
			}
			return nil
		}), nil
	}
}

// mathArg writes the index of the extreme of x, viewed as [A, R, B], over R.
func mathArg[T mathNumber, I int32 | int64](x []T, A, R, B int, greater bool, out []I) {
	kernel.ParallelFor(A, R*B, func(lo, hi int) {
		for a := lo; a < hi; a++ {
			base := a * R * B
			for b := 0; b < B; b++ {
				best, bi := x[base+b], 0
				for r := 1; r < R; r++ {
					v := x[base+r*B+b]
					if greater && v > best || !greater && v < best {
						best, bi = v, r
					}
				}
				out[a*B+b] = I(bi)
			}
		}
	})
}

func mathArgTyped[I int32 | int64](x *tensor.Tensor, A, R, B int, greater bool, out []I) error {
	switch d := x.Data().(type) {
	case []float32:
		mathArg(d, A, R, B, greater, out)
	case []float64:
		mathArg(d, A, R, B, greater, out)
	case []int32:
		mathArg(d, A, R, B, greater, out)
	case []int64:
		mathArg(d, A, R, B, greater, out)
	case []uint8:
		mathArg(d, A, R, B, greater, out)
	default:
		return fmt.Errorf("unsupported dtype %v", x.DType())
	}
	return nil
}

func mathArgFactory(name string, greater bool) kernel.Factory {
	return func(n *graph.Node) (kernel.Kernel, error) {
		axis, ot := n.AttrInt("axis"), n.AttrDType("output_type")
		return kernel.Func(func(c *kernel.Context) error {
			x := c.Inputs[0]
			if x.Rank() == 0 {
				return c.Errorf("%s: input must have rank >= 1, got shape []", name)
			}
			axes, err := op.MathNormalizeAxes([]int{axis}, x.Rank())
			if err != nil {
				return c.Errorf("%s: %v (input shape %v)", name, err, x.StaticShape())
			}
			sh, ax := x.Shape(), axes[0]
			A, R, B := tensor.NumElements(sh[:ax]), sh[ax], tensor.NumElements(sh[ax+1:])
			outShape := op.MathReducedShape(x.StaticShape(), axes, false).Dims()
			o := c.Alloc(0, ot, outShape...)
			if R == 0 && o.NumElements() > 0 {
				return c.Errorf("%s: cannot take the extreme of an empty axis %d (input shape %v)", name, ax, x.StaticShape())
			}
			switch ot {
			case tensor.Int64:
				err = mathArgTyped(x, A, R, B, greater, o.Int64s())
			case tensor.Int32:
				err = mathArgTyped(x, A, R, B, greater, o.Int32s())
			default:
				err = fmt.Errorf("output_type must be int32 or int64, got %v", ot)
			}
			if err != nil {
				return c.Errorf("%s: %w", name, err)
			}
			return nil
		}), nil
	}
}

// mathShapeValue appends the dimensions of a 1-D int32 or int64 shape
// tensor to dst (a caller's buffer on its stack: the error does not keep
// it).
func mathShapeValue(dst []int, t *tensor.Tensor) ([]int, error) {
	if t.DType() != tensor.Int32 && t.DType() != tensor.Int64 || t.Rank() != 1 {
		return nil, fmt.Errorf("shape must be a 1-D int32 or int64 tensor, got %v%v", t.DType(), t.StaticShape())
	}
	for i := range t.NumElements() {
		d := int(t.Float64At(i))
		if d < 0 {
			return nil, fmt.Errorf("negative dimension %d at index %d of shape %v", d, i, t)
		}
		dst = append(dst, d)
	}
	return dst, nil
}

func mathErrBroadcastTo(from, to []int) error {
	return fmt.Errorf("cannot broadcast %v to %v", tensor.MakeShape(from...), tensor.MakeShape(to...))
}

func mathBroadcastToKernel(c *kernel.Context, plans *mathPlans) error {
	x, st := c.Inputs[0], c.Inputs[1]
	if st.Rank() != 1 || st.NumElements() > 8 {
		o, err := mathBroadcastToSlow(x, st)
		if err != nil {
			return c.Errorf("BroadcastTo: %w", err)
		}
		c.SetOutput(0, o)
		return nil
	}
	// The common case without allocating: dims on the stack, the plan
	// cached per node, the output from Alloc.
	var buf [8]int
	target := buf[:st.NumElements()]
	for i := range target {
		if target[i] = int(st.Float64At(i)); target[i] < 0 {
			return c.Errorf("BroadcastTo: negative dimension in shape %v", st)
		}
	}
	if slices.Equal(x.Shape(), target) {
		c.SetOutput(0, x)
		return nil
	}
	if err := arrayCheckDims(c, target, "BroadcastTo"); err != nil {
		return err
	}
	p, err := plans.plan(x.Shape(), target)
	if err != nil || !slices.Equal(p.out, target) {
		return c.Errorf("BroadcastTo: %v", mathErrBroadcastTo(x.Shape(), target))
	}
	o := c.AllocUninit(0, x.DType(), target...)
	mathBroadcastInto(p, x, o)
	return nil
}

func mathBroadcastToSlow(x, st *tensor.Tensor) (*tensor.Tensor, error) {
	target, err := mathShapeValue(nil, st)
	if err != nil {
		return nil, err
	}
	if _, err := tensor.CheckNumElements(target); err != nil {
		return nil, err
	}
	return mathBroadcastTensor(x, target)
}

func mathSumToShapeKernel(c *kernel.Context) error {
	x := c.Inputs[0]
	var buf [8]int
	target, err := mathShapeValue(buf[:0], c.Inputs[1])
	if err != nil {
		return c.Errorf("SumToShape: %w", err)
	}
	if slices.Equal(x.Shape(), target) {
		c.SetOutput(0, x)
		return nil
	}
	axes, err := tensor.SumToAxes(x.Shape(), target)
	if err != nil {
		return c.Errorf("SumToShape: %w", err)
	}
	o := c.Alloc(0, x.DType(), target...)
	if err := mathReduceTensor(mathRedSum, false, x, o, axes); err != nil {
		return c.Errorf("SumToShape: %w", err)
	}
	return nil
}

func init() {
	for _, r := range []struct {
		name string
		kind mathReduceKind
		mean bool
	}{
		{"Sum", mathRedSum, false}, {"Mean", mathRedSum, true}, {"Prod", mathRedProd, false},
		{"Max", mathRedMax, false}, {"Min", mathRedMin, false},
	} {
		kernel.Register(r.name, kernel.CPU, mathReduceFactory(r.name, r.kind, r.mean))
	}
	kernel.Register("ArgMax", kernel.CPU, mathArgFactory("ArgMax", true))
	kernel.Register("ArgMin", kernel.CPU, mathArgFactory("ArgMin", false))
	kernel.Register("BroadcastTo", kernel.CPU, func(*graph.Node) (kernel.Kernel, error) {
		plans := new(mathPlans)
		return kernel.Func(func(c *kernel.Context) error { return mathBroadcastToKernel(c, plans) }), nil
	})
	kernel.Register("SumToShape", kernel.CPU, kernel.Simple(mathSumToShapeKernel))
}
