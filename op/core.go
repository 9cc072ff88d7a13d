package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// The ops every graph needs: constants, feeds, identity, no-op, variables.

func init() {
	Register(Def{
		Name:    "Const",
		Remote:  true,
		Attrs:   []Attr{{Name: "value", Type: AttrTensor}},
		Summary: "A constant tensor.",
		Infer: func(c *InferContext) error {
			v := c.Tensor("value")
			if v == nil {
				return fmt.Errorf("attribute value is nil")
			}
			c.SetOutput(0, v.DType(), v.StaticShape())
			return nil
		},
	})
	Register(Def{
		Name:    "Placeholder",
		Remote:  true,
		Attrs:   []Attr{{Name: "dtype", Type: AttrDType}, {Name: "shape", Type: AttrShape, Default: tensor.UnknownShape()}},
		Summary: "A tensor that must be fed when the graph runs.",
		Infer: func(c *InferContext) error {
			if !c.DType("dtype").Valid() {
				return fmt.Errorf("invalid dtype %v", c.DType("dtype"))
			}
			c.SetOutput(0, c.DType("dtype"), c.Shape("shape"))
			return nil
		},
	})
	Register(Def{
		Name:    "Identity",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Summary: "Returns its input.",
		Infer:   passThrough,
	})
	Register(Def{
		Name:    "StopGradient",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Summary: "Returns its input; gradients do not flow through it.",
		Infer:   passThrough,
	})
	Register(Def{
		Name:    "NoOp",
		Remote:  true,
		Summary: "Does nothing; groups control dependencies.",
		Infer:   func(c *InferContext) error { return nil },
	})
	Register(Def{
		Name:     "Variable",
		Remote:   true,
		Attrs:    []Attr{{Name: "dtype", Type: AttrDType}, {Name: "shape", Type: AttrShape}},
		Stateful: true,
		Summary:  "State kept across runs; its output is the current value.",
		Infer: func(c *InferContext) error {
			s := c.Shape("shape")
			if !s.FullyDefined() {
				return fmt.Errorf("variable shape %v must be fully defined", s)
			}
			if !c.DType("dtype").Valid() {
				return fmt.Errorf("invalid dtype %v", c.DType("dtype"))
			}
			c.SetOutput(0, c.DType("dtype"), s)
			return nil
		},
	})
}

// passThrough gives output 0 the dtype and shape of input 0.
func passThrough(c *InferContext) error {
	c.SetOutput(0, c.Inputs[0].DType, c.Inputs[0].Shape)
	return nil
}

// PassThrough is the Infer function of ops whose single output has the dtype
// and shape of their first input (element-wise unary ops).
var PassThrough = passThrough
