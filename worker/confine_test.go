package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/checkpoint/bundle"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	svc "github.com/distflow/distflow/service"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// The attacks of an admitted but hostile (or buggy) peer on a task: each
// test reproduces one over a real gRPC connection on loopback, the peer
// being a master in this process that registers and runs graphs on the
// task's worker.

const victim = "/job:ps/task:0"

// oneTask is a service.Workers of a single task reached over gRPC.
type oneTask struct{ w worker.Service }

func (o oneTask) Worker(task string) (worker.Service, error) {
	if task != victim {
		return nil, errors.New("no such task " + task)
	}
	return o.w, nil
}
func (o oneTask) Tasks() []string { return []string{victim} }

// serveVictim serves a worker with cfg on loopback and returns it and a
// function that opens a session on it through a master of this process.
func serveVictim(t testing.TB, cfg worker.Config) (*worker.Worker, func(g *graph.Graph) *session.Session) {
	t.Helper()
	cfg.Task = victim
	w := worker.New(cfg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(rpc.Options{})
	rpc.RegisterWorker(srv, w)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	client, closer, err := rpc.DialWorker(lis.Addr().String(), rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })
	m := master.New(master.Config{Task: victim, Workers: oneTask{client}})
	return w, func(g *graph.Graph) *session.Session {
		s, err := session.New(g, session.WithMaster(m, nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkpointGraph has a variable v = [1 2 3] and save and restore nodes
// for each dir.
func checkpointGraph(t *testing.T, dirs ...string) (*graph.Graph, *graph.Node, []graph.Output, []*graph.Node) {
	t.Helper()
	s := graph.NewScope()
	v := ops.NewVariable(s, "v", tensor.Float32, []int{3}, ops.ConstantInit(1))
	step := ops.Const(s, int64(7))
	var saves []graph.Output
	var restores []*graph.Node
	for i, dir := range dirs {
		sub := s.SubScope("ck" + string(rune('a'+i)))
		saves = append(saves, ops.SaveVariables(sub, step, []graph.Output{v.Node().Output(0)}, dir, "model.ckpt", 0, 1))
		restores = append(restores, ops.RestoreVariables(sub, step, []graph.Output{v.Node().Output(0)}, dir, "model.ckpt"))
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s.Graph(), v.Initializer(), saves, restores
}

// writeIndex writes the index of checkpoint model.ckpt-7 in dir, with the
// one shard that info (a SaveVariables output) describes, as the saver
// does on the client.
func writeIndex(t *testing.T, dir string, info *tensor.Tensor) {
	t.Helper()
	var si bundle.ShardInfo
	if err := json.Unmarshal(info.Uint8s(), &si); err != nil {
		t.Fatal(err)
	}
	if err := bundle.WriteIndex(dir, bundle.Prefix("model.ckpt", 7), 7, []bundle.ShardInfo{si}); err != nil {
		t.Fatal(err)
	}
}

// TestRemoteFileOpsConfined: a remote graph that saves to /etc, to
// ../../x, through a symlink that leaves the root, or restores from a
// checkpoint outside the root, is refused with an error naming the path
// and the allowed directory; inside the root, save and restore work.
func TestRemoteFileOpsConfined(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	// A valid checkpoint outside the root, written by an unconfined task.
	{
		_, open := serveVictim(t, worker.Config{UnconfinedFiles: true})
		g, init, saves, _ := checkpointGraph(t, outside)
		sess := open(g)
		// Initializing and saving in one step would race: the step
		// orders neither before the other.
		if _, err := sess.Run(ctxT(t), nil, nil, []*graph.Node{init}); err != nil {
			t.Fatal(err)
		}
		out, err := sess.Run(ctxT(t), nil, saves, nil)
		if err != nil {
			t.Fatal(err)
		}
		writeIndex(t, outside, out[0])
	}
	before, _ := os.ReadDir(outside)
	bad := []string{"/etc/x", "../../x", filepath.Join(root, "escape", "sub"), outside}
	w, open := serveVictim(t, worker.Config{FileRoots: []string{root}})
	g, init, saves, restores := checkpointGraph(t, append([]string{filepath.Join(root, "ok")}, bad...)...)
	sess := open(g)
	ctx := ctxT(t)
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(ctx, nil, saves[:1], nil)
	if err != nil {
		t.Fatalf("saving under the root: %v", err)
	}
	writeIndex(t, filepath.Join(root, "ok"), out[0])
	if _, err := sess.Run(ctx, nil, nil, restores[:1]); err != nil {
		t.Fatalf("restoring from under the root: %v", err)
	}
	rootReal, _ := filepath.EvalSymlinks(root)
	for i, dir := range bad {
		for what, run := range map[string]func() error{
			"save":    func() error { _, err := sess.Run(ctx, nil, saves[i+1:i+2], nil); return err },
			"restore": func() error { _, err := sess.Run(ctx, nil, nil, restores[i+1:i+2]); return err },
		} {
			err := run()
			if err == nil || !strings.Contains(err.Error(), "file access refused") || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), rootReal) {
				t.Errorf("%s in %q: %v, want a refusal naming the path and %s", what, dir, err, rootReal)
			}
		}
	}
	if _, err := os.Stat("/etc/x.ckpt"); err == nil {
		t.Error("something was written in /etc")
	}
	if after, _ := os.ReadDir(outside); len(after) != len(before) {
		t.Errorf("files outside the root: %v, then %v", before, after)
	}
	// In process, the same policy refuses with the sentinel.
	if _, err := w.Resources().CheckPath("/etc/x"); !errors.Is(err, kernel.ErrFileAccess) {
		t.Errorf("CheckPath(/etc/x) = %v, want kernel.ErrFileAccess", err)
	}
}

// TestRemoteFileOpsRefusedWithoutRoots: a task configured with no
// directories refuses every file op of a remote graph.
func TestRemoteFileOpsRefusedWithoutRoots(t *testing.T) {
	_, open := serveVictim(t, worker.Config{})
	g, init, saves, _ := checkpointGraph(t, t.TempDir())
	sess := open(g)
	// The initializer first: in one step with the saves, a save could run
	// before it and fail on the uninitialized variable instead.
	if _, err := sess.Run(ctxT(t), nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	_, err := sess.Run(ctxT(t), nil, saves, nil)
	if err == nil || !strings.Contains(err.Error(), "no file roots configured") {
		t.Errorf("save on a task without file roots: %v, want a refusal", err)
	}
}

// TestRemoteFillOverBudget: a request of about 200 bytes that asks the task
// to fill a [1e5, 1e5, 1e2] float tensor (4 TB) fails naming the node, the
// shape and the limit, without allocating; a fill under the budget works.
func TestRemoteFillOverBudget(t *testing.T) {
	const limit = 1 << 20
	_, open := serveVictim(t, worker.Config{MaxTensorBytes: limit})
	s := graph.NewScope()
	dims := ops.Placeholder(s, "dims", tensor.Int32, tensor.MakeShape(3))
	fill := ops.Fill(s.SubScope("bomb"), dims, ops.Const(s, float32(1)))
	sum := ops.Sum(s, fill, nil, false)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess := open(s.Graph())
	ctx := ctxT(t)
	small := tensor.MustFromSlice([]int32{2, 3, 4}, 3)
	out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{dims: small}, []graph.Output{sum}, nil)
	if err != nil || out[0].Float32s()[0] != 24 {
		t.Fatalf("a small fill: %v, %v", out, err)
	}
	huge := tensor.MustFromSlice([]int32{100000, 100000, 100}, 3)
	if n := len(graph.TensorToProto(huge).GetContent()); n > 200 {
		t.Fatalf("the request's tensor is %d bytes", n)
	}
	_, err = sess.Run(ctx, map[graph.Output]*tensor.Tensor{dims: huge}, []graph.Output{sum}, nil)
	for _, want := range []string{"memory budget", "bomb", "[100000 100000 100]", "limit 1048576"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a fill of [1e5 1e5 1e2]: %v, want an error with %q", err, want)
		}
	}
}

// TestOverBudgetStaticAndFed: a graph whose declared output is over the
// budget is refused at registration, and a fed tensor over it before it
// is decoded, both wrapping kernel.ErrOverBudget.
func TestOverBudgetStaticAndFed(t *testing.T) {
	ctx := context.Background()
	w := worker.New(worker.Config{Task: victim, MaxTensorBytes: 1 << 10})
	s := graph.NewScope()
	ops.Fill(s.SubScope("bomb"), ops.Const(s, []int32{1000, 1000}), ops.Const(s, float32(0)))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	_, err := w.RegisterGraph(ctx, &pb.RegisterGraphRequest{SessionHandle: "s", Graph: s.Graph().ToProto()})
	if !errors.Is(err, kernel.ErrOverBudget) || !strings.Contains(err.Error(), "bomb") {
		t.Errorf("registering a static [1000 1000] fill: %v, want kernel.ErrOverBudget naming the node", err)
	}

	s = graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.UnknownShape())
	ops.Identity(s.SubScope("y"), x)
	h := register(t, w, "s", s.Graph().ToProto())
	big := graph.TensorToProto(tensor.New(tensor.Float32, 1024))
	_, err = w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: h, StepId: 1,
		Feeds: []*pb.NamedTensor{{Name: "x:0", Tensor: big}}, Fetches: []string{"y:0"}})
	if !errors.Is(err, kernel.ErrOverBudget) || !strings.Contains(err.Error(), `feed "x:0"`) {
		t.Errorf("feeding 4 KiB to a task with 1 KiB: %v, want kernel.ErrOverBudget naming the feed", err)
	}
}

