package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// Checkpoint ops: each runs on the device of the variables it takes as refs,
// so that every task saves and restores the variables it holds. The
// checkpoint's step is an int64 scalar input (the engine has no string
// dtype); the directory and the basename are attributes, and the files are
// named as package checkpoint names them ("<basename>-<step>...").

func init() {
	Register(Def{
		Name:   "SaveVariables",
		Remote: true,
		Inputs: []Arg{
			{Name: "step"},
			{Name: "vars", Variadic: true, Ref: true},
		},
		Attrs: []Attr{
			{Name: "dir", Type: AttrString},
			{Name: "basename", Type: AttrString, Default: "model.ckpt"},
			{Name: "shard", Type: AttrInt, Default: 0},
			{Name: "num_shards", Type: AttrInt, Default: 1},
		},
		Stateful: true,
		Summary:  "Writes data shard `shard` of `num_shards` of checkpoint <dir>/<basename>-<step> with the variables' values; outputs the shard's description (JSON bytes) for the index.",
		Infer: func(c *InferContext) error {
			if err := checkpointScalarStep(c); err != nil {
				return err
			}
			if c.String("dir") == "" {
				return fmt.Errorf("attribute dir is empty")
			}
			if n, k := c.Int("num_shards"), c.Int("shard"); n <= 0 || k < 0 || k >= n {
				return fmt.Errorf("shard %d of %d is out of range", k, n)
			}
			if len(c.Inputs) < 2 {
				return fmt.Errorf("no variables to save")
			}
			c.SetOutput(0, tensor.Uint8, tensor.UnknownRankShape(1))
			return nil
		},
	})
	Register(Def{
		Name:   "RestoreVariables",
		Remote: true,
		Inputs: []Arg{
			{Name: "step"},
			{Name: "vars", Variadic: true, Ref: true},
		},
		Attrs: []Attr{
			{Name: "dir", Type: AttrString},
			{Name: "basename", Type: AttrString, Default: "model.ckpt"},
		},
		Stateful: true,
		Summary:  "Assigns each variable its value in checkpoint <dir>/<basename>-<step>, found by name in whichever shard holds it.",
		Infer: func(c *InferContext) error {
			if err := checkpointScalarStep(c); err != nil {
				return err
			}
			if c.String("dir") == "" {
				return fmt.Errorf("attribute dir is empty")
			}
			if len(c.Inputs) < 2 {
				return fmt.Errorf("no variables to restore")
			}
			return nil
		},
	})
}

// checkpointScalarStep checks that input 0 is an int64 scalar.
func checkpointScalarStep(c *InferContext) error {
	if c.Inputs[0].DType != tensor.Int64 {
		return fmt.Errorf("step must be int64, got %v", c.Inputs[0].DType)
	}
	return c.RequireRank(0, 0)
}
