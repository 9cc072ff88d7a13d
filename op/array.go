package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// The array family: ops that move, copy or describe data without arithmetic
// (except GatherGrad, the scatter-add adjoint of Gather). Integer-list
// attributes are []int; axis attributes may be negative (counted from the
// end). Shape-valued inputs are 1-D int32 (int64 is accepted too).

func init() {
	Register(Def{
		Name:    "Reshape",
		Remote:  true,
		Inputs:  []Arg{{Name: "tensor"}, {Name: "shape"}},
		Summary: "Returns tensor with the dimensions given by shape (1-D int32; one -1 is inferred).",
		Infer:   arrayInferReshape,
	})
	Register(Def{
		Name:    "Shape",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Summary: "Returns the dimensions of x as a 1-D int32 tensor.",
		Infer: func(c *InferContext) error {
			c.SetOutput(0, tensor.Int32, tensor.MakeShape(c.InputShape(0).Rank()))
			return nil
		},
	})
	Register(Def{
		Name:    "Rank",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Summary: "Returns the number of dimensions of x as an int32 scalar.",
		Infer: func(c *InferContext) error {
			c.SetOutput(0, tensor.Int32, tensor.ScalarShape())
			return nil
		},
	})
	Register(Def{
		Name:    "Size",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Summary: "Returns the number of elements of x as an int32 scalar.",
		Infer: func(c *InferContext) error {
			c.SetOutput(0, tensor.Int32, tensor.ScalarShape())
			return nil
		},
	})
	Register(Def{
		Name:    "ExpandDims",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Attrs:   []Attr{{Name: "axis", Type: AttrInt}},
		Summary: "Inserts a dimension of size 1 at axis (in [-rank-1, rank]).",
		Infer:   arrayInferExpandDims,
	})
	Register(Def{
		Name:    "Squeeze",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Attrs:   []Attr{{Name: "axes", Type: AttrInts, Default: []int{}}},
		Summary: "Removes the given dimensions of size 1 (all of them if axes is empty).",
		Infer:   arrayInferSqueeze,
	})
	Register(Def{
		Name:    "Transpose",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Attrs:   []Attr{{Name: "perm", Type: AttrInts, Default: []int{}}},
		Summary: "Permutes the dimensions: output dimension i is input dimension perm[i] (empty perm reverses them).",
		Infer:   arrayInferTranspose,
	})
	Register(Def{
		Name:    "Concat",
		Remote:  true,
		Inputs:  []Arg{{Name: "values", Variadic: true}},
		Attrs:   []Attr{{Name: "axis", Type: AttrInt}},
		Summary: "Joins one or more tensors of equal rank and dtype along axis.",
		Infer:   arrayInferConcat,
	})
	Register(Def{
		Name:   "Slice",
		Remote: true,
		Inputs: []Arg{{Name: "x"}},
		Attrs: []Attr{{Name: "begin", Type: AttrInts},
			{Name: "size", Type: AttrInts}},
		Summary: "Extracts the box starting at begin of extent size (-1 = to the end of that dimension).",
		Infer:   arrayInferSlice,
	})
	Register(Def{
		Name:   "Split",
		Remote: true,
		Inputs: []Arg{{Name: "x"}},
		Attrs: []Attr{{Name: "axis", Type: AttrInt},
			{Name: "num_split", Type: AttrInt}},
		Summary: "Splits x along axis into num_split equal parts (num_split outputs).",
		Infer:   arrayInferSplit,
	})
	Register(Def{
		Name:    "Gather",
		Remote:  true,
		Inputs:  []Arg{{Name: "params"}, {Name: "indices"}},
		Attrs:   []Attr{{Name: "axis", Type: AttrInt, Default: 0}},
		Summary: "Picks slices of params along axis at indices (int32 or int64); shape params[:axis]+indices+params[axis+1:].",
		Infer:   arrayInferGather,
	})
	Register(Def{
		Name:    "GatherGrad",
		Remote:  true,
		Inputs:  []Arg{{Name: "dy"}, {Name: "indices"}, {Name: "params_shape"}},
		Attrs:   []Attr{{Name: "axis", Type: AttrInt, Default: 0}},
		Summary: "The adjoint of Gather: a zero tensor of params_shape with the slices of dy added at indices along axis.",
		Infer:   arrayInferGatherGrad,
	})
	Register(Def{
		Name:   "OneHot",
		Remote: true,
		Inputs: []Arg{{Name: "indices"}},
		Attrs: []Attr{{Name: "depth", Type: AttrInt},
			{Name: "on_value", Type: AttrFloat, Default: float32(1)},
			{Name: "off_value", Type: AttrFloat, Default: float32(0)},
			{Name: "dtype", Type: AttrDType, Default: tensor.Float32},
			{Name: "axis", Type: AttrInt, Default: -1}},
		Summary: "Inserts a dimension of size depth at axis (-1: last; else in [0, rank]): on_value where the index matches, " +
			"off_value elsewhere (indices outside [0, depth) give all off_value).",
		Infer: arrayInferOneHot,
	})
	Register(Def{
		Name:    "Fill",
		Remote:  true,
		Inputs:  []Arg{{Name: "dims"}, {Name: "value"}},
		Summary: "Returns a tensor of shape dims (1-D int32) filled with the scalar value.",
		Infer:   arrayInferFill,
	})
	Register(Def{
		Name:    "ZerosLike",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Summary: "Returns zeros with the dtype and shape of x.",
		Infer:   passThrough,
	})
	Register(Def{
		Name:    "OnesLike",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Summary: "Returns ones (true for bool) with the dtype and shape of x.",
		Infer:   passThrough,
	})
	Register(Def{
		Name:    "Tile",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Attrs:   []Attr{{Name: "multiples", Type: AttrInts}},
		Summary: "Repeats x multiples[i] times along dimension i.",
		Infer:   arrayInferTile,
	})
	Register(Def{
		Name:    "Pad",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Attrs:   []Attr{{Name: "paddings", Type: AttrInts}},
		Summary: "Pads x with zeros: paddings holds (before, after) for each dimension, 2*rank values.",
		Infer:   arrayInferPad,
	})
}

