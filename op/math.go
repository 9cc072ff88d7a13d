package op

import (
	"fmt"
	"slices"

	"github.com/distflow/distflow/tensor"
)

// The math family: element-wise arithmetic with numpy broadcasting,
// comparisons, logical ops, reductions, matrix ops and the broadcasting
// primitives BroadcastTo and SumToShape.

// Dtype sets accepted by the math ops.
var (
	mathArithTypes = []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64}
	mathFloatTypes = []tensor.DType{tensor.Float32, tensor.Float64}
	mathCmpTypes   = []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64, tensor.Uint8}
	mathEqTypes    = []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64, tensor.Uint8, tensor.Bool}
	mathBoolTypes  = []tensor.DType{tensor.Bool}
)

// mathCheckDType reports an error unless dt is in allowed.
func mathCheckDType(what string, dt tensor.DType, allowed []tensor.DType) error {
	if slices.Contains(allowed, dt) {
		return nil
	}
	return fmt.Errorf("%s has dtype %v, want one of %v", what, dt, allowed)
}

func init() {
	binary := []struct {
		name, summary string
		types         []tensor.DType
		out           tensor.DType // Invalid: same as the inputs
	}{
		{"Add", "a + b, element-wise with broadcasting.", mathArithTypes, tensor.Invalid},
		{"Sub", "a - b, element-wise with broadcasting.", mathArithTypes, tensor.Invalid},
		{"Mul", "a * b, element-wise with broadcasting.", mathArithTypes, tensor.Invalid},
		{"Div", "a / b, element-wise with broadcasting; integer division truncates.", mathArithTypes, tensor.Invalid},
		{"Pow", "a ** b, element-wise with broadcasting.", mathFloatTypes, tensor.Invalid},
		{"Maximum", "max(a, b), element-wise with broadcasting.", mathArithTypes, tensor.Invalid},
		{"Minimum", "min(a, b), element-wise with broadcasting.", mathArithTypes, tensor.Invalid},
		{"SquaredDifference", "(a - b)^2, element-wise with broadcasting.", mathArithTypes, tensor.Invalid},
		{"Greater", "a > b, element-wise with broadcasting.", mathCmpTypes, tensor.Bool},
		{"GreaterEqual", "a >= b, element-wise with broadcasting.", mathCmpTypes, tensor.Bool},
		{"Less", "a < b, element-wise with broadcasting.", mathCmpTypes, tensor.Bool},
		{"LessEqual", "a <= b, element-wise with broadcasting.", mathCmpTypes, tensor.Bool},
		{"Equal", "a == b, element-wise with broadcasting.", mathEqTypes, tensor.Bool},
		{"NotEqual", "a != b, element-wise with broadcasting.", mathEqTypes, tensor.Bool},
		{"LogicalAnd", "a && b, element-wise with broadcasting.", mathBoolTypes, tensor.Bool},
		{"LogicalOr", "a || b, element-wise with broadcasting.", mathBoolTypes, tensor.Bool},
	}
	for _, b := range binary {
		Register(Def{
			Name:    b.name,
			Remote:  true,
			Inputs:  []Arg{{Name: "a"}, {Name: "b"}},
			Summary: b.summary,
			Infer:   mathBinaryInfer(b.types, b.out),
		})
	}

	unary := []struct {
		name, summary string
		types         []tensor.DType
	}{
		{"Neg", "-x, element-wise.", mathArithTypes},
		{"Abs", "|x|, element-wise.", mathArithTypes},
		{"Sign", "-1, 0 or 1 by the sign of x, element-wise.", mathArithTypes},
		{"Square", "x^2, element-wise.", mathArithTypes},
		{"Exp", "e^x, element-wise.", mathFloatTypes},
		{"Log", "Natural logarithm, element-wise.", mathFloatTypes},
		{"Sqrt", "Square root, element-wise.", mathFloatTypes},
		{"Rsqrt", "1/sqrt(x), element-wise.", mathFloatTypes},
		{"Reciprocal", "1/x, element-wise.", mathFloatTypes},
		{"LogicalNot", "!x, element-wise.", mathBoolTypes},
	}
	for _, u := range unary {
		Register(Def{
			Name:    u.name,
			Remote:  true,
			Inputs:  []Arg{{Name: "x"}},
			Summary: u.summary,
			Infer: func(c *InferContext) error {
				if err := mathCheckDType("x", c.InputDType(0), u.types); err != nil {
					return err
				}
				return passThrough(c)
			},
		})
	}

	Register(Def{
		Name:    "Cast",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Attrs:   []Attr{{Name: "dtype", Type: AttrDType}},
		Summary: "Converts x to dtype (floats to integers truncate; bools are 0 and 1).",
		Infer: func(c *InferContext) error {
			dt := c.DType("dtype")
			if !dt.Valid() {
				return fmt.Errorf("invalid target dtype %v", dt)
			}
			c.SetOutput(0, dt, c.InputShape(0))
			return nil
		},
	})

	Register(Def{
		Name:   "Select",
		Remote: true,
		Inputs: []Arg{{Name: "cond"}, {Name: "t"}, {Name: "e"}},
		Summary: "TensorFlow 1's where/Select: t and e have one shape; a scalar cond picks all of t or all of e, " +
			"a vector cond picks rows of t or e (along their first dimension, cond's length), " +
			"a cond of t's shape picks element-wise. No broadcasting (see SelectV2).",
		Infer: mathSelectInfer,
	})
	Register(Def{
		Name:    "SelectV2",
		Remote:  true,
		Inputs:  []Arg{{Name: "cond"}, {Name: "t"}, {Name: "e"}},
		Summary: "cond ? t : e, element-wise; the three inputs broadcast together (numpy rules), as tf.where in TensorFlow 2.",
		Infer:   mathSelectV2Infer,
	})

	Register(Def{
		Name:    "AddN",
		Remote:  true,
		Inputs:  []Arg{{Name: "inputs", Variadic: true}},
		Summary: "The element-wise sum of one or more tensors of the same shape.",
		Infer: func(c *InferContext) error {
			if len(c.Inputs) == 0 {
				return fmt.Errorf("needs at least one input")
			}
			dt, err := c.SameDTypes()
			if err != nil {
				return err
			}
			if err := mathCheckDType("inputs", dt, mathArithTypes); err != nil {
				return err
			}
			s := c.InputShape(0)
			for i := 1; i < len(c.Inputs); i++ {
				if s, err = s.Merge(c.InputShape(i)); err != nil {
					return fmt.Errorf("input %d: %w", i, err)
				}
			}
			c.SetOutput(0, dt, s)
			return nil
		},
	})

	for _, r := range []struct{ name, summary string }{
		{"Sum", "The sum of x over axis (all axes if empty)."},
		{"Mean", "The mean of x over axis (all axes if empty); integer means truncate."},
		{"Max", "The maximum of x over axis (all axes if empty)."},
		{"Min", "The minimum of x over axis (all axes if empty)."},
		{"Prod", "The product of x over axis (all axes if empty)."},
	} {
		Register(Def{
			Name:   r.name,
			Remote: true,
			Inputs: []Arg{{Name: "x"}},
			Attrs: []Attr{
				{Name: "axis", Type: AttrInts, Default: []int{}},
				{Name: "keep_dims", Type: AttrBool, Default: false},
			},
			Summary: r.summary,
			Infer:   mathReduceInfer,
		})
	}

	for _, name := range []string{"ArgMax", "ArgMin"} {
		Register(Def{
			Name:   name,
			Remote: true,
			Inputs: []Arg{{Name: "x"}},
			Attrs: []Attr{
				{Name: "axis", Type: AttrInt},
				{Name: "output_type", Type: AttrDType, Default: tensor.Int64},
			},
			Summary: "The index of the extreme value of x along axis (the first one on ties).",
			Infer:   mathArgInfer,
		})
	}

	Register(Def{
		Name:   "MatMul",
		Remote: true,
		Inputs: []Arg{{Name: "a"}, {Name: "b"}},
		Attrs: []Attr{
			{Name: "transpose_a", Type: AttrBool, Default: false},
			{Name: "transpose_b", Type: AttrBool, Default: false},
		},
		Summary: "The matrix product op(a) x op(b) over the last two axes; leading axes are batch axes and must match.",
		Infer:   mathMatMulInfer,
	})
	Register(Def{
		Name:    "MatrixInverse",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Summary: "The inverse of each square matrix [..., n, n] (error if one is singular).",
		Infer: func(c *InferContext) error {
			if _, err := mathSquareInfer(c); err != nil {
				return err
			}
			return passThrough(c)
		},
	})
	Register(Def{
		Name:    "MatrixDeterminant",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Summary: "The determinant of each square matrix [..., n, n]; the output has shape [...].",
		Infer: func(c *InferContext) error {
			s, err := mathSquareInfer(c)
			if err != nil {
				return err
			}
			out := tensor.UnknownShape()
			if s.KnownRank() {
				out = tensor.MakeShape(s.Dims()[:s.Rank()-2]...)
			}
			c.SetOutput(0, c.InputDType(0), out)
			return nil
		},
	})

	Register(Def{
		Name:    "BroadcastTo",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}, {Name: "shape"}},
		Summary: "x broadcast (numpy rules) to shape, a 1-D int32 or int64 tensor.",
		Infer: func(c *InferContext) error {
			target, err := mathShapeInput(c, 1)
			if err != nil {
				return err
			}
			if target.KnownRank() {
				b, err := BroadcastShapes(c.InputShape(0), target)
				if err != nil {
					return err
				}
				if b.KnownRank() && b.Rank() != target.Rank() || !b.IsCompatibleWith(target) {
					return fmt.Errorf("cannot broadcast %v to %v", c.InputShape(0), target)
				}
				if target, err = target.Merge(b); err != nil {
					return err
				}
			}
			c.SetOutput(0, c.InputDType(0), target)
			return nil
		},
	})
	Register(Def{
		Name:   "SumToShape",
		Remote: true,
		Inputs: []Arg{{Name: "x"}, {Name: "shape"}},
		Summary: "Sums x over the axes that broadcasting added or stretched so that the result has shape " +
			"(a 1-D int32 or int64 tensor): the adjoint of BroadcastTo.",
		Infer: func(c *InferContext) error {
			if err := mathCheckDType("x", c.InputDType(0), mathArithTypes); err != nil {
				return err
			}
			target, err := mathShapeInput(c, 1)
			if err != nil {
				return err
			}
			if target.KnownRank() {
				b, err := BroadcastShapes(c.InputShape(0), target)
				if err != nil {
					return fmt.Errorf("cannot sum %v to %v: %w", c.InputShape(0), target, err)
				}
				if !b.IsCompatibleWith(c.InputShape(0)) {
					return fmt.Errorf("cannot sum %v to %v: %v does not broadcast to %v", c.InputShape(0), target, target, c.InputShape(0))
				}
			}
			c.SetOutput(0, c.InputDType(0), target)
			return nil
		},
	})
}

