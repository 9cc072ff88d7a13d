package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// Random ops. Each node owns a random stream seeded from (seed, seed2):
// two sessions running the same graph with a non-zero seed produce the same
// values; seed == seed2 == 0 draws a fresh, non-deterministic seed.

func init() {
	for name, summary := range map[string]string{
		"RandomNormal":    "Samples of the standard normal distribution.",
		"TruncatedNormal": "Samples of the standard normal distribution, re-drawn beyond 2 standard deviations.",
		"RandomUniform":   "Samples of the uniform distribution on [0, 1).",
	} {
		Register(Def{
			Name:   name,
			Remote: true,
			Inputs: []Arg{{Name: "shape"}},
			Attrs: []Attr{
				{Name: "dtype", Type: AttrDType, Default: tensor.Float32},
				{Name: "seed", Type: AttrInt, Default: 0},
				{Name: "seed2", Type: AttrInt, Default: 0},
			},
			Stateful: true,
			Summary:  summary,
			Infer:    stateInferRandom,
		})
	}
}

// stateInferRandom reads the output shape from the shape input when it is a
// constant, else only its rank when the length of the shape vector is known.
func stateInferRandom(c *InferContext) error {
	if dt := c.DType("dtype"); !dt.IsFloat() {
		return fmt.Errorf("dtype must be float32 or float64, got %v", dt)
	}
	in := c.Inputs[0]
	if in.DType != tensor.Int32 && in.DType != tensor.Int64 {
		return fmt.Errorf("shape must be int32 or int64, got %v", in.DType)
	}
	if err := c.RequireRank(0, 1); err != nil {
		return fmt.Errorf("shape must be a vector: %w", err)
	}
	out := tensor.UnknownShape()
	if v := c.Consts[0]; v != nil {
		dims := make([]int, v.NumElements())
		for i := range dims {
			dims[i] = int(v.Float64At(i))
			if dims[i] < 0 {
				return fmt.Errorf("shape %v has a negative dimension", v)
			}
		}
		out = tensor.MakeShape(dims...)
	} else if in.Shape.KnownRank() && in.Shape.Dim(0) >= 0 {
		out = tensor.UnknownRankShape(in.Shape.Dim(0))
	}
	c.SetOutput(0, c.DType("dtype"), out)
	return nil
}
