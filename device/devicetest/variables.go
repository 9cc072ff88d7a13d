package devicetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/runner"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
)

// variableUpdateSteps is how many steps testVariables applies each update
// to variables in a store: the first runs kernel by kernel, the second is
// captured where the platform captures, and the third replays it.
const variableUpdateSteps = 3

// testVariables checks device variables (device.Variables) as the runner
// keeps them: uninitialized until assigned, read in place by kernels and
// fetches, assigned, kept from runner to runner, updated in place by each
// rule of device.Updates and device.SparseUpdates and by AssignAdd and
// AssignSub as the CPU's kernels update a host variable, in captured and
// replayed steps too, and freed when the store closes.
func testVariables(t *testing.T, p device.Platform) {
	d := open(t, p, device.Options{Count: 1, MemoryLimit: 64 << 20})[0]
	t.Run("Assign", func(t *testing.T) {
		store := device.NewVariables(d)
		defer store.Close()
		x := tensor.MustFromSlice([]float32{1, -2, 3, -4, 5, -6}, 2, 3)
		y := tensor.MustFromSlice([]float32{0.5, 0.25, -1, 2, 8, -16}, 2, 3)

		read := graph.NewScope()
		v := variable(read, "a", x)
		read.Out("Neg", "neg", []graph.Output{v}, nil)
		reader, err := runner.New(read.Graph(), d, runner.Options{Fetches: []string{"a:0", "neg:0"}, Variables: store})
		if err != nil {
			t.Fatal(err)
		}
		defer reader.Close()
		if _, err := runOnce(reader, nil); !errors.Is(err, kernel.ErrUninitialized) {
			t.Errorf("a read of a variable never assigned: %v, want kernel.ErrUninitialized", err)
		}
		if got := isInitialized(t, d, store, "a", x); got {
			t.Errorf("IsVariableInitialized is true before the Assign")
		}
		for i, val := range []*tensor.Tensor{x, y} {
			if out := assign(t, d, store, "a", val); !equal(out, val) {
				t.Errorf("assignment %d: Assign's output %v, want %v", i, out.Float32s(), val.Float32s())
			}
			out, err := runOnce(reader, nil)
			if err != nil {
				t.Fatalf("assignment %d: %v", i, err)
			}
			// The reader was built before the assignments: the variable
			// outlives runners.
			if !equal(out[0], val) {
				t.Errorf("assignment %d: the variable reads %v, want %v", i, out[0].Float32s(), val.Float32s())
			}
			for j, f := range out[1].Float32s() {
				if f != -val.Float32s()[j] {
					t.Errorf("assignment %d: Neg of the variable %v, want the negated %v", i, out[1].Float32s(), val.Float32s())
					break
				}
			}
		}
		if got := isInitialized(t, d, store, "a", x); !got {
			t.Errorf("IsVariableInitialized is false after the Assign")
		}
		other := graph.NewScope()
		variable(other, "a", tensor.New(tensor.Float32, 3, 2))
		if _, err := runner.New(other.Graph(), d, runner.Options{Variables: store}); err == nil {
			t.Errorf("a Variable of another shape than the stored one was accepted")
		}
	})
	t.Run("ReadAfterUpdate", func(t *testing.T) { testReadAfterUpdate(t, d) })
	for _, c := range refCases() {
		t.Run(c.Op, func(t *testing.T) {
			want, _, err := cpuUpdate(c, variableUpdateSteps)
			if err != nil {
				t.Fatalf("%v on the CPU: %v", c, err)
			}
			got, replays, err := storeUpdate(d, c, variableUpdateSteps)
			if err != nil {
				t.Fatalf("%v on %s: %v", c, d.Info().Name, err)
			}
			for i := range want {
				if msg := compare(got[i], want[i], forwardTol); msg != "" {
					t.Errorf("%v after %d steps, variable input %d: %s", c, variableUpdateSteps, i, msg)
				}
			}
			if _, ok := d.Stream().(device.Capturer); ok && replays != 1 {
				t.Errorf("%v: the update step was not captured and replayed (%d graphs)", c, replays)
			}
		})
	}
	if st := d.Allocator().Stats(); st.Live != 0 {
		t.Errorf("the variable cases left %d allocations (%d bytes) live after their stores closed", st.Live, st.InUse)
	}
}

// variable adds Variable name of like's dtype and shape to s.
func variable(s *graph.Scope, name string, like *tensor.Tensor) graph.Output {
	return s.Out("Variable", name, nil, map[string]any{"dtype": like.DType(), "shape": tensor.MakeShape(like.Shape()...)})
}

func placeholder(s *graph.Scope, name string, like *tensor.Tensor) graph.Output {
	return s.Out("Placeholder", name, nil, map[string]any{"dtype": like.DType(), "shape": tensor.MakeShape(like.Shape()...)})
}

// runOnce runs one step of r with a rendezvous of its own.
func runOnce(r *runner.Runner, feeds []*tensor.Tensor) ([]*tensor.Tensor, error) {
	return r.Run(context.Background(), rendezvous.NewLocal(), feeds)
}