// mathSelectDTypes checks Select's and SelectV2's dtypes: a bool cond, and
// t and e of one dtype, which it returns.
func mathSelectDTypes(c *InferContext) (tensor.DType, error) {
	if c.InputDType(0) != tensor.Bool {
		return tensor.Invalid, fmt.Errorf("cond must be bool, got %v", c.InputDType(0))
	}
	return c.SameDTypes(1, 2)
}

// MathSelectRows reports how Select (TensorFlow 1's rules) combines a cond
// of shape cond with t and e of shape data: rows is true when a vector
// cond picks rows of a data of rank > 1, and false when it picks all (a
// scalar cond) or element-wise (cond has data's shape). Shapes that allow
// neither are an error naming both. Unknown ranks or dimensions are
// accepted; the kernel checks the concrete shapes with the same function.
func MathSelectRows(cond, data tensor.Shape) (rows bool, err error) {
	if !cond.KnownRank() || !data.KnownRank() {
		return cond.Rank() == 1 && data.Rank() != 1, nil
	}
	switch {
	case cond.Rank() == 0:
		return false, nil
	case cond.Rank() == 1 && data.Rank() > 1:
		if d, n := data.Dim(0), cond.Dim(0); d >= 0 && n >= 0 && d != n {
			return false, fmt.Errorf("a vector cond %v picks rows of t and e, whose first dimension must be its length; t and e have shape %v", cond, data)
		}
		return true, nil
	case !cond.IsCompatibleWith(data):
		return false, fmt.Errorf("cond has shape %v, t and e have shape %v: want cond a scalar, a vector of length %s or of shape %v (Select does not broadcast; SelectV2 does)",
			cond, data, mathFirstDim(data), data)
	}
	return false, nil
}

