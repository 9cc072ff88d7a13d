package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// StridedSlice and its gradient, with TensorFlow's semantics (the rules of
// core/util/strided_slice_op.cc): the slice spec has one entry per
// subscript of a Python-style index such as t[1:3, ..., ::-1, tf.newaxis, 0];
// the masks' bit i qualifies entry i.

func init() {
	masks := []Attr{
		{Name: "begin_mask", Type: AttrInt, Default: 0},
		{Name: "end_mask", Type: AttrInt, Default: 0},
		{Name: "ellipsis_mask", Type: AttrInt, Default: 0},
		{Name: "new_axis_mask", Type: AttrInt, Default: 0},
		{Name: "shrink_axis_mask", Type: AttrInt, Default: 0},
	}
	Register(Def{
		Name:   "StridedSlice",
		Remote: true,
		Inputs: []Arg{{Name: "input"}, {Name: "begin"}, {Name: "end"}, {Name: "strides"}},
		Attrs:  masks,
		Summary: "input[begin:end:strides] over one subscript per entry of the 1-D int32 or int64 begin, end and strides, " +
			"as TensorFlow's: bit i of begin_mask / end_mask ignores begin[i] / end[i] (the whole range), of ellipsis_mask " +
			"makes entry i a ... (the dimensions not otherwise named), of new_axis_mask inserts a dimension of size 1, of " +
			"shrink_axis_mask takes the single index begin[i] and drops the dimension. Negative indices count from the end; " +
			"out-of-range ones are clamped.",
		Infer: arrayInferStridedSlice,
	})
	Register(Def{
		Name:   "StridedSliceGrad",
		Remote: true,
		Inputs: []Arg{{Name: "shape"}, {Name: "begin"}, {Name: "end"}, {Name: "strides"}, {Name: "dy"}},
		Attrs:  masks,
		Summary: "The adjoint of StridedSlice: a zero tensor of shape (the sliced input's, 1-D int32 or int64) with dy " +
			"written where StridedSlice with the same arguments reads.",
		Infer: arrayInferStridedSliceGrad,
	})
}

// ArrayStridedSpec is the slice spec of a StridedSlice node: its sparse
// begin, end and strides (one entry per subscript) and its masks. A nil
// Begin, End or Strides is not known (at build time).
type ArrayStridedSpec struct {
	Begin, End, Strides []int
	// N is the number of subscripts, -1 if unknown.
	N                                                             int
	BeginMask, EndMask, EllipsisMask, NewAxisMask, ShrinkAxisMask int
}

// ArrayStridedPlan is a spec resolved against an input shape.
type ArrayStridedPlan struct {
	// Begin and Strides hold, per input dimension, the first index read
	// and the step; Sizes the number of indices read (-1 if unknown).
	// Begin is only meaningful when every size is known.
	Begin, Strides, Sizes []int
	// Out is the output shape: Sizes without the shrunk dimensions and
	// with the new axes (-1 for an unknown dimension).
	Out []int
}

// ArrayStridedSpecOf reads the spec from a node's attributes and its
// begin, end and strides values (nil when unknown; n < 0 if even their
// length is).
func ArrayStridedSpecOf(attr func(string) int, begin, end, strides []int, n int) ArrayStridedSpec {
	return ArrayStridedSpec{Begin: begin, End: end, Strides: strides, N: n,
		BeginMask: attr("begin_mask"), EndMask: attr("end_mask"), EllipsisMask: attr("ellipsis_mask"),
		NewAxisMask: attr("new_axis_mask"), ShrinkAxisMask: attr("shrink_axis_mask")}
}

// arrayDenseEntry is one input dimension of the dense spec.
type arrayDenseEntry struct {
	sparse      int // index of the subscript naming it; -1 for an ellipsis
	beginMasked bool
	endMasked   bool
	shrink      bool
}

