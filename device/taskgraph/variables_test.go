package taskgraph_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/checkpoint/bundle"
	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/runner"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// deviceRun is a training of a trainer on a session, with the executor
// of its training step for the placement and the copies.
type deviceRun struct {
	losses []float32
	// perStep are the copies of the last step, a replayed one.
	perStep runner.Transfers
	onGPU   map[string]bool
	saved   string // the checkpoint's prefix
}

// trainSession trains tr for steps on a session over devs (the CPU alone
// when devs is empty) with cfg's variables placement, saves a checkpoint
// in dir at the end, and returns what it saw.
func trainSession(t *testing.T, tr *trainer, sv *checkpoint.Saver, devs []device.Device, onDevice bool, steps, batchSize int) deviceRun {
	t.Helper()
	ctx := context.Background()
	var opts []session.Option
	if len(devs) > 0 {
		opts = append(opts, session.WithDevices(taskgraph.Config{Task: task, Devices: devs, SoftPlacement: true,
			RandomOnDevice: true, VariablesOnDevice: onDevice}))
	}
	sess, err := session.New(tr.g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{tr.init}); err != nil {
		t.Fatal(err)
	}
	// The step's own executor, on the session's resources, for the
	// placement and the count of copies.
	cfg := taskgraph.Config{Task: task, Devices: devs, SoftPlacement: true, RandomOnDevice: true, VariablesOnDevice: onDevice}
	e, err := taskgraph.New(tr.g, graph.Signature{Feeds: []graph.Output{tr.m.Input, tr.m.Label},
		Fetches: []graph.Output{tr.m.Loss}, Targets: []*graph.Node{tr.trainOp}}, sess.Resources(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	out := deviceRun{onGPU: map[string]bool{}}
	for name, d := range e.Placement() {
		if strings.HasSuffix(d, "/gpu:0") {
			out.onGPU[tr.g.Node(name).Op()] = true
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i := range steps {
		n := batchSize
		if i%5 == 4 {
			n = batchSize/2 + 1
		}
		x, y := batch(r, n)
		before := e.Transfers()
		v, err := e.Run(ctx, []*tensor.Tensor{x, y})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		out.perStep = e.Transfers().Sub(before)
		out.losses = append(out.losses, v[0].Float32s()[0])
	}
	if out.saved, err = sv.Save(ctx, sess, int64(steps)); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestVariablesOnDeviceTrainAsOnTheCPU trains the reference models with
// their variables in the simulated GPU's memory, updated there in place,
// and checks every step's loss and the saved checkpoint against the same
// training on the CPU alone; the checkpoint restores into a fresh session
// on the device bit for bit; a replayed step copies in the batch alone.
func TestVariablesOnDeviceTrainAsOnTheCPU(t *testing.T) {
	for _, c := range []struct {
		model        string
		steps, batch int
	}{{"mlp", 20, 32}, {"cnn", 7, 4}} {
		t.Run(c.model, func(t *testing.T) {
			devs := openSim(t, device.Options{Count: 1})
			ref := reference(build(t, c.model))
			refDir, dir := t.TempDir(), t.TempDir()
			refSaver := newSaver(t, ref, refDir)
			want := trainSession(t, ref, refSaver, devs, false, c.steps, c.batch)

			tr := build(t, c.model)
			sv := newSaver(t, tr, dir)
			host := trainSession(t, tr, sv, devs, false, c.steps, c.batch)
			got := trainSession(t, tr, sv, devs, true, c.steps, c.batch)
			for _, op := range []string{"Variable", "ApplyGradientDescent", "MatMul"} {
				if !got.onGPU[op] {
					t.Errorf("no %s on the GPU with the variables there (on it: %v)", op, got.onGPU)
				}
			}
			for i := range want.losses {
				if d := math.Abs(float64(got.losses[i] - want.losses[i])); d > tolerance()*max(1, math.Abs(float64(want.losses[i]))) {
					t.Fatalf("step %d: loss %g with the variables on the GPU, %g on the CPU", i, got.losses[i], want.losses[i])
				}
			}
			nvars := len(ops.TrainableVariables(tr.g))
			t.Logf("%s: copies per replayed step: variables on the host %+v, on the device %+v (%d trainable variables)",
				c.model, host.perStep, got.perStep, nvars)
			// In: the batch's two tensors; out: the loss.
			if got.perStep.In != 2 || got.perStep.Out != 1 {
				t.Errorf("a step with the variables on the device copies %+v, want 2 in and 1 out", got.perStep)
			}
			if host.perStep.In < got.perStep.In+int64(nvars) {
				t.Errorf("a step with the variables on the host copies %d in, want at least %d", host.perStep.In, got.perStep.In+int64(nvars))
			}
			// The checkpoints: the device's against the CPU's.
			gotVals := savedAlike(t, tr.g, refDir, want.saved, dir, got.saved)
			restoreOnDevice(t, tr, sv, devs, int64(c.steps), gotVals)
			if st := devs[0].Allocator().Stats(); st.Live != 0 {
				t.Errorf("after the sessions closed: %d allocations live", st.Live)
			}
		})
	}
}

func newSaver(t *testing.T, tr *trainer, dir string) *checkpoint.Saver {
	t.Helper()
	sv, err := checkpoint.NewSaver(graph.NewScopeWithGraph(tr.g), nil, checkpoint.SaverConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return sv
}

// savedAlike checks that the checkpoint gotPrefix in dir holds every
// variable of g as the CPU's, wantPrefix in refDir, does, and returns its
// values.
func savedAlike(t *testing.T, g *graph.Graph, refDir, wantPrefix, dir, gotPrefix string) map[string]*tensor.Tensor {
	t.Helper()
	names := variableNames(g)
	wantVals, err := bundle.ReadVariables(refDir, wantPrefix, names)
	if err != nil {
		t.Fatal(err)
	}
	gotVals, err := bundle.ReadVariables(dir, gotPrefix, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if msg := differ(gotVals[name], wantVals[name]); msg != "" {
			t.Errorf("variable %s saved from the GPU: %s", name, msg)
		}
	}
	return gotVals
}

func variableNames(g *graph.Graph) []string {
	var names []string
	for _, v := range ops.GlobalVariables(g) {
		names = append(names, v.Name())
	}
	return names
}

// differ says how a differs from b, bit for bit on the simulator and
// within tolerance() on a real device; "" when they agree.
func differ(a, b *tensor.Tensor) string {
	if a == nil || b == nil {
		return "missing"
	}
	if a.DType() != b.DType() || !slicesEqual(a.Shape(), b.Shape()) {
		return "another dtype or shape"
	}
	if a.DType() != tensor.Float32 {
		if string(a.RawBytes()) != string(b.RawBytes()) {
			return "other bytes"
		}
		return ""
	}
	x, y := a.Float32s(), b.Float32s()
	for i := range x {
		if tolerance() < 1e-5 && math.Float32bits(x[i]) != math.Float32bits(y[i]) ||
			math.Abs(float64(x[i]-y[i])) > tolerance()*max(1, math.Abs(float64(y[i]))) {
			return "element " + itoa(i) + " differs"
		}
	}
	return ""
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// restoreOnDevice restores the checkpoint of step into a fresh session
// with the variables on devs and checks their values against want,
// fetched back through the host.
func restoreOnDevice(t *testing.T, tr *trainer, sv *checkpoint.Saver, devs []device.Device, step int64, want map[string]*tensor.Tensor) {
	t.Helper()
	ctx := context.Background()
	sess, err := session.New(tr.g, session.WithDevices(taskgraph.Config{Task: task, Devices: devs, SoftPlacement: true,
		RandomOnDevice: true, VariablesOnDevice: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	vars := ops.GlobalVariables(tr.g)
	_, err = sess.Run(ctx, nil, []graph.Output{vars[len(vars)-1].Value()}, nil)
	if !errors.Is(err, kernel.ErrUninitialized) {
		t.Errorf("a read before the restore: %v, want kernel.ErrUninitialized", err)
	}
	if err := sv.Restore(ctx, sess, step); err != nil {
		t.Fatal(err)
	}
	var fetches []graph.Output
	for _, v := range vars {
		fetches = append(fetches, v.Value())
	}
	got, err := sess.Run(ctx, nil, fetches, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vars {
		if string(got[i].RawBytes()) != string(want[v.Name()].RawBytes()) {
			t.Errorf("variable %s restored on the GPU differs from the checkpoint", v.Name())
		}
	}
	onDevice := onGPU0(sess.Resources())
	if len(onDevice) < len(ops.TrainableVariables(tr.g)) {
		t.Errorf("the restored session keeps %v on %s, want the trainable variables", onDevice, devs[0].Info().Name)
	}
}

// buildWith is build with another optimizer than SGD.
func buildWith(t *testing.T, model, optimizer string, lr float32) *trainer {
	t.Helper()
	root := graph.NewScope()
	s := root.WithDevice("/gpu:0")
	m, err := models.Build(s, model, models.Config{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	opt, err := train.NewOptimizer(optimizer, lr)
	if err != nil {
		t.Fatal(err)
	}
	op, err := train.Minimize(s, opt, m.Loss, train.CreateGlobalStep(root))
	if err != nil {
		t.Fatal(err)
	}
	ginit := ops.GlobalVariablesInitializer(root)
	if err := root.Err(); err != nil {
		t.Fatal(err)
	}
	return &trainer{g: root.Graph(), m: m, init: ginit, trainOp: op}
}

// TestVariablesOnDeviceOptimizers trains the MLP with each optimizer whose
// update has a device kernel, its variables and slots (Adam's powers too)
// in the simulated GPU's memory, to the CPU's losses and checkpoint.
func TestVariablesOnDeviceOptimizers(t *testing.T) {
	for _, c := range []struct {
		name string
		lr   float32
		op   string
	}{{"momentum", 0.05, "ApplyMomentum"}, {"adagrad", 0.1, "ApplyAdagrad"}, {"rmsprop", 0.001, "ApplyRMSProp"}, {"adam", 0.001, "ApplyAdam"}} {
		t.Run(c.name, func(t *testing.T) {
			const steps, batchSize = 8, 16
			devs := openSim(t, device.Options{Count: 1})
			ref := reference(buildWith(t, "mlp", c.name, c.lr))
			refDir, dir := t.TempDir(), t.TempDir()
			want := trainSession(t, ref, newSaver(t, ref, refDir), devs, false, steps, batchSize)
			tr := buildWith(t, "mlp", c.name, c.lr)
			got := trainSession(t, tr, newSaver(t, tr, dir), devs, true, steps, batchSize)
			if !got.onGPU[c.op] || !got.onGPU["Variable"] {
				t.Errorf("%s or Variable not on the GPU (on it: %v)", c.op, got.onGPU)
			}
			for i := range want.losses {
				if d := math.Abs(float64(got.losses[i] - want.losses[i])); d > tolerance()*max(1, math.Abs(float64(want.losses[i]))) {
					t.Fatalf("step %d: loss %g with the variables on the GPU, %g on the CPU", i, got.losses[i], want.losses[i])
				}
			}
			if got.perStep.In != 2 || got.perStep.Out != 1 {
				t.Errorf("a step copies %+v, want 2 in and 1 out", got.perStep)
			}
			savedAlike(t, tr.g, refDir, want.saved, dir, got.saved)
		})
	}
}

// TestDeviceVariablePlacement: a variable on /gpu:0 stays there with the
// ops that take it by ref, whatever device they ask for, and a read by
// the host crosses as a value; one that an op without a device kernel
// for its dtype (AssignAdd of a float64) takes by ref stays on the host; an op that takes both by
// ref (a checkpoint's) keeps both there; a step built after the graph grew
// that would move a variable is refused by name.
func TestDeviceVariablePlacement(t *testing.T) {
	devs := openSim(t, device.Options{Count: 1})
	ctx := context.Background()
	cfg := taskgraph.Config{Task: task, Devices: devs, SoftPlacement: true, VariablesOnDevice: true}
	type model struct {
		root         *graph.Scope
		w, c         *ops.Variable
		step         *graph.Node
		exp, counted graph.Output
	}
	build := func() model {
		root := graph.NewScope()
		g := root.WithDevice("/gpu:0")
		m := model{root: root}
		m.w = ops.NewVariable(g, "w", tensor.Float32, []int{3}, ops.ConstantInit(1))
		m.c = ops.NewVariable(g, "c", tensor.Float64, []int{3}, ops.ConstantInit(2))
		m.counted = ops.AssignAdd(g, m.c.Value(), ops.Const(root, []float64{1, 1, 1}))
		// An update asked for on the host runs next to its variable.
		m.step = ops.ApplyGradientDescent(root.WithDevice("/cpu:0"), m.w.Value(), ops.Const(root, float32(0.5)), ops.Const(root, []float32{1, 2, 3}))
		m.exp = ops.Exp(root, m.w.Value()) // read on the host: no device kernel for Exp
		return m
	}
	run := func(t *testing.T, m model, res *kernel.Resources) *taskgraph.Executor {
		t.Helper()
		init := ops.GlobalVariablesInitializer(m.root)
		if err := m.root.Err(); err != nil {
			t.Fatal(err)
		}
		ie, err := taskgraph.New(m.root.Graph(), graph.Signature{Targets: []*graph.Node{init}}, res, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer ie.Close()
		if _, err := ie.Run(ctx, nil); err != nil {
			t.Fatal(err)
		}
		e, err := taskgraph.New(m.root.Graph(), graph.Signature{Fetches: []graph.Output{m.exp, m.w.Value(), m.counted},
			Targets: []*graph.Node{m.step}}, res, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	checkPlaced := func(t *testing.T, e *taskgraph.Executor, want map[string]string) {
		t.Helper()
		for name, dev := range want {
			if got := e.Placement()[name]; !strings.HasSuffix(got, dev) {
				t.Errorf("%s placed on %q, want %s", name, got, dev)
			}
		}
	}

	t.Run("colocated", func(t *testing.T) {
		m := build()
		res := kernel.NewResources()
		defer taskgraph.ReleaseVariables(res)
		e := run(t, m, res)
		checkPlaced(t, e, map[string]string{"w": "/gpu:0", m.step.Name(): "/gpu:0", "c": "/cpu:0",
			m.counted.Node.Name(): "/cpu:0", m.exp.Node.Name(): "/cpu:0"})
		for i := range 3 {
			out, err := e.Run(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The host's reads see the value before the step's update,
			// as they would of a variable on the host: a copy made as
			// the step starts (the second step is captured, the third
			// replays it).
			k := float32(i) * 0.5
			want := []float32{1 - k, 1 - 2*k, 1 - 3*k}
			if got := out[1].Float32s(); !slicesEqualF(got, want) {
				t.Errorf("step %d: w read %v, want %v", i, got, want)
			}
			if got := out[0].Float32s()[0]; math.Abs(float64(got)-math.Exp(float64(want[0]))) > 1e-5 {
				t.Errorf("step %d: exp(w)[0] = %g on the host, want %g", i, got, math.Exp(float64(want[0])))
			}
			if got := out[2].Float64s()[0]; got != float64(3+i) {
				t.Errorf("step %d: c counted %g on the host, want %d", i, got, 3+i)
			}
		}
		if e.Replays() != 1 {
			t.Errorf("the step with an update and reads after it does not replay")
		}
		if got := onGPU0(res); !slicesEqualS(got, []string{"w"}) {
			t.Errorf("variables in GPU:0's memory: %v, want [w]", got)
		}
	})
	t.Run("checkpoint with a host variable", func(t *testing.T) {
		// One shard holds w, on the GPU, and c, on the host: the checkpoint
		// ops run on the GPU, reaching c in the task's resources.
		m := build()
		sv := newSaver(t, &trainer{g: m.root.Graph()}, t.TempDir())
		res := kernel.NewResources()
		defer taskgraph.ReleaseVariables(res)
		e := run(t, m, res)
		checkPlaced(t, e, map[string]string{"w": "/gpu:0", m.step.Name(): "/gpu:0", "c": "/cpu:0"})
		sess, err := session.New(m.root.Graph(), session.WithResources(res), session.WithDevices(cfg))
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		for range 2 {
			if _, err := e.Run(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		read := func() []*tensor.Tensor {
			out, err := sess.Run(ctx, nil, []graph.Output{m.w.Value(), m.c.Value()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		saved := read()
		if _, err := sv.Save(ctx, sess, 2); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := e.Run(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := sv.Restore(ctx, sess, 2); err != nil {
			t.Fatal(err)
		}
		for i, got := range read() {
			if string(got.RawBytes()) != string(saved[i].RawBytes()) {
				t.Errorf("variable %d restored as %v, saved as %v", i, got.Float32s(), saved[i].Float32s())
			}
		}
	})
	t.Run("moved by a later op", func(t *testing.T) {
		m := build()
		res := kernel.NewResources()
		defer taskgraph.ReleaseVariables(res)
		run(t, m, res)
		// FTRL's dense update has no device kernel.
		slot := func(name string) graph.Output {
			return ops.NewVariable(m.root, name, tensor.Float32, []int{3}, ops.ConstantInit(0.1)).Value()
		}
		sc := func(v float32) graph.Output { return ops.Const(m.root, v) }
		late := ops.ApplyFtrl(m.root, m.w.Value(), slot("accum"), slot("linear"), ops.Const(m.root, []float32{1, 1, 1}),
			sc(0.1), sc(0), sc(0), sc(-0.5))
		if err := m.root.Err(); err != nil {
			t.Fatal(err)
		}
		_, err := taskgraph.New(m.root.Graph(), graph.Signature{Targets: []*graph.Node{late}}, res, cfg)
		if err == nil || !strings.Contains(err.Error(), "lives on /job:localhost/task:0/gpu:0 since an earlier step") {
			t.Errorf("a step that would move w to the host: %v", err)
		}
	})
	t.Run("strict placement", func(t *testing.T) {
		m := build()
		strict := cfg
		strict.SoftPlacement = false
		_, err := taskgraph.New(m.root.Graph(), graph.Signature{Fetches: []graph.Output{m.counted}}, kernel.NewResources(), strict)
		if err == nil || !strings.Contains(err.Error(), "node c ") || !strings.Contains(err.Error(), "lives on the host") {
			t.Errorf("c's AssignAdd asked for on the GPU without soft placement: %v", err)
		}
	})
	if st := devs[0].Allocator().Stats(); st.Live != 0 {
		t.Errorf("%d allocations live after the variables were released", st.Live)
	}
}

func slicesEqualS(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func slicesEqualF(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// onGPU0 returns the names of the initialized variables res keeps in
// GPU:0's memory.
func onGPU0(res *kernel.Resources) []string {
	var names []string
	for _, v := range taskgraph.DeviceVariables(res) {
		if v.Device == "GPU:0" && v.Initialized {
			names = append(names, v.Name)
		}
	}
	return names
}
