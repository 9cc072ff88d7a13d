package runner

import (
	"fmt"
	"slices"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/tensor"
)

// maxGraphs bounds the graphs a runner keeps, one per set of input shapes
// (a training batch, an evaluation batch, the last short batch).
const maxGraphs = 4

// replay is a step captured for one set of input shapes: the graph of its
// kernels, the device buffers it reads its inputs from, and every buffer
// it reads or writes, held for as long as the graph lives.
type replay struct {
	key    []inputSig
	graph  device.Graph
	inputs []staticInput
	// outputs are the values of the slots Sends and fetches read, as the
	// capture left them: device tensors that each replay rewrites, or
	// host values fixed by the shapes.
	outputs map[int]*device.Tensor
	held    []device.Buffer
	// fixed are the host values copied in once, kept while the stream
	// may read them.
	fixed []*tensor.Tensor
}

// pendingUpload is a host value that a captured kernel reads on the
// device, copied in once the capture ends.
type pendingUpload struct {
	dev  *device.Tensor
	host *tensor.Tensor
}

// staticInput is a Recv's or a feed's value copied in before each replay.
type staticInput struct {
	slot int
	buf  *device.Tensor
}

// replayable reports whether a partition's steps can be captured whole:
// every Recv and feed comes before every Send (so that taking the inputs
// first changes no order another partition sees), and every host input
// of a kernel is a constant or computed from shapes (a value received,
// fed or computed on the device would be frozen into the graph, or need
// a synchronisation inside it).
func replayable(nodes []*step) bool {
	producer := map[int]*step{}
	sent := false
	for _, st := range nodes {
		switch st.kind {
		case send:
			sent = true
		case recv, feed:
			if sent {
				return false
			}
		case initialized, save, restore:
			// Their work is on the host, at the time the step runs.
			return false
		case launch:
			for i, slot := range st.inputs {
				if !st.def.IsHostInput(i) {
					continue
				}
				p := producer[slot]
				if p == nil || !(p.kind == constant || p.kind == launch && p.def.IsHostOutput(slot-p.outputs)) {
					return false
				}
			}
		}
		for i := range st.n.NumOutputs() {
			producer[st.outputs+i] = st
		}
	}
	return true
}

// receive takes every Recv's tensor, before the step runs.
func (s *run) receive() error {
	s.received = map[int]*tensor.Tensor{}
	for _, st := range s.r.nodes {
		if st.kind != recv {
			continue
		}
		t, err := s.rv.Recv(s.ctx, st.key)
		if err != nil {
			return fmt.Errorf("runner: node %s on %s: %w", st.n, s.r.dev.Info().Name, err)
		}
		s.received[st.outputs] = t
	}
	return nil
}

// inputSig is the dtype and shape of one received or fed value: the
// steps one graph replays are those whose inputs all have its.
type inputSig struct {
	dt    tensor.DType
	shape []int
}

// inputKey returns the signature of the step's received and fed values,
// in node order, in the runner's reused buffer (steps are serialised).
func (s *run) inputKey() []inputSig {
	key := s.r.keyBuf[:0]
	for _, st := range s.r.nodes {
		var t *tensor.Tensor
		switch st.kind {
		case recv:
			t = s.received[st.outputs]
		case feed:
			if st.feed < len(s.feeds) {
				t = s.feeds[st.feed]
			}
		default:
			continue
		}
		if t == nil {
			key = append(key, inputSig{})
			continue
		}
		key = append(key, inputSig{t.DType(), t.Shape()})
	}
	s.r.keyBuf = key
	return key
}

func sameKey(a, b []inputSig) bool {
	return slices.EqualFunc(a, b, func(x, y inputSig) bool { return x.dt == y.dt && slices.Equal(x.shape, y.shape) })
}

// cloneKey copies a key out of the reused buffer.
func cloneKey(k []inputSig) []inputSig {
	out := make([]inputSig, len(k))
	for i, x := range k {
		out[i] = inputSig{x.dt, slices.Clone(x.shape)}
	}
	return out
}

