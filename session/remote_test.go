package session_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker/workertest"
)

// recordingMaster is a master.Service that records the calls it forwards.
type recordingMaster struct {
	master.Service
	mu    sync.Mutex
	calls []string
	nodes []int // nodes shipped by each Create/ExtendSession
}

func (r *recordingMaster) record(call string, nodes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
	r.nodes = append(r.nodes, nodes)
}

func (r *recordingMaster) CreateSession(ctx context.Context, req *pb.CreateSessionRequest) (*pb.CreateSessionResponse, error) {
	r.record("CreateSession", len(req.GetGraph().GetNode()))
	return r.Service.CreateSession(ctx, req)
}

func (r *recordingMaster) ExtendSession(ctx context.Context, req *pb.ExtendSessionRequest) (*pb.ExtendSessionResponse, error) {
	r.record("ExtendSession", len(req.GetGraph().GetNode()))
	return r.Service.ExtendSession(ctx, req)
}

func (r *recordingMaster) CloseSession(ctx context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	r.record("CloseSession", 0)
	return r.Service.CloseSession(ctx, req)
}

// newMaster returns an in-process master of a one-task cluster.
func newMaster() *recordingMaster {
	const task = "/job:localhost/task:0"
	net := workertest.NewCluster(task)
	return &recordingMaster{Service: master.New(master.Config{Task: task, Workers: net.From(task)})}
}

// backends opens the same graph on the local back end and on a master.
func backends(t *testing.T, g *graph.Graph) map[string]*session.Session {
	t.Helper()
	local, err := session.New(g)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := session.New(g, session.WithMaster(newMaster(), nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close(); remote.Close() })
	return map[string]*session.Session{"local": local, "remote": remote}
}

// TestRemoteMatchesLocal runs the same steps and the same mistakes on both
// back ends: results and error kinds must agree.
func TestRemoteMatchesLocal(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 1))
	w := ops.NewVariable(s, "W", tensor.Float32, []int{1, 1}, ops.ConstantInit(2))
	b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ConstantInit(10))
	y := ops.Add(s, ops.MatMul(s, x, w.Value(), false, false), b.Value())
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, sess := range backends(t, s.Graph()) {
		t.Run(name, func(t *testing.T) {
			// Before init: reading a variable fails the same way.
			if _, err := sess.Run(ctx, nil, []graph.Output{w.Value()}, nil); err == nil || !strings.Contains(err.Error(), "W") {
				t.Errorf("fetching W before init: err = %v, want one naming W", err)
			}
			if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
				t.Fatal(err)
			}
			out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: tensor.MustFromSlice([]float32{1, 2, 3}, 3, 1)}, []graph.Output{y}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := tensor.MustFromSlice([]float32{12, 14, 16}, 3, 1); !tensor.Equal(out[0], want) {
				t.Errorf("y = %v, want %v", out[0], want)
			}
			out, err = sess.RunNamed(ctx, map[string]*tensor.Tensor{"x:0": tensor.MustFromSlice([]float32{0}, 1, 1)}, []string{y.Name(), "W"}, nil)
			if err != nil || out[0].Float32s()[0] != 10 || out[1].Float32s()[0] != 2 {
				t.Errorf("RunNamed = %v, %v; want [[10]] and [[2]]", out, err)
			}

			errTests := []struct {
				name string
				run  func() error
				is   error
				msg  string
			}{
				{"unknown fetch", func() error { _, err := sess.RunNamed(ctx, nil, []string{"nope:0"}, nil); return err }, graph.ErrNotFound, "nope"},
				{"unknown target", func() error { _, err := sess.RunNamed(ctx, nil, nil, []string{"nope"}); return err }, graph.ErrNotFound, "nope"},
				{"wrong feed dtype", func() error {
					_, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: tensor.MustFromSlice([]int32{1}, 1, 1)}, []graph.Output{y}, nil)
					return err
				}, nil, "x:0"},
				{"wrong feed shape", func() error {
					_, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: tensor.MustFromSlice([]float32{1, 2}, 1, 2)}, []graph.Output{y}, nil)
					return err
				}, nil, "x:0"},
				{"unfed placeholder", func() error { _, err := sess.Run(ctx, nil, []graph.Output{y}, nil); return err }, nil, "x"},
			}
			for _, tt := range errTests {
				err := tt.run()
				if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.msg) {
					t.Errorf("%s: err = %v, want one naming %q (wrapping %v)", tt.name, err, tt.msg, tt.is)
				}
			}
		})
	}
}

