package taskgraph_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/runner"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// TestHostInputFromAFeed: a Reshape whose shape is fed reads it on the
// host; the step cannot be replayed (the shape would be frozen into the
// graph), so it runs kernel by kernel, right for every shape fed.
func TestHostInputFromAFeed(t *testing.T) {
	s := graph.NewScope()
	g := s.WithDevice("/gpu:0")
	x := ops.Placeholder(g, "x", tensor.Float32, tensor.UnknownShape())
	shape := ops.Placeholder(g, "shape", tensor.Int32, tensor.MakeShape(2))
	y := ops.Add(g, ops.Reshape(g, x, shape), ops.Const(g, float32(1)))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	devs := openSim(t, device.Options{Count: 1})
	e, err := taskgraph.New(s.Graph(), graph.Signature{Feeds: []graph.Output{shape, x}, Fetches: []graph.Output{y}},
		kernel.NewResources(), taskgraph.Config{Task: task, Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	xv := tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 6)
	for i, dims := range [][]int32{{2, 3}, {3, 2}, {2, 3}, {6, 1}, {1, 6}} {
		out, err := e.Run(context.Background(), []*tensor.Tensor{tensor.MustFromSlice(dims, 2), xv})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := out[0].Shape(); got[0] != int(dims[0]) || got[1] != int(dims[1]) || !slices.Equal(out[0].Float32s(), []float32{2, 3, 4, 5, 6, 7}) {
			t.Fatalf("step %d: reshape to %v gave %v%v", i, dims, out[0].Shape(), out[0].Float32s())
		}
	}
	if e.Replays() != 0 {
		t.Errorf("a step with a fed shape replays")
	}
	if st := devs[0].Allocator().Stats(); st.Live != 0 {
		t.Errorf("%d allocations live after the steps", st.Live)
	}
}

// TestKernelErrorOnTheDevice: a kernel that fails on the stream fails the
// step naming the node, frees the step's memory, and the next step runs.
func TestKernelErrorOnTheDevice(t *testing.T) {
	s := graph.NewScope()
	g := s.WithDevice("/gpu:0")
	a := ops.Placeholder(g, "a", tensor.Float32, tensor.MakeShape(-1, -1))
	b := ops.Placeholder(g, "b", tensor.Float32, tensor.MakeShape(-1, -1))
	y := ops.MatMul(g, a, b, false, false)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	devs := openSim(t, device.Options{Count: 1})
	e, err := taskgraph.New(s.Graph(), graph.Signature{Feeds: []graph.Output{a, b}, Fetches: []graph.Output{y}},
		kernel.NewResources(), taskgraph.Config{Task: task, Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ok := []*tensor.Tensor{tensor.New(tensor.Float32, 2, 3), tensor.New(tensor.Float32, 3, 4)}
	for i := range 3 { // the third replays
		if _, err := e.Run(context.Background(), ok); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	_, err = e.Run(context.Background(), []*tensor.Tensor{tensor.New(tensor.Float32, 2, 3), tensor.New(tensor.Float32, 5, 4)})
	if err == nil || !strings.Contains(err.Error(), "MatMul") {
		t.Fatalf("a MatMul of [2 3] by [5 4]: %v, want an error naming the node", err)
	}
	if _, err := e.Run(context.Background(), ok); err != nil {
		t.Fatalf("the step after a failed one: %v", err)
	}
	e.Close()
	if st := devs[0].Allocator().Stats(); st.Live != 0 {
		t.Errorf("%d allocations live after the steps", st.Live)
	}
}

// TestDeadlineEndsAWait: the GPU's partition waits for a tensor the CPU's
// partition never produces (a dequeue from an empty queue); the step's
// deadline ends both, and the error wraps the context's.
func TestDeadlineEndsAWait(t *testing.T) {
	s := graph.NewScope()
	q := ops.FIFOQueue(s, tensor.Float32, 1, "")
	x := ops.QueueDequeue(s, q, tensor.MakeShape(2))
	y := ops.Neg(s.WithDevice("/gpu:0"), x)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	devs := openSim(t, device.Options{Count: 1})
	e, err := taskgraph.New(s.Graph(), graph.Signature{Fetches: []graph.Output{y}},
		kernel.NewResources(), taskgraph.Config{Task: task, Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = e.Run(ctx, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a step past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the step took %v to end after its 200ms deadline", d)
	}
}

// TestRandomOnDevice: dropout on /gpu:0 draws its mask on the host by
// default; with RandomOnDevice it draws on the device, the step replays
// whole, and each step's mask is the next run of the node's Philox stream.
func TestRandomOnDevice(t *testing.T) {
	s := graph.NewScope()
	g := s.WithDevice("/gpu:0")
	x := ops.Placeholder(g, "x", tensor.Float32, tensor.MakeShape(-1, 5))
	u := ops.RandomUniform(g, ops.Shape(g, x), tensor.Float32, 11)
	y := ops.Mul(g, ops.Relu(g, x), ops.Cast(g, ops.GreaterEqual(g, u, ops.Const(g, float32(0.5))), tensor.Float32))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	devs := openSim(t, device.Options{Count: 1})
	sig := graph.Signature{Feeds: []graph.Output{x}, Fetches: []graph.Output{y, u}}
	for _, onDevice := range []bool{false, true} {
		e, err := taskgraph.New(s.Graph(), sig, kernel.NewResources(),
			taskgraph.Config{Task: task, Devices: devs, SoftPlacement: true, RandomOnDevice: onDevice})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.HasSuffix(e.Placement()[u.Node.Name()], "/gpu:0"); got != onDevice {
			t.Errorf("RandomOnDevice %v: RandomUniform placed on %s", onDevice, e.Placement()[u.Node.Name()])
		}
		xv := tensor.New(tensor.Float32, 3, 5)
		for i := range xv.Float32s() {
			xv.Float32s()[i] = float32(i + 1)
		}
		var prev []float32
		for step := range 4 {
			out, err := e.Run(context.Background(), []*tensor.Tensor{xv})
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			got := out[1].Float32s()
			if onDevice {
				want := make([]float32, 15)
				device.PhiloxUniform(11, 0, uint64(step), want)
				if !slices.Equal(got, want) {
					t.Errorf("step %d: mask draws %v, want run %d of the Philox stream %v", step, got, step, want)
				}
			}
			if slices.Equal(got, prev) {
				t.Errorf("step %d drew the numbers of the step before", step)
			}
			prev = slices.Clone(got)
			for i, v := range out[0].Float32s() {
				if keep := got[i] >= 0.5; (keep && v != xv.Float32s()[i]) || (!keep && v != 0) {
					t.Fatalf("step %d: element %d is %g with draw %g", step, i, v, got[i])
				}
			}
		}
		if onDevice && e.Replays() != 1 {
			t.Errorf("a step with a random op on the device: %d partitions replay, want 1", e.Replays())
		}
		e.Close()
	}
	if st := devs[0].Allocator().Stats(); st.Live != 0 {
		t.Errorf("%d allocations live after the steps", st.Live)
	}
}

// TestValuesRefusedOnTheDevice: a step whose values a kernel refuses on
// the stream (a label out of range) fails naming the node on the
// simulator (CUDA's kernel gives NaN), and the device serves the next
// steps, replayed or eager, as the CPU does after a step with bad data.
func TestValuesRefusedOnTheDevice(t *testing.T) {
	s := graph.NewScope()
	g := s.WithDevice("/gpu:0")
	logits := ops.Placeholder(g, "logits", tensor.Float32, tensor.MakeShape(-1, 3))
	labels := ops.Placeholder(g, "labels", tensor.Int32, tensor.MakeShape(-1))
	xe, _ := ops.SparseSoftmaxCrossEntropyWithLogits(g, logits, labels)
	loss := ops.Sum(g, xe, nil, false)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	devs := openSim(t, device.Options{Count: 1})
	x := tensor.MustFromSlice([]float32{1, 2, 3, 0, 0, 0}, 2, 3)
	ok, bad := tensor.MustFromSlice([]int32{2, 0}, 2), tensor.MustFromSlice([]int32{2, 3}, 2)
	for _, eager := range []bool{false, true} {
		e, err := taskgraph.New(s.Graph(), graph.Signature{Feeds: []graph.Output{logits, labels}, Fetches: []graph.Output{loss}},
			kernel.NewResources(), taskgraph.Config{Task: task, Devices: devs, Eager: eager})
		if err != nil {
			t.Fatal(err)
		}
		want := float32(0.40760596 + 1.0986123)
		for i := range 5 { // from the third, replays
			labels := ok
			if i == 2 {
				labels = bad
			}
			out, err := e.Run(context.Background(), []*tensor.Tensor{x, labels})
			switch {
			case i == 2 && err != nil:
				if !strings.Contains(err.Error(), "SparseSoftmaxCrossEntropyWithLogits") {
					t.Errorf("eager %v: a label out of range: %v, want an error naming the node", eager, err)
				}
			case err != nil:
				t.Fatalf("eager %v: step %d: %v", eager, i, err)
			case i != 2 && math.Abs(float64(out[0].Float32s()[0]-want)) > 1e-5:
				t.Errorf("eager %v: step %d: loss %v, want %v", eager, i, out[0].Float32s()[0], want)
			}
		}
		e.Close()
	}
	if st := devs[0].Allocator().Stats(); st.Live != 0 {
		t.Errorf("%d allocations live after the steps", st.Live)
	}
}

// TestFeedsChecked: a value fed to a node on a GPU is checked against the
// fed tensor's dtype and shape, as on the CPU, not taken as it is.
func TestFeedsChecked(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s.WithDevice("/gpu:0"), "x", tensor.Float32, tensor.MakeShape(-1, 2))
	y := ops.Relu(s.WithDevice("/gpu:0"), x)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	devs := openSim(t, device.Options{Count: 1})
	e, err := taskgraph.New(s.Graph(), graph.Signature{Feeds: []graph.Output{x}, Fetches: []graph.Output{y}},
		kernel.NewResources(), taskgraph.Config{Task: task, Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, v := range []*tensor.Tensor{
		tensor.MustFromSlice([]int32{1, 2, 3, 4}, 2, 2), // another dtype
		tensor.MustFromSlice([]float32{1, 2, 3, 4}, 4),  // another rank
		tensor.MustFromSlice([]float32{1, 2, 3}, 1, 3),  // another dimension
		nil,
	} {
		if _, err := e.Run(context.Background(), []*tensor.Tensor{v}); err == nil || !strings.Contains(err.Error(), "feed x:0") {
			t.Errorf("feeding %v to float32[?,2]: %v, want an error naming the feed", v, err)
		}
	}
	if _, err := e.Run(context.Background(), nil); err == nil {
		t.Error("a step without its feed ran")
	}
	out, err := e.Run(context.Background(), []*tensor.Tensor{tensor.MustFromSlice([]float32{-1, 2}, 1, 2)})
	if err != nil || !slices.Equal(out[0].Float32s(), []float32{0, 2}) {
		t.Errorf("a good feed: %v, %v", out, err)
	}
}

// TestRecurrentStepReplaysWhole: an LSTM's training step, its variables in
// device memory, is captured and replayed whole, copying only the batch
// in and the loss out: no op of the unrolled cell (its zero state among
// them, whose batch was once computed on the host) leaves the device.
func TestRecurrentStepReplaysWhole(t *testing.T) {
	root := graph.NewScope()
	m := lstmModel(root.WithDevice("/gpu:0"), 8)
	opt, _ := train.NewOptimizer("adam", 0.01)
	op, err := train.Minimize(root.WithDevice("/gpu:0"), opt, m.Loss, train.CreateGlobalStep(root))
	if err != nil {
		t.Fatal(err)
	}
	e := initializedStep(t, root, m, op, taskgraph.Config{Task: task, Devices: openSim(t, device.Options{Count: 1}), SoftPlacement: true, VariablesOnDevice: true})
	ctx := context.Background()
	x, y := batch(rand.New(rand.NewPCG(1, 2)), 8)
	var before runner.Transfers
	for i := range 3 {
		if i == 2 {
			before = e.Transfers()
		}
		if _, err := e.Run(ctx, []*tensor.Tensor{x, y}); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if e.Replays() != 1 {
		t.Errorf("the LSTM's step does not replay whole: %d partitions replay", e.Replays())
	}
	if c := e.Transfers().Sub(before); c.In+c.Out != 3 {
		t.Errorf("a replayed step copied %d tensors in and %d out, want the images and labels in, the loss out", c.In, c.Out)
	}
}
