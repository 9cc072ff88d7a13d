package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// TensorInfo is what is known of a tensor while the graph is built.
type TensorInfo struct {
	DType tensor.DType
	Shape tensor.Shape
}

// InferContext is handed to Def.Infer: the inputs as known at build time, the
// node's attributes (defaults applied), and the outputs to fill in.
type InferContext struct {
	Inputs []TensorInfo
	// Consts holds the value of input i when it is known at build time (its
	// producer is a Const), else nil. It lets Reshape or Fill infer exact shapes.
	Consts []*tensor.Tensor
	// ShapeValues holds, for a 1-D int32 or int64 input that is not a
	// constant, what is known at build time of its value read as a shape
	// (a rank, and the dimensions known, -1 for the others): a shape
	// computed from another tensor's Shape, sliced, cast or joined with
	// constants, as TensorFlow's shape inference reads
	// tf.concat([tf.shape(x)[:2], [3]], 0). Unknown rank when nothing is
	// known; it may be shorter than Inputs (read it with ShapeValue).
	ShapeValues []tensor.Shape
	Attrs       map[string]any
	Outputs     []TensorInfo
}

// ShapeValue returns ShapeValues[i], or the unknown shape.
func (c *InferContext) ShapeValue(i int) tensor.Shape {
	if i < len(c.ShapeValues) {
		return c.ShapeValues[i]
	}
	return tensor.UnknownShape()
}

// Attr returns attribute name (defaults are applied before Infer runs).
func (c *InferContext) Attr(name string) any { return c.Attrs[name] }

// Int returns an int attribute.
func (c *InferContext) Int(name string) int { v, _ := c.Attrs[name].(int); return v }

// Float returns a float attribute.
func (c *InferContext) Float(name string) float32 { v, _ := c.Attrs[name].(float32); return v }

// Bool returns a bool attribute.
func (c *InferContext) Bool(name string) bool { v, _ := c.Attrs[name].(bool); return v }

// String returns a string attribute.
func (c *InferContext) String(name string) string { v, _ := c.Attrs[name].(string); return v }

// Ints returns a list(int) attribute.
func (c *InferContext) Ints(name string) []int { v, _ := c.Attrs[name].([]int); return v }

// DType returns a dtype attribute.
func (c *InferContext) DType(name string) tensor.DType {
	v, _ := c.Attrs[name].(tensor.DType)
	return v
}

// Shape returns a shape attribute.
func (c *InferContext) Shape(name string) tensor.Shape {
	v, _ := c.Attrs[name].(tensor.Shape)
	return v
}

// Tensor returns a tensor attribute.
func (c *InferContext) Tensor(name string) *tensor.Tensor {
	v, _ := c.Attrs[name].(*tensor.Tensor)
	return v
}

// Func returns a func attribute (nil if absent).
func (c *InferContext) Func(name string) Func { v, _ := c.Attrs[name].(Func); return v }

// InputShape returns the shape of input i.
func (c *InferContext) InputShape(i int) tensor.Shape { return c.Inputs[i].Shape }

// InputDType returns the dtype of input i.
func (c *InferContext) InputDType(i int) tensor.DType { return c.Inputs[i].DType }

// SetOutput declares output i (outputs are appended as needed).
func (c *InferContext) SetOutput(i int, dt tensor.DType, s tensor.Shape) {
	for len(c.Outputs) <= i {
		c.Outputs = append(c.Outputs, TensorInfo{})
	}
	c.Outputs[i] = TensorInfo{DType: dt, Shape: s}
}

// SameDTypes checks that the given inputs (all inputs if none are named)
// share one dtype and returns it.
func (c *InferContext) SameDTypes(idx ...int) (tensor.DType, error) {
	if len(idx) == 0 {
		for i := range c.Inputs {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return tensor.Invalid, nil
	}
	dt := c.Inputs[idx[0]].DType
	for _, i := range idx[1:] {
		if c.Inputs[i].DType != dt {
			return dt, fmt.Errorf("inputs %d and %d have different dtypes: %v and %v", idx[0], i, dt, c.Inputs[i].DType)
		}
	}
	return dt, nil
}

// RequireFloat checks that input i has a floating-point dtype.
func (c *InferContext) RequireFloat(i int) error {
	if !c.Inputs[i].DType.IsFloat() {
		return fmt.Errorf("input %d must be float32 or float64, got %v", i, c.Inputs[i].DType)
	}
	return nil
}

// RequireRank checks that input i has the given rank (if known).
func (c *InferContext) RequireRank(i, rank int) error {
	s := c.Inputs[i].Shape
	if s.KnownRank() && s.Rank() != rank {
		return fmt.Errorf("input %d must have rank %d, got shape %v", i, rank, s)
	}
	return nil
}

// BroadcastShapes returns the numpy-style broadcast of a and b.
func BroadcastShapes(a, b tensor.Shape) (tensor.Shape, error) {
	if !a.KnownRank() || !b.KnownRank() {
		return tensor.UnknownShape(), nil
	}
	ra, rb := a.Rank(), b.Rank()
	r := max(ra, rb)
	out := make([]int, r)
	for i := 0; i < r; i++ {
		da, db := 1, 1
		if j := i - (r - ra); j >= 0 {
			da = a.Dim(j)
		}
		if j := i - (r - rb); j >= 0 {
			db = b.Dim(j)
		}
		switch {
		case da == db:
			out[i] = da
		case da == 1:
			out[i] = db
		case db == 1:
			out[i] = da
		case da < 0 || db < 0:
			// One is unknown: the result is the known one unless it is 1.
			out[i] = max(da, db)
			if out[i] == 1 {
				out[i] = -1
			}
		default:
			return tensor.Shape{}, fmt.Errorf("shapes %v and %v cannot be broadcast (dimension %d: %d vs %d)", a, b, i, da, db)
		}
	}
	return tensor.MakeShape(out...), nil
}