// mathFirstDim renders the first dimension of s, "?" if unknown.
func mathFirstDim(s tensor.Shape) string {
	if s.Rank() < 1 || s.Dim(0) < 0 {
		return "?"
	}
	return fmt.Sprint(s.Dim(0))
}

func mathSelectInfer(c *InferContext) error {
	dt, err := mathSelectDTypes(c)
	if err != nil {
		return err
	}
	data, err := c.InputShape(1).Merge(c.InputShape(2))
	if err != nil {
		return fmt.Errorf("t and e must have the same shape, got %v and %v", c.InputShape(1), c.InputShape(2))
	}
	cond := c.InputShape(0)
	rows, err := MathSelectRows(cond, data)
	if err != nil {
		return err
	}
	switch {
	case rows && data.KnownRank() && cond.KnownRank():
		d := data.Dims()
		if d[0] < 0 {
			d[0] = cond.Dim(0)
		}
		data = tensor.MakeShape(d...)
	case !rows && cond.Rank() > 0:
		if data, err = data.Merge(cond); err != nil {
			return err
		}
	}
	c.SetOutput(0, dt, data)
	return nil
}

func mathSelectV2Infer(c *InferContext) error {
	dt, err := mathSelectDTypes(c)
	if err != nil {
		return err
	}
	te, err := BroadcastShapes(c.InputShape(1), c.InputShape(2))
	if err != nil {
		return fmt.Errorf("t and e: %w", err)
	}
	out, err := BroadcastShapes(c.InputShape(0), te)
	if err != nil {
		return fmt.Errorf("cond: %w", err)
	}
	c.SetOutput(0, dt, out)
	return nil
}