// lookup returns the graph captured for key, and whether key is one that
// could not be captured.
func (r *Runner) lookup(key []inputSig) (g *replay, eager bool) {
	for _, c := range r.graphs {
		if sameKey(c.key, key) {
			return c, false
		}
	}
	for _, k := range r.eagerKeys {
		if sameKey(k, key) {
			return nil, true
		}
	}
	return nil, false
}

// input returns the host value of a Recv or feed slot in this step.
func (s *run) input(slot int) *tensor.Tensor {
	st := s.r.producer[slot]
	if st.kind == recv {
		return s.received[slot]
	}
	if st.feed < len(s.feeds) {
		return s.feeds[st.feed]
	}
	return nil
}

// capture records the step's kernels into a graph for key and replays it
// once for this step's results. It reports false, with the step's state
// as it was, when the step cannot be captured (the caller runs it
// eagerly); err is an error of the replay itself.
func (s *run) capture(key []inputSig) (out []*tensor.Tensor, captured bool, err error) {
	r, d := s.r, s.r.dev
	c := d.Stream().(device.Capturer)
	g := &replay{key: cloneKey(key), outputs: map[int]*device.Tensor{}}
	// The inputs' host values, then device copies of those a kernel reads
	// there, made before the capture: the graph reads them in place, and
	// each replay first copies the new values in.
	for _, st := range r.nodes {
		switch {
		case st.kind == recv || st.kind == feed || st.kind == constant || st.kind == variable && !st.snapshot:
			if err := s.node(st); err != nil {
				return nil, false, nil
			}
		}
	}
	uploaded := map[int]bool{}
	for _, st := range r.nodes {
		if st.kind != launch {
			continue
		}
		for i, slot := range st.inputs {
			p := r.producer[slot]
			if st.def.IsHostInput(i) || uploaded[slot] || p.kind == launch || p.kind == variable {
				continue
			}
			v := s.vals[slot]
			if v == nil || v.Host == nil {
				return nil, false, nil
			}
			up, err := s.upload(v.Host)
			if err != nil {
				s.abandon(g)
				return nil, false, nil
			}
			s.hold = append(s.hold, v.Host)
			g.held = append(g.held, up.Buf)
			s.vals[slot], uploaded[slot] = up, true
			if p.kind != constant {
				g.inputs = append(g.inputs, staticInput{slot: slot, buf: up})
			}
		}
	}
	if err := c.BeginCapture(); err != nil {
		s.abandon(g)
		return nil, false, nil
	}
	s.holding = true
	for _, st := range r.nodes {
		switch st.kind {
		case launch, variable:
			if st.kind == variable && !st.snapshot {
				continue
			}
			if err := s.node(st); err != nil {
				c.EndCapture()
				s.abandon(g)
				return nil, false, nil
			}
			s.done(st)
		case send:
			g.outputs[st.inputs[0]] = s.vals[st.inputs[0]]
		}
	}
	graph, err := c.EndCapture()
	if err != nil {
		s.abandon(g)
		return nil, false, nil
	}
	g.graph = graph
	// Host values the kernels read on the device that the shapes fix (a
	// constant, a Shape's result) are copied in once, for every replay.
	for _, p := range s.pending {
		if raw := p.host.RawBytes(); len(raw) > 0 {
			if err := d.Stream().CopyIn(p.dev.Buf.Ptr, raw); err != nil {
				s.abandon(g)
				return nil, false, nil
			}
			r.copies.in(int64(len(raw)))
		}
		g.fixed = append(g.fixed, p.host)
	}
	s.pending = nil
	for _, slot := range r.fetches {
		g.outputs[slot] = s.vals[slot]
	}
	g.held = append(g.held, s.captured...)
	g.held = append(g.held, bufs(s.temps)...)
	// The graph holds the step's buffers from now on: freeAll lets them be.
	s.captured, s.temps, s.holding = nil, nil, false
	clear(s.vals)
	r.graphs = append(r.graphs, g)
	out, err = s.replay(g)
	return out, true, err
}

