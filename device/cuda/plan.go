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
