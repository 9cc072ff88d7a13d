package sim

import (
	"context"
	"fmt"
	"slices"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	_ "github.com/distflow/distflow/kernel/cpu" // the kernels the simulator computes with
	"github.com/distflow/distflow/op"
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
	for _, op := range device.Random {
		device.RegisterKernel(Name, op, device.KernelDef{HostInputs: device.HostInputs(op),
			DTypes: []tensor.DType{tensor.Float32}, Factory: randomFactory(op)})
	}
	for _, op := range append(slices.Clone(device.Updates), device.SparseUpdates...) {
		device.RegisterKernel(Name, op, device.KernelDef{DTypes: []tensor.DType{tensor.Float32, tensor.Float64}, Factory: updateFactory(op)})
	}
	device.RegisterKernel(Name, "Assign", device.KernelDef{Factory: assignFactory})
	for _, op := range []string{"AssignAdd", "AssignSub"} {
		device.RegisterKernel(Name, op, device.KernelDef{DTypes: device.AssignDTypes, Factory: updateFactory(op)})
	}
}

// updateFactory builds the adapter of the CPU kernel of an op that
// updates its ref inputs in place (device.Updates, device.SparseUpdates,
// AssignAdd and AssignSub): on the stream, each ref's device memory
// becomes the value of a variable of a resource container of its own, the
// CPU kernel updates the variables (checking a sparse update's indices,
// whose error fails the stream), their values are copied back, and so are
// the kernel's outputs (AssignAdd's new value).
func updateFactory(op string) func(n *graph.Node) (device.Kernel, error) {
	return func(n *graph.Node) (device.Kernel, error) {
		f, err := kernel.Lookup(op, kernel.CPU)
		if err != nil {
			return nil, err
		}
		k, err := f(n)
		if err != nil {
			return nil, err
		}
		return device.KernelFunc(func(c *device.Context) error {
			st, ok := c.Stream.(*stream)
			if !ok {
				return fmt.Errorf("sim: node %s: a simulated kernel launched on a %T", c.Node, c.Stream)
			}
			ins, outs := slices.Clone(c.Inputs), slices.Clone(c.Outputs)
			at := device.SparseIndices(op)
			return st.launch(func() error {
				if st.faulted() {
					return nil // as a device: no variable written after a fault
				}
				res := kernel.NewResources()
				kc := &kernel.Context{Ctx: context.Background(), Node: n, Resources: res,
					Inputs: make([]*tensor.Tensor, len(ins)), Refs: make([]*kernel.Variable, len(ins)),
					Outputs: make([]*tensor.Tensor, len(outs))}
				views := make([]*tensor.Tensor, len(ins))
				for i, in := range ins {
					if n.IsRefInput(i) && in.Host != nil {
						return fmt.Errorf("sim: node %s: variable input %d is a host value, not device memory", n, i)
					}
					t := in.Host
					if t == nil {
						raw, err := st.mem.bytes(in.Buf.Ptr, in.Bytes())
						if err != nil {
							return fmt.Errorf("sim: node %s: input %d: %w", n, i, err)
						}
						if t, err = tensor.ViewRawBytes(in.DType, in.Shape, raw); err != nil {
							return fmt.Errorf("sim: node %s: input %d: %w", n, i, err)
						}
					}
					views[i] = t
					if !n.IsRefInput(i) {
						kc.Inputs[i] = t
						continue
					}
					v, err := res.Variable(fmt.Sprintf("ref%d", i), in.DType, tensor.MakeShape(in.Shape...))
					if err == nil {
						err = v.Assign(t)
					}
					if err != nil {
						return fmt.Errorf("sim: node %s: input %d: %w", n, i, err)
					}
					kc.Refs[i] = v
				}
				if at >= 0 && len(ins[0].Shape) > 0 { // no rows: the CPU kernel's error
					if err := checkIndices(n, views[at], int64(ins[0].Shape[0])); err != nil {
						return err
					}
				}
				if err := k.Compute(kc); err != nil {
					return &kernelError{fmt.Errorf("sim: node %s: %w", n, err)}
				}
				for i, v := range kc.Refs {
					if v == nil {
						continue
					}
					if err := v.ReadInto(views[i]); err != nil {
						return fmt.Errorf("sim: node %s: input %d: %w", n, i, err)
					}
				}
				return copyOutputs(st, n, kc.Outputs, outs)
			})
		}), nil
	}
}

