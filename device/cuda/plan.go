package cuda

import (
	"fmt"
	"slices"

	"github.com/distflow/distflow/tensor"
)

// maxRank is the most axes a plan holds after merging (MAXR in
// kernels/common.cuh): any broadcast or reduction of tensors up to rank 6,
// and most of higher rank, whose adjacent axes merge.
const maxRank = 6

// bcastPlan is a numpy broadcast of shapes a and b as the kernels index
// it: the output shape, and the merged axes (adjacent axes that broadcast
// alike, size-1 output axes dropped) with each operand's element stride
// (0 along an axis it is broadcast over).
type bcastPlan struct {
	out          []int
	dims, sa, sb []int64
}

func newBcastPlan(a, b []int) (*bcastPlan, error) {
	bp, err := tensor.PlanBroadcast(a, b)
	if err != nil {
		return nil, err
	}
	if len(bp.Dims) > maxRank {
		return nil, fmt.Errorf("broadcasting %v with %v needs %d axes; the CUDA kernels index at most %d",
			tensor.MakeShape(a...), tensor.MakeShape(b...), len(bp.Dims), maxRank)
	}
	wide := func(v []int) []int64 {
		out := make([]int64, len(v))
		for i, x := range v {
			out[i] = int64(x)
		}
		return out
	}
	return &bcastPlan{out: bp.Out, dims: wide(bp.Dims), sa: wide(bp.StrideA), sb: wide(bp.StrideB)}, nil
}

// words lays p out as struct Bcast.
func (p *bcastPlan) words() words {
	w := make(words, 1+3*maxRank)
	w[0] = int64(len(p.dims))
	copy(w[1:], p.dims)
	copy(w[1+maxRank:], p.sa)
	copy(w[1+2*maxRank:], p.sb)
	return w
}

// index returns the operands' element offsets of output element i, as
// bcast_index in kernels/common.cuh computes them.
func (p *bcastPlan) index(i int64) (ia, ib int64) {
	for d := len(p.dims) - 1; d >= 0; d-- {
		q := i % p.dims[d]
		i /= p.dims[d]
		ia += q * p.sa[d]
		ib += q * p.sb[d]
	}
	return ia, ib
}

// bcast3Plan is the numpy broadcast of three shapes (SelectV2's cond, t
// and e) as struct Bcast3 indexes it: the output shape, and the merged
// axes (adjacent axes along which each operand is broadcast alike, size-1
// output axes dropped) with each operand's element stride.
type bcast3Plan struct {
	out     []int
	dims    []int64
	strides [3][]int64
}

func newBcast3Plan(a, b, c []int) (*bcast3Plan, error) {
	bc, err := tensor.PlanBroadcast(b, c)
	if err != nil {
		return nil, err
	}
	all, err := tensor.PlanBroadcast(a, bc.Out)
	if err != nil {
		return nil, err
	}
	p := &bcast3Plan{out: all.Out}
	r := len(p.out)
	shapes := [3][]int{a, b, c}
	var ones [][3]bool // per merged axis: whether each operand is broadcast along it
	for i, d := range p.out {
		if d == 1 {
			continue
		}
		var one [3]bool
		for k, s := range shapes {
			j := i - (r - len(s))
			one[k] = j < 0 || s[j] == 1
		}
		if k := len(ones) - 1; k >= 0 && ones[k] == one {
			p.dims[k] *= int64(d)
			continue
		}
		ones = append(ones, one)
		p.dims = append(p.dims, int64(d))
	}
	if len(p.dims) == 0 {
		p.dims, ones = []int64{1}, [][3]bool{{}}
	}
	if len(p.dims) > maxRank {
		return nil, fmt.Errorf("broadcasting %v, %v and %v needs %d axes; the CUDA kernels index at most %d",
			tensor.MakeShape(a...), tensor.MakeShape(b...), tensor.MakeShape(c...), len(p.dims), maxRank)
	}
	for k := range shapes {
		p.strides[k] = make([]int64, len(p.dims))
		n := int64(1)
		for i := len(p.dims) - 1; i >= 0; i-- {
			if !ones[i][k] {
				p.strides[k][i] = n
				n *= p.dims[i]
			}
		}
	}
	return p, nil
}

// words lays p out as struct Bcast3.
func (p *bcast3Plan) words() words {
	w := make(words, 1+4*maxRank)
	w[0] = int64(len(p.dims))
	copy(w[1:], p.dims)
	for k, s := range p.strides {
		copy(w[1+(k+1)*maxRank:], s)
	}
	return w
}