func init() {
	// An op that reaches into the host: not allowed in remote graphs.
	op.Register(op.Def{Name: "WorkerTestHostOnly", Summary: "Runs a command on the host (pretend).", Infer: func(c *op.InferContext) error { return nil }})
}

// TestRegisterGraphRefusesHostOps: a graph with a node of an op not
// registered for remote execution is refused, naming the node and the op.
func TestRegisterGraphRefusesHostOps(t *testing.T) {
	g := graph.New()
	if _, err := g.AddNode(graph.NodeSpec{Name: "pwn", Op: "WorkerTestHostOnly"}); err != nil {
		t.Fatal(err)
	}
	w := worker.New(worker.Config{Task: victim})
	_, err := w.RegisterGraph(context.Background(), &pb.RegisterGraphRequest{SessionHandle: "s", Graph: g.ToProto()})
	if !errors.Is(err, worker.ErrRemoteOp) || !strings.Contains(err.Error(), "pwn") || !strings.Contains(err.Error(), "WorkerTestHostOnly") {
		t.Errorf("RegisterGraph with a host-only op: %v, want worker.ErrRemoteOp naming node and op", err)
	}
	if w.NumGraphs() != 0 {
		t.Errorf("%d graphs registered", w.NumGraphs())
	}
}

// bigGraph is a graph of about n KiB (a constant of n*256 floats).
func bigGraph(t *testing.T, kib int) *pb.GraphDef {
	t.Helper()
	s := graph.NewScope()
	ops.ConstNamed(s, "c", make([]float32, kib*256))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s.Graph().ToProto()
}

