package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// The summary family: ops whose output is a serialised TensorBoard Summary
// proto (package summary), carried as a 1-D uint8 tensor because tensors
// have no string dtype. Fetch it and hand the bytes to summary.Writer.AddSummary.

func init() {
	Register(Def{
		Name:    "ScalarSummary",
		Remote:  true,
		Inputs:  []Arg{{Name: "value"}},
		Attrs:   []Attr{{Name: "tag", Type: AttrString}},
		Summary: "Serialises a Summary holding the numeric scalar value under tag (as float32), as 1-D uint8.",
		Infer: func(c *InferContext) error {
			if err := summaryRequireTag(c); err != nil {
				return err
			}
			if err := summaryRequireNumeric(c, 0); err != nil {
				return err
			}
			if err := c.RequireRank(0, 0); err != nil {
				return err
			}
			c.SetOutput(0, tensor.Uint8, tensor.MakeShape(-1))
			return nil
		},
	})
	Register(Def{
		Name:    "HistogramSummary",
		Remote:  true,
		Inputs:  []Arg{{Name: "values"}},
		Attrs:   []Attr{{Name: "tag", Type: AttrString}},
		Summary: "Serialises a Summary holding the histogram of the numeric values (any shape) under tag, as 1-D uint8; NaN or infinite values are an error.",
		Infer: func(c *InferContext) error {
			if err := summaryRequireTag(c); err != nil {
				return err
			}
			if err := summaryRequireNumeric(c, 0); err != nil {
				return err
			}
			c.SetOutput(0, tensor.Uint8, tensor.MakeShape(-1))
			return nil
		},
	})
	Register(Def{
		Name:    "MergeSummary",
		Remote:  true,
		Inputs:  []Arg{{Name: "inputs", Variadic: true}},
		Summary: "Concatenates the values of one or more serialised Summaries (1-D uint8) into one; a tag present twice is an error.",
		Infer: func(c *InferContext) error {
			if len(c.Inputs) == 0 {
				return fmt.Errorf("needs at least one summary input")
			}
			for i := range c.Inputs {
				if c.InputDType(i) != tensor.Uint8 {
					return fmt.Errorf("input %d must be a uint8 serialised summary, got %v", i, c.InputDType(i))
				}
				if err := c.RequireRank(i, 1); err != nil {
					return err
				}
			}
			c.SetOutput(0, tensor.Uint8, tensor.MakeShape(-1))
			return nil
		},
	})
}

func summaryRequireTag(c *InferContext) error {
	if c.String("tag") == "" {
		return fmt.Errorf("attribute tag is empty")
	}
	return nil
}

func summaryRequireNumeric(c *InferContext, i int) error {
	if dt := c.InputDType(i); !dt.IsFloat() && !dt.IsInteger() {
		return fmt.Errorf("input %d must be numeric, got %v", i, dt)
	}
	return nil
}