// TestRemoteShipsGraphOnce: the first Run creates the session with the
// whole graph, later Runs send only the nodes added since, and Close closes
// the session on the master.
func TestRemoteShipsGraphOnce(t *testing.T) {
	s := graph.NewScope()
	a := ops.Const(s, float32(3))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	m := newMaster()
	sess, err := session.New(s.Graph(), session.WithMaster(m, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, err := sess.Run(ctx, nil, []graph.Output{a}, nil); err != nil {
			t.Fatal(err)
		}
	}
	n0 := s.Graph().NumNodes()
	b := ops.Mul(s, a, ops.Const(s, float32(2)))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{b}, nil)
	if err != nil || out[0].Float32s()[0] != 6 {
		t.Fatalf("a*2 = %v, %v; want 6", out, err)
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Run(ctx, nil, []graph.Output{a}, nil); !errors.Is(err, session.ErrClosed) {
		t.Errorf("Run after Close: err = %v, want ErrClosed", err)
	}
	wantCalls := []string{"CreateSession", "ExtendSession", "CloseSession"}
	wantNodes := []int{n0, s.Graph().NumNodes() - n0, 0}
	if strings.Join(m.calls, ",") != strings.Join(wantCalls, ",") || m.nodes[0] != wantNodes[0] || m.nodes[1] != wantNodes[1] {
		t.Errorf("calls %v shipping %v nodes, want %v shipping %v", m.calls, m.nodes, wantCalls, wantNodes)
	}
}

// TestOpenTargets: "" is local, an unknown scheme is an error that says
// what to import.
func TestOpenTargets(t *testing.T) {
	g := graph.New()
	sess, err := session.Open(context.Background(), "", g)
	if err != nil {
		t.Fatal(err)
	}
	sess.Close()
	for _, target := range []string{"nope://h:1", "h:1"} {
		if _, err := session.Open(context.Background(), target, g); err == nil {
			t.Errorf("Open(%q) succeeded, want an error", target)
		}
	}
	var closed closerFunc
	// A scheme of each run's own: a scheme registers once per process
	// (go test -count).
	scheme := fmt.Sprintf("test%d", openTargetsRuns.Add(1))
	session.RegisterDialer(scheme, func(ctx context.Context, target string) (master.Service, io.Closer, error) {
		return newMaster(), &closed, nil
	})
	s := graph.NewScope()
	c := ops.Const(s, float32(5))
	sess, err = session.Open(context.Background(), scheme+"://anywhere", s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(context.Background(), nil, []graph.Output{c}, nil)
	if err != nil || out[0].Float32s()[0] != 5 {
		t.Errorf("Run through the test dialer = %v, %v; want 5", out, err)
	}
	sess.Close()
	if closed != 1 {
		t.Errorf("the dialer's connection was closed %d times, want once", closed)
	}
}

var openTargetsRuns atomic.Int64

// closerFunc counts Close calls.
type closerFunc int

func (c *closerFunc) Close() error { *c++; return nil }

// TestRemoteStepsReuseNothingOfEachOther: a remote step's request is
// reused by the next (the session's pool): steps run concurrently, with
// more feeds than its room and fewer, fetching fed values back (which the
// master answers from the request itself), each get their own values.
func TestRemoteStepsReuseNothingOfEachOther(t *testing.T) {
	s := graph.NewScope()
	const n = 11 // more feeds than the request's room for them
	xs := make([]graph.Output, n)
	for i := range xs {
		xs[i] = ops.Placeholder(s, fmt.Sprintf("x%d", i), tensor.Float32, tensor.MakeShape(-1))
	}
	sum := ops.AddN(s, xs...)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, sess := range backends(t, s.Graph()) {
		t.Run(name, func(t *testing.T) {
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for step := range 50 {
						feeds := n
						if step%2 == 1 {
							feeds = 1 // within the room
						}
						fed := make(map[graph.Output]*tensor.Tensor, feeds)
						v := float32(g*1000 + step)
						for i := range feeds {
							fed[xs[i]] = tensor.MustFromSlice([]float32{v, float32(i)}, 2)
						}
						fetches := []graph.Output{xs[0]}
						if feeds == n {
							fetches = append(fetches, sum)
						}
						out, err := sess.Run(ctx, fed, fetches, nil)
						if err != nil {
							t.Error(err)
							return
						}
						if got := out[0].Float32s(); got[0] != v || got[1] != 0 {
							t.Errorf("goroutine %d step %d: x0 = %v, want [%v 0]", g, step, got, v)
						}
						if feeds == n {
							if got, want := out[1].Float32s(), []float32{n * v, n * (n - 1) / 2}; got[0] != want[0] || got[1] != want[1] {
								t.Errorf("goroutine %d step %d: sum = %v, want %v", g, step, got, want)
							}
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestFetchedRemoteTensorsAreApart: in a cluster whose tasks share one
// process, a fetch of a tensor another task sent (here a variable's
// value, which the sender lends rather than copies) comes back as the
// caller's own: modifying it changes neither the variable nor a later
// fetch. A task's response may hand on uncopied only the tensors its step
// made.
func TestFetchedRemoteTensorsAreApart(t *testing.T) {
	ps, wk := "/job:ps/task:0", "/job:worker/task:0"
	net := workertest.NewCluster(ps, wk)
	m := master.New(master.Config{Task: wk, Workers: net.From(wk)})
	s := graph.NewScope()
	v := ops.NewVariable(s.WithDevice(ps), "v", tensor.Float32, []int{3}, ops.ConstantInit(4))
	onWorker := s.WithDevice(wk)
	read := ops.Identity(onWorker, v.Value())
	twice := ops.Mul(onWorker, v.Value(), ops.Scalar(onWorker, tensor.Float32, 2))
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph(), session.WithMaster(m, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		out, err := sess.Run(ctx, nil, []graph.Output{read, twice}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := out[0].Float32s(); got[0] != 4 || got[2] != 4 {
			t.Fatalf("round %d: read v = %v, want 4s: a fetch from an earlier round changed it", round, got)
		}
		if got := out[1].Float32s(); got[0] != 8 || got[2] != 8 {
			t.Fatalf("round %d: 2v = %v, want 8s", round, got)
		}
		for _, o := range out {
			o.Float32s()[0] = -100 // the caller's to modify
		}
	}
}