// mathBinaryInfer checks the dtypes of a broadcasting binary op and sets its
// output to the broadcast shape; out is the output dtype (Invalid: the input's).
func mathBinaryInfer(types []tensor.DType, out tensor.DType) func(c *InferContext) error {
	return func(c *InferContext) error {
		dt, err := c.SameDTypes(0, 1)
		if err != nil {
			return err
		}
		if err := mathCheckDType("a", dt, types); err != nil {
			return err
		}
		s, err := BroadcastShapes(c.InputShape(0), c.InputShape(1))
		if err != nil {
			return err
		}
		odt := out
		if odt == tensor.Invalid {
			odt = dt
		}
		c.SetOutput(0, odt, s)
		return nil
	}
}

// MathNormalizeAxes resolves negative axes against rank and checks that each
// axis is in range and appears once. An empty list means every axis. The
// result is sorted. Kernels and gradients of reductions share it.
func MathNormalizeAxes(axes []int, rank int) ([]int, error) {
	if len(axes) == 0 {
		all := make([]int, rank)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	out := make([]int, len(axes))
	for i, a := range axes {
		if a < -rank || a >= rank {
			return nil, fmt.Errorf("axis %d out of range for rank %d", a, rank)
		}
		if a < 0 {
			a += rank
		}
		out[i] = a
	}
	slices.Sort(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			return nil, fmt.Errorf("axis %d repeated in %v", out[i], axes)
		}
	}
	return out, nil
}

// MathReducedShape returns the shape of reducing in over the normalized axes.
func MathReducedShape(in tensor.Shape, axes []int, keepDims bool) tensor.Shape {
	var out []int
	for i, d := range in.Dims() {
		if slices.Contains(axes, i) {
			if keepDims {
				out = append(out, 1)
			}
			continue
		}
		out = append(out, d)
	}
	return tensor.MakeShape(out...)
}

func mathReduceInfer(c *InferContext) error {
	if err := mathCheckDType("x", c.InputDType(0), mathArithTypes); err != nil {
		return err
	}
	in, axes := c.InputShape(0), c.Ints("axis")
	if !in.KnownRank() {
		out := tensor.UnknownShape()
		if len(axes) == 0 && !c.Bool("keep_dims") {
			out = tensor.ScalarShape()
		}
		c.SetOutput(0, c.InputDType(0), out)
		return nil
	}
	norm, err := MathNormalizeAxes(axes, in.Rank())
	if err != nil {
		return fmt.Errorf("%w (input shape %v)", err, in)
	}
	c.SetOutput(0, c.InputDType(0), MathReducedShape(in, norm, c.Bool("keep_dims")))
	return nil
}