// ArrayStridedSlice resolves spec against the input dims (-1 for unknown
// dimensions), as TensorFlow's ValidateStridedSliceOp: the ellipsis (an
// implicit one at the end if none is given) expands to the dimensions the
// other subscripts do not name; each begin and end is made non-negative
// and clamped to the dimension (a shrunk index must be in range instead).
// Kernels and shape inference share it.
func ArrayStridedSlice(spec ArrayStridedSpec, dims []int) (*ArrayStridedPlan, error) {
	n := spec.N
	for _, v := range [][]int{spec.Begin, spec.End, spec.Strides} {
		if v != nil {
			if n >= 0 && len(v) != n {
				return nil, fmt.Errorf("begin, end and strides must have one length, got %v, %v and %v", spec.Begin, spec.End, spec.Strides)
			}
			n = len(v)
		}
	}
	if n < 0 {
		return nil, fmt.Errorf("the number of subscripts is unknown")
	}
	if n > 32 {
		return nil, fmt.Errorf("%d subscripts; at most 32 fit the masks", n)
	}
	bit := func(mask, i int) bool { return mask&(1<<i) != 0 }
	ellipses, newAfterEllipsis, seen := 0, 0, false
	for i := range n {
		if seen && bit(spec.NewAxisMask, i) && !bit(spec.EllipsisMask, i) {
			newAfterEllipsis++
		}
		if bit(spec.EllipsisMask, i) {
			ellipses++
			seen = true
		}
	}
	if ellipses > 1 {
		return nil, fmt.Errorf("ellipsis_mask %#b has more than one ellipsis", spec.EllipsisMask)
	}
	sparseN, ellipsis := n, spec.EllipsisMask
	if ellipses == 0 {
		// An implicit ellipsis after the last subscript.
		ellipsis |= 1 << n
		sparseN++
	}

	rank := len(dims)
	dense := make([]arrayDenseEntry, 0, rank)
	// final lists, per output dimension, the dense index it shows, or -1
	// for a new axis.
	var final []int
	for i := range sparseN {
		switch {
		case bit(ellipsis, i):
			next := min(rank-(sparseN-i)+1+newAfterEllipsis, rank)
			for len(dense) < next {
				final = append(final, len(dense))
				dense = append(dense, arrayDenseEntry{sparse: -1, beginMasked: true, endMasked: true})
			}
		case bit(spec.NewAxisMask, i):
			final = append(final, -1)
		default:
			if len(dense) == rank {
				return nil, fmt.Errorf("subscript %d is out of range for an input of rank %d", i, rank)
			}
			e := arrayDenseEntry{sparse: i, beginMasked: bit(spec.BeginMask, i), endMasked: bit(spec.EndMask, i),
				shrink: bit(spec.ShrinkAxisMask, i)}
			if !e.shrink {
				final = append(final, len(dense))
			}
			dense = append(dense, e)
		}
	}
	if len(dense) != rank {
		// Only when the ellipsis cannot fill the gap (fewer dims than named).
		return nil, fmt.Errorf("%d subscripts for an input of rank %d", n, rank)
	}

	p := &ArrayStridedPlan{Begin: make([]int, rank), Strides: make([]int, rank), Sizes: make([]int, rank)}
	for d, e := range dense {
		dim := dims[d]
		stride, strideKnown := 1, true
		begin, end := 0, 0
		valuesKnown := true
		if e.sparse >= 0 {
			if spec.Strides == nil {
				strideKnown = false
			} else {
				stride = spec.Strides[e.sparse]
			}
			if spec.Begin == nil || spec.End == nil {
				valuesKnown = false
			} else {
				begin, end = spec.Begin[e.sparse], spec.End[e.sparse]
			}
		}
		if strideKnown && stride == 0 {
			return nil, fmt.Errorf("strides[%d] must be non-zero", e.sparse)
		}
		if e.shrink && strideKnown && stride < 0 {
			return nil, fmt.Errorf("subscript %d takes a single index (shrink_axis_mask) and must have a positive stride, got %d", e.sparse, stride)
		}
		p.Strides[d] = stride
		switch {
		case e.shrink:
			p.Sizes[d] = 1
			if valuesKnown && dim >= 0 {
				b := begin
				if b < 0 {
					b += dim
				}
				if b < 0 || b >= dim {
					return nil, fmt.Errorf("index %d of subscript %d is out of range for dimension %d of size %d", begin, e.sparse, d, dim)
				}
				p.Begin[d] = b
			}
		case dim < 0 || !strideKnown || !valuesKnown && !(e.beginMasked && e.endMasked):
			p.Sizes[d] = -1
		default:
			b := arrayStridedCanonical(begin, dim, stride, e.beginMasked, 0)
			en := arrayStridedCanonical(end, dim, stride, e.endMasked, 1)
			length := en - b
			switch {
			case length == 0 || (length < 0) != (stride < 0):
				p.Sizes[d] = 0
			default:
				p.Sizes[d] = length / stride
				if length%stride != 0 {
					p.Sizes[d]++
				}
			}
			p.Begin[d] = b
		}
	}
	p.Out = make([]int, len(final))
	for i, d := range final {
		p.Out[i] = 1
		if d >= 0 {
			p.Out[i] = p.Sizes[d]
		}
	}
	return p, nil
}

