package cpu

import (
	"math"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// CPU kernels of the array family. They accept every dtype (they move bytes,
// see array_copy.go) except where arithmetic is involved (GatherGrad).
//
// Outputs never alias inputs: Reshape, ExpandDims and Squeeze copy, because
// nothing tracks buffer ownership between kernels, and an aliasing output
// could be fed to an in-place consumer while the input is still live.

func init() {
	for name, f := range map[string]func(*kernel.Context) error{
		"Reshape":    arrayReshape,
		"Shape":      arrayShape,
		"Rank":       arrayRank,
		"Size":       arraySize,
		"ExpandDims": arrayExpandDims,
		"Squeeze":    arraySqueeze,
		"Transpose":  arrayTransposeKernel,
		"Concat":     arrayConcat,
		"Slice":      arraySlice,
		"Split":      arraySplit,
		"Gather":     arrayGather,
		"GatherGrad": arrayGatherGrad,
		"OneHot":     arrayOneHot,
		"Fill":       arrayFill,
		"ZerosLike":  arrayZerosLike,
		"OnesLike":   arrayOnesLike,
		"Tile":       arrayTile,
		"Pad":        arrayPad,
	} {
		kernel.Register(name, kernel.CPU, kernel.Simple(f))
	}
}

// arrayReadDims reads a 1-D int32 or int64 tensor of dimensions.
func arrayReadDims(c *kernel.Context, t *tensor.Tensor, what string) ([]int, error) {
	if t.Rank() != 1 {
		return nil, c.Errorf("%s must be 1-D, got shape %v", what, t.StaticShape())
	}
	dims := make([]int, t.NumElements())
	switch d := t.Data().(type) {
	case []int32:
		for i, v := range d {
			dims[i] = int(v)
		}
	case []int64:
		for i, v := range d {
			dims[i] = int(v)
		}
	default:
		return nil, c.Errorf("%s must be int32 or int64, got %v", what, t.DType())
	}
	return dims, nil
}

// arrayCheckDims refuses output dims whose element count overflows int
// (the error wraps tensor.ErrShapeOverflow), which Alloc would take for a
// programmer error.
func arrayCheckDims(c *kernel.Context, dims []int, what string) error {
	if _, err := tensor.CheckNumElements(dims); err != nil {
		return c.Errorf("%s: %w", what, err)
	}
	return nil
}

// arrayCopyAs sets output 0 to a copy of x with the given dims (same size).
func arrayCopyAs(c *kernel.Context, x *tensor.Tensor, dims []int) {
	out := c.Alloc(0, x.DType(), dims...)
	copy(arrayBytes(out), arrayBytes(x))
}

func arrayReshape(c *kernel.Context) error {
	x := c.Input(0)
	want, err := arrayReadDims(c, c.Input(1), "shape")
	if err != nil {
		return err
	}
	dims, err := op.ArrayResolveReshape(x.NumElements(), want)
	if err != nil {
		return c.Errorf("cannot reshape %v to %v: %w", x.StaticShape(), want, err)
	}
	arrayCopyAs(c, x, dims)
	return nil
}

func arrayShape(c *kernel.Context) error {
	x := c.Input(0)
	out := c.Alloc(0, tensor.Int32, x.Rank())
	for i, d := range x.Shape() {
		if d > math.MaxInt32 {
			return c.Errorf("dimension %d of shape %v does not fit int32", i, x.StaticShape())
		}
		out.Int32s()[i] = int32(d)
	}
	return nil
}

func arrayRank(c *kernel.Context) error {
	c.Alloc(0, tensor.Int32).Int32s()[0] = int32(c.Input(0).Rank())
	return nil
}

func arraySize(c *kernel.Context) error {
	x := c.Input(0)
	if x.NumElements() > math.MaxInt32 {
		return c.Errorf("size of shape %v does not fit int32", x.StaticShape())
	}
	c.Alloc(0, tensor.Int32).Int32s()[0] = int32(x.NumElements())
	return nil
}

func arrayExpandDims(c *kernel.Context) error {
	x := c.Input(0)
	axis, r := c.Node.AttrInt("axis"), x.Rank()
	if axis < -r-1 || axis > r {
		return c.Errorf("axis %d is out of range [%d, %d] for shape %v", axis, -r-1, r, x.StaticShape())
	}
	if axis < 0 {
		axis += r + 1
	}
	var dimsBuf [8]int
	dims := append(append(append(dimsBuf[:0], x.Shape()[:axis]...), 1), x.Shape()[axis:]...)
	arrayCopyAs(c, x, dims)
	return nil
}

func arraySqueeze(c *kernel.Context) error {
	x := c.Input(0)
	shape := x.StaticShape()
	axes := c.Node.AttrInts("axes")
	drop := make([]bool, x.Rank())
	for i, d := range x.Shape() {
		drop[i] = len(axes) == 0 && d == 1
	}
	for _, a := range axes {
		a, err := op.ArrayNormAxis(a, shape)
		if err != nil {
			return c.Errorf("%w", err)
		}
		if x.Shape()[a] != 1 {
			return c.Errorf("cannot squeeze dimension %d of shape %v: size is %d, not 1", a, shape, x.Shape()[a])
		}
		drop[a] = true
	}
	dims := []int{}
	for i, d := range x.Shape() {
		if !drop[i] {
			dims = append(dims, d)
		}
	}
	arrayCopyAs(c, x, dims)
	return nil
}

func arrayTransposeKernel(c *kernel.Context) error {
	x := c.Input(0)
	perm, err := op.ArrayPerm(c.Node.AttrInts("perm"), x.Rank())
	if err != nil {
		return c.Errorf("%v (shape %v)", err, x.StaticShape())
	}
	dims := make([]int, len(perm))
	for i, j := range perm {
		dims[i] = x.Shape()[j]
	}
	out := c.Alloc(0, x.DType(), dims...)
	arrayTranspose(arrayBytes(out), arrayBytes(x), x.DType().Size(), x.Shape(), perm)
	return nil
}

func arrayConcat(c *kernel.Context) error {
	first := c.Input(0)
	axis, err := op.ArrayNormAxis(c.Node.AttrInt("axis"), first.StaticShape())
	if err != nil {
		return c.Errorf("%w", err)
	}
	dims := append([]int{}, first.Shape()...)
	dims[axis] = 0
	for i, x := range c.Inputs {
		if x.DType() != first.DType() || x.Rank() != first.Rank() {
			return c.Errorf("input %d is %v%v, input 0 is %v%v", i, x.DType(), x.StaticShape(), first.DType(), first.StaticShape())
		}
		for j, d := range x.Shape() {
			if j != axis && d != dims[j] {
				return c.Errorf("input %d has shape %v, input 0 has shape %v (concatenating on axis %d)", i, x.StaticShape(), first.StaticShape(), axis)
			}
		}
		dims[axis] += x.Shape()[axis]
	}
	out := c.Alloc(0, first.DType(), dims...)
	ob := arrayBytes(out)
	dstStart := make([]int, len(dims))
	zero := make([]int, len(dims))
	for _, x := range c.Inputs {
		b := arrayBox{dst: ob, src: arrayBytes(x), dstDims: dims, srcDims: x.Shape(),
			dstStart: dstStart, srcStart: zero, count: x.Shape(), esize: x.DType().Size()}
		b.apply()
		dstStart[axis] += x.Shape()[axis]
	}
	return nil
}

func arraySlice(c *kernel.Context) error {
	x := c.Input(0)
	begin, size := c.Node.AttrInts("begin"), append([]int{}, c.Node.AttrInts("size")...)
	if len(begin) != x.Rank() || len(size) != x.Rank() {
		return c.Errorf("begin %v and size %v must have one entry per dimension of shape %v", begin, size, x.StaticShape())
	}
	for i, d := range x.Shape() {
		if size[i] == -1 {
			size[i] = d - begin[i]
		}
		if begin[i] < 0 || size[i] < 0 || begin[i]+size[i] > d {
			return c.Errorf("slice begin %v size %v is out of bounds of shape %v", begin, c.Node.AttrInts("size"), x.StaticShape())
		}
	}
	out := c.Alloc(0, x.DType(), size...)
	b := arrayBox{dst: arrayBytes(out), src: arrayBytes(x), dstDims: size, srcDims: x.Shape(),
		dstStart: make([]int, len(size)), srcStart: begin, count: size, esize: x.DType().Size()}
	b.apply()
	return nil
}

func arraySplit(c *kernel.Context) error {
	x := c.Input(0)
	num := c.Node.AttrInt("num_split")
	axis, err := op.ArrayNormAxis(c.Node.AttrInt("axis"), x.StaticShape())
	if err != nil {
		return c.Errorf("%w", err)
	}
	if num < 1 || x.Shape()[axis]%num != 0 {
		return c.Errorf("dimension %d of shape %v is not divisible by num_split %d", axis, x.StaticShape(), num)
	}
	dims := append([]int{}, x.Shape()...)
	dims[axis] /= num
	srcStart := make([]int, len(dims))
	for i := range num {
		out := c.Alloc(i, x.DType(), dims...)
		b := arrayBox{dst: arrayBytes(out), src: arrayBytes(x), dstDims: dims, srcDims: x.Shape(),
			dstStart: make([]int, len(dims)), srcStart: srcStart, count: dims, esize: x.DType().Size()}
		b.apply()
		srcStart[axis] += dims[axis]
	}
	return nil
}

// arrayIndices reads an int32 or int64 index tensor and checks every index
// against [0, bound), naming the first bad one.
func arrayIndices(c *kernel.Context, t *tensor.Tensor, bound int, what string) ([]int, error) {
	idx := make([]int, t.NumElements())
	switch d := t.Data().(type) {
	case []int32:
		for i, v := range d {
			idx[i] = int(v)
		}
	case []int64:
		for i, v := range d {
			idx[i] = int(v)
		}
	default:
		return nil, c.Errorf("%s must be int32 or int64, got %v", what, t.DType())
	}
	for i, v := range idx {
		if v < 0 || v >= bound {
			return nil, c.Errorf("%s[%d] = %d is out of range [0, %d)", what, i, v, bound)
		}
	}
	return idx, nil
}

// arrayGatherDims splits params around axis: outer x n x inner elements.
func arrayGatherDims(dims []int, axis int) (outer, n, inner int) {
	return tensor.NumElements(dims[:axis]), dims[axis], tensor.NumElements(dims[axis+1:])
}

func arrayGather(c *kernel.Context) error {
	params, indices := c.Input(0), c.Input(1)
	axis, err := op.ArrayNormAxis(c.Node.AttrInt("axis"), params.StaticShape())
	if err != nil {
		return c.Errorf("%w", err)
	}
	outer, n, inner := arrayGatherDims(params.Shape(), axis)
	idx, err := arrayIndices(c, indices, n, "indices")
	if err != nil {
		return err
	}
	p := params.Shape()
	dims := append(append(append([]int{}, p[:axis]...), indices.Shape()...), p[axis+1:]...)
	out := c.Alloc(0, params.DType(), dims...)
	src, dst := arrayBytes(params), arrayBytes(out)
	row := inner * params.DType().Size()
	k := len(idx)
	kernel.ParallelFor(outer*k, inner, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			o, j := r/k, r%k
			s := (o*n + idx[j]) * row
			copy(dst[r*row:(r+1)*row], src[s:s+row])
		}
	})
	return nil
}