// TestRegisteredGraphsBounded: registrations of a large graph are refused
// past the session's limits with an error saying so; closing the session
// frees them, and so does idleness.
func TestRegisteredGraphsBounded(t *testing.T) {
	ctx := context.Background()
	gd := bigGraph(t, 64)
	now := time.Unix(1000, 0)
	w := worker.New(worker.Config{Task: victim, MaxGraphs: 10, MaxGraphBytes: 8 * 64 << 10, SessionIdle: time.Hour,
		Now: func() time.Time { return now }})
	var errs []error
	for range 12 {
		_, err := w.RegisterGraph(ctx, &pb.RegisterGraphRequest{SessionHandle: "s", Graph: gd})
		errs = append(errs, err)
	}
	for i, err := range errs {
		switch {
		case i < 7 && err != nil:
			t.Errorf("registration %d: %v", i, err)
		case i >= 8 && (!errors.Is(err, worker.ErrTooManyGraphs) || !strings.Contains(err.Error(), "MaxGraphBytes")):
			t.Errorf("registration %d: %v, want worker.ErrTooManyGraphs naming MaxGraphBytes", i, err)
		}
	}
	if _, err := w.RegisterGraph(ctx, &pb.RegisterGraphRequest{SessionHandle: "other", Graph: gd}); err != nil {
		t.Errorf("another session is not limited by the first: %v", err)
	}
	if _, err := w.CloseSession(ctx, &pb.WorkerCloseSessionRequest{SessionHandle: "s"}); err != nil {
		t.Fatal(err)
	}
	if n := w.NumGraphs(); n != 1 {
		t.Errorf("%d graphs after closing the session, want 1 (the other session's)", n)
	}
	small := sendGraph(t)
	for i := range 11 {
		_, err := w.RegisterGraph(ctx, &pb.RegisterGraphRequest{SessionHandle: "s", Graph: small})
		if i < 10 && err != nil {
			t.Errorf("small registration %d: %v", i, err)
		}
		if i == 10 && (!errors.Is(err, worker.ErrTooManyGraphs) || !strings.Contains(err.Error(), "limit 10")) {
			t.Errorf("registration 11: %v, want worker.ErrTooManyGraphs naming the limit", err)
		}
	}
	// An hour and a bit later, both sessions idle: the next registration
	// drops their graphs.
	now = now.Add(61 * time.Minute)
	register(t, w, "new", small)
	if n := w.NumGraphs(); n != 1 {
		t.Errorf("%d graphs after the others went idle, want 1", n)
	}
}

