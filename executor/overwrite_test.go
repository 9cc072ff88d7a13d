package executor_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/executor"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
)

// doubling is w (4 floats, 1 each) and its update w = 2w: the Assign's
// input is the step's own intermediate, which the variable may take.
type doubling struct {
	*shareGraph
	twice  graph.Output
	double *graph.Node
}

func newDoubling(t *testing.T) (*doubling, *kernel.Resources) {
	t.Helper()
	g, res := newShareGraph(t)
	d := &doubling{shareGraph: g}
	d.twice = ops.Mul(g.s, g.read, ops.Const(g.s, []float32{2, 2, 2, 2}))
	d.double = ops.Assign(g.s, g.w, d.twice).Node
	if err := g.s.Err(); err != nil {
		t.Fatal(err)
	}
	return d, res
}

func checkW(t *testing.T, res *kernel.Resources, want float32) {
	t.Helper()
	v, _ := res.Lookup("w")
	got, err := v.Read()
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(got, f32(want, want, want, want)) {
		t.Errorf("w = %v, want %v each", got, want)
	}
}

// TestAssignTakesItsOwnInput checks that an Assign whose input is an
// intermediate no one else reads takes its storage instead of copying:
// the variable's buffer and the recycled intermediate trade places at
// every step, and the values stay right.
func TestAssignTakesItsOwnInput(t *testing.T) {
	d, res := newDoubling(t)
	e := mustNew(t, d.s.Graph(), nil, nil, []*graph.Node{d.double}, res)
	first := varData(t, res)
	run(t, e)
	checkW(t, res, 2)
	second := varData(t, res)
	if second == first {
		t.Fatal("the variable copied its new value instead of taking the intermediate's storage")
	}
	for i, want := range []float32{4, 8, 16} {
		run(t, e)
		checkW(t, res, want)
		if got, alt := varData(t, res), []*float32{first, second}[i%2]; got != alt {
			t.Errorf("step %d: the variable's buffer is not the one it gave the step before (the step allocated)", i+2)
		}
	}
}

// TestAssignLeavesWhatOthersRead checks the cases where the Assign's input
// may not be overwritten: someone else reads it, or a view of it, after
// the Assign, it is fetched, fed, or the variable's buffer is shared. The
// variable then copies (its buffer stays), and every reader sees the
// right values.
func TestAssignLeavesWhatOthersRead(t *testing.T) {
	t.Run("fetched", func(t *testing.T) {
		d, res := newDoubling(t)
		before := varData(t, res)
		out := run(t, mustNew(t, d.s.Graph(), nil, []graph.Output{d.twice}, []*graph.Node{d.double}, res))
		if !tensor.Equal(out[0], f32(2, 2, 2, 2)) {
			t.Errorf("fetched %v, want the new value", out[0])
		}
		checkW(t, res, 2)
		if varData(t, res) != before {
			t.Error("the variable took a fetched tensor's storage")
		}
	})
	t.Run("a view fetched", func(t *testing.T) {
		d, res := newDoubling(t)
		view := ops.Identity(d.s, d.twice)
		out := run(t, mustNew(t, d.s.Graph(), nil, []graph.Output{view}, []*graph.Node{d.double}, res))
		if !tensor.Equal(out[0], f32(2, 2, 2, 2)) {
			t.Errorf("fetched a view of %v, want the new value", out[0])
		}
		checkW(t, res, 2)
	})
	t.Run("a view read after", func(t *testing.T) {
		d, res := newDoubling(t)
		view := ops.Identity(d.s, d.twice)
		assign := ops.Assign(d.s.WithControlDependencies(view.Node), d.w, d.twice).Node
		s := d.s.WithControlDependencies(assign)
		after := ops.Add(s, view, ops.Const(s, []float32{1, 1, 1, 1}))
		if err := d.s.Err(); err != nil {
			t.Fatal(err)
		}
		out := run(t, mustNew(t, d.s.Graph(), nil, []graph.Output{after}, nil, res))
		if !tensor.Equal(out[0], f32(3, 3, 3, 3)) {
			t.Errorf("a view read after the Assign: %v, want 2w+1 = 3", out[0])
		}
		checkW(t, res, 2)
	})
	t.Run("read after", func(t *testing.T) {
		d, res := newDoubling(t)
		s := d.s.WithControlDependencies(d.double)
		after := ops.Add(s, d.twice, ops.Const(s, []float32{1, 1, 1, 1}))
		if err := d.s.Err(); err != nil {
			t.Fatal(err)
		}
		before := varData(t, res)
		out := run(t, mustNew(t, d.s.Graph(), nil, []graph.Output{after}, nil, res))
		if !tensor.Equal(out[0], f32(3, 3, 3, 3)) {
			t.Errorf("read after the Assign: %v, want 2w+1 = 3", out[0])
		}
		checkW(t, res, 2)
		if varData(t, res) != before {
			t.Error("the variable took the storage of a tensor read after it")
		}
	})
	t.Run("fed", func(t *testing.T) {
		d, res := newDoubling(t)
		x := ops.Placeholder(d.s, "x", tensor.Float32, tensor.MakeShape(4))
		assign := ops.Assign(d.s, d.w, x).Node
		if err := d.s.Err(); err != nil {
			t.Fatal(err)
		}
		before := varData(t, res)
		fed := f32(5, 6, 7, 8)
		fedData := &fed.Float32s()[0]
		e := mustNew(t, d.s.Graph(), []graph.Output{x}, nil, []*graph.Node{assign}, res)
		if _, err := e.Run(context.Background(), []*tensor.Tensor{fed}); err != nil {
			t.Fatal(err)
		}
		if !tensor.Equal(fed, f32(5, 6, 7, 8)) || &fed.Float32s()[0] != fedData {
			t.Errorf("the fed tensor changed: %v", fed)
		}
		if varData(t, res) != before {
			t.Error("the variable took a fed tensor's storage")
		}
	})
	t.Run("a constant", func(t *testing.T) {
		d, res := newDoubling(t)
		nine := ops.Assign(d.s, d.w, ops.Const(d.s, []float32{9, 9, 9, 9})).Node
		if err := d.s.Err(); err != nil {
			t.Fatal(err)
		}
		assign := mustNew(t, d.s.Graph(), nil, nil, []*graph.Node{nine}, res)
		double := mustNew(t, d.s.Graph(), nil, nil, []*graph.Node{d.double}, res)
		for range 2 {
			run(t, assign)
			checkW(t, res, 9)
			run(t, double)
			checkW(t, res, 18)
		}
	})
	t.Run("variable shared", func(t *testing.T) {
		d, res := newDoubling(t)
		// The fetched read keeps a share of w's buffer: the Assign must
		// leave it as it is and move w elsewhere.
		out := run(t, mustNew(t, d.s.Graph(), nil, []graph.Output{d.alias}, []*graph.Node{d.double}, res))
		if !tensor.Equal(out[0], f32(1, 1, 1, 1)) {
			t.Errorf("fetched w = %v, want the value read, 1 each", out[0])
		}
		checkW(t, res, 2)
	})
}