func arrayGatherGrad(c *kernel.Context) error {
	dy, indices := c.Input(0), c.Input(1)
	dims, err := arrayReadDims(c, c.Input(2), "params_shape")
	if err != nil {
		return err
	}
	ps := tensor.MakeShape(dims...)
	if !ps.FullyDefined() {
		return c.Errorf("params_shape %v has a negative dimension", dims)
	}
	axis, err := op.ArrayNormAxis(c.Node.AttrInt("axis"), ps)
	if err != nil {
		return c.Errorf("%w", err)
	}
	outer, n, inner := arrayGatherDims(dims, axis)
	idx, err := arrayIndices(c, indices, n, "indices")
	if err != nil {
		return err
	}
	if want := outer * len(idx) * inner; dy.NumElements() != want {
		return c.Errorf("dy has shape %v, want %d elements for params shape %v and indices shape %v on axis %d",
			dy.StaticShape(), want, ps, indices.StaticShape(), axis)
	}
	out := c.Alloc(0, dy.DType(), dims...)
	switch d := out.Data().(type) {
	case []float32:
		arrayScatterAdd(d, dy.Float32s(), idx, outer, n, inner)
	case []float64:
		arrayScatterAdd(d, dy.Float64s(), idx, outer, n, inner)
	case []int32:
		arrayScatterAdd(d, dy.Int32s(), idx, outer, n, inner)
	case []int64:
		arrayScatterAdd(d, dy.Int64s(), idx, outer, n, inner)
	default:
		return c.Errorf("dy must be a number type, got %v", dy.DType())
	}
	return nil
}

