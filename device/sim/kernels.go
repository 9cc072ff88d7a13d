package sim

import (
	"context"
	"fmt"
	"slices"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	_ "github.com/distflow/distflow/kernel/cpu" // the kernels the simulator computes with
	"github.com/distflow/distflow/tensor"
)

// registerKernels registers a kernel for each op of device.Ops that runs
// the op's CPU kernel on the stream.
func registerKernels() {
	for _, op := range device.Ops {
		def := device.KernelDef{HostInputs: device.HostInputs(op), HostOutputs: device.HostOutputs(op)}
		if len(def.HostOutputs) > 0 {
			def.Factory = device.ShapeFactory(op)
		} else {
			def.Factory = cpuFactory(op)
		}
		device.RegisterKernel(Name, op, def)
	}
}

// cpuFactory builds the adapter of op's CPU kernel.
func cpuFactory(op string) func(n *graph.Node) (device.Kernel, error) {
	return func(n *graph.Node) (device.Kernel, error) {
		f, err := kernel.Lookup(op, kernel.CPU)
		if err != nil {
			return nil, err
		}
		k, err := f(n)
		if err != nil {
			return nil, err
		}
		def, _ := device.LookupKernel(Name, op)
		return &cpuKernel{k: k, def: def}, nil
	}
}

// cpuKernel runs a CPU kernel on a simulated stream.
type cpuKernel struct {
	k   kernel.Kernel
	def device.KernelDef
}

func (k *cpuKernel) Launch(c *device.Context) error {
	st, ok := c.Stream.(*stream)
	if !ok {
		return fmt.Errorf("sim: node %s: a simulated kernel launched on a %T", c.Node, c.Stream)
	}
	// The launch's slices are the runtime's, reused after Launch returns.
	ins, outs := slices.Clone(c.Inputs), slices.Clone(c.Outputs)
	node := c.Node
	return st.launch(func() error {
		kc := &kernel.Context{Ctx: context.Background(), Node: node,
			Inputs: make([]*tensor.Tensor, len(ins)), Outputs: make([]*tensor.Tensor, len(outs))}
		for i, in := range ins {
			if in.Host != nil {
				kc.Inputs[i] = in.Host
				continue
			}
			raw, err := st.mem.bytes(in.Buf.Ptr, in.Bytes())
			if err != nil {
				return fmt.Errorf("sim: node %s: input %d: %w", node, i, err)
			}
			// A view of device memory: CPU kernels never write their inputs.
			if kc.Inputs[i], err = tensor.ViewRawBytes(in.DType, in.Shape, raw); err != nil {
				return fmt.Errorf("sim: node %s: input %d: %w", node, i, err)
			}
		}
		if err := k.k.Compute(kc); err != nil {
			return fmt.Errorf("sim: node %s (%s): %w", node, node.Op(), err)
		}
		for i, out := range outs {
			got := kc.Outputs[i]
			if got == nil || got.DType() != out.DType || !slices.Equal(got.Shape(), out.Shape) {
				return fmt.Errorf("sim: node %s (%s): output %d is %v, the shape function said %v%v",
					node, node.Op(), i, describe(got), out.DType, out.Shape)
			}
			raw, err := st.mem.bytes(out.Buf.Ptr, out.Bytes())
			if err != nil {
				return fmt.Errorf("sim: node %s: output %d: %w", node, i, err)
			}
			copy(raw, got.RawBytes())
		}
		return nil
	})
}

func describe(t *tensor.Tensor) string {
	if t == nil {
		return "missing"
	}
	return fmt.Sprintf("%v%v", t.DType(), t.Shape())
}
