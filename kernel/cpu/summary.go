package cpu

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/summary"
	"github.com/distflow/distflow/tensor"
)

// The kernels of the summary ops (op/summary.go): each outputs a serialised
// Summary proto as a fresh 1-D uint8 tensor (encoded by package summary).

func init() {
	kernel.Register("ScalarSummary", kernel.CPU, summaryScalar)
	kernel.Register("HistogramSummary", kernel.CPU, summaryHistogram)
	kernel.Register("MergeSummary", kernel.CPU, kernel.Simple(summaryMerge))
}

func summaryScalar(n *graph.Node) (kernel.Kernel, error) {
	tag := n.AttrString("tag")
	return kernel.Func(func(c *kernel.Context) error {
		x := c.Input(0)
		if x.NumElements() != 1 {
			return c.Errorf("scalar summary %q: value has shape %v, want a scalar", tag, x.Shape())
		}
		b, err := summary.EncodeScalar(tag, x.Float64At(0))
		if err != nil {
			return summaryErr(c, err)
		}
		return summaryOutput(c, b)
	}), nil
}

func summaryHistogram(n *graph.Node) (kernel.Kernel, error) {
	tag := n.AttrString("tag")
	return kernel.Func(func(c *kernel.Context) error {
		x := c.Input(0)
		values := make([]float64, x.NumElements())
		for i := range values {
			values[i] = x.Float64At(i)
		}
		b, err := summary.EncodeHistogram(tag, values)
		if err != nil {
			return summaryErr(c, err)
		}
		return summaryOutput(c, b)
	}), nil
}

func summaryMerge(c *kernel.Context) error {
	parts := make([][]byte, len(c.Inputs))
	for i, t := range c.Inputs {
		if t.DType() != tensor.Uint8 {
			return c.Errorf("input %d is %v, want a uint8 serialised summary", i, t.DType())
		}
		parts[i] = t.Uint8s()
	}
	b, err := summary.Merge(parts...)
	if err != nil {
		return summaryErr(c, err)
	}
	return summaryOutput(c, b)
}

func summaryOutput(c *kernel.Context, b []byte) error {
	t, err := tensor.FromSlice(b, len(b))
	if err != nil {
		return c.Errorf("%w", err)
	}
	c.SetOutput(0, t)
	return nil
}

// summaryErr names the node and keeps err (and its sentinels) in the chain.
func summaryErr(c *kernel.Context, err error) error {
	return fmt.Errorf("kernel: node %s: %w", c.Node, err)
}