// assign assigns val to the variable name of store on a runner of its
// own, and returns Assign's output.
func assign(t *testing.T, d device.Device, store *device.Variables, name string, val *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	s := graph.NewScope()
	s.Out("Assign", "assign", []graph.Output{variable(s, name, val), placeholder(s, "value", val)}, nil)
	r, err := runner.New(s.Graph(), d, runner.Options{Feeds: []string{"value"}, Fetches: []string{"assign:0"}, Variables: store})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, err := runOnce(r, []*tensor.Tensor{val})
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

func isInitialized(t *testing.T, d device.Device, store *device.Variables, name string, like *tensor.Tensor) bool {
	t.Helper()
	s := graph.NewScope()
	s.Out("IsVariableInitialized", "init", []graph.Output{variable(s, name, like)}, nil)
	r, err := runner.New(s.Graph(), d, runner.Options{Fetches: []string{"init:0"}, Variables: store})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, err := runOnce(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out[0].Bools()[0]
}

func equal(a, b *tensor.Tensor) bool {
	return a.DType() == b.DType() && slices.Equal(a.Shape(), b.Shape()) && string(a.RawBytes()) == string(b.RawBytes())
}

// storeUpdate assigns c's ref inputs to variables of a store of d, applies
// c's update steps times on one runner, and returns the variables' values
// and how many steps the runner replays whole.
func storeUpdate(d device.Device, c Case, steps int) (_ []*tensor.Tensor, replays int, err error) {
	store := device.NewVariables(d)
	defer func() {
		if cerr := store.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	n, err := Node(c)
	if err != nil {
		return nil, 0, err
	}
	init := graph.NewScope()
	read := graph.NewScope()
	var initFeeds, feeds []string
	var initVals, vals []*tensor.Tensor
	var fetches []string
	for i, in := range c.Inputs {
		name := fmt.Sprintf("v%d", i)
		if !n.IsRefInput(i) {
			feeds, vals = append(feeds, fmt.Sprintf("x%d", i)), append(vals, in)
			continue
		}
		val := placeholder(init, "init"+name, in)
		init.Out("Assign", name+"/Assign", []graph.Output{variable(init, name, in), val}, nil)
		initFeeds, initVals = append(initFeeds, "init"+name), append(initVals, in)
		variable(read, name, in)
		fetches = append(fetches, name+":0")
	}
	if err := errors.Join(init.Err(), read.Err()); err != nil {
		return nil, 0, err
	}
	ir, err := runner.New(init.Graph(), d, runner.Options{Feeds: initFeeds, Variables: store})
	if err != nil {
		return nil, 0, err
	}
	defer ir.Close()
	if _, err := runOnce(ir, initVals); err != nil {
		return nil, 0, fmt.Errorf("assigning the variables: %w", err)
	}
	ur, err := runner.New(n.Graph(), d, runner.Options{Feeds: feeds, Variables: store})
	if err != nil {
		return nil, 0, err
	}
	defer ur.Close()
	for i := range steps {
		if _, err := runOnce(ur, vals); err != nil {
			return nil, 0, fmt.Errorf("step %d: %w", i, err)
		}
	}
	rr, err := runner.New(read.Graph(), d, runner.Options{Fetches: fetches, Variables: store})
	if err != nil {
		return nil, 0, err
	}
	defer rr.Close()
	out, err := runOnce(rr, nil)
	return out, ur.Replays(), err
}

// testReadAfterUpdate: a step that updates a variable in place and then
// fetches it returns the value the step started from, as the host's
// Variable kernel gives, while a kernel queued before the update reads
// the variable itself; the step captured and replayed where the stream
// captures.
func testReadAfterUpdate(t *testing.T, d device.Device) {
	store := device.NewVariables(d)
	defer store.Close()
	x := tensor.MustFromSlice([]float32{1, 2, 3, 4}, 4)
	assign(t, d, store, "w", x)
	s := graph.NewScope()
	w := variable(s, "w", x)
	s.Out("Neg", "before", []graph.Output{w}, nil)
	s.AddNode("ApplyGradientDescent", "update", []graph.Output{w, placeholder(s, "alpha", tensor.Scalar(float32(0))),
		placeholder(s, "delta", x)}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(s.Graph(), d, runner.Options{Feeds: []string{"alpha", "delta"}, Fetches: []string{"w:0", "before:0"}, Variables: store})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := slices.Clone(x.Float32s())
	for step := range 4 {
		out, err := runOnce(r, []*tensor.Tensor{tensor.Scalar(float32(0.5)), x})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if got := out[0].Float32s(); !slices.Equal(got, want) {
			t.Errorf("step %d: w fetched after its update %v, want the step's first value %v", step, got, want)
		}
		for i, v := range out[1].Float32s() {
			if v != -want[i] {
				t.Errorf("step %d: Neg before the update read %v, want the negated %v", step, out[1].Float32s(), want)
				break
			}
		}
		for i := range want {
			want[i] -= 0.5 * x.Float32s()[i]
		}
	}
	if _, ok := d.Stream().(device.Capturer); ok && r.Replays() != 1 {
		t.Errorf("the step was not captured and replayed")
	}
}
