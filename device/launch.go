package device

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// OutputInfo returns the dtypes and concrete shapes of n's outputs given
// its inputs: the op's shape function run on the inputs' shapes, with the
// values of host inputs as constants (a Reshape's shape, a Fill's dims). It
// fails, naming the node, when a shape is still not fully known.
func OutputInfo(n *graph.Node, inputs []*Tensor) ([]op.TensorInfo, error) {
	ic := &op.InferContext{Attrs: make(map[string]any, 4)}
	for _, a := range n.AttrNames() {
		ic.Attrs[a], _ = n.Attr(a)
	}
	ic.Inputs = make([]op.TensorInfo, len(inputs))
	ic.Consts = make([]*tensor.Tensor, len(inputs))
	for i, in := range inputs {
		ic.Inputs[i] = op.TensorInfo{DType: in.DType, Shape: tensor.MakeShape(in.Shape...)}
		ic.Consts[i] = in.Host
	}
	if err := n.Def().Infer(ic); err != nil {
		return nil, fmt.Errorf("device: node %s: %w", n, err)
	}
	for i, o := range ic.Outputs {
		if !o.Shape.FullyDefined() {
			return nil, fmt.Errorf("device: node %s: output %d has shape %v on inputs %s: a device kernel needs shapes known before it runs",
				n, i, o.Shape, describeInputs(inputs))
		}
	}
	return ic.Outputs, nil
}

func describeInputs(inputs []*Tensor) string {
	s := ""
	for i, in := range inputs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%v%v", in.DType, in.Shape)
	}
	return "[" + s + "]"
}

// Launch runs one node's kernel: it infers the outputs' shapes from
// c.Inputs (OutputInfo), allocates c.Outputs from c.Device's allocator
// (host outputs are left for the kernel to set), gives the kernel its
// scratch memory and calls Launch. Scratch memory is freed once the launch
// is queued; on an error the outputs are freed too and c.Outputs is nil.
func Launch(c *Context, def KernelDef, k Kernel) (err error) {
	infos, err := OutputInfo(c.Node, c.Inputs)
	if err != nil {
		return err
	}
	if len(infos) > 0 && !def.Supports(infos[0].DType) {
		return fmt.Errorf("device: node %s: %w for %s of %v on %s", c.Node, ErrNoKernel, c.Node.Op(), infos[0].DType, c.Device.Info().Name)
	}
	alloc := c.Device.Allocator()
	outs := make([]*Tensor, len(infos))
	var scratch []Buffer
	defer func() {
		for _, b := range scratch {
			if c.Hold != nil {
				c.Hold(b)
			} else if ferr := alloc.Free(b); err == nil {
				err = ferr
			}
		}
		if err != nil {
			FreeAll(alloc, outs)
			c.Outputs = nil
		}
	}()
	for i, o := range infos {
		outs[i] = &Tensor{DType: o.DType, Shape: o.Shape.Dims()}
		if def.IsHostOutput(i) {
			continue
		}
		if outs[i].Buf, err = alloc.Alloc(outs[i].Bytes()); err != nil {
			return fmt.Errorf("device: node %s: output %d (%v%v): %w", c.Node, i, o.DType, outs[i].Shape, err)
		}
	}
	c.Outputs = outs
	c.Scratch = func(n int64) (Ptr, error) {
		b, err := alloc.Alloc(n)
		if err != nil {
			return 0, fmt.Errorf("device: node %s: scratch: %w", c.Node, err)
		}
		scratch = append(scratch, b)
		return b.Ptr, nil
	}
	if err = k.Launch(c); err != nil {
		return fmt.Errorf("device: node %s on %s: %w", c.Node, c.Device.Info().Name, err)
	}
	for i, o := range outs {
		if def.IsHostOutput(i) && o.Host == nil {
			return fmt.Errorf("device: node %s: the kernel did not set host output %d", c.Node, i)
		}
	}
	return nil
}

// FreeAll frees the device buffers of ts (nil entries and host values are
// skipped).
func FreeAll(a *Allocator, ts []*Tensor) {
	for _, t := range ts {
		if t != nil && t.Host == nil && t.Buf.Ptr != 0 {
			a.Free(t.Buf)
		}
	}
}

// Upload enqueues a copy of a host tensor into new device memory of d and
// returns it. t must stay unchanged until the stream has passed the copy.
func Upload(d Device, t *tensor.Tensor) (*Tensor, error) {
	dt := &Tensor{DType: t.DType(), Shape: t.Shape()}
	buf, err := d.Allocator().Alloc(dt.Bytes())
	if err != nil {
		return nil, err
	}
	dt.Buf = buf
	if raw := t.RawBytes(); len(raw) > 0 {
		if err := d.Stream().CopyIn(buf.Ptr, raw); err != nil {
			d.Allocator().Free(buf)
			return nil, err
		}
	}
	return dt, nil
}

// Download returns a host tensor that the stream fills with t's value: it
// is valid after the stream's next Synchronize. A host value is returned
// as it is.
func Download(d Device, t *Tensor) (*tensor.Tensor, error) {
	if t.Host != nil {
		return t.Host, nil
	}
	h := tensor.New(t.DType, t.Shape...)
	if raw := h.RawBytes(); len(raw) > 0 {
		if err := d.Stream().CopyOut(raw, t.Buf.Ptr); err != nil {
			return nil, err
		}
	}
	return h, nil
}
