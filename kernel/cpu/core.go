package cpu

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
)

// The kernels of the ops every graph needs (op/core.go).

func init() {
	kernel.Register("Const", kernel.CPU, coreConst)
	kernel.Register("Placeholder", kernel.CPU, kernel.Simple(corePlaceholder))
	kernel.Register("Identity", kernel.CPU, kernel.Simple(coreIdentity))
	kernel.Register("StopGradient", kernel.CPU, kernel.Simple(coreIdentity))
	kernel.Register("NoOp", kernel.CPU, kernel.Simple(func(*kernel.Context) error { return nil }))
	kernel.Register("Variable", kernel.CPU, coreVariable)
}

// coreConst outputs the node's value attribute itself, without a copy: kernels
// never modify their inputs, and the executor clones a constant before handing
// it to a caller as a fetch.
func coreConst(n *graph.Node) (kernel.Kernel, error) {
	v := n.AttrTensor("value")
	if v == nil {
		return nil, fmt.Errorf("kernel: node %s: attribute value is nil", n)
	}
	return kernel.Func(func(c *kernel.Context) error {
		c.Outputs[0] = v
		return nil
	}), nil
}

// corePlaceholder runs only when the placeholder was not fed: the executor
// never runs the producer of a fed tensor.
func corePlaceholder(c *kernel.Context) error {
	return c.Errorf("placeholder %q must be fed", c.Node.Name())
}

// coreIdentity forwards its input; sharing is safe because no kernel modifies
// its inputs.
func coreIdentity(c *kernel.Context) error {
	c.Outputs[0] = c.Inputs[0]
	return nil
}

// coreVariable outputs the variable's current value without a copy: the
// variable is copy-on-write (kernel.Variable), so a later update in the same
// or another step never changes a tensor already handed to consumers.
func coreVariable(n *graph.Node) (kernel.Kernel, error) {
	name, dt, shape := n.Name(), n.AttrDType("dtype"), n.AttrShape("shape")
	return kernel.Func(func(c *kernel.Context) error {
		if c.Resources == nil {
			return c.Errorf("no resource container to hold variable %q", name)
		}
		v, err := c.Resources.Variable(name, dt, shape)
		if err != nil {
			return fmt.Errorf("kernel: node %s: %w", c.Node, err)
		}
		t, lease, err := v.Share()
		if err != nil {
			// The error names the variable, says to run its initializer and
			// wraps kernel.ErrUninitialized.
			return fmt.Errorf("kernel: node %s: %w", c.Node, err)
		}
		c.ShareOutput(0, t, lease)
		return nil
	}), nil
}