// ArrayNormAxis maps axis in [-rank, rank) to [0, rank), or fails naming the
// shape. Ops that accept negative axes share it.
func ArrayNormAxis(axis int, s tensor.Shape) (int, error) {
	r := s.Rank()
	if axis < -r || axis >= r {
		return 0, fmt.Errorf("axis %d is out of range for shape %v (rank %d)", axis, s, r)
	}
	if axis < 0 {
		axis += r
	}
	return axis, nil
}

// arrayIndexDType rejects index inputs that are not int32 or int64.
func arrayIndexDType(c *InferContext, i int, what string) error {
	if dt := c.InputDType(i); dt != tensor.Int32 && dt != tensor.Int64 {
		return fmt.Errorf("%s must be int32 or int64, got %v", what, dt)
	}
	return nil
}

// arrayShapeInput reads a 1-D shape-valued input (shape of Reshape, dims of
// Fill): the exact dims when the input is a constant, ok=false otherwise.
// It also fixes the rank when only the input's length is known.
func arrayShapeInput(c *InferContext, i int, what string) (dims []int, rank int, ok bool, err error) {
	if err := arrayIndexDType(c, i, what); err != nil {
		return nil, 0, false, err
	}
	s := c.InputShape(i)
	if s.KnownRank() && s.Rank() != 1 {
		return nil, 0, false, fmt.Errorf("%s must be 1-D, got shape %v", what, s)
	}
	if t := c.Consts[i]; t != nil {
		dims = make([]int, t.NumElements())
		for j := range dims {
			dims[j] = int(t.Float64At(j))
		}
		return dims, len(dims), true, nil
	}
	if s.KnownRank() {
		return nil, s.Dim(0), false, nil
	}
	return nil, -1, false, nil
}