// arrayScatterAdd adds row (o, j) of dy ([outer, len(idx), inner]) to row
// (o, idx[j]) of out ([outer, n, inner]). Repeated indices accumulate, so
// the work is split over columns, which no two workers share.
func arrayScatterAdd[T float32 | float64 | int32 | int64](out, dy []T, idx []int, outer, n, inner int) {
	k := len(idx)
	kernel.ParallelFor(inner, outer*k, func(lo, hi int) {
		for o := range outer {
			for j, i := range idx {
				src := dy[(o*k+j)*inner+lo : (o*k+j)*inner+hi]
				dst := out[(o*n+i)*inner+lo : (o*n+i)*inner+hi]
				for c, v := range src {
					dst[c] += v
				}
			}
		}
	})
}

func arrayOneHot(c *kernel.Context) error {
	indices := c.Input(0)
	depth := c.Node.AttrInt("depth")
	dt := c.Node.AttrDType("dtype")
	if depth < 0 || !dt.Valid() {
		return c.Errorf("bad depth %d or dtype %v", depth, dt)
	}
	var idx []int
	switch d := indices.Data().(type) {
	case []int32:
		idx = make([]int, len(d))
		for i, v := range d {
			idx[i] = int(v)
		}
	case []int64:
		idx = make([]int, len(d))
		for i, v := range d {
			idx[i] = int(v)
		}
	default:
		return c.Errorf("indices must be int32 or int64, got %v", indices.DType())
	}
	dims, err := op.ArrayOneHotDims(indices.Shape(), depth, c.Node.AttrInt("axis"))
	if err != nil {
		return c.Errorf("%w", err)
	}
	if err := arrayCheckDims(c, dims, "output shape"); err != nil {
		return err
	}
	// The indices are [outer, inner] around axis; the output is
	// [outer, depth, inner].
	axis := len(dims) - 1
	if a := c.Node.AttrInt("axis"); a >= 0 {
		axis = a
	}
	inner := tensor.NumElements(indices.Shape()[axis:])
	out := c.Alloc(0, dt, dims...)
	ob := arrayBytes(out)
	es := dt.Size()
	if off := float64(c.Node.AttrFloat("off_value")); off != 0 {
		arrayFillPattern(ob, arrayElem(dt, off))
	}
	on := arrayElem(dt, float64(c.Node.AttrFloat("on_value")))
	for i, v := range idx {
		// Indices outside [0, depth) select nothing, as in TensorFlow.
		if v >= 0 && v < depth {
			o, j := i/inner, i%inner
			copy(ob[((o*depth+v)*inner+j)*es:], on)
		}
	}
	return nil
}