// TestShutdownOnlyFromChief: with ShutdownFrom, a Shutdown from another
// task, or from an unnamed caller, is refused and does not stop the task.
func TestShutdownOnlyFromChief(t *testing.T) {
	const chief = "/job:worker/task:0"
	stopped := 0
	w := worker.New(worker.Config{Task: victim, ShutdownFrom: []string{chief}, OnShutdown: func(string) { stopped++ }})
	for _, ctx := range []context.Context{
		context.Background(),
		svc.WithCaller(context.Background(), "/job:worker/task:1"),
	} {
		_, err := w.Shutdown(ctx, &pb.ShutdownRequest{Reason: "pwned"})
		if !errors.Is(err, svc.ErrPermissionDenied) || !strings.Contains(err.Error(), chief) {
			t.Errorf("Shutdown: %v, want svc.ErrPermissionDenied naming the chief", err)
		}
	}
	if stopped != 0 {
		t.Fatal("a refused Shutdown stopped the task")
	}
	if _, err := w.Shutdown(svc.WithCaller(context.Background(), chief), &pb.ShutdownRequest{Reason: "done"}); err != nil || stopped != 1 {
		t.Errorf("Shutdown from the chief: %v, %d stops", err, stopped)
	}
}

// TestRemoteNaNWriteRefused: a peer's request that assigns NaN to a
// variable on the ps is refused, naming the variable and the feed, and the
// variable keeps its value; obeyed, it would kill the job later on the
// chief's NaN guard ("the loss is not a finite number: lower the learning
// rate"), blaming the model.
func TestRemoteNaNWriteRefused(t *testing.T) {
	_, open := serveVictim(t, worker.Config{})
	s := graph.NewScope()
	v := ops.NewVariable(s, "w", tensor.Float32, []int{2}, ops.ConstantInit(1))
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2))
	assign := ops.Assign(s.SubScope("overwrite"), v.Node().Output(0), x)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess := open(s.Graph())
	ctx := ctxT(t)
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{v.Initializer()}); err != nil {
		t.Fatal(err)
	}
	nan := tensor.MustFromSlice([]float32{0, float32(math.NaN())}, 2)
	_, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: nan}, []graph.Output{assign}, nil)
	for _, want := range []string{"non-finite value written into a variable", `"w"`, "NaN", "element 1", "request"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("assigning a fed NaN: %v, want an error with %q", err, want)
		}
	}
	out, err := sess.Run(ctx, nil, []graph.Output{v.Value()}, nil)
	if err != nil || out[0].Float32s()[1] != 1 {
		t.Errorf("the variable after the refused write: %v, %v", out, err)
	}
	if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: tensor.MustFromSlice([]float32{3, 4}, 2)}, []graph.Output{assign}, nil); err != nil {
		t.Errorf("a finite write: %v", err)
	}
}
