package executor_test

import (
	"context"
	"sync"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
)

// shareGraph is a variable w of 4 floats with an initializer to 1, a read,
// the read through Identity, and an update adding 1.
type shareGraph struct {
	s              *graph.Scope
	w, read, alias graph.Output
	init, add      *graph.Node
}

func newShareGraph(t *testing.T) (*shareGraph, *kernel.Resources) {
	t.Helper()
	s := graph.NewScope()
	g := &shareGraph{s: s, w: variable(s, "w", 4)}
	g.init = ops.Assign(s, g.w, ops.Const(s, []float32{1, 1, 1, 1})).Node
	g.add = ops.AssignAdd(s, g.w, ops.Const(s, []float32{1, 1, 1, 1})).Node
	g.read = ops.Identity(s, g.w)
	g.alias = ops.Identity(s, g.read)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	res := kernel.NewResources()
	run(t, mustNew(t, s.Graph(), nil, nil, []*graph.Node{g.init}, res))
	return g, res
}

func run(t *testing.T, e interface {
	Run(context.Context, []*tensor.Tensor) ([]*tensor.Tensor, error)
}) []*tensor.Tensor {
	t.Helper()
	out, err := e.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// varData returns the address of w's buffer now.
func varData(t *testing.T, res *kernel.Resources) *float32 {
	t.Helper()
	v, _ := res.Lookup("w")
	val, l, err := v.Share()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	return &val.Float32s()[0]
}

// TestFetchedVariableKeepsItsValue fetches the variable (directly and
// through forwarding kernels), updates it, and checks that the fetched
// tensors are unchanged and that the caller owns them.
func TestFetchedVariableKeepsItsValue(t *testing.T) {
	for _, fetch := range []string{"variable", "identity", "both"} {
		t.Run(fetch, func(t *testing.T) {
			g, res := newShareGraph(t)
			fetches := map[string][]graph.Output{
				"variable": {g.w}, "identity": {g.alias}, "both": {g.w, g.alias, g.w},
			}[fetch]
			out := run(t, mustNew(t, g.s.Graph(), nil, fetches, nil, res))
			run(t, mustNew(t, g.s.Graph(), nil, nil, []*graph.Node{g.add}, res))
			for i, o := range out {
				if !tensor.Equal(o, f32(1, 1, 1, 1)) {
					t.Errorf("fetch %d changed under an update: %v", i, o)
				}
			}
			for _, o := range out {
				o.Float32s()[0] = 100 // the caller's to modify
			}
			v, _ := res.Lookup("w")
			if now, _ := v.Read(); !tensor.Equal(now, f32(2, 2, 2, 2)) {
				t.Errorf("w = %v, want [2 2 2 2]", now)
			}
		})
	}
}

// TestVariableUpdatedInPlaceOnceReadersAreDone checks that a step's read
// shares the variable's buffer and hands it back when its consumers are
// done, so that an update after them runs in place, in the same step and
// in later ones; the values stay right.
func TestVariableUpdatedInPlaceOnceReadersAreDone(t *testing.T) {
	g, res := newShareGraph(t)
	sum := ops.Sum(g.s, ops.Mul(g.s, g.alias, g.read), nil, false)
	add := ops.AssignAdd(g.s.WithControlDependencies(sum.Node), g.w, ops.Const(g.s, []float32{1, 1, 1, 1})).Node
	if err := g.s.Err(); err != nil {
		t.Fatal(err)
	}
	e := mustNew(t, g.s.Graph(), nil, []graph.Output{sum}, []*graph.Node{add}, res)
	buf := varData(t, res)
	for step := range 3 {
		out := run(t, e)
		x := float32(step + 1)
		if got := out[0].Float32s()[0]; got != 4*x*x {
			t.Fatalf("step %d: sum = %v, want %v", step, got, 4*x*x)
		}
		if varData(t, res) != buf {
			t.Fatalf("step %d: the variable moved to another buffer: its read was not released", step)
		}
	}
}

// TestConcurrentReadsAndUpdates runs steps that read the variable beside
// steps that update it in place (run it with -race): no read sees a
// half-applied update, and every update counts.
func TestConcurrentReadsAndUpdates(t *testing.T) {
	g, res := newShareGraph(t)
	spread := ops.Sub(g.s, ops.Max(g.s, g.alias, nil, false), ops.Min(g.s, g.read, nil, false))
	if err := g.s.Err(); err != nil {
		t.Fatal(err)
	}
	reader := mustNew(t, g.s.Graph(), nil, []graph.Output{spread}, nil, res)
	updater := mustNew(t, g.s.Graph(), nil, nil, []*graph.Node{g.add}, res)
	const steps = 300
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range steps {
				if i%2 == 0 {
					if _, err := updater.Run(context.Background(), nil); err != nil {
						errs <- err
						return
					}
					continue
				}
				out, err := reader.Run(context.Background(), nil)
				if err != nil {
					errs <- err
					return
				}
				if d := out[0].Float32s()[0]; d != 0 {
					t.Errorf("a read saw a half-applied update: max - min = %v", d)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	v, _ := res.Lookup("w")
	if now, _ := v.Read(); now.Float32s()[0] != 1+2*steps {
		t.Errorf("w = %v after %d updates, want %d", now, 2*steps, 1+2*steps)
	}
}

// TestSendInFlightKeepsTheValue sends the variable's value (as a
// distributed step's Send does), updates the variable before the tensor is
// received, and checks that the receiver gets the value sent.
func TestSendInFlightKeepsTheValue(t *testing.T) {
	g, res := newShareGraph(t)
	attrs := map[string]any{"tensor_name": "w:0", "send_device": "/job:ps/task:0/cpu:0", "recv_device": "/job:worker/task:0/cpu:0"}
	send := g.s.AddNode("Send", "send", []graph.Output{g.read}, attrs)
	if err := g.s.Err(); err != nil {
		t.Fatal(err)
	}
	rv := rendezvous.NewLocal()
	e := mustNew(t, g.s.Graph(), nil, nil, []*graph.Node{send}, res)
	if _, err := e.RunStep(context.Background(), &kernel.Step{ID: 1, Rendezvous: rv}, nil); err != nil {
		t.Fatal(err)
	}
	updater := mustNew(t, g.s.Graph(), nil, nil, []*graph.Node{g.add}, res)
	for range 2 {
		run(t, updater)
	}
	got, err := rv.Recv(context.Background(), rendezvous.Key(attrs["send_device"].(string), attrs["recv_device"].(string), "w:0"))
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(got, f32(1, 1, 1, 1)) {
		t.Errorf("received %v, want the value sent, [1 1 1 1]", got)
	}
}
