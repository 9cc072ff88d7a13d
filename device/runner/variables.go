package runner

import (
	"fmt"
	"sync/atomic"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
)

// Variables on the device. A Variable node of the partition is a variable
// of the device's store (Options.Variables), made when the runner is built:
// its value is the store's buffer, which kernels read in place and the
// updates (device.Updates) and Assign take by ref and write in place, the
// stream ordering them. A read queued after an update of the variable in
// the same step (a fetch of a weight beside the train op) reads a device
// copy made as the step starts instead, the value the host's Variable
// kernel gives (markSnapshots). A captured step reads and writes the same
// buffers at every replay. IsVariableInitialized and the checkpoint ops run on the host:
// SaveVariables copies its variables out and writes them with the CPU's
// kernel, RestoreVariables reads them with it and copies them in; a step
// with either, or with IsVariableInitialized, is never captured.

// prepareVariableOp sets up st, a Variable node or an op the runner runs
// on its variables.
func (r *Runner) prepareVariableOp(st *step) error {
	n, name := st.n, r.dev.Info().Name
	if n.Op() == "Variable" && onHost(n) {
		// Its checkpoint ops find it by name in the task's resources.
		if r.res == nil {
			return fmt.Errorf("runner: node %s on %s: the host's variable needs the task's resources (Options.Resources)", n, name)
		}
		st.kind = hostVar
		return nil
	}
	if r.vars == nil {
		return fmt.Errorf("runner: node %s on %s: the runner has no store of device variables (Options.Variables)", n, name)
	}
	switch n.Op() {
	case "Variable":
		v, err := r.vars.Get(n.Name(), n.AttrDType("dtype"), n.AttrShape("shape").Dims())
		if err != nil {
			return fmt.Errorf("runner: node %s: %w", n, err)
		}
		st.kind, st.v = variable, v
		return nil
	case "IsVariableInitialized":
		st.kind = initialized
		return nil
	case "SaveVariables":
		st.kind = save
	case "RestoreVariables":
		st.kind = restore
	}
	f, err := kernel.Lookup(n.Op(), kernel.CPU)
	if err != nil {
		return fmt.Errorf("runner: node %s on %s: %w", n, name, err)
	}
	if st.host, err = f(n); err != nil {
		return fmt.Errorf("runner: node %s on %s: %w", n, name, err)
	}
	return nil
}

// markSnapshots marks the Variables whose value a node reads after a node
// that writes the variable in place (a fetch or Send queued after its
// update): they read a copy made as the step starts, the value a Variable
// node gives on the host. Reads queued before the writes (the forward and
// backward passes of a training step) read the variable itself.
func (r *Runner) markSnapshots() {
	firstWrite := map[int]int{} // slot -> index of its first writer
	for i, st := range r.nodes {
		if st.kind != launch && st.kind != restore {
			continue
		}
		for j, slot := range st.inputs {
			if st.n.IsRefInput(j) && r.variableOf(slot) != nil {
				if _, ok := firstWrite[slot]; !ok {
					firstWrite[slot] = i
				}
			}
		}
	}
	later := func(slot, i int) {
		if w, ok := firstWrite[slot]; ok && i > w {
			r.producer[slot].snapshot = true
		}
	}
	for i, st := range r.nodes {
		for j, slot := range st.inputs {
			if !st.n.IsRefInput(j) && r.variableOf(slot) != nil {
				later(slot, i)
			}
		}
	}
	for _, slot := range r.fetches {
		later(slot, len(r.nodes))
	}
}

// stored reports whether v, the value of slot, is a variable's own
// buffer, which the store owns.
func (s *run) stored(slot int, v *device.Tensor) bool {
	x := s.r.variableOf(slot)
	return x != nil && v.Buf.Ptr == x.Tensor().Buf.Ptr
}

// variableOf returns the device variable behind slot, or nil.
func (r *Runner) variableOf(slot int) *device.Variable {
	if p := r.producer[slot]; p != nil && p.kind == variable {
		return p.v
	}
	return nil
}

// readable returns an error if slot is an uninitialized variable's.
func (s *run) readable(slot int) error {
	if v := s.r.variableOf(slot); v != nil {
		return v.CheckInitialized()
	}
	return nil
}