func arrayFill(c *kernel.Context) error {
	dims, err := arrayReadDims(c, c.Input(0), "dims")
	if err != nil {
		return err
	}
	v := c.Input(1)
	if v.Rank() != 0 {
		return c.Errorf("value must be a scalar, got shape %v", v.StaticShape())
	}
	for _, d := range dims {
		if d < 0 {
			return c.Errorf("dims %v has a negative dimension", dims)
		}
	}
	if err := arrayCheckDims(c, dims, "dims"); err != nil {
		return err
	}
	out := c.Alloc(0, v.DType(), dims...)
	arrayFillPattern(arrayBytes(out), arrayBytes(v))
	return nil
}

func arrayZerosLike(c *kernel.Context) error {
	x := c.Input(0)
	c.Alloc(0, x.DType(), x.Shape()...)
	return nil
}

func arrayOnesLike(c *kernel.Context) error {
	x := c.Input(0)
	out := c.Alloc(0, x.DType(), x.Shape()...)
	arrayFillPattern(arrayBytes(out), arrayElem(x.DType(), 1))
	return nil
}

func arrayTile(c *kernel.Context) error {
	x := c.Input(0)
	m := c.Node.AttrInts("multiples")
	if len(m) != x.Rank() {
		return c.Errorf("multiples %v has %d entries for shape %v", m, len(m), x.StaticShape())
	}
	dims := make([]int, len(m))
	for i, k := range m {
		if k < 0 {
			return c.Errorf("multiples %v has a negative entry", m)
		}
		dims[i] = x.Shape()[i] * k
		if k != 0 && dims[i]/k != x.Shape()[i] {
			return c.Errorf("tiling shape %v by %v: %w", x.StaticShape(), m, tensor.ErrShapeOverflow)
		}
	}
	if err := arrayCheckDims(c, dims, "tiled shape"); err != nil {
		return err
	}
	out := c.Alloc(0, x.DType(), dims...)
	if out.NumElements() == 0 {
		return nil
	}
	// One box copy per tile, enumerated by an odometer over the multiples.
	ob, xb := arrayBytes(out), arrayBytes(x)
	tile := make([]int, len(m))
	start := make([]int, len(m))
	zero := make([]int, len(m))
	for {
		for i := range m {
			start[i] = tile[i] * x.Shape()[i]
		}
		b := arrayBox{dst: ob, src: xb, dstDims: dims, srcDims: x.Shape(),
			dstStart: start, srcStart: zero, count: x.Shape(), esize: x.DType().Size()}
		b.apply()
		i := len(m) - 1
		for ; i >= 0; i-- {
			if tile[i]++; tile[i] < m[i] {
				break
			}
			tile[i] = 0
		}
		if i < 0 {
			return nil
		}
	}
}

func arrayPad(c *kernel.Context) error {
	x := c.Input(0)
	p := c.Node.AttrInts("paddings")
	if len(p) != 2*x.Rank() {
		return c.Errorf("paddings %v must hold 2 values per dimension of shape %v", p, x.StaticShape())
	}
	dims := make([]int, x.Rank())
	before := make([]int, x.Rank())
	for i, d := range x.Shape() {
		if p[2*i] < 0 || p[2*i+1] < 0 {
			return c.Errorf("paddings %v has a negative entry", p)
		}
		before[i] = p[2*i]
		dims[i] = d + p[2*i] + p[2*i+1]
		if dims[i] < d {
			return c.Errorf("padding shape %v by %v: %w", x.StaticShape(), p, tensor.ErrShapeOverflow)
		}
	}
	if err := arrayCheckDims(c, dims, "padded shape"); err != nil {
		return err
	}
	out := c.Alloc(0, x.DType(), dims...)
	b := arrayBox{dst: arrayBytes(out), src: arrayBytes(x), dstDims: dims, srcDims: x.Shape(),
		dstStart: before, srcStart: make([]int, len(dims)), count: x.Shape(), esize: x.DType().Size()}
	b.apply()
	return nil
}
