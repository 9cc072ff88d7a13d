package grad

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Gradients of the array family and of the core ops (Const, Placeholder,
// Identity, StopGradient, NoOp, Variable). Data-moving ops have data-moving
// gradients: each is the adjoint copy (Slice <-> Pad, Concat <-> Slice,
// Split <-> Concat, Gather <-> GatherGrad, Tile -> Reshape + Sum).

func init() {
	Register("Identity", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		return dys[:1], nil
	})
	RegisterNone("StopGradient", "stops gradients by definition")
	RegisterNone("Const", "a constant has no inputs")
	RegisterNone("Placeholder", "a placeholder has no inputs; differentiate with respect to its output")
	RegisterNone("NoOp", "it has no outputs")
	RegisterNone("Variable", "a variable has no inputs; differentiate with respect to its output")

	RegisterNone("Shape", "its output is integer metadata that does not vary with the values of x")
	RegisterNone("Rank", "its output is integer metadata that does not vary with the values of x")
	RegisterNone("Size", "its output is integer metadata that does not vary with the values of x")
	RegisterNone("ZerosLike", "its output is constant in the values of x")
	RegisterNone("OnesLike", "its output is constant in the values of x")
	RegisterNone("OneHot", "its input is integer indices")

	Register("Reshape", arrayReshapeBack)
	Register("ExpandDims", arrayReshapeBack)
	Register("Squeeze", arrayReshapeBack)
	Register("Transpose", arrayTransposeGrad)
	Register("Concat", arrayConcatGrad)
	Register("Slice", arraySliceGrad)
	Register("StridedSlice", arrayStridedSliceGrad)
	Register("StridedSliceGrad", arrayStridedSliceGradGrad)
	Register("Split", arraySplitGrad)
	Register("Gather", arrayGatherGrad)
	Register("GatherGrad", arrayGatherGradGrad)
	Register("Tile", arrayTileGrad)
	Register("Pad", arrayPadGrad)
	Register("Fill", arrayFillGrad)
}

// arrayStridedSliceGrad writes dy back where the slice read, as
// TensorFlow's _StridedSliceGrad (array_grad.py); begin, end and strides
// get no gradient.
func arrayStridedSliceGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	x := n.Input(0)
	dx := ops.StridedSliceGrad(s, shapeOf(s, x), n.Input(1), n.Input(2), n.Input(3), dys[0], ops.StridedMasks(n)...)
	return []graph.Output{dx, {}, {}, {}}, nil
}

// arrayStridedSliceGradGrad: StridedSliceGrad is linear in dy, its adjoint
// the slice itself (TensorFlow's _StridedSliceGradGrad).
func arrayStridedSliceGradGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	ddy := ops.StridedSliceOf(s, dys[0], n.Input(1), n.Input(2), n.Input(3), ops.StridedMasks(n)...)
	return []graph.Output{{}, {}, {}, {}, ddy}, nil
}

// arrayReshapeBack is the gradient of ops that only relabel dimensions: dy
// reshaped to the input's shape. Extra inputs (Reshape's shape) get none.
func arrayReshapeBack(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	out := make([]graph.Output, n.NumInputs())
	out[0] = ops.Reshape(s, dys[0], shapeOf(s, n.Input(0)))
	return out, nil
}

func arrayTransposeGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	perm := n.AttrInts("perm")
	if len(perm) == 0 {
		// Reversing the dimensions is its own inverse.
		return []graph.Output{ops.Transpose(s, dys[0], nil)}, nil
	}
	inv := make([]int, len(perm))
	for i, p := range perm {
		inv[p] = i
	}
	return []graph.Output{ops.Transpose(s, dys[0], inv)}, nil
}

// arrayConcatGrad slices dy back into the inputs. When every input's size
// on the concat axis is known at build time the bounds are constants;
// otherwise each input's offset is summed from the run-time shapes of the
// inputs before it, as TensorFlow's _ConcatGradHelper does with
// ConcatOffset.
func arrayConcatGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	if n.NumInputs() == 1 {
		return dys[:1], nil
	}
	out0 := n.Output(0).Shape()
	rank := out0.Rank()
	if rank < 0 {
		return nil, fmt.Errorf("grad: Concat: the rank of the output is unknown at build time")
	}
	axis := n.AttrInt("axis")
	if axis < 0 {
		axis += rank
	}
	sizes := make([]int, n.NumInputs())
	static := true
	for i, in := range n.Inputs() {
		sizes[i] = -1
		if sh := in.Shape(); sh.KnownRank() {
			sizes[i] = sh.Dim(axis)
		}
		// The last input takes whatever remains, so its size may be unknown.
		static = static && (sizes[i] >= 0 || i == n.NumInputs()-1)
	}
	grads := make([]graph.Output, n.NumInputs())
	if static {
		offset := 0
		for i, size := range sizes {
			begin, box := make([]int, rank), make([]int, rank)
			for j := range box {
				box[j] = -1
			}
			begin[axis], box[axis] = offset, size
			grads[i] = ops.Slice(s, dys[0], begin, box)
			offset += size
		}
		return grads, nil
	}
	// onAxis is 1 at the concat axis and 0 elsewhere: shape * onAxis is an
	// input's extent on the axis, by which the next input's box starts later.
	unit := make([]int32, rank)
	unit[axis] = 1
	onAxis := ops.Const(s, unit)
	ones := make([]int32, rank)
	for j := range ones {
		ones[j] = 1
	}
	strides := ops.Const(s, ones)
	begin := ops.Const(s, make([]int32, rank))
	for i, in := range n.Inputs() {
		// The box starts at the offset on the axis and at 0 elsewhere, and
		// spans the input's shape.
		shape := shapeOf(s, in)
		end := ops.Add(s, begin, shape)
		grads[i] = ops.Reshape(s, ops.StridedSliceOf(s, dys[0], begin, end, strides), shape)
		begin = ops.Add(s, begin, ops.Mul(s, shape, onAxis))
	}
	return grads, nil
}