// variableOp runs a Variable node, IsVariableInitialized or a checkpoint
// op.
func (s *run) variableOp(st *step) error {
	r, d := s.r, s.r.dev
	switch st.kind {
	case hostVar:
		return nil // read or written by name by its checkpoint op
	case variable:
		v := st.v.Tensor()
		if !st.snapshot || !st.v.Initialized() {
			s.vals[st.outputs] = v
			return nil
		}
		// The value as the step starts, for reads queued after its update.
		buf, err := d.Allocator().Alloc(max(v.Bytes(), 1))
		if err != nil {
			return fmt.Errorf("runner: node %s on %s: %w", st.n, d.Info().Name, err)
		}
		snap := &device.Tensor{DType: v.DType, Shape: v.Shape, Buf: buf}
		s.vals[st.outputs] = snap
		if s.holding {
			s.captured = append(s.captured, buf)
		}
		if v.Bytes() > 0 {
			if err := d.Stream().Copy(buf.Ptr, v.Buf.Ptr, v.Bytes()); err != nil {
				return fmt.Errorf("runner: node %s on %s: %w", st.n, d.Info().Name, err)
			}
		}
		return nil
	case initialized:
		v := r.variableOf(st.inputs[0])
		t := tensor.New(tensor.Bool)
		t.Bools()[0] = v.Initialized()
		s.vals[st.outputs] = host(t)
		return nil
	}
	// A checkpoint op: the CPU kernel, on host copies of the variables.
	step, err := s.toHost(s.vals[st.inputs[0]])
	if err != nil {
		return fmt.Errorf("runner: node %s on %s: the step: %w", st.n, d.Info().Name, err)
	}
	tmp := kernel.NewResources()
	kc := &kernel.Context{Ctx: s.ctx, Node: st.n, Resources: r.res,
		Inputs: make([]*tensor.Tensor, len(st.inputs)), Refs: make([]*kernel.Variable, len(st.inputs)),
		Outputs: make([]*tensor.Tensor, st.n.NumOutputs())}
	kc.Inputs[0] = step
	vars := make([]*device.Variable, len(st.inputs))
	values := make([]*tensor.Tensor, len(st.inputs))
	for i, slot := range st.inputs[1:] {
		if p := r.producer[slot]; p != nil && p.kind == hostVar {
			// The host's own variable: the CPU kernel reads or writes it.
			hv, err := r.res.Variable(p.n.Name(), p.n.AttrDType("dtype"), p.n.AttrShape("shape"))
			if err != nil {
				return fmt.Errorf("runner: node %s: %w", st.n, err)
			}
			kc.Refs[i+1] = hv
			continue
		}
		v := r.variableOf(slot)
		if v == nil {
			return fmt.Errorf("runner: node %s on %s: input %d is not a variable", st.n, d.Info().Name, i+1)
		}
		dv := v.Tensor()
		hv, err := tmp.Variable(v.Name(), dv.DType, tensor.MakeShape(dv.Shape...))
		if err != nil {
			return fmt.Errorf("runner: node %s: %w", st.n, err)
		}
		kc.Refs[i+1], vars[i+1] = hv, v
		if st.kind == save {
			if err := v.CheckInitialized(); err != nil {
				return fmt.Errorf("runner: node %s: saving: %w", st.n, err)
			}
			t, err := s.download(dv)
			if err != nil {
				return fmt.Errorf("runner: node %s: saving %s: %w", st.n, v.Name(), err)
			}
			values[i+1] = t
		}
	}
	if st.kind == save {
		if err := d.Stream().Synchronize(s.ctx); err != nil {
			return fmt.Errorf("runner: node %s on %s: %w", st.n, d.Info().Name, err)
		}
		for i, t := range values {
			if t == nil {
				continue
			}
			if err := kc.Refs[i].Assign(t); err != nil {
				return fmt.Errorf("runner: node %s: %w", st.n, err)
			}
		}
	}
	if err := st.host.Compute(kc); err != nil {
		return fmt.Errorf("runner: node %s on %s: %w", st.n, d.Info().Name, err)
	}
	if st.kind == save {
		s.vals[st.outputs] = host(kc.Outputs[0])
		return nil
	}
	for i := 1; i < len(vars); i++ {
		if vars[i] == nil {
			continue // the host's, restored in place
		}
		t, err := kc.Refs[i].Read()
		if err != nil {
			return fmt.Errorf("runner: node %s: %w", st.n, err)
		}
		dv := vars[i].Tensor()
		if raw := t.RawBytes(); len(raw) > 0 {
			if err := d.Stream().CopyIn(dv.Buf.Ptr, raw); err != nil {
				return fmt.Errorf("runner: node %s: restoring %s: %w", st.n, vars[i].Name(), err)
			}
			r.copies.in(int64(len(raw)))
		}
		s.hold = append(s.hold, t)
		vars[i].SetInitialized()
	}
	return nil
}

// onHost reports whether a Variable node asks for the host's CPU: a
// variable of the task's resources that a checkpoint op here takes by ref
// (partition.SubgraphByDevice).
func onHost(n *graph.Node) bool {
	d, err := placement.ParseDevice(n.Device())
	return err == nil && d.Type == "cpu"
}

// upload copies a host value into new device memory, counted.
func (s *run) upload(t *tensor.Tensor) (*device.Tensor, error) {
	up, err := device.Upload(s.r.dev, t)
	if err == nil && len(t.RawBytes()) > 0 {
		s.r.copies.in(int64(len(t.RawBytes())))
	}
	return up, err
}

// download is device.Download, counted when it copies.
func (s *run) download(v *device.Tensor) (*tensor.Tensor, error) {
	t, err := device.Download(s.r.dev, v)
	if err == nil && v.Host == nil && v.Bytes() > 0 {
		s.r.copies.out(v.Bytes())
	}
	return t, err
}

// Transfers counts the copies between host and device memory a runner
// has queued since it was built: values copied in (received, fed or
// restored), and out (sent, fetched, read on the host or saved).
type Transfers struct {
	In, Out           int64 // copies
	InBytes, OutBytes int64
}

// Add returns the sum of t and u.
func (t Transfers) Add(u Transfers) Transfers {
	return Transfers{t.In + u.In, t.Out + u.Out, t.InBytes + u.InBytes, t.OutBytes + u.OutBytes}
}

// Sub returns t less u: the copies between two readings.
func (t Transfers) Sub(u Transfers) Transfers {
	return Transfers{t.In - u.In, t.Out - u.Out, t.InBytes - u.InBytes, t.OutBytes - u.OutBytes}
}

type transfers struct{ nIn, nOut, bIn, bOut atomic.Int64 }

func (c *transfers) in(n int64)  { c.nIn.Add(1); c.bIn.Add(n) }
func (c *transfers) out(n int64) { c.nOut.Add(1); c.bOut.Add(n) }

// Transfers returns the copies the runner has queued so far.
func (r *Runner) Transfers() Transfers {
	c := &r.copies
	return Transfers{In: c.nIn.Load(), Out: c.nOut.Load(), InBytes: c.bIn.Load(), OutBytes: c.bOut.Load()}
}
