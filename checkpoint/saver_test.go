package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker/workertest"
)

var quiet = slog.New(slog.DiscardHandler)

// model is a small graph: a few variables of different dtypes and a global
// step, built on s.
type model struct {
	vars []*ops.Variable
	init *graph.Node
}

func buildModel(t *testing.T, s *graph.Scope) *model {
	t.Helper()
	m := &model{}
	for i, spec := range []struct {
		dt    tensor.DType
		shape []int
	}{{tensor.Float32, []int{3, 2}}, {tensor.Float32, []int{2}}, {tensor.Float64, []int{4}}, {tensor.Int32, []int{2, 2}}, {tensor.Float32, nil}} {
		m.vars = append(m.vars, ops.NewVariable(s, fmt.Sprintf("layer%d/v", i), spec.dt, spec.shape, ops.ZerosInit()))
	}
	// A global step, as train.CreateGlobalStep makes it.
	m.vars = append(m.vars, ops.NewVariable(s, "global_step", tensor.Int64, nil, ops.ZerosInit(), ops.NotTrainable()))
	m.init = ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// setValues assigns every variable a value derived from seed, and returns
// the values.
func (m *model) setValues(t *testing.T, s *graph.Scope, sess *session.Session, seed float64) map[string]*tensor.Tensor {
	t.Helper()
	want := map[string]*tensor.Tensor{}
	var assigns []*graph.Node
	for _, v := range m.vars {
		n := v.Shape().NumElements()
		val := tensor.New(v.DType(), v.Shape().Dims()...)
		for i := range n {
			val.SetFloat64At(i, seed+float64(i))
		}
		want[v.Name()] = val
		assigns = append(assigns, ops.Assign(s.WithDevice(v.Node().Device()), v.Value(), ops.Const(s, val)).Node)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Run(context.Background(), nil, nil, assigns); err != nil {
		t.Fatal(err)
	}
	return want
}

// values fetches every variable.
func (m *model) values(t *testing.T, sess *session.Session) map[string]*tensor.Tensor {
	t.Helper()
	var outs []graph.Output
	for _, v := range m.vars {
		outs = append(outs, v.Value())
	}
	got, err := sess.Run(context.Background(), nil, outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]*tensor.Tensor{}
	for i, v := range m.vars {
		vals[v.Name()] = got[i]
	}
	return vals
}

func checkValues(t *testing.T, got, want map[string]*tensor.Tensor) {
	t.Helper()
	for n, w := range want {
		if !tensor.Equal(got[n], w) {
			t.Errorf("%s = %v, want %v", n, got[n], w)
		}
	}
}

func TestSaverLocal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := graph.NewScope()
	m := buildModel(t, s)
	sv, err := checkpoint.NewSaver(s, nil, checkpoint.SaverConfig{Dir: dir, Keep: 2, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, ok, err := sv.RestoreLatest(ctx, sess); ok || err != nil {
		t.Fatalf("RestoreLatest on an empty dir = %v, %v; want false, nil", ok, err)
	}
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{m.init}); err != nil {
		t.Fatal(err)
	}
	var saved map[string]*tensor.Tensor
	for step := int64(10); step <= 30; step += 10 {
		saved = m.setValues(t, s, sess, float64(step))
		prefix, err := sv.Save(ctx, sess, step)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("model.ckpt-%d", step); prefix != want {
			t.Errorf("Save returned %q, want %q", prefix, want)
		}
	}
	all, _, _ := checkpoint.ReadState(dir)
	if !slices.Equal(all, []string{"model.ckpt-20", "model.ckpt-30"}) {
		t.Errorf("kept %v, want the last 2", all)
	}
	m.setValues(t, s, sess, -5) // training goes on, then the task restarts
	step, ok, err := sv.RestoreLatest(ctx, sess)
	if step != 30 || !ok || err != nil {
		t.Fatalf("RestoreLatest = %d, %v, %v; want 30, true, nil", step, ok, err)
	}
	checkValues(t, m.values(t, sess), saved)

	// A fresh session (a restarted process) restores an older checkpoint.
	sess2, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess2.Close()
	if err := sv.Restore(ctx, sess2, 20); err != nil {
		t.Fatal(err)
	}
	if got := m.values(t, sess2)["layer1/v"].Float32s(); !slices.Equal(got, []float32{20, 21}) {
		t.Errorf("layer1/v at step 20 = %v, want [20 21]", got)
	}
	if err := sv.Restore(ctx, sess2, 10); !errors.Is(err, checkpoint.ErrIncomplete) {
		t.Errorf("Restore of a deleted checkpoint: err = %v, want ErrIncomplete", err)
	}
}

// TestSaverRestoreChecksVariables: a checkpoint without one of the graph's
// variables, or with another shape, is refused naming the variable.
func TestSaverRestoreChecksVariables(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeCheckpoint(t, dir, 5, 1, map[string]*tensor.Tensor{"a": tensor.MustFromSlice([]float32{1, 2, 3}, 3)})
	for _, tc := range []struct {
		name  string
		shape []int
		want  string
	}{{"a", []int{2}, `"a"`}, {"b", []int{3}, `"b"`}} {
		s := graph.NewScope()
		ops.NewVariable(s, tc.name, tensor.Float32, tc.shape, ops.ZerosInit())
		sv, err := checkpoint.NewSaver(s, nil, checkpoint.SaverConfig{Dir: dir, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		sess, err := session.New(s.Graph())
		if err != nil {
			t.Fatal(err)
		}
		err = sv.Restore(ctx, sess, 5)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("restoring %s%v: err = %v, want one naming %s", tc.name, tc.shape, err, tc.want)
		}
		sess.Close()
	}
}

func TestNewSaverErrors(t *testing.T) {
	s := graph.NewScope()
	v := ops.NewVariable(s, "v", tensor.Float32, []int{1}, ops.ZerosInit())
	for name, tc := range map[string]struct {
		vars []*ops.Variable
		cfg  checkpoint.SaverConfig
	}{
		"no dir":        {nil, checkpoint.SaverConfig{}},
		"bad basename":  {nil, checkpoint.SaverConfig{Dir: "x", Basename: "a/b"}},
		"duplicate var": {[]*ops.Variable{v, v}, checkpoint.SaverConfig{Dir: "x"}},
	} {
		if _, err := checkpoint.NewSaver(s, tc.vars, tc.cfg); err == nil {
			t.Errorf("%s: NewSaver succeeded", name)
		}
	}
	if _, err := checkpoint.NewSaver(graph.NewScope(), nil, checkpoint.SaverConfig{Dir: "x"}); err == nil {
		t.Error("NewSaver of a graph without variables succeeded")
	}
}

// cluster is an in-memory cluster of numPS ps tasks and one worker, with a
// graph whose variables the replica device setter spread over the ps tasks.
type cluster struct {
	net  *workertest.Network
	s    *graph.Scope
	m    *model
	sv   *checkpoint.Saver
	sess *session.Session
}

func newCluster(t *testing.T, numPS int, dir string) *cluster {
	t.Helper()
	return newClusterWith(t, numPS, dir, nil)
}

// newClusterWith is newCluster with more of the graph built by build
// before the saver.
func newClusterWith(t *testing.T, numPS int, dir string, build func(*graph.Scope)) *cluster {
	t.Helper()
	tasks := []string{"/job:worker/task:0"}
	for i := range numPS {
		tasks = append(tasks, fmt.Sprintf("/job:ps/task:%d", i))
	}
	c := &cluster{net: workertest.NewCluster(tasks...)}
	mst := master.New(master.Config{Task: tasks[0], Workers: c.net.From(tasks[0]), Logger: quiet})
	c.s = graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
		PSTasks: numPS, WorkerDevice: "/job:worker/task:0",
	}))
	c.m = buildModel(t, c.s)
	if build != nil {
		build(c.s)
	}
	var err error
	c.sv, err = checkpoint.NewSaver(c.s, nil, checkpoint.SaverConfig{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c.sess, err = session.New(c.s.Graph(), session.WithMaster(mst, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.sess.Close() })
	return c
}

// TestSaverCluster saves from a cluster with 2 ps tasks (each writes its
// own shard) and restores into clusters with 3 and 1 ps tasks, where the
// variables live elsewhere.
func TestSaverCluster(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c2 := newCluster(t, 2, dir)
	if got := c2.sv.Devices(); !slices.Equal(got, []string{"/job:ps/task:0", "/job:ps/task:1"}) {
		t.Fatalf("saver devices = %v, want the two ps tasks", got)
	}
	if _, err := c2.sess.Run(ctx, nil, nil, []*graph.Node{c2.m.init}); err != nil {
		t.Fatal(err)
	}
	want := c2.m.setValues(t, c2.s, c2.sess, 7)
	if _, err := c2.sv.Save(ctx, c2.sess, 77); err != nil {
		t.Fatal(err)
	}
	// Each ps wrote its own shard: the shard of each variable is the ps
	// task that holds it, and each ps ran one SaveVariables step.
	ix, err := checkpoint.ReadIndex(dir, "model.ckpt-77")
	if err != nil {
		t.Fatal(err)
	}
	if ix.NumShards != 2 {
		t.Errorf("%d shards, want 2", ix.NumShards)
	}
	for _, v := range c2.m.vars {
		e, ok := ix.Lookup(v.Name())
		if wantDev := fmt.Sprintf("/job:ps/task:%d", e.Shard); !ok || v.Node().Device() != wantDev {
			t.Errorf("%s (on %s) is in shard %d", v.Name(), v.Node().Device(), e.Shard)
		}
	}
	for i := range 2 {
		if _, err := os.Stat(filepath.Join(dir, checkpoint.ShardFile("model.ckpt-77", i, 2))); err != nil {
			t.Error(err)
		}
	}

	for _, numPS := range []int{3, 1} {
		t.Run(fmt.Sprintf("restore into %d ps", numPS), func(t *testing.T) {
			c := newCluster(t, numPS, dir)
			step, ok, err := c.sv.RestoreLatest(ctx, c.sess)
			if step != 77 || !ok || err != nil {
				t.Fatalf("RestoreLatest = %d, %v, %v; want 77, true, nil", step, ok, err)
			}
			checkValues(t, c.m.values(t, c.sess), want)
			// The values live on the new ps tasks, as the new placement says.
			for _, v := range c.m.vars {
				task := strings.TrimSuffix(v.Node().Device(), "/cpu:0")
				w := c.net.Local(task)
				if w == nil {
					t.Fatalf("%s is on %q, not a ps task", v.Name(), v.Node().Device())
				}
				if rv, ok := w.Resources().Lookup(v.Name()); !ok || !rv.Initialized() {
					t.Errorf("%s is not initialized on %s", v.Name(), task)
				}
			}
			if gs := c.m.values(t, c.sess)["global_step"]; gs.Int64s()[0] != 7 {
				t.Errorf("global_step = %v, want the saved 7", gs)
			}
		})
	}
}

// TestSaveFailureLeavesNoCheckpoint: a save that fails on a device (here an
// uninitialized variable) writes no index, so Latest still finds the
// previous checkpoint.
func TestSaveFailureLeavesNoCheckpoint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := graph.NewScope()
	a := ops.NewVariable(s.WithDevice("/job:localhost/task:0"), "a", tensor.Float32, []int{1}, ops.OnesInit())
	b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.OnesInit())
	sv, err := checkpoint.NewSaver(s, nil, checkpoint.SaverConfig{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if len(sv.Devices()) != 2 {
		t.Fatalf("devices %v, want 2 shards", sv.Devices())
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{a.Initializer(), b.Initializer()}); err != nil {
		t.Fatal(err)
	}
	if _, err := sv.Save(ctx, sess, 1); err != nil {
		t.Fatal(err)
	}
	c := ops.NewVariable(s, "c", tensor.Float32, []int{1}, ops.OnesInit()) // never initialised
	sv2, err := checkpoint.NewSaver(s, []*ops.Variable{a, b, c}, checkpoint.SaverConfig{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sv2.Save(ctx, sess, 2)
	if err == nil || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("Save with an uninitialized variable: err = %v, want one naming \"c\"", err)
	}
	if _, step, err := checkpoint.FindLatest(dir, "", quiet); step != 1 || err != nil {
		t.Errorf("FindLatest = %d, %v; want 1", step, err)
	}
}

// TestOpsRejectBadInputs checks the op declarations through their builders.
func TestOpsRejectBadInputs(t *testing.T) {
	tests := map[string]func(s *graph.Scope, step graph.Output, v graph.Output){
		"float step": func(s *graph.Scope, _ graph.Output, v graph.Output) {
			ops.SaveVariables(s, ops.Const(s, float32(1)), []graph.Output{v}, "d", "m", 0, 1)
		},
		"vector step": func(s *graph.Scope, _ graph.Output, v graph.Output) {
			ops.RestoreVariables(s, ops.Const(s, []int64{1, 2}), []graph.Output{v}, "d", "m")
		},
		"not a variable": func(s *graph.Scope, step graph.Output, _ graph.Output) {
			ops.SaveVariables(s, step, []graph.Output{ops.Const(s, float32(1))}, "d", "m", 0, 1)
		},
		"no variables": func(s *graph.Scope, step graph.Output, _ graph.Output) {
			ops.RestoreVariables(s, step, nil, "d", "m")
		},
		"shard out of range": func(s *graph.Scope, step graph.Output, v graph.Output) {
			ops.SaveVariables(s, step, []graph.Output{v}, "d", "m", 2, 2)
		},
		"empty dir": func(s *graph.Scope, step graph.Output, v graph.Output) {
			ops.RestoreVariables(s, step, []graph.Output{v}, "", "m")
		},
	}
	for name, build := range tests {
		s := graph.NewScope()
		v := ops.NewVariable(s, "v", tensor.Float32, []int{1}, ops.OnesInit())
		step := ops.Placeholder(s, "step", tensor.Int64, tensor.ScalarShape())
		build(s, step, v.Value())
		if s.Err() == nil {
			t.Errorf("%s: the graph accepted it", name)
		}
	}
}

// TestSaverRestoresFromAlso: RestoreLatest takes the newest checkpoint of
// Dir and of the directories of SaverConfig.Also (another task's saves),
// Dir's on a tie, and skips an Also directory that does not exist yet;
// Save and retention keep to Dir.
func TestSaverRestoresFromAlso(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	deputy := filepath.Join(dir, "replica-1")
	s := graph.NewScope()
	m := buildModel(t, s)
	main, err := checkpoint.NewSaver(s, nil, checkpoint.SaverConfig{Dir: dir, Keep: 1, Logger: quiet,
		Also: []string{deputy, filepath.Join(dir, "replica-2")}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := checkpoint.NewSaver(s, nil, checkpoint.SaverConfig{Dir: deputy, Keep: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{m.init}); err != nil {
		t.Fatal(err)
	}
	save := func(sv *checkpoint.Saver, step int64) map[string]*tensor.Tensor {
		vals := m.setValues(t, s, sess, float64(step))
		if _, err := sv.Save(ctx, sess, step); err != nil {
			t.Fatal(err)
		}
		return vals
	}
	restore := func(wantStep int64, want map[string]*tensor.Tensor) {
		t.Helper()
		m.setValues(t, s, sess, -1)
		step, ok, err := main.RestoreLatest(ctx, sess)
		if step != wantStep || !ok || err != nil {
			t.Fatalf("RestoreLatest = %d, %v, %v; want %d, true, nil", step, ok, err, wantStep)
		}
		checkValues(t, m.values(t, sess), want)
	}
	save(main, 100)
	atDeputy := save(other, 250)
	restore(250, atDeputy)
	atMain := save(main, 300)
	restore(300, atMain)
	save(other, 300) // a tie: Dir's
	restore(300, atMain)
	if all, _, _ := checkpoint.ReadState(dir); !slices.Equal(all, []string{"model.ckpt-300"}) {
		t.Errorf("Dir keeps %v, want [model.ckpt-300]", all)
	}
	if all, _, _ := checkpoint.ReadState(deputy); !slices.Equal(all, []string{"model.ckpt-300"}) {
		t.Errorf("the other directory keeps %v, want its own [model.ckpt-300]", all)
	}
}
