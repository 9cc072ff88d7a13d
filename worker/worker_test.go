package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/partition"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
	"github.com/distflow/distflow/worker/workertest"
)

const (
	ps = "/job:ps/task:0"
	wk = "/job:worker/task:0"
)

// sendGraph is ps's side of a transfer: c = [1 2 3], sent to the worker.
func sendGraph(t *testing.T) *pb.GraphDef {
	t.Helper()
	g := graph.New()
	s := graph.NewScopeWithGraph(g).WithDevice(ps + "/cpu:0")
	c := ops.ConstNamed(s, "c", []float32{1, 2, 3})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.AddNode(partition.SendSpec("send_c", c, "c:0", ps+"/cpu:0", wk+"/cpu:0")); err != nil {
		t.Fatal(err)
	}
	return g.ToProto()
}

// recvGraph is the worker's side: y = recv(c) * 2.
func recvGraph(t *testing.T) *pb.GraphDef {
	t.Helper()
	g := graph.New()
	r, err := g.AddNode(partition.RecvSpec("recv_c", "c:0", ps+"/cpu:0", wk+"/cpu:0", tensor.Float32, tensor.MakeShape(3)))
	if err != nil {
		t.Fatal(err)
	}
	s := graph.NewScopeWithGraph(g)
	y := ops.Mul(s, r.Output(0), ops.Const(s, float32(2)))
	ops.Identity(s.SubScope("y"), y)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return g.ToProto()
}

func register(t *testing.T, w worker.Service, session string, gd *pb.GraphDef) string {
	t.Helper()
	resp, err := w.RegisterGraph(context.Background(), &pb.RegisterGraphRequest{SessionHandle: session, Graph: gd})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetGraphHandle()
}

func service(t *testing.T, n *workertest.Network, task string) worker.Service {
	t.Helper()
	w, err := n.Worker(task)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestRunGraphMovesTensorsBetweenTasks runs the two halves of a step on two
// workers: the worker's Recv fetches the tensor from the ps.
func TestRunGraphMovesTensorsBetweenTasks(t *testing.T) {
	n := workertest.NewCluster(ps, wk)
	psw, ww := service(t, n, ps), service(t, n, wk)
	hs, hr := register(t, psw, "s", sendGraph(t)), register(t, ww, "s", recvGraph(t))
	ctx := context.Background()
	for step := int64(1); step <= 3; step++ {
		var wg sync.WaitGroup
		var sendErr error
		wg.Go(func() {
			_, sendErr = psw.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: hs, StepId: step, Targets: []string{"send_c"}})
		})
		resp, err := ww.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: hr, StepId: step, Fetches: []string{"y/Identity:0"}})
		wg.Wait()
		if err != nil || sendErr != nil {
			t.Fatalf("step %d: recv side %v, send side %v", step, err, sendErr)
		}
		got, err := graph.TensorFromProto(resp.GetFetches()[0].GetTensor())
		if err != nil {
			t.Fatal(err)
		}
		if want := tensor.MustFromSlice([]float32{2, 4, 6}, 3); !tensor.Equal(got, want) {
			t.Fatalf("step %d: y = %v, want %v", step, got, want)
		}
		for _, task := range []string{ps, wk} {
			if _, err := service(t, n, task).CleanupStep(ctx, &pb.CleanupStepRequest{StepId: step}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := n.Calls(ps, "RecvTensor"); got != 3 {
		t.Errorf("ps served %d RecvTensor calls, want 3", got)
	}
}

// TestStepAbort checks that every wait of a step ends when the step is
// cleaned up with a reason, when the sender fails, or when the sender's task
// is unreachable, and that the error names the task.
func TestStepAbort(t *testing.T) {
	tests := []struct {
		name  string
		abort func(n *workertest.Network, step int64)
		want  []string
	}{
		{"cleanup with reason", func(n *workertest.Network, step int64) {
			w, _ := n.Worker(wk)
			w.CleanupStep(context.Background(), &pb.CleanupStepRequest{StepId: step, AbortReason: "task /job:ps/task:0 failed"})
		}, []string{wk, "task /job:ps/task:0 failed"}},
		{"sender's step aborted", func(n *workertest.Network, step int64) {
			w, _ := n.Worker(ps)
			w.CleanupStep(context.Background(), &pb.CleanupStepRequest{StepId: step, AbortReason: "kernel exploded"})
		}, []string{wk, ps, "kernel exploded"}},
		{"sender cut", func(n *workertest.Network, step int64) { n.Cut(ps) }, []string{wk, ps, "unreachable"}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := workertest.NewCluster(ps, wk)
			ww := service(t, n, wk)
			h := register(t, ww, "s", recvGraph(t))
			step := int64(100 + i)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := ww.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: h, StepId: step, Fetches: []string{"y/Identity:0"}})
				done <- err
			}()
			// Abort only once the Recv is waiting on the ps.
			for deadline := time.Now().Add(5 * time.Second); n.Calls(ps, "RecvTensor") == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the worker never asked the ps for its tensor")
				}
			}
			start := time.Now()
			tc.abort(n, step)
			err := <-done
			if err == nil {
				t.Fatal("the step succeeded without its tensor")
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("the wait ended %v after the abort", d)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			// A late receive of the step fails at once.
			if _, err := ww.RecvTensor(ctx, step, rendezvous.Key(wk+"/cpu:0", ps+"/cpu:0", "x:0")); err == nil {
				t.Error("a receive in an aborted step succeeded")
			}
		})
	}
}

