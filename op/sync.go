package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// Synchronisation ops: conditional accumulators (gradients averaged across
// replicas, stale ones dropped; dense, or sparse for indexed slices, whose
// state is only the rows touched) and FIFO queues (tokens that release
// replicas). Both are resources that outlive steps, kept in the task's
// kernel.Resources. The resource op ("ConditionalAccumulator", "FIFOQueue")
// outputs a scalar int64 handle whose value carries no meaning: the ops that
// use it take it as input 0 and find the resource by the name of the
// handle's producer (its shared_name attribute if set). They must therefore
// run on the resource op's device; the ops builders place them there.

func init() {
	handleAttrs := func(extra ...Attr) []Attr {
		return append([]Attr{{Name: "shared_name", Type: AttrString, Default: ""}}, extra...)
	}
	Register(Def{
		Name:   "ConditionalAccumulator",
		Remote: true,
		Attrs: handleAttrs(
			Attr{Name: "dtype", Type: AttrDType},
			Attr{Name: "shape", Type: AttrShape, Default: tensor.UnknownShape()}),
		Stateful: true,
		Summary:  "A gradient accumulator kept across steps: averages the gradients applied at or after its global step; outputs its handle.",
		Infer: func(c *InferContext) error {
			if !c.DType("dtype").IsFloat() {
				return fmt.Errorf("accumulator dtype must be float32 or float64, got %v", c.DType("dtype"))
			}
			c.SetOutput(0, tensor.Int64, tensor.ScalarShape())
			return nil
		},
	})
	Register(Def{
		Name:     "AccumulatorApplyGradient",
		Remote:   true,
		Inputs:   []Arg{{Name: "handle"}, {Name: "local_step"}, {Name: "gradient"}},
		Stateful: true,
		Summary:  "Adds gradient to the accumulator if local_step >= its global step; otherwise drops it and counts it as stale.",
		Infer: func(c *InferContext) error {
			if err := syncRequireScalar(c, 1, "local_step", tensor.Int64); err != nil {
				return err
			}
			return c.RequireFloat(2)
		},
	})
	Register(Def{
		Name:     "AccumulatorTakeGradient",
		Remote:   true,
		Inputs:   []Arg{{Name: "handle"}, {Name: "num_required"}},
		Attrs:    []Attr{{Name: "dtype", Type: AttrDType}, {Name: "shape", Type: AttrShape, Default: tensor.UnknownShape()}},
		Stateful: true,
		Summary: "Waits until num_required gradients are accumulated, then outputs their mean and the number of gradients " +
			"offered (accepted or dropped) since the previous take, resets the accumulator and advances its global step.",
		Infer: func(c *InferContext) error {
			if err := syncRequireScalar(c, 1, "num_required", tensor.Int32); err != nil {
				return err
			}
			if !c.DType("dtype").IsFloat() {
				return fmt.Errorf("dtype must be float32 or float64, got %v", c.DType("dtype"))
			}
			c.SetOutput(0, c.DType("dtype"), c.Shape("shape"))
			c.SetOutput(1, tensor.Int64, tensor.ScalarShape())
			return nil
		},
	})
	Register(Def{
		Name:   "SparseConditionalAccumulator",
		Remote: true,
		Attrs: handleAttrs(
			Attr{Name: "dtype", Type: AttrDType},
			Attr{Name: "shape", Type: AttrShape, Default: tensor.UnknownShape()}),
		Stateful: true,
		Summary: "An accumulator of sparse gradients (indexed slices) kept across steps: the union of the rows the gradients " +
			"applied at or after its global step touch, each summed; outputs its handle.",
		Infer: func(c *InferContext) error {
			if !c.DType("dtype").IsFloat() {
				return fmt.Errorf("accumulator dtype must be float32 or float64, got %v", c.DType("dtype"))
			}
			if s := c.Shape("shape"); s.KnownRank() && s.Rank() < 1 {
				return fmt.Errorf("a sparse accumulator's shape must have rank >= 1 (rows first), got %v", s)
			}
			c.SetOutput(0, tensor.Int64, tensor.ScalarShape())
			return nil
		},
	})
	Register(Def{
		Name:     "SparseAccumulatorApplyGradient",
		Remote:   true,
		Inputs:   []Arg{{Name: "handle"}, {Name: "local_step"}, {Name: "indices"}, {Name: "values"}, {Name: "dense_shape"}},
		Stateful: true,
		Summary: "Adds the indexed slices (indices, values, dense_shape) to the sparse accumulator if local_step >= its global step; " +
			"otherwise drops them and counts them as stale.",
		Infer: func(c *InferContext) error {
			if err := syncRequireScalar(c, 1, "local_step", tensor.Int64); err != nil {
				return err
			}
			for _, i := range []int{2, 4} {
				if dt := c.InputDType(i); dt != tensor.Int32 && dt != tensor.Int64 {
					return fmt.Errorf("input %d must be int32 or int64, got %v", i, dt)
				}
				if err := c.RequireRank(i, 1); err != nil {
					return err
				}
			}
			if s := c.InputShape(3); s.KnownRank() && s.Rank() < 1 {
				return fmt.Errorf("values must have rank >= 1 (one row per index), got a scalar")
			}
			return c.RequireFloat(3)
		},
	})
	Register(Def{
		Name:     "SparseAccumulatorTakeGradient",
		Remote:   true,
		Inputs:   []Arg{{Name: "handle"}, {Name: "num_required"}},
		Attrs:    []Attr{{Name: "dtype", Type: AttrDType}, {Name: "shape", Type: AttrShape, Default: tensor.UnknownShape()}},
		Stateful: true,
		Summary: "Waits until num_required gradients are accumulated, then outputs their mean as indexed slices (the touched rows, " +
			"distinct and ascending; their rows; the dense shape) and the number of gradients offered since the previous take, " +
			"resets the accumulator and advances its global step.",
		Infer: func(c *InferContext) error {
			if err := syncRequireScalar(c, 1, "num_required", tensor.Int32); err != nil {
				return err
			}
			dt := c.DType("dtype")
			if !dt.IsFloat() {
				return fmt.Errorf("dtype must be float32 or float64, got %v", dt)
			}
			values, rank := tensor.UnknownShape(), tensor.MakeShape(-1)
			if s := c.Shape("shape"); s.KnownRank() && s.Rank() >= 1 {
				values = tensor.MakeShape(append([]int{-1}, s.Dims()[1:]...)...)
				rank = tensor.MakeShape(s.Rank())
			}
			c.SetOutput(0, tensor.Int64, tensor.MakeShape(-1))
			c.SetOutput(1, dt, values)
			c.SetOutput(2, tensor.Int64, rank)
			c.SetOutput(3, tensor.Int64, tensor.ScalarShape())
			return nil
		},
	})
	Register(Def{
		Name:     "AccumulatorNumAccumulated",
		Remote:   true,
		Inputs:   []Arg{{Name: "handle"}},
		Stateful: true,
		Summary:  "The number of gradients accumulated since the last take (int32 scalar); of either kind of accumulator.",
		Infer:    syncScalarOut(tensor.Int32),
	})
	Register(Def{
		Name:     "AccumulatorNumDropped",
		Remote:   true,
		Inputs:   []Arg{{Name: "handle"}},
		Stateful: true,
		Summary:  "The number of stale gradients dropped since the accumulator was created (int64 scalar); of either kind of accumulator.",
		Infer:    syncScalarOut(tensor.Int64),
	})
	Register(Def{
		Name:     "AccumulatorSetGlobalStep",
		Remote:   true,
		Inputs:   []Arg{{Name: "handle"}, {Name: "new_global_step"}},
		Stateful: true,
		Summary:  "Sets the accumulator's global step (of either kind): gradients with an older local step are dropped.",
		Infer: func(c *InferContext) error {
			return syncRequireScalar(c, 1, "new_global_step", tensor.Int64)
		},
	})

	Register(Def{
		Name:   "FIFOQueue",
		Remote: true,
		Attrs: handleAttrs(
			Attr{Name: "dtype", Type: AttrDType, Default: tensor.Int64},
			Attr{Name: "capacity", Type: AttrInt, Default: -1}),
		Stateful: true,
		Summary:  "A first-in first-out queue of tensors kept across steps (capacity -1: unbounded); outputs its handle.",
		Infer: func(c *InferContext) error {
			if !c.DType("dtype").Valid() {
				return fmt.Errorf("invalid queue dtype %v", c.DType("dtype"))
			}
			if n := c.Int("capacity"); n == 0 || n < -1 {
				return fmt.Errorf("queue capacity must be positive or -1 (unbounded), got %d", n)
			}
			c.SetOutput(0, tensor.Int64, tensor.ScalarShape())
			return nil
		},
	})
	Register(Def{
		Name:     "QueueEnqueueMany",
		Remote:   true,
		Inputs:   []Arg{{Name: "handle"}, {Name: "values"}},
		Stateful: true,
		Summary:  "Enqueues the slices values[i] in order, waiting for room in a bounded queue.",
		Infer: func(c *InferContext) error {
			if s := c.InputShape(1); s.KnownRank() && s.Rank() == 0 {
				return fmt.Errorf("values must have rank >= 1 (one element per row), got a scalar")
			}
			return nil
		},
	})
	Register(Def{
		Name:     "QueueDequeue",
		Remote:   true,
		Inputs:   []Arg{{Name: "handle"}},
		Attrs:    []Attr{{Name: "dtype", Type: AttrDType, Default: tensor.Int64}, {Name: "shape", Type: AttrShape, Default: tensor.UnknownShape()}},
		Stateful: true,
		Summary:  "Waits for an element and removes it from the queue; fails once the queue is closed and empty.",
		Infer: func(c *InferContext) error {
			c.SetOutput(0, c.DType("dtype"), c.Shape("shape"))
			return nil
		},
	})
	Register(Def{
		Name:     "QueueSize",
		Remote:   true,
		Inputs:   []Arg{{Name: "handle"}},
		Stateful: true,
		Summary:  "The number of elements in the queue (int32 scalar).",
		Infer:    syncScalarOut(tensor.Int32),
	})
	Register(Def{
		Name:     "QueueClose",
		Remote:   true,
		Inputs:   []Arg{{Name: "handle"}},
		Attrs:    []Attr{{Name: "cancel_pending_enqueues", Type: AttrBool, Default: false}},
		Stateful: true,
		Summary:  "Closes the queue: later enqueues fail, dequeues fail once it is empty (waiting ones wake up).",
		Infer:    func(c *InferContext) error { return nil },
	})
}

// syncRequireScalar checks that input i is a scalar of dtype dt.
func syncRequireScalar(c *InferContext, i int, name string, dt tensor.DType) error {
	in := c.Inputs[i]
	if in.DType != dt {
		return fmt.Errorf("%s must be %v, got %v", name, dt, in.DType)
	}
	if in.Shape.KnownRank() && in.Shape.Rank() != 0 {
		return fmt.Errorf("%s must be a scalar, got shape %v", name, in.Shape)
	}
	return nil
}

// syncScalarOut is the Infer function of ops whose one output is a scalar of dt.
func syncScalarOut(dt tensor.DType) func(c *InferContext) error {
	return func(c *InferContext) error {
		c.SetOutput(0, dt, tensor.ScalarShape())
		return nil
	}
}