// arrayPartialShape is the output shape of a shape-valued input i that is
// not a constant: what the graph knows of its value (InferContext.
// ShapeValue), or rank unknown dimensions (none known when rank < 0).
func arrayPartialShape(c *InferContext, i, rank int) tensor.Shape {
	if v := c.ShapeValue(i); v.KnownRank() && (rank < 0 || v.Rank() == rank) {
		return v
	}
	if rank >= 0 {
		return tensor.UnknownRankShape(rank)
	}
	return tensor.UnknownShape()
}

func arrayInferReshape(c *InferContext) error {
	in := c.InputShape(0)
	dims, rank, ok, err := arrayShapeInput(c, 1, "shape")
	if err != nil {
		return err
	}
	dt := c.InputDType(0)
	if !ok {
		out := arrayPartialShape(c, 1, rank)
		if !out.KnownRank() {
			c.SetOutput(0, dt, out)
			return nil
		}
		// Part of the target known: a -1 there (to be inferred) is as
		// unknown as a dimension computed at run time, and can be
		// inferred when it is the only one.
		dims = out.Dims()
		unknown := 0
		for _, d := range dims {
			if d < 0 {
				unknown++
			}
		}
		if unknown > 1 {
			c.SetOutput(0, dt, out)
			return nil
		}
	}
	out, err := ArrayResolveReshape(in.NumElements(), dims)
	if err != nil {
		return fmt.Errorf("cannot reshape %v to %v: %w", in, dims, err)
	}
	c.SetOutput(0, dt, tensor.MakeShape(out...))
	return nil
}

// ArrayResolveReshape checks a Reshape target and replaces its -1 (at most
// one) by the size that keeps n elements. n < 0 means unknown: the -1 stays.
// Kernels and shape inference share it so that both accept the same targets.
func ArrayResolveReshape(n int, dims []int) ([]int, error) {
	out := append([]int(nil), dims...)
	wild, prod := -1, 1
	for i, d := range out {
		switch {
		case d == -1 && wild >= 0:
			return nil, fmt.Errorf("only one dimension may be -1")
		case d == -1:
			wild = i
		case d < 0:
			return nil, fmt.Errorf("dimension %d is negative (%d)", i, d)
		default:
			prod *= d
		}
	}
	known := make([]int, 0, len(out))
	for _, d := range out {
		if d >= 0 {
			known = append(known, d)
		}
	}
	if _, err := tensor.CheckNumElements(known); err != nil {
		return nil, err
	}
	if n < 0 {
		return out, nil
	}
	if wild < 0 {
		if prod != n {
			return nil, fmt.Errorf("%d elements do not fit %d", n, prod)
		}
		return out, nil
	}
	if prod == 0 || n%prod != 0 {
		// With a zero-sized known dimension the -1 is ambiguous unless n is 0.
		if prod == 0 && n == 0 {
			out[wild] = 0
			return out, nil
		}
		return nil, fmt.Errorf("%d elements cannot be split into parts of %d for the -1 dimension", n, prod)
	}
	out[wild] = n / prod
	return out, nil
}

func arrayInferExpandDims(c *InferContext) error {
	in := c.InputShape(0)
	dt := c.InputDType(0)
	if !in.KnownRank() {
		c.SetOutput(0, dt, tensor.UnknownShape())
		return nil
	}
	axis := c.Int("axis")
	r := in.Rank()
	if axis < -r-1 || axis > r {
		return fmt.Errorf("axis %d is out of range [%d, %d] for shape %v", axis, -r-1, r, in)
	}
	if axis < 0 {
		axis += r + 1
	}
	d := in.Dims()
	d = append(d[:axis], append([]int{1}, d[axis:]...)...)
	c.SetOutput(0, dt, tensor.MakeShape(d...))
	return nil
}