// newBoxPlan plans the copy of a box of dims elements from a layout of
// strides src to one of strides dst (element strides, one per axis), as
// the copy_box kernels index it: a bcastPlan whose sa are the source's
// strides and sb the destination's, adjacent axes merged where both
// layouts run on across them and size-1 axes dropped. A box that both
// layouts hold contiguously ends as one axis of strides 1.
func newBoxPlan(dims []int, src, dst []int64) (*bcastPlan, error) {
	p := &bcastPlan{}
	for i := len(dims) - 1; i >= 0; i-- { // innermost first, then reversed
		d := int64(dims[i])
		if d == 1 {
			continue
		}
		if k := len(p.dims) - 1; k >= 0 && src[i] == p.sa[k]*p.dims[k] && dst[i] == p.sb[k]*p.dims[k] {
			p.dims[k] *= d
			continue
		}
		p.dims, p.sa, p.sb = append(p.dims, d), append(p.sa, src[i]), append(p.sb, dst[i])
	}
	if len(p.dims) == 0 {
		p.dims, p.sa, p.sb = []int64{1}, []int64{1}, []int64{1}
	}
	if len(p.dims) > maxRank {
		return nil, fmt.Errorf("copying a box of %v needs %d axes; the CUDA kernels index at most %d",
			tensor.MakeShape(dims...), len(p.dims), maxRank)
	}
	slices.Reverse(p.dims)
	slices.Reverse(p.sa)
	slices.Reverse(p.sb)
	return p, nil
}

// contiguous reports whether a box plan copies one run of elements.
func (p *bcastPlan) contiguous() bool {
	return len(p.dims) == 1 && p.sa[0] == 1 && p.sb[0] == 1
}

// rowMajor returns the element strides of a row-major tensor of shape.
func rowMajor(shape []int) []int64 {
	s := make([]int64, len(shape))
	n := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = n
		n *= int64(shape[i])
	}
	return s
}

// reducePlan is a reduction over some axes of a row-major tensor as the
// kernels index it: the kept axes (the output's, in order) and the reduced
// ones, each merged where adjacent axes are alike and size-1 axes dropped,
// with their element strides in the input.
type reducePlan struct {
	kdims, kstr []int64
	rdims, rstr []int64
	nout, count int64
}

// newReducePlan plans the reduction of a tensor of shape over axes (sorted,
// distinct, in range).
func newReducePlan(shape, axes []int) (*reducePlan, error) {
	p := &reducePlan{nout: 1, count: 1}
	stride := int64(1)
	strides := make([]int64, len(shape))
	for i := len(shape) - 1; i >= 0; i-- {
		strides[i] = stride
		stride *= int64(shape[i])
	}
	lastReduced := -1 // kind of the last group: 0 kept, 1 reduced
	for i, d := range shape {
		red := slices.Contains(axes, i)
		if red {
			p.count *= int64(d)
		} else {
			p.nout *= int64(d)
		}
		if d == 1 {
			continue
		}
		kind := 0
		if red {
			kind = 1
		}
		dims, str := &p.kdims, &p.kstr
		if red {
			dims, str = &p.rdims, &p.rstr
		}
		if kind == lastReduced && len(*dims) > 0 {
			// Adjacent to the group before it (only size-1 axes between):
			// merge.
			(*dims)[len(*dims)-1] *= int64(d)
			(*str)[len(*str)-1] = strides[i]
			continue
		}
		*dims = append(*dims, int64(d))
		*str = append(*str, strides[i])
		lastReduced = kind
	}
	if len(p.kdims) > maxRank || len(p.rdims) > maxRank {
		return nil, fmt.Errorf("reducing %v over axes %v needs %d kept and %d reduced axes; the CUDA kernels index at most %d",
			tensor.MakeShape(shape...), axes, len(p.kdims), len(p.rdims), maxRank)
	}
	return p, nil
}

// words lays p out as struct Reduce.
func (p *reducePlan) words() words {
	w := make(words, 2+4*maxRank)
	w[0] = int64(len(p.kdims))
	copy(w[1:], p.kdims)
	copy(w[1+maxRank:], p.kstr)
	w[1+2*maxRank] = int64(len(p.rdims))
	copy(w[2+2*maxRank:], p.rdims)
	copy(w[2+3*maxRank:], p.rstr)
	return w
}

// offset is plan_offset of kernels/common.cuh.
func offset(idx int64, dims, str []int64) int64 {
	var off int64
	for d := len(dims) - 1; d >= 0; d-- {
		off += (idx % dims[d]) * str[d]
		idx /= dims[d]
	}
	return off
}
