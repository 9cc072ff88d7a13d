package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// Gradient compression for the parameter-server push: a worker sends the
// ps only the entries of its gradient that matter most this step, and keeps
// the others for later (error feedback).

func init() {
	Register(Def{
		Name:     "TopKCompress",
		Remote:   true,
		Stateful: true, // the residual carried from step to step
		Inputs:   []Arg{{Name: "gradient"}, {Name: "ratio"}},
		Summary: "Error-feedback top-k: adds the float32 gradient (any shape) to the residual the node keeps, " +
			"returns the indices (int32, ascending, into the flattened gradient) and values of the " +
			"k = min(max(int(ratio*n), 1), n) entries of largest magnitude of that sum (ratio*n rounded up when within float32 rounding of an integer; " +
			"fewer when it has fewer non-zeros, " +
			"or past 65536 elements when its sampled threshold overshoots), and keeps the rest as the next step's residual; " +
			"ratio is a float32 scalar in (0, 1].",
		Infer: func(c *InferContext) error {
			if dt := c.InputDType(0); dt != tensor.Float32 {
				return fmt.Errorf("gradient must be float32, got %v", dt)
			}
			if dt := c.InputDType(1); dt != tensor.Float32 {
				return fmt.Errorf("ratio must be float32, got %v", dt)
			}
			if s := c.InputShape(1); s.KnownRank() && s.Rank() != 0 {
				return fmt.Errorf("ratio must be a scalar, got shape %v", s)
			}
			if t := c.Consts[1]; t != nil && t.NumElements() == 1 {
				if r := t.Float64At(0); !(r > 0 && r <= 1) {
					return fmt.Errorf("ratio must be in (0, 1] (the share of the gradient's elements sent), got %v", r)
				}
			}
			c.SetOutput(0, tensor.Int32, tensor.MakeShape(-1))
			c.SetOutput(1, tensor.Float32, tensor.MakeShape(-1))
			return nil
		},
	})
}