// abandon undoes a capture that failed: the buffers made for it are freed
// and the step's state is as before it, but for the received tensors.
func (s *run) abandon(g *replay) {
	d := s.r.dev
	d.Stream().Synchronize(s.ctx) // nothing of the capture ran; earlier copies may have
	a := d.Allocator()
	for _, b := range append(append(g.held, s.captured...), bufs(s.temps)...) {
		a.Free(b)
	}
	s.captured, s.temps, s.holding, s.pending = nil, nil, false, nil
	s.vals = make([]*device.Tensor, len(s.r.consumers))
	copy(s.left, s.r.consumers)
}

func bufs(ts []*device.Tensor) []device.Buffer {
	var out []device.Buffer
	for _, t := range ts {
		if t != nil && t.Host == nil {
			out = append(out, t.Buf)
		}
	}
	return out
}

// replay runs a step as g: the inputs copied in, one launch, the Sends'
// and fetches' values copied out.
func (s *run) replay(g *replay) ([]*tensor.Tensor, error) {
	r, d := s.r, s.r.dev
	name := d.Info().Name
	for _, in := range g.inputs {
		t := s.input(in.slot)
		if t == nil {
			return nil, fmt.Errorf("runner: %s: input of node %s missing", name, r.producer[in.slot].n)
		}
		if raw := t.RawBytes(); len(raw) > 0 {
			if err := d.Stream().CopyIn(in.buf.Buf.Ptr, raw); err != nil {
				return nil, fmt.Errorf("runner: %s: %w", name, err)
			}
			r.copies.in(int64(len(raw)))
		}
		s.hold = append(s.hold, t)
	}
	if err := g.graph.Launch(); err != nil {
		return nil, fmt.Errorf("runner: %s: replaying the step: %w", name, err)
	}
	value := func(slot int) (*tensor.Tensor, error) {
		if p := r.producer[slot]; p.kind == recv || p.kind == feed {
			return s.input(slot), nil // passed on as it came
		}
		v := g.outputs[slot]
		if v == nil {
			return nil, fmt.Errorf("runner: %s: node %s has no value in the replayed step", name, r.producer[slot].n)
		}
		return s.download(v)
	}
	type sent struct {
		key string
		t   *tensor.Tensor
	}
	var sends []sent
	for _, st := range r.nodes {
		if st.kind != send {
			continue
		}
		t, err := value(st.inputs[0])
		if err != nil {
			return nil, err
		}
		sends = append(sends, sent{st.key, t})
	}
	out := make([]*tensor.Tensor, len(r.fetches))
	for i, slot := range r.fetches {
		t, err := value(slot)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	if err := d.Stream().Synchronize(s.ctx); err != nil {
		return nil, fmt.Errorf("runner: %s: %w", name, err)
	}
	for _, x := range sends {
		if err := s.rv.Send(x.key, x.t); err != nil {
			return nil, fmt.Errorf("runner: %s: %w", name, err)
		}
	}
	return out, nil
}

// Close frees the graphs the runner captured and the memory they hold,
// and what its kernels hold from step to step (device.Releaser: a random
// op's count of runs), once a step running ends; later Runs fail. The
// variables stay in their store (Options.Variables), whose owner closes it.
func (r *Runner) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	a := r.dev.Allocator()
	for _, g := range r.graphs {
		g.graph.Close()
		for _, b := range g.held {
			a.Free(b)
		}
	}
	r.graphs = nil
	var first error
	for _, st := range r.nodes {
		if rel, ok := st.k.(device.Releaser); ok {
			if err := rel.Release(); err != nil && first == nil {
				first = fmt.Errorf("runner: node %s on %s: %w", st.n, r.dev.Info().Name, err)
			}
		}
	}
	return first
}

// Replays reports how many input shapes the runner replays whole steps
// for.
func (r *Runner) Replays() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.graphs)
}
