package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// The sparse family: the ops that let an embedding lookup and
// its gradient touch only the rows a batch uses. Unique, DynamicPartition
// and DynamicStitch split a batch's ids over the shards of a partitioned
// table and put the rows back; UnsortedSegmentSum adds rows by id (the
// deduplication of an indexed-slices gradient, the bag combiners); the
// SparseApply ops update only the rows named by indices, and their slots.

func init() {
	Register(Def{
		Name:    "Range",
		Remote:  true,
		Inputs:  []Arg{{Name: "limit"}},
		Summary: "Returns 0, 1, ..., limit-1 (a 1-D tensor of limit's int dtype; limit is a non-negative scalar).",
		Infer: func(c *InferContext) error {
			if err := arrayIndexDType(c, 0, "limit"); err != nil {
				return err
			}
			if s := c.InputShape(0); s.KnownRank() && s.Rank() != 0 {
				return fmt.Errorf("limit must be a scalar, got shape %v", s)
			}
			n := -1
			if t := c.Consts[0]; t != nil {
				if n = int(t.Float64At(0)); n < 0 {
					return fmt.Errorf("limit must be non-negative, got %d", n)
				}
			}
			c.SetOutput(0, c.InputDType(0), tensor.MakeShape(n))
			return nil
		},
	})
	Register(Def{
		Name:    "Unique",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Summary: "Returns the distinct values y of the 1-D int x in order of first appearance, and idx (int32) with x[i] = y[idx[i]].",
		Infer: func(c *InferContext) error {
			if err := arrayIndexDType(c, 0, "x"); err != nil {
				return err
			}
			if err := sparseRank1(c, 0, "x"); err != nil {
				return err
			}
			c.SetOutput(0, c.InputDType(0), tensor.MakeShape(-1))
			c.SetOutput(1, tensor.Int32, tensor.MakeShape(c.InputShape(0).Dim(0)))
			return nil
		},
	})
	Register(Def{
		Name:    "UnsortedSegmentSum",
		Remote:  true,
		Inputs:  []Arg{{Name: "data"}, {Name: "segment_ids"}, {Name: "num_segments"}},
		Summary: "Adds the rows data[i] into output row segment_ids[i] (1-D ids in [0, num_segments)); output [num_segments]+data.shape[1:].",
		Infer:   sparseInferSegmentSum,
	})
	Register(Def{
		Name:    "DynamicPartition",
		Remote:  true,
		Inputs:  []Arg{{Name: "data"}, {Name: "partitions"}},
		Attrs:   []Attr{{Name: "num_partitions", Type: AttrInt}},
		Summary: "Splits the rows of data by partitions (1-D int32 in [0, num_partitions)): output p holds, in order, the rows i with partitions[i] = p.",
		Infer:   sparseInferDynamicPartition,
	})
	Register(Def{
		Name:   "DynamicStitch",
		Remote: true,
		// One variadic list: the n index tensors, then the n data tensors.
		Inputs:  []Arg{{Name: "indices_and_data", Variadic: true}},
		Attrs:   []Attr{{Name: "n", Type: AttrInt}},
		Summary: "Interleaves data tensors: output[indices[p][j]] = data[p][j] (1-D int indices); the inverse of DynamicPartition.",
		Infer:   sparseInferDynamicStitch,
	})
	Register(Def{
		Name:   "PartitionIDs",
		Remote: true,
		Inputs: []Arg{{Name: "ids"}},
		Attrs: []Attr{{Name: "strategy", Type: AttrString, Default: "mod"},
			{Name: "num_shards", Type: AttrInt}, {Name: "num_rows", Type: AttrInt, Default: 0}},
		Summary: "For ids of a table split by rows over num_shards shards (TF1's mod or div strategy; div needs num_rows): the shard of each id (int32) and its row within the shard (ids' dtype).",
		Infer: func(c *InferContext) error {
			if err := arrayIndexDType(c, 0, "ids"); err != nil {
				return err
			}
			if err := sparseRank1(c, 0, "ids"); err != nil {
				return err
			}
			if err := CheckPartitionStrategy(c.String("strategy"), c.Int("num_shards"), c.Int("num_rows")); err != nil {
				return err
			}
			n := c.InputShape(0).Dim(0)
			c.SetOutput(0, tensor.Int32, tensor.MakeShape(n))
			c.SetOutput(1, c.InputDType(0), tensor.MakeShape(n))
			return nil
		},
	})

	sparseRegisterApply("SparseApplyGradientDescent", "var[indices] -= alpha * grad.",
		[]string{"var"}, []string{"alpha", "grad", "indices"}, nil)
	sparseRegisterApply("SparseApplyMomentum",
		"For the rows named by indices: accum = accum*momentum + grad; var -= lr*accum (or the Nesterov form).",
		[]string{"var", "accum"}, []string{"lr", "grad", "indices", "momentum"},
		[]Attr{{Name: "use_nesterov", Type: AttrBool, Default: false}})
	sparseRegisterApply("SparseApplyAdagrad",
		"For the rows named by indices: accum += grad^2; var -= lr*grad/sqrt(accum).",
		[]string{"var", "accum"}, []string{"lr", "grad", "indices"}, nil)
	sparseRegisterApply("SparseApplyAdam",
		"Lazy Adam: ApplyAdam on the rows named by indices only (their m and v decay only when they are touched).",
		[]string{"var", "m", "v"}, []string{"beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad", "indices"}, nil)
	sparseRegisterApply("SparseApplyFtrl",
		"FTRL-Proximal (TF's SparseApplyFtrl) on the rows named by indices.",
		[]string{"var", "accum", "linear"}, []string{"grad", "indices", "lr", "l1", "l2", "lr_power"}, nil)
	stateRegisterApply("ApplyFtrl",
		"FTRL-Proximal (McMahan et al. 2013, TF's ApplyFtrl): accum_new = accum + grad^2; linear += grad - (accum_new^-p - accum^-p)/lr*var; "+
			"var = |linear| > l1 ? (sign(linear)*l1 - linear) / (accum_new^-p/lr + 2*l2) : 0, with p = lr_power (-0.5).",
		[]string{"var", "accum", "linear"}, []string{"grad", "lr", "l1", "l2", "lr_power"}, "grad", nil)
}