func mathArgInfer(c *InferContext) error {
	if err := mathCheckDType("x", c.InputDType(0), mathCmpTypes); err != nil {
		return err
	}
	ot := c.DType("output_type")
	if ot != tensor.Int32 && ot != tensor.Int64 {
		return fmt.Errorf("output_type must be int32 or int64, got %v", ot)
	}
	in := c.InputShape(0)
	if !in.KnownRank() {
		c.SetOutput(0, ot, tensor.UnknownShape())
		return nil
	}
	if in.Rank() == 0 {
		return fmt.Errorf("input must have rank >= 1, got shape %v", in)
	}
	axes, err := MathNormalizeAxes([]int{c.Int("axis")}, in.Rank())
	if err != nil {
		return fmt.Errorf("%w (input shape %v)", err, in)
	}
	c.SetOutput(0, ot, MathReducedShape(in, axes, false))
	return nil
}

func mathMatMulInfer(c *InferContext) error {
	dt, err := c.SameDTypes(0, 1)
	if err != nil {
		return err
	}
	if err := mathCheckDType("a", dt, mathFloatTypes); err != nil {
		return err
	}
	a, b := c.InputShape(0), c.InputShape(1)
	ta, tb := c.Bool("transpose_a"), c.Bool("transpose_b")
	if !a.KnownRank() || !b.KnownRank() {
		c.SetOutput(0, dt, tensor.UnknownShape())
		return nil
	}
	if a.Rank() < 2 || a.Rank() != b.Rank() {
		return fmt.Errorf("operands must be matrices (or batches of the same rank): %v x %v", a, b)
	}
	r := a.Rank()
	batch := make([]int, r-2)
	for i := range batch {
		da, db := a.Dim(i), b.Dim(i)
		if da >= 0 && db >= 0 && da != db {
			return fmt.Errorf("batch dimensions differ: %v x %v", a, b)
		}
		batch[i] = max(da, db)
	}
	m, ka := a.Dim(r-2), a.Dim(r-1)
	if ta {
		m, ka = ka, m
	}
	kb, n := b.Dim(r-2), b.Dim(r-1)
	if tb {
		kb, n = n, kb
	}
	if ka >= 0 && kb >= 0 && ka != kb {
		return fmt.Errorf("inner dimensions differ: %v x %v (transpose_a=%v, transpose_b=%v)", a, b, ta, tb)
	}
	c.SetOutput(0, dt, tensor.MakeShape(append(batch, m, n)...))
	return nil
}

// mathSquareInfer checks that input 0 is a float batch of square matrices.
func mathSquareInfer(c *InferContext) (tensor.Shape, error) {
	if err := mathCheckDType("x", c.InputDType(0), mathFloatTypes); err != nil {
		return tensor.Shape{}, err
	}
	s := c.InputShape(0)
	if !s.KnownRank() {
		return s, nil
	}
	if s.Rank() < 2 {
		return s, fmt.Errorf("input must be a matrix [..., n, n], got shape %v", s)
	}
	if r, k := s.Dim(-2), s.Dim(-1); r >= 0 && k >= 0 && r != k {
		return s, fmt.Errorf("input must be square matrices [..., n, n], got shape %v", s)
	}
	return s, nil
}

// mathShapeInput reads input i as a target shape: exact when it is a
// constant, else of known rank when its length is known.
func mathShapeInput(c *InferContext, i int) (tensor.Shape, error) {
	dt, s := c.InputDType(i), c.InputShape(i)
	if dt != tensor.Int32 && dt != tensor.Int64 {
		return tensor.Shape{}, fmt.Errorf("shape must be int32 or int64, got %v", dt)
	}
	if s.KnownRank() && s.Rank() != 1 {
		return tensor.Shape{}, fmt.Errorf("shape must be 1-D, got shape %v", s)
	}
	if v := c.Consts[i]; v != nil {
		dims := make([]int, v.NumElements())
		for j := range dims {
			dims[j] = int(v.Float64At(j))
			if dims[j] < 0 {
				return tensor.Shape{}, fmt.Errorf("negative dimension in shape %v", dims)
			}
		}
		return tensor.MakeShape(dims...), nil
	}
	if s.KnownRank() && s.Dim(0) >= 0 {
		return tensor.UnknownRankShape(s.Dim(0)), nil
	}
	return tensor.UnknownShape(), nil
}