// checkIndices checks the indices of n (a sparse update, a Gather)
// against the rows they index, as a device does: a fault wrapping
// device.ErrIndexOutOfRange, which does not fail the stream.
func checkIndices(n *graph.Node, idx *tensor.Tensor, rows int64) error {
	check := func(pos int, v int64) error {
		if v < 0 || v >= rows {
			return device.IndexError(n.String(), int64(pos), v, rows)
		}
		return nil
	}
	switch d := idx.Data().(type) {
	case []int32:
		for i, v := range d {
			if err := check(i, int64(v)); err != nil {
				return err
			}
		}
	case []int64:
		for i, v := range d {
			if err := check(i, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// assignFactory is Assign's kernel: device.AssignFactory's copies, in one
// launch that writes nothing while the stream holds a fault, as the
// updates.
func assignFactory(n *graph.Node) (device.Kernel, error) {
	if _, err := device.AssignFactory(n); err != nil {
		return nil, err
	}
	node := n
	return device.KernelFunc(func(c *device.Context) error {
		st, ok := c.Stream.(*stream)
		if !ok {
			return fmt.Errorf("sim: node %s: a simulated kernel launched on a %T", c.Node, c.Stream)
		}
		ref, val, out := c.Inputs[0], c.Inputs[1], c.Outputs[0]
		if err := device.CheckAssign(ref, val); err != nil {
			return err
		}
		n := ref.Bytes()
		if n == 0 {
			return nil
		}
		dst, src, res := ref.Buf.Ptr, val.Buf.Ptr, out.Buf.Ptr
		return st.launch(func() error {
			if st.faulted() {
				return nil
			}
			v, err := st.mem.bytes(src, n)
			if err != nil {
				return fmt.Errorf("sim: node %s: the value: %w", node, err)
			}
			for _, p := range []device.Ptr{dst, res} {
				d, err := st.mem.bytes(p, n)
				if err != nil {
					return fmt.Errorf("sim: node %s: %w", node, err)
				}
				copy(d, v)
			}
			return nil
		})
	}), nil
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
		if node.Op() == "Gather" {
			// As a device: a fault, the stream going on, and no output.
			params := kc.Inputs[0]
			if axis, err := op.ArrayNormAxis(node.AttrInt("axis"), params.StaticShape()); err == nil {
				if err := checkIndices(node, kc.Inputs[1], int64(params.Shape()[axis])); err != nil {
					if raw, berr := st.mem.bytes(outs[0].Buf.Ptr, outs[0].Bytes()); berr == nil {
						clear(raw) // a device's zeros
					}
					return err
				}
			}
		}
		if err := k.k.Compute(kc); err != nil {
			for _, out := range outs { // a device's zeros for the kernels after it
				if raw, berr := st.mem.bytes(out.Buf.Ptr, out.Bytes()); berr == nil {
					clear(raw)
				}
			}
			return &kernelError{fmt.Errorf("sim: node %s: %w", node, err)}
		}
		return copyOutputs(st, node, kc.Outputs, outs)
	})
}

// copyOutputs copies a CPU kernel's outputs got into the device outputs
// outs, after checking them against the shapes inferred before the launch.
// It runs on the stream.
func copyOutputs(st *stream, node *graph.Node, got []*tensor.Tensor, outs []*device.Tensor) error {
	for i, out := range outs {
		g := got[i]
		if g == nil || g.DType() != out.DType || !slices.Equal(g.Shape(), out.Shape) {
			return fmt.Errorf("sim: node %s: output %d is %v, the shape function said %v%v",
				node, i, describe(g), out.DType, out.Shape)
		}
		raw, err := st.mem.bytes(out.Buf.Ptr, out.Bytes())
		if err != nil {
			return fmt.Errorf("sim: node %s: output %d: %w", node, i, err)
		}
		copy(raw, g.RawBytes())
	}
	return nil
}

func describe(t *tensor.Tensor) string {
	if t == nil {
		return "missing"
	}
	return fmt.Sprintf("%v%v", t.DType(), t.Shape())
}

// randomFactory builds the kernel of a random op of device.Random: the
// Philox stream of device.PhiloxUniform, the run counted on the stream
// (the simulator's device), so that a replayed capture draws fresh
// numbers as a CUDA graph does.
func randomFactory(op string) func(n *graph.Node) (device.Kernel, error) {
	return func(n *graph.Node) (device.Kernel, error) {
		if op != "RandomUniform" {
			return nil, fmt.Errorf("sim: node %s: no kernel for %s", n, op)
		}
		key, base := device.RandomSeeds(n)
		var step uint64 // read and advanced on the stream only
		return device.KernelFunc(func(c *device.Context) error {
			st, ok := c.Stream.(*stream)
			if !ok {
				return fmt.Errorf("sim: node %s: a simulated kernel launched on a %T", c.Node, c.Stream)
			}
			out := c.Outputs[0]
			if out.DType != tensor.Float32 {
				return fmt.Errorf("sim: node %s: %w for %s of %v", n, device.ErrNoKernel, op, out.DType)
			}
			return st.launch(func() error {
				raw, err := st.mem.bytes(out.Buf.Ptr, out.Bytes())
				if err != nil {
					return fmt.Errorf("sim: node %s: output: %w", n, err)
				}
				t, err := tensor.ViewRawBytes(out.DType, out.Shape, raw)
				if err != nil {
					return fmt.Errorf("sim: node %s: output: %w", n, err)
				}
				device.PhiloxUniform(key, base, step, t.Float32s())
				step++
				return nil
			})
		}), nil
	}
}
