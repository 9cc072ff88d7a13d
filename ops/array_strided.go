package ops

import (
	"fmt"

	"github.com/distflow/distflow/graph"
)

// StridedSlice returns x[begin:end:strides] with TensorFlow's semantics,
// begin, end and strides holding one entry per subscript. Options set the
// masks that qualify subscript i: StridedBeginMask and StridedEndMask
// (ignore begin[i] / end[i]: the range starts or ends at the edge),
// StridedEllipsisMask (subscript i is ..., standing for every dimension
// the others do not name), StridedNewAxisMask (insert a dimension of size
// 1) and StridedShrinkAxisMask (take the single index begin[i] and drop
// the dimension). Negative indices count from the end; out-of-range ones
// are clamped. With constant subscripts the output shape is known at
// build time. Index builds the spec from Python-style subscripts.
func StridedSlice(s *graph.Scope, x graph.Output, begin, end, strides []int, opts ...StridedOption) graph.Output {
	return StridedSliceOf(s, x, Const(s, arrayInts(begin)), Const(s, arrayInts(end)), Const(s, arrayInts(strides)), opts...)
}

// StridedSliceOf is StridedSlice with begin, end and strides as 1-D int32
// or int64 tensors (computed at run time, for example).
func StridedSliceOf(s *graph.Scope, x, begin, end, strides graph.Output, opts ...StridedOption) graph.Output {
	return s.Out("StridedSlice", "StridedSlice", []graph.Output{x, begin, end, strides}, stridedAttrs(opts))
}

// StridedSliceGrad is the adjoint of StridedSlice: a zero tensor of shape
// (1-D int32, the sliced input's) with dy written where the slice reads.
func StridedSliceGrad(s *graph.Scope, shape, begin, end, strides, dy graph.Output, opts ...StridedOption) graph.Output {
	return s.Out("StridedSliceGrad", "StridedSliceGrad", []graph.Output{shape, begin, end, strides, dy}, stridedAttrs(opts))
}

// StridedOption sets a mask of StridedSlice (bit i qualifies subscript i).
type StridedOption func(attrs map[string]any)

func stridedMask(name string, mask int) StridedOption {
	return func(attrs map[string]any) { attrs[name] = mask }
}

// StridedBeginMask ignores begin[i] for each bit i of mask (t[:e]).
func StridedBeginMask(mask int) StridedOption { return stridedMask("begin_mask", mask) }

// StridedEndMask ignores end[i] for each bit i of mask (t[b:]).
func StridedEndMask(mask int) StridedOption { return stridedMask("end_mask", mask) }

// StridedEllipsisMask makes subscript i an ellipsis (t[..., 0]); at most
// one bit may be set.
func StridedEllipsisMask(mask int) StridedOption { return stridedMask("ellipsis_mask", mask) }

// StridedNewAxisMask makes subscript i a new dimension of size 1
// (t[:, tf.newaxis]).
func StridedNewAxisMask(mask int) StridedOption { return stridedMask("new_axis_mask", mask) }

// StridedShrinkAxisMask makes subscript i the single index begin[i],
// dropping its dimension (t[2]).
func StridedShrinkAxisMask(mask int) StridedOption { return stridedMask("shrink_axis_mask", mask) }

// StridedMasks returns the options of a node's masks, to build a slice
// like it (its gradient, for example).
func StridedMasks(n *graph.Node) []StridedOption {
	var opts []StridedOption
	for _, name := range []string{"begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"} {
		opts = append(opts, stridedMask(name, n.AttrInt(name)))
	}
	return opts
}

func stridedAttrs(opts []StridedOption) map[string]any {
	attrs := map[string]any{}
	for _, o := range opts {
		o(attrs)
	}
	return attrs
}

// Subscript is one Python-style subscript for Index: At(i) is t[i], Span(b, e)
// t[b:e], From(b) t[b:], Until(e) t[:e], All() t[:], any of them with
// Step(k) t[b:e:k]; Ellipsis() is t[...] and NewAxis() t[tf.newaxis].
type Subscript struct {
	kind             subKind
	begin, end, step int
	hasBegin, hasEnd bool
}

type subKind int

const (
	subRange subKind = iota
	subAt
	subEllipsis
	subNewAxis
)

// At is the subscript t[i]: the single index i (negative counts from the
// end), whose dimension is dropped.
func At(i int) Subscript {
	return Subscript{kind: subAt, begin: i, end: i + 1, step: 1, hasBegin: true, hasEnd: true}
}

// Span is the subscript t[begin:end].
func Span(begin, end int) Subscript {
	return Subscript{begin: begin, end: end, step: 1, hasBegin: true, hasEnd: true}
}

// From is the subscript t[begin:].
func From(begin int) Subscript { return Subscript{begin: begin, step: 1, hasBegin: true} }

// Until is the subscript t[:end].
func Until(end int) Subscript { return Subscript{end: end, step: 1, hasEnd: true} }

// All is the subscript t[:].
func All() Subscript { return Subscript{step: 1} }

// Ellipsis is the subscript t[...]: every dimension the other subscripts
// do not name.
func Ellipsis() Subscript { return Subscript{kind: subEllipsis, step: 1} }

// NewAxis is the subscript t[tf.newaxis]: a new dimension of size 1.
func NewAxis() Subscript { return Subscript{kind: subNewAxis, step: 1} }

// Step returns the range subscript with step k (t[b:e:k]); a negative k
// walks backwards, so that All().Step(-1) reverses.
func (u Subscript) Step(k int) Subscript {
	u.step = k
	return u
}

// Index returns x[subs...] as TensorFlow's Python subscripts do, for
// example Index(s, x, Span(1, 3), All().Step(2)) is x[1:3, ::2],
// Index(s, x, Ellipsis(), At(0)) is x[..., 0] and Index(s, x, All(),
// NewAxis()) is x[:, tf.newaxis]. Dimensions after the last subscript are
// taken whole.
func Index(s *graph.Scope, x graph.Output, subs ...Subscript) graph.Output {
	n := len(subs)
	begin, end, strides := make([]int, n), make([]int, n), make([]int, n)
	var bm, em, elm, nam, sam int
	for i, u := range subs {
		begin[i], end[i], strides[i] = u.begin, u.end, u.step
		switch u.kind {
		case subAt:
			if u.step != 1 {
				s.SetErr(fmt.Errorf("ops: Index: subscript %d: At(%d) takes no step", i, u.begin))
				return graph.Output{}
			}
			sam |= 1 << i
		case subEllipsis:
			elm |= 1 << i
		case subNewAxis:
			nam |= 1 << i
		default:
			if !u.hasBegin {
				bm |= 1 << i
			}
			if !u.hasEnd {
				em |= 1 << i
			}
		}
	}
	return StridedSlice(s, x, begin, end, strides, StridedBeginMask(bm), StridedEndMask(em),
		StridedEllipsisMask(elm), StridedNewAxisMask(nam), StridedShrinkAxisMask(sam))
}