// ownRendezvous hands out t for any key, saying whether it is the
// receiver's own.
type ownRendezvous struct {
	t   *tensor.Tensor
	own bool
}

func (r *ownRendezvous) Send(string, *tensor.Tensor) error { return nil }

func (r *ownRendezvous) Recv(context.Context, string) (*tensor.Tensor, error) { return r.t, nil }

func (r *ownRendezvous) RecvOwn(context.Context, string) (*tensor.Tensor, bool, error) {
	return r.t, r.own, nil
}

var _ rendezvous.OwnReceiver = (*ownRendezvous)(nil)

// TestAssignTakesAReceivedTensor checks that an Assign of a received
// tensor takes its storage when the rendezvous says it is the step's own
// (decoded off the wire), and copies it, leaving it untouched, when it
// may be the sender's.
func TestAssignTakesAReceivedTensor(t *testing.T) {
	for _, own := range []bool{true, false} {
		g, res := newShareGraph(t)
		recv := g.s.Out("Recv", "recv", nil, map[string]any{"tensor_name": "x:0",
			"send_device": "/job:worker/task:0/cpu:0", "recv_device": "/job:ps/task:0/cpu:0",
			"dtype": tensor.Float32, "shape": tensor.MakeShape(4)})
		assign := ops.Assign(g.s, g.w, recv).Node
		if err := g.s.Err(); err != nil {
			t.Fatal(err)
		}
		before := varData(t, res)
		rv := &ownRendezvous{t: f32(3, 3, 3, 3), own: own}
		sent := &rv.t.Float32s()[0]
		e := mustNew(t, g.s.Graph(), nil, nil, []*graph.Node{assign}, res)
		if _, err := e.RunStep(context.Background(), &kernel.Step{ID: 1, Rendezvous: rv}, nil); err != nil {
			t.Fatal(err)
		}
		checkW(t, res, 3)
		switch now := varData(t, res); {
		case own && now != sent:
			t.Error("own: the variable copied the received tensor instead of taking its storage")
		case !own && now != before:
			t.Error("not own: the variable took the received tensor's storage")
		case !own && (!tensor.Equal(rv.t, f32(3, 3, 3, 3)) || &rv.t.Float32s()[0] != sent):
			t.Errorf("not own: the sender's tensor changed: %v", rv.t)
		}
	}
}

// TestOwnedFetches checks which fetches the executor reports as storage
// of the step's own (StepOptions.Owned), which a worker hands on without
// a copy: results it allocated, and the copies it makes of constants and
// variables; not a feed or a view of one, nor a result that a stateful
// kernel keeps.
func TestOwnedFetches(t *testing.T) {
	g, res := newShareGraph(t)
	s := g.s
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(4))
	sq := ops.Square(s, x)
	keptSq := ops.Square(s, x)
	keep := s.AddNode("ExecKeep", "keep_owned", []graph.Output{ops.Identity(s, keptSq)}, nil)
	c := ops.Const(s, []float32{1, 2, 3, 4})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	fetches := []graph.Output{sq, x, ops.Identity(s, x), keptSq, c, g.read, g.alias}
	want := []bool{true, false, false, false, true, true, true}
	e := mustNew(t, s.Graph(), []graph.Output{x}, fetches, []*graph.Node{keep}, res)
	owned := make([]bool, len(fetches))
	for i := range owned {
		owned[i] = !want[i] // each must be set
	}
	if _, err := e.RunStepWith(context.Background(), nil, []*tensor.Tensor{f32(1, 2, 3, 4)}, executor.StepOptions{Owned: owned}); err != nil {
		t.Fatal(err)
	}
	for i := range fetches {
		if owned[i] != want[i] {
			t.Errorf("fetch %s: owned %v, want %v", fetches[i], owned[i], want[i])
		}
	}
}