func arrayInferSqueeze(c *InferContext) error {
	in := c.InputShape(0)
	dt := c.InputDType(0)
	if !in.KnownRank() {
		c.SetOutput(0, dt, tensor.UnknownShape())
		return nil
	}
	axes := c.Ints("axes")
	drop := make([]bool, in.Rank())
	if len(axes) == 0 {
		for i, d := range in.Dims() {
			if d < 0 {
				// Whether it will be squeezed is only known at run time.
				c.SetOutput(0, dt, tensor.UnknownShape())
				return nil
			}
			drop[i] = d == 1
		}
	}
	for _, a := range axes {
		a, err := ArrayNormAxis(a, in)
		if err != nil {
			return err
		}
		if d := in.Dim(a); d >= 0 && d != 1 {
			return fmt.Errorf("cannot squeeze dimension %d of shape %v: size is %d, not 1", a, in, d)
		}
		drop[a] = true
	}
	var out []int
	for i, d := range in.Dims() {
		if !drop[i] {
			out = append(out, d)
		}
	}
	c.SetOutput(0, dt, tensor.MakeShape(out...))
	return nil
}

// ArrayPerm returns perm checked as a permutation of rank dimensions; an
// empty perm means reversing them.
func ArrayPerm(perm []int, rank int) ([]int, error) {
	if len(perm) == 0 {
		p := make([]int, rank)
		for i := range p {
			p[i] = rank - 1 - i
		}
		return p, nil
	}
	if len(perm) != rank {
		return nil, fmt.Errorf("perm %v has %d entries for rank %d", perm, len(perm), rank)
	}
	seen := make([]bool, rank)
	for _, p := range perm {
		if p < 0 || p >= rank || seen[p] {
			return nil, fmt.Errorf("perm %v is not a permutation of [0, %d)", perm, rank)
		}
		seen[p] = true
	}
	return perm, nil
}

func arrayInferTranspose(c *InferContext) error {
	in := c.InputShape(0)
	dt := c.InputDType(0)
	perm := c.Ints("perm")
	if !in.KnownRank() {
		if len(perm) == 0 {
			c.SetOutput(0, dt, tensor.UnknownShape())
		} else {
			c.SetOutput(0, dt, tensor.UnknownRankShape(len(perm)))
		}
		return nil
	}
	p, err := ArrayPerm(perm, in.Rank())
	if err != nil {
		return fmt.Errorf("%v (shape %v)", err, in)
	}
	out := make([]int, len(p))
	for i, j := range p {
		out[i] = in.Dim(j)
	}
	c.SetOutput(0, dt, tensor.MakeShape(out...))
	return nil
}

func arrayInferConcat(c *InferContext) error {
	if len(c.Inputs) == 0 {
		return fmt.Errorf("needs at least one input")
	}
	dt, err := c.SameDTypes()
	if err != nil {
		return err
	}
	var out tensor.Shape // first known-rank input, merged with the others
	for _, in := range c.Inputs {
		if in.Shape.KnownRank() {
			out = in.Shape
			break
		}
	}
	if !out.KnownRank() {
		c.SetOutput(0, dt, tensor.UnknownShape())
		return nil
	}
	axis, err := ArrayNormAxis(c.Int("axis"), out)
	if err != nil {
		return err
	}
	dims := out.Dims()
	dims[axis] = 0
	for i, in := range c.Inputs {
		s := in.Shape
		if !s.KnownRank() {
			dims[axis] = -1
			continue
		}
		if s.Rank() != len(dims) {
			return fmt.Errorf("input %d has shape %v, input 0 has shape %v: ranks differ", i, s, c.Inputs[0].Shape)
		}
		for j, d := range s.Dims() {
			if j == axis {
				if d < 0 || dims[axis] < 0 {
					dims[axis] = -1
				} else {
					dims[axis] += d
				}
				continue
			}
			switch {
			case dims[j] < 0:
				dims[j] = d
			case d >= 0 && d != dims[j]:
				return fmt.Errorf("input %d has shape %v, other inputs have dimension %d = %d (concatenating on axis %d)", i, s, j, dims[j], axis)
			}
		}
	}
	c.SetOutput(0, dt, tensor.MakeShape(dims...))
	return nil
}

