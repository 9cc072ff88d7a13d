package cpu

import (
	"context"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// runKernel builds one node of op over placeholders of unknown shape (so
// that the kernel's own checks, not shape inference, are tested) and runs its
// CPU kernel directly on inputs, returning its outputs.
func runKernel(t testing.TB, op string, attrs map[string]any, inputs ...*tensor.Tensor) ([]*tensor.Tensor, error) {
	t.Helper()
	s := graph.NewScope()
	var ins []graph.Output
	for _, in := range inputs {
		ins = append(ins, s.Out("Placeholder", "x", nil, map[string]any{"dtype": in.DType(), "shape": tensor.UnknownShape()}))
	}
	n := s.AddNode(op, "", ins, attrs)
	if err := s.Err(); err != nil {
		t.Fatalf("%s: building: %v", op, err)
	}
	f, err := kernel.Lookup(op, kernel.CPU)
	if err != nil {
		t.Fatal(err)
	}
	k, err := f(n)
	if err != nil {
		return nil, err
	}
	c := &kernel.Context{Ctx: context.Background(), Node: n, Inputs: inputs, Outputs: make([]*tensor.Tensor, n.NumOutputs())}
	if err := k.Compute(c); err != nil {
		return nil, err
	}
	return c.Outputs, nil
}
