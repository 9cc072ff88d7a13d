package master_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
	"github.com/distflow/distflow/worker/workertest"
)

const (
	ps  = "/job:ps/task:0"
	wk0 = "/job:worker/task:0"
	wk1 = "/job:worker/task:1"
)

var quiet = slog.New(slog.DiscardHandler)

// cluster is 1 ps + 2 workers in memory.
func cluster() *workertest.Network { return workertest.NewCluster(ps, wk0, wk1) }

// newMaster returns the master of task on net.
func newMaster(net *workertest.Network, task string) *master.Master {
	var devices []string
	for _, t := range net.Tasks() {
		devices = append(devices, t+"/cpu:0")
	}
	return master.New(master.Config{Task: task, Devices: devices, Workers: net.From(task), Logger: quiet})
}

// client runs steps of one session by name, like a remote session.
type client struct {
	t      testing.TB
	m      *master.Master
	handle string
}

func open(t testing.TB, m *master.Master, g *graph.Graph, cfg *pb.SessionConfig) *client {
	t.Helper()
	resp, err := m.CreateSession(context.Background(), &pb.CreateSessionRequest{Graph: g.ToProto(), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, m: m, handle: resp.GetSessionHandle()}
}

func (c *client) run(ctx context.Context, feeds map[string]*tensor.Tensor, fetches []string, targets ...string) ([]*tensor.Tensor, error) {
	req := &pb.RunStepRequest{SessionHandle: c.handle, Fetches: fetches, Targets: targets}
	for name, v := range feeds {
		req.Feeds = append(req.Feeds, &pb.NamedTensor{Name: name, Tensor: graph.TensorToProto(v)})
	}
	resp, err := c.m.RunStep(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make([]*tensor.Tensor, len(resp.GetTensors()))
	for i, nt := range resp.GetTensors() {
		if out[i], err = graph.TensorFromProto(nt.GetTensor()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (c *client) mustRun(feeds map[string]*tensor.Tensor, fetches []string, targets ...string) []*tensor.Tensor {
	c.t.Helper()
	out, err := c.run(context.Background(), feeds, fetches, targets...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// linearModel is y = x W + b with W, b on the ps, the MatMul on worker 1
// (which also takes the x placeholder) and the rest on the session's default
// device; "wsum" is computed on the ps. One gradient-descent step is
// "train".
func linearModel(t testing.TB) *graph.Graph {
	t.Helper()
	s := graph.NewScope()
	pss := s.WithDevice("/job:ps")
	w1 := s.WithDevice(wk1)
	w := ops.NewVariable(pss, "W", tensor.Float32, []int{3, 1}, ops.ConstantInit(0.5))
	b := ops.NewVariable(pss, "b", tensor.Float32, []int{1}, ops.ZerosInit())
	x := ops.Placeholder(w1, "x", tensor.Float32, tensor.MakeShape(-1, 3))
	y := ops.Placeholder(s, "y", tensor.Float32, tensor.MakeShape(-1, 1))
	pred := ops.Identity(s.SubScope("pred"), ops.Add(s, ops.MatMul(w1, x, w.Value(), false, false), b.Value()))
	loss := ops.Identity(s.SubScope("loss"), ops.Mean(s, ops.Square(s, ops.Sub(s, pred, y)), nil, false))
	grads, err := grad.Gradients(s, []graph.Output{loss}, []graph.Output{w.Value(), b.Value()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lr := ops.Scalar(s, tensor.Float32, 0.05)
	ops.Group(s, "train", ops.ApplyGradientDescent(s, w.Value(), lr, grads[0]), ops.ApplyGradientDescent(s, b.Value(), lr, grads[1]))
	ops.Identity(pss.SubScope("wsum"), ops.Sum(pss, w.Value(), nil, false))
	ops.GlobalVariablesInitializer(s.SubScope("init"))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s.Graph()
}

// batch returns step i's data for y = x (1 2 3)' + 4.
func batch(i int) map[string]*tensor.Tensor {
	x, y := tensor.New(tensor.Float32, 4, 3), tensor.New(tensor.Float32, 4, 1)
	for r := range 4 {
		var sum float32 = 4
		for c := range 3 {
			v := float32((i*7+r*3+c*5)%11)/10 - 0.5
			x.Float32s()[r*3+c] = v
			sum += v * float32(c+1)
		}
		y.Float32s()[r] = sum
	}
	return map[string]*tensor.Tensor{"x:0": x, "y:0": y}
}

func initName(g *graph.Graph) string {
	for _, n := range g.Nodes() {
		if strings.HasPrefix(n.Name(), "init/") && n.Op() == "NoOp" {
			return n.Name()
		}
	}
	return "init/init"
}

func closeTo(a, b *tensor.Tensor, tol float64) bool {
	if a.DType() != b.DType() || len(a.Float32s()) != len(b.Float32s()) {
		return false
	}
	for i, v := range a.Float32s() {
		if math.Abs(float64(v-b.Float32s()[i])) > tol {
			return false
		}
	}
	return true
}

// TestTrainingMatchesLocalSession trains the linear model on 1 ps + 2
// workers and checks that the variables live on the ps and that every
// result equals the local session's.
func TestTrainingMatchesLocalSession(t *testing.T) {
	g := linearModel(t)
	net := cluster()
	c := open(t, newMaster(net, wk0), g, nil)
	local, err := session.New(g)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	localRun := func(feeds map[string]*tensor.Tensor, fetches []string, targets ...string) []*tensor.Tensor {
		out, err := local.RunNamed(ctx, feeds, fetches, targets)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	c.mustRun(nil, nil, initName(g))
	localRun(nil, nil, initName(g))
	for i := range 30 {
		got := c.mustRun(batch(i), []string{"loss/Identity:0"}, "train")
		want := localRun(batch(i), []string{"loss/Identity:0"}, "train")
		if !closeTo(got[0], want[0], 1e-5) {
			t.Fatalf("step %d: loss %v, local session %v", i, got[0], want[0])
		}
	}
	fetches := []string{"W:0", "b:0", "wsum/Identity:0"}
	got, want := c.mustRun(nil, fetches), localRun(nil, fetches)
	for i := range fetches {
		if !closeTo(got[i], want[i], 1e-5) {
			t.Errorf("%s = %v, local session %v", fetches[i], got[i], want[i])
		}
	}
	// The variables live on the ps only.
	for _, task := range []string{ps, wk0, wk1} {
		st, err := net.Local(task).GetStatus(ctx, &pb.GetStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, v := range st.GetVariables() {
			if !v.GetInitialized() {
				t.Errorf("%s: variable %s is not initialized", task, v.GetName())
			}
			names = append(names, v.GetName())
		}
		want := ""
		if task == ps {
			want = "W b"
		}
		if got := strings.Join(names, " "); got != want {
			t.Errorf("variables on %s: %q, want %q", task, got, want)
		}
	}
	// Every worker took part: the feed of x went to worker 1.
	for _, task := range []string{ps, wk0, wk1} {
		if net.Calls(task, "RunGraph") == 0 {
			t.Errorf("task %s ran no partition", task)
		}
	}
}

// TestBetweenGraphSessionsShareVariables opens one session per worker, each
// on its own worker's master with the replica device setter, and checks
// that both update the same variables on the ps.
func TestBetweenGraphSessionsShareVariables(t *testing.T) {
	net := cluster()
	build := func(task string) *graph.Graph {
		s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{PSTasks: 1, WorkerDevice: task}))
		v := ops.NewVariable(s, "counter", tensor.Float32, []int{2}, ops.ZerosInit())
		ops.AssignAdd(s.SubScope("inc"), v.Value(), ops.Const(s, []float32{1, 10}))
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		return s.Graph()
	}
	cfg := func(task string) *pb.SessionConfig {
		return &pb.SessionConfig{DeviceFilters: []string{"/job:ps", task}}
	}
	c0 := open(t, newMaster(net, wk0), build(wk0), cfg(wk0))
	c1 := open(t, newMaster(net, wk1), build(wk1), cfg(wk1))
	c0.mustRun(nil, nil, "counter/Assign")
	var wg sync.WaitGroup
	for _, c := range []*client{c0, c1} {
		wg.Go(func() {
			for range 10 {
				if _, err := c.run(context.Background(), nil, nil, "inc/AssignAdd"); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, c := range []*client{c0, c1} {
		got := c.mustRun(nil, []string{"counter:0"})[0]
		if want := tensor.MustFromSlice([]float32{20, 200}, 2); !tensor.Equal(got, want) {
			t.Errorf("counter = %v, want %v", got, want)
		}
	}
	if st, _ := net.Local(ps).GetStatus(context.Background(), &pb.GetStatusRequest{}); len(st.GetVariables()) != 1 {
		t.Errorf("ps holds %d variables, want the 1 shared one", len(st.GetVariables()))
	}
}

// TestFeedsAndFetches routes feeds and fetches of tensors that live on
// different tasks, including a fed intermediate tensor whose inputs must
// then be neither computed nor fed.
func TestFeedsAndFetches(t *testing.T) {
	g := linearModel(t)
	net := cluster()
	c := open(t, newMaster(net, wk0), g, nil)
	local, err := session.New(g)
	if err != nil {
		t.Fatal(err)
	}
	c.mustRun(nil, nil, initName(g))
	if _, err := local.RunNamed(context.Background(), nil, nil, []string{initName(g)}); err != nil {
		t.Fatal(err)
	}
	pred := tensor.MustFromSlice([]float32{1, 2, 3, 4}, 4, 1)
	tests := []struct {
		name    string
		feeds   map[string]*tensor.Tensor
		fetches []string
	}{
		{"fetch on ps", nil, []string{"wsum/Identity:0", "W:0"}},
		{"feed placeholder on worker 1", map[string]*tensor.Tensor{"x:0": batch(1)["x:0"]}, []string{"pred/Identity:0"}},
		{"fed intermediate cuts its inputs", map[string]*tensor.Tensor{"pred/Identity:0": pred, "y:0": batch(2)["y:0"]}, []string{"loss/Identity:0"}},
		{"fetch of a fed tensor", map[string]*tensor.Tensor{"pred/Identity:0": pred}, []string{"pred/Identity:0"}},
		{"feed and fetch on three tasks", batch(3), []string{"loss/Identity:0", "wsum/Identity:0", "x:0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.run(context.Background(), tc.feeds, tc.fetches)
			if err != nil {
				t.Fatal(err)
			}
			want, err := local.RunNamed(context.Background(), tc.feeds, tc.fetches, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if !closeTo(got[i], want[i], 1e-5) {
					t.Errorf("%s = %v, local session %v", tc.fetches[i], got[i], want[i])
				}
			}
		})
	}
}

// failingGraph has a Recv on the ps and on worker 0 that wait for a tensor
// worker 1 never sends: worker 1 reads an uninitialized variable.
func failingGraph(t *testing.T) *graph.Graph {
	s := graph.NewScope()
	u := ops.NewVariable(s.WithDevice(wk1), "u", tensor.Float32, []int{2}, ops.ZerosInit())
	bad := ops.Identity(s.WithDevice(wk1).SubScope("bad"), u.Value())
	onPS := ops.Identity(s.WithDevice(ps).SubScope("on_ps"), bad)
	ops.Identity(s.SubScope("out"), ops.Add(s, onPS, bad))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s.Graph()
}

func TestStepFailures(t *testing.T) {
	tests := []struct {
		name    string
		fault   func(net *workertest.Network)
		timeout time.Duration
		within  time.Duration
		want    []string
		is      error
	}{
		{name: "kernel fails on one task", timeout: 30 * time.Second, within: 3 * time.Second, want: []string{wk1, `"u"`, "u (Variable)"}},
		{name: "ps cut", fault: func(n *workertest.Network) { n.Cut(ps) }, timeout: 30 * time.Second, within: 3 * time.Second,
			want: []string{ps}, is: workertest.ErrUnreachable},
		{name: "ps hangs", fault: func(n *workertest.Network) { n.Delay(ps, time.Hour) }, timeout: 300 * time.Millisecond, within: 3 * time.Second,
			want: []string{ps}, is: context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			net := cluster()
			m := newMaster(net, wk0)
			c := open(t, m, failingGraph(t), &pb.SessionConfig{StepTimeoutMs: tc.timeout.Milliseconds()})
			if tc.fault != nil {
				c.mustRun(nil, nil, "u/Assign")
				// Register the plan before the fault, so that the step itself fails.
				c.mustRun(nil, []string{"out/Identity:0"})
				tc.fault(net)
			}
			start := time.Now()
			_, err := c.run(context.Background(), nil, []string{"out/Identity:0"})
			took := time.Since(start)
			if err == nil {
				t.Fatal("the step succeeded")
			}
			if took > tc.within {
				t.Errorf("the step failed after %v, want within %v", took, tc.within)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
			if tc.fault == nil {
				// Every task of the step was told to abort it.
				waitFor(t, func() bool {
					return net.Calls(ps, "CleanupStep") > 0 && net.Calls(wk0, "CleanupStep") > 0 && net.Calls(wk1, "CleanupStep") > 0
				})
			}
		})
	}
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
	}
}

func TestPlansAreCachedPerSignature(t *testing.T) {
	g := linearModel(t)
	net := cluster()
	m := newMaster(net, wk0)
	c := open(t, m, g, nil)
	c.mustRun(nil, nil, initName(g))
	for i := range 20 {
		c.mustRun(batch(i), []string{"loss/Identity:0"}, "train")
	}
	// One registration for init (on the ps: its group, on the default
	// device, worker 0, is run as the initializers it groups), one per
	// task for train (ps, wk0, wk1).
	for _, task := range []string{ps, wk0, wk1} {
		reg := net.Calls(task, "RegisterGraph")
		want := 1
		if task == ps {
			want = 2
		}
		if reg != want {
			t.Errorf("task %s: %d RegisterGraph calls for 2 signatures, want %d", task, reg, want)
		}
	}
	if got := net.Calls(wk1, "RunGraph"); got != 20 {
		t.Errorf("worker 1 ran %d steps, want 20", got)
	}
	// Concurrent steps of one session, each with its own step ID.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if _, err := c.run(context.Background(), batch(i), []string{"loss/Identity:0"}, "train"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if _, err := m.CloseSession(context.Background(), &pb.CloseSessionRequest{SessionHandle: c.handle}); err != nil {
		t.Fatal(err)
	}
	for _, task := range []string{ps, wk0, wk1} {
		if n := net.Local(task).NumGraphs(); n != 0 {
			t.Errorf("task %s keeps %d graphs after CloseSession", task, n)
		}
	}
	if _, err := c.run(context.Background(), nil, []string{"W:0"}); !errors.Is(err, master.ErrNoSession) {
		t.Errorf("a step in a closed session: %v", err)
	}
}

func TestExtendSession(t *testing.T) {
	s := graph.NewScope()
	v := ops.NewVariable(s.WithDevice(ps), "v", tensor.Float32, []int{2}, ops.OnesInit())
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	g := s.Graph()
	net := cluster()
	m := newMaster(net, wk0)
	c := open(t, m, g, nil)
	c.mustRun(nil, nil, "v/Assign")
	version := int64(g.NumNodes())

	// The client adds nodes and ships only them.
	ops.Identity(s.SubScope("double"), ops.Mul(s, v.Value(), ops.Const(s, float32(2))))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	gd := &pb.GraphDef{}
	for _, nd := range g.ToProto().GetNode()[version:] {
		gd.Node = append(gd.Node, nd)
	}
	ctx := context.Background()
	tests := []struct {
		name    string
		version int64
		wantErr error
	}{
		{"stale version", version - 1, master.ErrStaleGraph},
		{"current version", version, nil},
		{"extending twice", version, master.ErrStaleGraph},
	}
	for _, tc := range tests {
		resp, err := m.ExtendSession(ctx, &pb.ExtendSessionRequest{SessionHandle: c.handle, Graph: gd, CurrentGraphVersion: tc.version})
		if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Fatalf("%s: ExtendSession error %v, want %v", tc.name, err, tc.wantErr)
		}
		if err == nil && resp.GetNewGraphVersion() != int64(g.NumNodes()) {
			t.Errorf("%s: new version %d, want %d", tc.name, resp.GetNewGraphVersion(), g.NumNodes())
		}
	}
	got := c.mustRun(nil, []string{"double/Identity:0"})[0]
	if want := tensor.MustFromSlice([]float32{2, 2}, 2); !tensor.Equal(got, want) {
		t.Errorf("double = %v, want %v", got, want)
	}
}

func TestRunStepErrors(t *testing.T) {
	g := linearModel(t)
	net := cluster()
	m := newMaster(net, wk0)
	c := open(t, m, g, nil)
	tests := []struct {
		name     string
		feeds    map[string]*tensor.Tensor
		fetches  []string
		targets  []string
		want     string
		notFound bool
	}{
		{name: "unknown fetch", fetches: []string{"nope:0"}, want: `"nope"`, notFound: true},
		{name: "unknown feed", feeds: map[string]*tensor.Tensor{"ghost:0": tensor.Scalar(float32(1))}, fetches: []string{"W:0"}, want: `"ghost"`, notFound: true},
		{name: "unknown target", targets: []string{"nothing"}, want: `"nothing"`, notFound: true},
		{name: "bad output index", fetches: []string{"W:7"}, want: "W"},
		{name: "wrong feed dtype", feeds: map[string]*tensor.Tensor{"x:0": tensor.New(tensor.Int32, 1, 3)}, fetches: []string{"pred/Identity:0"}, want: "x:0"},
		{name: "wrong feed shape", feeds: map[string]*tensor.Tensor{"x:0": tensor.New(tensor.Float32, 1, 4)}, fetches: []string{"pred/Identity:0"}, want: "[1,4]"},
		{name: "uninitialized variable", fetches: []string{"wsum/Identity:0"}, want: ps},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.run(context.Background(), tc.feeds, tc.fetches, tc.targets...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %s", err, tc.want)
			}
			if tc.notFound && !errors.Is(err, graph.ErrNotFound) {
				t.Errorf("error %v does not wrap graph.ErrNotFound", err)
			}
		})
	}
	if _, err := m.RunStep(context.Background(), &pb.RunStepRequest{SessionHandle: "nope"}); !errors.Is(err, master.ErrNoSession) {
		t.Errorf("unknown session: %v", err)
	}
	devs, err := m.ListDevices(context.Background(), &pb.ListDevicesRequest{})
	if err != nil || fmt.Sprint(devs.GetDevices()) != fmt.Sprint([]string{ps + "/cpu:0", wk0 + "/cpu:0", wk1 + "/cpu:0"}) {
		t.Errorf("ListDevices = %v, %v", devs.GetDevices(), err)
	}
}

func TestEmptyStep(t *testing.T) {
	c := open(t, newMaster(cluster(), wk0), linearModel(t), nil)
	if out := c.mustRun(nil, nil); len(out) != 0 {
		t.Errorf("an empty step returned %d tensors", len(out))
	}
}

// TestFeedOneOutputOfAMultiOutputNode feeds output 1 of a Split whose input
// is an unfed placeholder on another task: the plan substitutes a
// placeholder for that output, so the Split and its input are not needed.
func TestFeedOneOutputOfAMultiOutputNode(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s.WithDevice(wk1), "x", tensor.Float32, tensor.MakeShape(4))
	parts := ops.Split(s.WithDevice(wk1), x, 0, 2)
	ops.Identity(s.WithDevice(ps).SubScope("second"), ops.Mul(s, parts[1], ops.Const(s, float32(3))))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	c := open(t, newMaster(cluster(), wk0), s.Graph(), nil)
	feed := tensor.MustFromSlice([]float32{1, 2}, 2)
	name := parts[1].Name()
	got := c.mustRun(map[string]*tensor.Tensor{name: feed}, []string{"second/Identity:0", name})
	if want := tensor.MustFromSlice([]float32{3, 6}, 2); !tensor.Equal(got[0], want) {
		t.Errorf("second = %v, want %v", got[0], want)
	}
	if !tensor.Equal(got[1], feed) {
		t.Errorf("fetch of the fed tensor = %v, want %v", got[1], feed)
	}
}

// TestLostTaskIsRegisteredAgain: when the ps is restarted (its graphs and
// variables are gone) or cut off, the step that finds out fails naming it,
// and the master drops every plan with a partition on it: the next steps
// register their partitions again instead of failing on stale handles.
func TestLostTaskIsRegisteredAgain(t *testing.T) {
	tests := []struct {
		name  string
		fault func(net *workertest.Network)
		// fetch is what the first step after the fault fetches: the loss,
		// as before (a registered plan), or the ps's sum of W (a new one).
		fetch string
		is    error
		// heal brings the ps back after the failed step.
		heal func(net *workertest.Network)
	}{
		{name: "restarted between steps", fault: func(n *workertest.Network) { n.Restart(ps) }, fetch: "loss/Identity:0", is: worker.ErrNoGraph},
		{name: "restarted, then a new signature", fault: func(n *workertest.Network) { n.Restart(ps) }, fetch: "wsum/Identity:0", is: worker.ErrNoGraph},
		{name: "cut, then restarted", fault: func(n *workertest.Network) { n.Cut(ps) }, fetch: "loss/Identity:0", is: worker.ErrUnavailable,
			heal: func(n *workertest.Network) { n.Restart(ps) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := linearModel(t)
			net := cluster()
			m := newMaster(net, wk0)
			c := open(t, m, g, nil)
			c.mustRun(nil, nil, initName(g))
			for i := range 3 {
				c.mustRun(batch(i), []string{"loss/Identity:0"}, "train")
			}
			before := net.Local(ps).Incarnation()
			tc.fault(net)
			_, err := c.run(context.Background(), batch(3), []string{tc.fetch}, "train")
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), ps) {
				t.Fatalf("the step after the fault: %v; want an error naming %s that wraps %v", err, ps, tc.is)
			}
			if tc.heal != nil {
				tc.heal(net)
			}
			if net.Local(ps).Incarnation() == before {
				t.Errorf("the restarted ps kept its incarnation %d", before)
			}
			// No stale handle is used again: initialising (as a chief
			// restoring the model would) and training work at once.
			regs := net.Calls(ps, "RegisterGraph")
			c.mustRun(nil, nil, initName(g))
			for i := range 3 {
				c.mustRun(batch(i), []string{"loss/Identity:0"}, "train")
			}
			if got := net.Calls(ps, "RegisterGraph") - regs; got != 2 {
				t.Errorf("%d registrations on the restarted ps, want 2 (init and train)", got)
			}
			// The dropped plans' partitions on the live workers are
			// deregistered: what is left are the two new plans'.
			waitFor(t, func() bool { return net.Local(wk0).NumGraphs() == 1 && net.Local(wk1).NumGraphs() == 1 })
			if got := c.mustRun(nil, []string{"wsum/Identity:0"})[0].Float32s()[0]; got == 1.5 {
				t.Errorf("sum of W = %v: not trained since the restart", got)
			}
		})
	}
}