// arrayStridedCanonical makes begin (c = 0) or end (c = 1) of a dimension
// of size dim a non-negative index, clamped as TensorFlow does: into
// [0, dim] for a positive stride, [-1, dim-1] for a negative one (-1 is
// "before the first element"); a masked index is the whole range's end.
func arrayStridedCanonical(x, dim, stride int, masked bool, c int) int {
	lo, hi := 0, dim
	if stride < 0 {
		lo, hi = -1, dim-1
	}
	if masked {
		if (stride > 0) == (c == 0) {
			return lo
		}
		return hi
	}
	if x < 0 {
		x += dim
	}
	return max(lo, min(x, hi))
}

// arrayStridedValues reads input i (begin, end or strides): its values when
// it is a constant, else nil; and its length, -1 if unknown.
func arrayStridedValues(c *InferContext, i int, what string) ([]int, int, error) {
	if err := arrayIndexDType(c, i, what); err != nil {
		return nil, 0, err
	}
	s := c.InputShape(i)
	if s.KnownRank() && s.Rank() != 1 {
		return nil, 0, fmt.Errorf("%s must be 1-D, got shape %v", what, s)
	}
	if t := c.Consts[i]; t != nil {
		v := make([]int, t.NumElements())
		for j := range v {
			v[j] = int(t.Float64At(j))
		}
		return v, len(v), nil
	}
	if s.KnownRank() {
		return nil, s.Dim(0), nil
	}
	return nil, -1, nil
}

// arrayStridedSpecInfer reads the spec of a StridedSlice or
// StridedSliceGrad node: begin, end and strides are inputs 1 to 3 of both.
func arrayStridedSpecInfer(c *InferContext) (ArrayStridedSpec, error) {
	var vals [3][]int
	n := -1
	for k, what := range []string{"begin", "end", "strides"} {
		v, l, err := arrayStridedValues(c, 1+k, what)
		if err != nil {
			return ArrayStridedSpec{}, err
		}
		if l >= 0 {
			if n >= 0 && l != n {
				return ArrayStridedSpec{}, fmt.Errorf("begin, end and strides must have one length, got shapes %v, %v and %v",
					c.InputShape(1), c.InputShape(2), c.InputShape(3))
			}
			n = l
		}
		vals[k] = v
	}
	return ArrayStridedSpecOf(c.Int, vals[0], vals[1], vals[2], n), nil
}

// arrayStridedOutShape is the output shape of slicing in with spec, as far
// as it is known.
func arrayStridedOutShape(spec ArrayStridedSpec, in tensor.Shape) (tensor.Shape, error) {
	if !in.KnownRank() {
		return tensor.UnknownShape(), nil
	}
	if spec.N < 0 {
		if spec.EllipsisMask != 0 || spec.NewAxisMask != 0 || spec.ShrinkAxisMask != 0 {
			return tensor.UnknownShape(), nil
		}
		// Without those masks the output has the input's rank.
		return tensor.UnknownRankShape(in.Rank()), nil
	}
	p, err := ArrayStridedSlice(spec, in.Dims())
	if err != nil {
		return tensor.Shape{}, fmt.Errorf("slicing shape %v with begin %v, end %v, strides %v: %w",
			in, arrayStridedShow(spec.Begin, spec.N), arrayStridedShow(spec.End, spec.N), arrayStridedShow(spec.Strides, spec.N), err)
	}
	return tensor.MakeShape(p.Out...), nil
}

// arrayStridedShow renders values for an error, "[?]*n" when unknown.
func arrayStridedShow(v []int, n int) string {
	if v == nil {
		return fmt.Sprintf("(%d unknown)", n)
	}
	return fmt.Sprint(v)
}

func arrayInferStridedSlice(c *InferContext) error {
	spec, err := arrayStridedSpecInfer(c)
	if err != nil {
		return fmt.Errorf("slicing shape %v: %w", c.InputShape(0), err)
	}
	out, err := arrayStridedOutShape(spec, c.InputShape(0))
	if err != nil {
		return err
	}
	c.SetOutput(0, c.InputDType(0), out)
	return nil
}

func arrayInferStridedSliceGrad(c *InferContext) error {
	spec, err := arrayStridedSpecInfer(c)
	if err != nil {
		return err
	}
	dims, rank, ok, err := arrayShapeInput(c, 0, "shape")
	if err != nil {
		return err
	}
	dt := c.InputDType(4)
	switch {
	case ok:
		in := tensor.MakeShape(dims...)
		want, err := arrayStridedOutShape(spec, in)
		if err != nil {
			return err
		}
		if dy := c.InputShape(4); !dy.IsCompatibleWith(want) {
			return fmt.Errorf("dy has shape %v, but slicing shape %v gives %v", dy, in, want)
		}
		c.SetOutput(0, dt, in)
	case rank >= 0:
		c.SetOutput(0, dt, tensor.UnknownRankShape(rank))
	default:
		c.SetOutput(0, dt, tensor.UnknownShape())
	}
	return nil
}