// CheckPartitionStrategy checks how a table of numRows rows is split over
// shards: "mod" (id % shards, row id / shards) or "div" (contiguous blocks,
// the first numRows % shards one row longer, as NewPartitionedVariable cuts
// them), which needs numRows.
func CheckPartitionStrategy(strategy string, shards, numRows int) error {
	if shards < 1 {
		return fmt.Errorf("num_shards must be at least 1, got %d", shards)
	}
	switch strategy {
	case "mod":
		return nil
	case "div":
		if numRows < shards {
			return fmt.Errorf("the div strategy needs num_rows >= num_shards (%d), got %d", shards, numRows)
		}
		return nil
	}
	return fmt.Errorf("unknown partition strategy %q: want mod or div", strategy)
}

func sparseRank1(c *InferContext, i int, what string) error {
	if s := c.InputShape(i); s.KnownRank() && s.Rank() != 1 {
		return fmt.Errorf("%s must be 1-D, got shape %v", what, s)
	}
	return nil
}

// sparseRest returns [first]+s[1:], or the unknown shape.
func sparseRest(first int, s tensor.Shape) tensor.Shape {
	if !s.KnownRank() || s.Rank() == 0 {
		return tensor.UnknownShape()
	}
	return tensor.MakeShape(append([]int{first}, s.Dims()[1:]...)...)
}

func sparseInferSegmentSum(c *InferContext) error {
	if err := arrayIndexDType(c, 1, "segment_ids"); err != nil {
		return err
	}
	if err := sparseRank1(c, 1, "segment_ids"); err != nil {
		return err
	}
	if err := arrayIndexDType(c, 2, "num_segments"); err != nil {
		return err
	}
	if s := c.InputShape(2); s.KnownRank() && s.Rank() != 0 {
		return fmt.Errorf("num_segments must be a scalar, got shape %v", s)
	}
	data := c.InputShape(0)
	if data.KnownRank() && data.Rank() == 0 {
		return fmt.Errorf("data must have at least one dimension")
	}
	if ids := c.InputShape(1); data.KnownRank() && ids.KnownRank() && data.Dim(0) >= 0 && ids.Dim(0) >= 0 && data.Dim(0) != ids.Dim(0) {
		return fmt.Errorf("data has %d rows but segment_ids %d", data.Dim(0), ids.Dim(0))
	}
	n := -1
	if t := c.Consts[2]; t != nil {
		n = int(t.Float64At(0))
		if n < 0 {
			return fmt.Errorf("num_segments must be non-negative, got %d", n)
		}
	}
	c.SetOutput(0, c.InputDType(0), sparseRest(n, data))
	return nil
}