func arrayInferSlice(c *InferContext) error {
	in := c.InputShape(0)
	begin, size := c.Ints("begin"), c.Ints("size")
	if len(begin) != len(size) {
		return fmt.Errorf("begin %v and size %v have different lengths", begin, size)
	}
	if in.KnownRank() && in.Rank() != len(begin) {
		return fmt.Errorf("begin %v has %d entries for shape %v", begin, len(begin), in)
	}
	out := make([]int, len(begin))
	for i := range begin {
		d := -1
		if in.KnownRank() {
			d = in.Dim(i)
		}
		b, n := begin[i], size[i]
		if b < 0 || n < -1 {
			return fmt.Errorf("bad slice of shape %v: begin %v, size %v", in, begin, size)
		}
		if n == -1 {
			if d >= 0 {
				n = d - b
			}
		}
		if d >= 0 && (n < 0 || b+n > d) {
			return fmt.Errorf("slice begin %v size %v is out of bounds of shape %v", begin, size, in)
		}
		out[i] = n
	}
	c.SetOutput(0, c.InputDType(0), tensor.MakeShape(out...))
	return nil
}

func arrayInferSplit(c *InferContext) error {
	in := c.InputShape(0)
	dt := c.InputDType(0)
	num := c.Int("num_split")
	if num < 1 {
		return fmt.Errorf("num_split must be at least 1, got %d", num)
	}
	out := tensor.UnknownShape()
	if in.KnownRank() {
		axis, err := ArrayNormAxis(c.Int("axis"), in)
		if err != nil {
			return err
		}
		dims := in.Dims()
		if d := dims[axis]; d >= 0 {
			if d%num != 0 {
				return fmt.Errorf("dimension %d of shape %v (%d) is not divisible by num_split %d", axis, in, d, num)
			}
			dims[axis] = d / num
		}
		out = tensor.MakeShape(dims...)
	}
	for i := range num {
		c.SetOutput(i, dt, out)
	}
	return nil
}

func arrayInferGather(c *InferContext) error {
	params, idx := c.InputShape(0), c.InputShape(1)
	if err := arrayIndexDType(c, 1, "indices"); err != nil {
		return err
	}
	dt := c.InputDType(0)
	if !params.KnownRank() || !idx.KnownRank() {
		c.SetOutput(0, dt, tensor.UnknownShape())
		return nil
	}
	axis, err := ArrayNormAxis(c.Int("axis"), params)
	if err != nil {
		return err
	}
	p := params.Dims()
	out := append(append(append([]int{}, p[:axis]...), idx.Dims()...), p[axis+1:]...)
	c.SetOutput(0, dt, tensor.MakeShape(out...))
	return nil
}

func arrayInferGatherGrad(c *InferContext) error {
	if err := arrayIndexDType(c, 1, "indices"); err != nil {
		return err
	}
	dims, rank, ok, err := arrayShapeInput(c, 2, "params_shape")
	if err != nil {
		return err
	}
	dt := c.InputDType(0)
	if !dt.IsFloat() && dt != tensor.Int32 && dt != tensor.Int64 {
		return fmt.Errorf("dy must be float32, float64, int32 or int64, got %v", dt)
	}
	switch {
	case ok:
		c.SetOutput(0, dt, tensor.MakeShape(dims...))
	default:
		c.SetOutput(0, dt, arrayPartialShape(c, 2, rank))
	}
	return nil
}

