package cpu

import (
	"slices"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// StridedSlice and StridedSliceGrad: both walk the indices the slice reads
// (op.ArrayStridedSlice resolves them), one copying from the input, the
// other writing dy into a zero tensor. They move bytes, so every dtype works.

func init() {
	kernel.Register("StridedSlice", kernel.CPU, kernel.Simple(arrayStridedSliceKernel))
	kernel.Register("StridedSliceGrad", kernel.CPU, kernel.Simple(arrayStridedSliceGradKernel))
}

// arrayStridedPlan reads begin, end and strides (inputs 1 to 3) and
// resolves the node's slice against dims.
func arrayStridedPlan(c *kernel.Context, dims []int) (*op.ArrayStridedPlan, error) {
	var vals [3][]int
	for k, what := range []string{"begin", "end", "strides"} {
		v, err := arrayReadDims(c, c.Input(1+k), what)
		if err != nil {
			return nil, err
		}
		vals[k] = v
	}
	spec := op.ArrayStridedSpecOf(c.Node.AttrInt, vals[0], vals[1], vals[2], len(vals[0]))
	p, err := op.ArrayStridedSlice(spec, dims)
	if err != nil {
		return nil, c.Errorf("slicing shape %v with begin %v, end %v, strides %v: %w", tensor.MakeShape(dims...), vals[0], vals[1], vals[2], err)
	}
	return p, nil
}

// arrayStridedWalk calls f(src, dst) with the byte offsets, in x (of dims)
// and in the packed result, of every run of elements the plan reads; a run
// is one element, or the whole innermost extent when its stride is 1.
func arrayStridedWalk(p *op.ArrayStridedPlan, dims []int, esize int, f func(src, dst, n int)) {
	rank := len(dims)
	if tensor.NumElements(p.Sizes) == 0 {
		return
	}
	if rank == 0 {
		f(0, 0, esize)
		return
	}
	strides := arrayStrides(dims) // element strides of x
	// The odometer turns over the outer dimensions; the innermost one is
	// part of each run when its stride is 1.
	outer, run := rank, esize
	if p.Strides[rank-1] == 1 {
		outer, run = rank-1, p.Sizes[rank-1]*esize
	}
	idx := make([]int, rank) // idx[rank-1] stays 0 when it is in the run
	dst := 0
	for {
		src := 0
		for d := range rank {
			src += (p.Begin[d] + idx[d]*p.Strides[d]) * strides[d]
		}
		f(src*esize, dst, run)
		dst += run
		d := outer - 1
		for ; d >= 0; d-- {
			if idx[d]++; idx[d] < p.Sizes[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

func arrayStridedSliceKernel(c *kernel.Context) error {
	x := c.Input(0)
	p, err := arrayStridedPlan(c, x.Shape())
	if err != nil {
		return err
	}
	out := c.AllocUninit(0, x.DType(), p.Out...)
	ob, xb := arrayBytes(out), arrayBytes(x)
	arrayStridedWalk(p, x.Shape(), x.DType().Size(), func(src, dst, n int) {
		copy(ob[dst:dst+n], xb[src:src+n])
	})
	return nil
}

func arrayStridedSliceGradKernel(c *kernel.Context) error {
	dims, err := arrayReadDims(c, c.Input(0), "shape")
	if err != nil {
		return err
	}
	if err := arrayCheckDims(c, dims, "shape"); err != nil {
		return err
	}
	p, err := arrayStridedPlan(c, dims)
	if err != nil {
		return err
	}
	dy := c.Input(4)
	if !slices.Equal(dy.Shape(), p.Out) {
		return c.Errorf("dy has shape %v, but slicing shape %v gives %v", dy.StaticShape(), tensor.MakeShape(dims...), tensor.MakeShape(p.Out...))
	}
	out := c.Alloc(0, dy.DType(), dims...)
	ob, db := arrayBytes(out), arrayBytes(dy)
	arrayStridedWalk(p, dims, dy.DType().Size(), func(src, dst, n int) {
		copy(ob[src:src+n], db[dst:dst+n])
	})
	return nil
}