func TestErrorsNameTaskAndNode(t *testing.T) {
	n := workertest.NewCluster(ps)
	w := service(t, n, ps)
	s := graph.NewScope()
	v := ops.NewVariable(s, "v", tensor.Float32, []int{2}, ops.ZerosInit())
	ops.Identity(s.SubScope("read"), v.Value())
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	h := register(t, w, "s", s.Graph().ToProto())
	ctx := context.Background()
	tests := []struct {
		name string
		req  *pb.RunGraphRequest
		want []string
	}{
		{"uninitialized variable", &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: h, StepId: 1, Fetches: []string{"read/Identity:0"}},
			[]string{ps, "step 1", `"v"`}},
		{"unknown graph", &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: "nope", StepId: 2}, []string{ps, `"nope"`, worker.ErrNoGraph.Error()}},
		{"graph of another session", &pb.RunGraphRequest{SessionHandle: "other", GraphHandle: h, StepId: 3}, []string{ps, worker.ErrNoGraph.Error()}},
		{"unknown fetch", &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: h, StepId: 4, Fetches: []string{"ghost:0"}}, []string{ps, `"ghost`}},
		{"unknown target", &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: h, StepId: 5, Targets: []string{"ghost"}}, []string{ps, `"ghost"`}},
		{"feed without value", &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: h, StepId: 6, Feeds: []*pb.NamedTensor{{Name: "v:0"}}}, []string{ps, `"v:0"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.RunGraph(ctx, tc.req)
			if err == nil {
				t.Fatal("RunGraph succeeded")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %s", err, want)
				}
			}
		})
	}
}

// TestVariablesOutliveSessions checks GetStatus and that closing a session
// drops its graphs but keeps the task's variables, which a second session
// shares.
func TestVariablesOutliveSessions(t *testing.T) {
	n := workertest.NewCluster(ps)
	w := service(t, n, ps)
	ctx := context.Background()
	build := func() *pb.GraphDef {
		s := graph.NewScope()
		v := ops.NewVariable(s, "v", tensor.Float32, []int{2, 3}, ops.OnesInit())
		ops.AssignAdd(s.SubScope("inc"), v.Value(), ops.Const(s, tensor.MustFromSlice([]float32{1, 1, 1, 1, 1, 1}, 2, 3)))
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		return s.Graph().ToProto()
	}
	h1 := register(t, w, "s1", build())
	h2 := register(t, w, "s2", build())
	if _, err := w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s1", GraphHandle: h1, StepId: 1, Targets: []string{"v/Assign"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CloseSession(ctx, &pb.WorkerCloseSessionRequest{SessionHandle: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s1", GraphHandle: h1, StepId: 2}); !errors.Is(err, worker.ErrNoGraph) {
		t.Errorf("a graph of a closed session ran: %v", err)
	}
	resp, err := w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s2", GraphHandle: h2, StepId: 3, Fetches: []string{"inc/AssignAdd:0"}})
	if err != nil {
		t.Fatalf("the second session does not see the variable the first initialised: %v", err)
	}
	got, _ := graph.TensorFromProto(resp.GetFetches()[0].GetTensor())
	if got.Float32s()[0] != 2 {
		t.Errorf("v after one increment = %v, want all 2", got)
	}
	st, err := w.GetStatus(ctx, &pb.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetTask() != ps || len(st.GetDevices()) != 1 || st.GetDevices()[0] != ps+"/cpu:0" {
		t.Errorf("status task %q devices %v", st.GetTask(), st.GetDevices())
	}
	if len(st.GetVariables()) != 1 {
		t.Fatalf("status lists %d variables, want 1", len(st.GetVariables()))
	}
	v := st.GetVariables()[0]
	if v.GetName() != "v" || !v.GetInitialized() || v.GetBytes() != 24 || len(v.GetDims()) != 2 || v.GetDtype() != pb.DataType(tensor.Float32) {
		t.Errorf("variable status %v", v)
	}
	if _, err := w.DeregisterGraph(ctx, &pb.DeregisterGraphRequest{SessionHandle: "s2", GraphHandle: h2}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.DeregisterGraph(ctx, &pb.DeregisterGraphRequest{SessionHandle: "s2", GraphHandle: h2}); !errors.Is(err, worker.ErrNoGraph) {
		t.Errorf("deregistering twice: %v", err)
	}
	if got := n.Local(ps).NumGraphs(); got != 0 {
		t.Errorf("%d graphs left", got)
	}
}

func TestRegisterGraphRejectsBadGraphs(t *testing.T) {
	w := worker.New(worker.Config{Task: ps})
	for _, gd := range []*pb.GraphDef{nil, {Node: []*pb.NodeDef{{Name: "a", Op: "NoSuchOp"}}}} {
		if _, err := w.RegisterGraph(context.Background(), &pb.RegisterGraphRequest{SessionHandle: "s", Graph: gd}); err == nil || !strings.Contains(err.Error(), ps) {
			t.Errorf("RegisterGraph(%v) = %v, want an error naming the task", gd, err)
		}
	}
}

func TestShutdownCallsOnShutdownOnce(t *testing.T) {
	var reasons []string
	w := worker.New(worker.Config{Task: ps, OnShutdown: func(r string) { reasons = append(reasons, r) }})
	for range 3 {
		if _, err := w.Shutdown(context.Background(), &pb.ShutdownRequest{Reason: "training finished"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(reasons) != 1 || reasons[0] != "training finished" {
		t.Errorf("OnShutdown calls: %q", reasons)
	}
}

// TestIncarnation: a worker reports one non-zero incarnation in GetStatus
// and RegisterGraph; a restarted task reports another.
func TestIncarnation(t *testing.T) {
	ctx := context.Background()
	net := workertest.NewCluster(ps)
	incarnation := func() uint64 {
		w, err := net.Worker(ps)
		if err != nil {
			t.Fatal(err)
		}
		st, err := w.GetStatus(ctx, &pb.GetStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		reg, err := w.RegisterGraph(ctx, &pb.RegisterGraphRequest{SessionHandle: "s", Graph: sendGraph(t)})
		if err != nil {
			t.Fatal(err)
		}
		if st.GetIncarnation() == 0 || reg.GetIncarnation() != st.GetIncarnation() {
			t.Fatalf("GetStatus reports incarnation %x, RegisterGraph %x: want one non-zero number", st.GetIncarnation(), reg.GetIncarnation())
		}
		return st.GetIncarnation()
	}
	first := incarnation()
	if again := incarnation(); again != first {
		t.Errorf("incarnation %x, then %x: want one per run of the task", first, again)
	}
	net.Restart(ps)
	if restarted := incarnation(); restarted == first {
		t.Errorf("the restarted task kept incarnation %x", first)
	}
}

// TestRunGraphFeedsInAnyOrder feeds a partition's tensors out of name
// order, then in order, several times: each value must reach its own
// placeholder whether the request's names were resolved or remembered.
func TestRunGraphFeedsInAnyOrder(t *testing.T) {
	n := workertest.NewCluster(ps)
	w := service(t, n, ps)
	s := graph.NewScope()
	a := ops.Placeholder(s, "a", tensor.Float32, tensor.MakeShape())
	b := ops.Placeholder(s, "b", tensor.Float32, tensor.MakeShape())
	ops.Identity(s.SubScope("d"), ops.Sub(s, a, b))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	h := register(t, w, "s", s.Graph().ToProto())
	feed := func(o graph.Output, v float32) *pb.NamedTensor {
		return &pb.NamedTensor{Name: o.Name(), Tensor: graph.TensorToProto(tensor.Scalar(v))}
	}
	ctx := context.Background()
	for step := int64(1); step <= 4; step++ {
		av, bv := float32(step*10), float32(step)
		feeds := []*pb.NamedTensor{feed(b, bv), feed(a, av)}
		if step > 2 {
			feeds[0], feeds[1] = feeds[1], feeds[0]
		}
		resp, err := w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: h, StepId: step, Feeds: feeds, Fetches: []string{"d/Identity:0"}})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		got, err := graph.TensorFromProto(resp.GetFetches()[0].GetTensor())
		if err != nil {
			t.Fatal(err)
		}
		if want := tensor.Scalar(av - bv); !tensor.Equal(got, want) {
			t.Errorf("step %d: a-b = %v, want %v", step, got, want)
		}
	}
}