// arraySliceGrad pads dy back to the input's shape with zeros. When a
// dimension the padding needs is unknown at build time, it writes dy into
// zeros of the input's run-time shape instead (StridedSliceGrad), as
// TensorFlow's _SliceGrad pads by amounts computed from Shape.
func arraySliceGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	begin, size := n.AttrInts("begin"), n.AttrInts("size")
	in := n.Input(0).Shape()
	p := make([][2]int, len(begin))
	static := true
	for i := range begin {
		p[i][0] = begin[i]
		if size[i] == -1 {
			continue // the slice reaches the end: nothing after it
		}
		d := -1
		if in.KnownRank() {
			d = in.Dim(i)
		}
		if d < 0 {
			static = false
			break
		}
		p[i][1] = d - begin[i] - size[i]
	}
	if static {
		return []graph.Output{ops.Pad(s, dys[0], p)}, nil
	}
	end, strides := make([]int, len(begin)), make([]int, len(begin))
	endMask := 0
	for i := range begin {
		strides[i] = 1
		if size[i] == -1 {
			endMask |= 1 << i
		} else {
			end[i] = begin[i] + size[i]
		}
	}
	dx := ops.StridedSliceGrad(s, shapeOf(s, n.Input(0)), ops.Const(s, begin), ops.Const(s, end), ops.Const(s, strides),
		dys[0], ops.StridedEndMask(endMask))
	return []graph.Output{dx}, nil
}

func arraySplitGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	return []graph.Output{ops.Concat(s, n.AttrInt("axis"), dys...)}, nil
}

func arrayGatherGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	params, indices := n.Input(0), n.Input(1)
	g := ops.GatherGrad(s, dys[0], indices, shapeOf(s, params), n.AttrInt("axis"))
	return []graph.Output{g, {}}, nil
}

// arrayGatherGradGrad: GatherGrad is linear in dy, and its adjoint is Gather.
func arrayGatherGradGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	g := ops.Gather(s, dys[0], n.Input(1), n.AttrInt("axis"))
	return []graph.Output{g, {}, {}}, nil
}

// arrayTileGrad views dy ([m0*d0, m1*d1, ...]) as [m0, d0, m1, d1, ...] and
// sums over the multiples' axes.
func arrayTileGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	m := n.AttrInts("multiples")
	x := n.Input(0)
	axes := make([]int, len(m))
	tiled := false
	for i, k := range m {
		axes[i] = 2 * i // size 1 where k == 1: summing it just drops it
		tiled = tiled || k != 1
	}
	if !tiled {
		return dys[:1], nil
	}
	var split graph.Output
	if sh := x.Shape(); sh.FullyDefined() {
		dims := make([]int, 0, 2*len(m))
		for i, k := range m {
			dims = append(dims, k, sh.Dim(i))
		}
		split = ops.ReshapeTo(s, dys[0], dims...)
	} else {
		// Interleave the multiples with the run-time shape: a [rank, 2]
		// matrix of (m_i, d_i) rows, flattened.
		mcol := make([]int32, len(m))
		for i, k := range m {
			mcol[i] = int32(k)
		}
		col := tensor.MustFromSlice(mcol, len(m), 1)
		pairs := ops.Concat(s, 1, ops.Const(s, col), ops.ReshapeTo(s, ops.Shape(s, x), len(m), 1))
		split = ops.Reshape(s, dys[0], ops.ReshapeTo(s, pairs, 2*len(m)))
	}
	return []graph.Output{ops.Sum(s, split, axes, false)}, nil
}

// arrayPadGrad slices the input's box out of dy. Where the input's
// dimension is unknown at build time, the box ends that many elements
// before dy's end (a negative end), so that no run-time shape is needed.
func arrayPadGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	p := n.AttrInts("paddings")
	in := n.Input(0).Shape()
	rank := len(p) / 2
	begin, size := make([]int, rank), make([]int, rank)
	static := true
	for i := range begin {
		begin[i] = p[2*i]
		size[i] = -1
		if in.KnownRank() && in.Dim(i) >= 0 {
			size[i] = in.Dim(i)
		} else if p[2*i+1] != 0 {
			static = false
		}
	}
	if static {
		return []graph.Output{ops.Slice(s, dys[0], begin, size)}, nil
	}
	end, strides := make([]int, rank), make([]int, rank)
	endMask := 0
	for i := range begin {
		strides[i] = 1
		if after := p[2*i+1]; after != 0 {
			end[i] = -after
		} else {
			endMask |= 1 << i
		}
	}
	return []graph.Output{ops.StridedSlice(s, dys[0], begin, end, strides, ops.StridedEndMask(endMask))}, nil
}

// arrayFillGrad: every output element is the value, so its gradient is the
// sum of dy. The dims input is integer and gets none.
func arrayFillGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	return []graph.Output{{}, ops.Sum(s, dys[0], nil, false)}, nil
}