func arrayInferOneHot(c *InferContext) error {
	if err := arrayIndexDType(c, 0, "indices"); err != nil {
		return err
	}
	depth := c.Int("depth")
	if depth < 0 {
		return fmt.Errorf("depth must be non-negative, got %d", depth)
	}
	dt := c.DType("dtype")
	if !dt.Valid() {
		return fmt.Errorf("invalid dtype %v", dt)
	}
	in := c.InputShape(0)
	axis := c.Int("axis")
	if axis < -1 {
		return fmt.Errorf("axis must be -1 or in [0, rank], got %d", axis)
	}
	if !in.KnownRank() {
		c.SetOutput(0, dt, tensor.UnknownShape())
		return nil
	}
	dims, err := ArrayOneHotDims(in.Dims(), depth, axis)
	if err != nil {
		return err
	}
	c.SetOutput(0, dt, tensor.MakeShape(dims...))
	return nil
}

// ArrayOneHotDims returns the shape of OneHot's output for indices of
// shape dims, as TensorFlow's: depth inserted at axis (-1 means last), so
// that for indices [batch, features] axis -1 gives [batch, features, depth],
// axis 1 [batch, depth, features] and axis 0 [depth, batch, features].
func ArrayOneHotDims(dims []int, depth, axis int) ([]int, error) {
	if axis == -1 {
		axis = len(dims)
	}
	if axis < 0 || axis > len(dims) {
		return nil, fmt.Errorf("axis %d is out of range [-1, %d] for indices of shape %v", axis, len(dims), tensor.MakeShape(dims...))
	}
	out := make([]int, 0, len(dims)+1)
	out = append(append(append(out, dims[:axis]...), depth), dims[axis:]...)
	return out, nil
}

func arrayInferFill(c *InferContext) error {
	if v := c.InputShape(1); v.KnownRank() && v.Rank() != 0 {
		return fmt.Errorf("value must be a scalar, got shape %v", v)
	}
	dims, rank, ok, err := arrayShapeInput(c, 0, "dims")
	if err != nil {
		return err
	}
	dt := c.InputDType(1)
	switch {
	case ok:
		for _, d := range dims {
			if d < 0 {
				return fmt.Errorf("dims %v has a negative dimension", dims)
			}
		}
		c.SetOutput(0, dt, tensor.MakeShape(dims...))
	default:
		c.SetOutput(0, dt, arrayPartialShape(c, 0, rank))
	}
	return nil
}

func arrayInferTile(c *InferContext) error {
	in := c.InputShape(0)
	m := c.Ints("multiples")
	if in.KnownRank() && in.Rank() != len(m) {
		return fmt.Errorf("multiples %v has %d entries for shape %v", m, len(m), in)
	}
	out := make([]int, len(m))
	for i, k := range m {
		if k < 0 {
			return fmt.Errorf("multiples %v has a negative entry", m)
		}
		out[i] = -1
		if in.KnownRank() && in.Dim(i) >= 0 {
			out[i] = in.Dim(i) * k
		}
	}
	c.SetOutput(0, c.InputDType(0), tensor.MakeShape(out...))
	return nil
}

func arrayInferPad(c *InferContext) error {
	in := c.InputShape(0)
	p := c.Ints("paddings")
	if len(p)%2 != 0 || in.KnownRank() && len(p) != 2*in.Rank() {
		return fmt.Errorf("paddings %v must hold 2 values per dimension of shape %v", p, in)
	}
	out := make([]int, len(p)/2)
	for i := range out {
		if p[2*i] < 0 || p[2*i+1] < 0 {
			return fmt.Errorf("paddings %v has a negative entry", p)
		}
		out[i] = -1
		if in.KnownRank() && in.Dim(i) >= 0 {
			out[i] = in.Dim(i) + p[2*i] + p[2*i+1]
		}
	}
	c.SetOutput(0, c.InputDType(0), tensor.MakeShape(out...))
	return nil
}