func sparseInferDynamicPartition(c *InferContext) error {
	if c.InputDType(1) != tensor.Int32 {
		return fmt.Errorf("partitions must be int32, got %v", c.InputDType(1))
	}
	if err := sparseRank1(c, 1, "partitions"); err != nil {
		return err
	}
	n := c.Int("num_partitions")
	if n < 1 {
		return fmt.Errorf("num_partitions must be at least 1, got %d", n)
	}
	data := c.InputShape(0)
	if data.KnownRank() && data.Rank() == 0 {
		return fmt.Errorf("data must have at least one dimension")
	}
	for i := range n {
		c.SetOutput(i, c.InputDType(0), sparseRest(-1, data))
	}
	return nil
}

func sparseInferDynamicStitch(c *InferContext) error {
	n := c.Int("n")
	if n < 1 || len(c.Inputs) != 2*n {
		return fmt.Errorf("want n >= 1 index tensors and n data tensors, got n=%d and %d inputs", n, len(c.Inputs))
	}
	var dt tensor.DType
	rest := tensor.UnknownShape()
	for i := range n {
		if err := arrayIndexDType(c, i, fmt.Sprintf("indices %d", i)); err != nil {
			return err
		}
		if err := sparseRank1(c, i, fmt.Sprintf("indices %d", i)); err != nil {
			return err
		}
		d := c.InputDType(n + i)
		if i == 0 {
			dt = d
		} else if d != dt {
			return fmt.Errorf("data %d is %v, data 0 is %v", i, d, dt)
		}
		if s := c.InputShape(n + i); s.KnownRank() {
			if s.Rank() == 0 {
				return fmt.Errorf("data %d must have at least one dimension", i)
			}
			r := sparseRest(-1, s)
			m, err := rest.Merge(r)
			if err != nil {
				return fmt.Errorf("data %d of shape %v does not match the others: %v", i, s, err)
			}
			rest = m
		}
	}
	c.SetOutput(0, dt, rest)
	return nil
}

// sparseRegisterApply declares a sparse update op with zero outputs: refs
// (the variable first, then its slots), then values. The input named grad
// has shape [len(indices)]+var.shape[1:], indices is 1-D int32 or int64,
// every other value is a scalar of the variable's dtype.
func sparseRegisterApply(name, summary string, refs, values []string, attrs []Attr) {
	args := applyArgs(refs, values)
	Register(Def{
		Name:     name,
		Remote:   true,
		Inputs:   args,
		Attrs:    attrs,
		Stateful: true,
		Summary:  summary,
		Infer: func(c *InferContext) error {
			dt := c.InputDType(0)
			if !dt.IsFloat() {
				return fmt.Errorf("variable must be float32 or float64, got %v", dt)
			}
			vs := c.Inputs[0].Shape
			if vs.KnownRank() && vs.Rank() == 0 {
				return fmt.Errorf("a sparse update needs a variable with rows, got a scalar")
			}
			for i, a := range args {
				s, d := c.Inputs[i].Shape, c.Inputs[i].DType
				switch {
				case a.Name == "indices":
					if err := arrayIndexDType(c, i, "indices"); err != nil {
						return err
					}
					if err := sparseRank1(c, i, "indices"); err != nil {
						return err
					}
				case d != dt:
					return fmt.Errorf("%s is %v, the variable %v", a.Name, d, dt)
				case a.Ref:
					if !vs.IsCompatibleWith(s) {
						return fmt.Errorf("%s shape %v does not match var shape %v", a.Name, s, vs)
					}
				case a.Name == "grad":
					if !sparseRest(-1, vs).IsCompatibleWith(s) {
						return fmt.Errorf("grad shape %v does not match the rows of var shape %v", s, vs)
					}
				default:
					if s.KnownRank() && s.Rank() != 0 {
						return fmt.Errorf("%s must be a scalar, got shape %v", a.Name, s)
					}
				}
			}
			return nil
		},
	})
}
