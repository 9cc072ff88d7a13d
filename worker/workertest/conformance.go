package workertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/service"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// The task and devices of the conformance suite's worker.
const (
	Task       = "/job:ps/task:0"
	Device     = Task + "/cpu:0"
	PeerDevice = "/job:worker/task:0/cpu:0"
)

// Connector returns the service a test talks to for the in-process worker
// w: w itself, or a client of w served over a transport.
type Connector func(t *testing.T, w *worker.Worker) service.Worker

// Options tunes Run.
type Options struct {
	// HugeRecv adds a 1 GiB RecvTensor (slow, and heavy under -race).
	HugeRecv bool
}

// suite is one worker under test and what it recorded.
type Suite struct {
	Svc service.Worker

	mu       sync.Mutex
	shutdown []string
}

func NewSuite(t *testing.T, connect Connector) *Suite {
	s := &Suite{}
	w := worker.New(worker.Config{Task: Task, OnShutdown: func(reason string) {
		s.mu.Lock()
		s.shutdown = append(s.shutdown, reason)
		s.mu.Unlock()
	}})
	s.Svc = connect(t, w)
	return s
}

// Register installs the graph built by build and returns its handle.
func (s *Suite) Register(t testing.TB, session string, build func(sc *graph.Scope)) string {
	t.Helper()
	sc := graph.NewScope().WithDevice(Device)
	build(sc)
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Svc.RegisterGraph(Ctx(t), &pb.RegisterGraphRequest{SessionHandle: session, Graph: sc.Graph().ToProto()})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetGraphHandle()
}

// SendGraph registers a graph that sends value (computed by build) under
// the key of tensor name "v:0", and returns the handle and the key.
func (s *Suite) SendGraph(t testing.TB, build func(sc *graph.Scope) graph.Output) (handle, key string) {
	t.Helper()
	handle = s.Register(t, "sess", func(sc *graph.Scope) {
		v := build(sc)
		sc.AddNode("Send", "send", []graph.Output{v}, map[string]any{"tensor_name": "v:0", "send_device": Device, "recv_device": PeerDevice})
	})
	return handle, rendezvous.Key(Device, PeerDevice, "v:0")
}

func (s *Suite) RunSend(t testing.TB, handle string, step int64) {
	t.Helper()
	if _, err := s.Svc.RunGraph(Ctx(t), &pb.RunGraphRequest{SessionHandle: "sess", GraphHandle: handle, StepId: step, Targets: []string{"send"}}); err != nil {
		t.Fatal(err)
	}
}

func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Run is the conformance suite of the worker service: every implementation
// (the worker in process, a transport's client of it) must pass it.
func Run(t *testing.T, connect Connector, opts Options) {
	t.Run("GetStatus", func(t *testing.T) {
		s := NewSuite(t, connect)
		st, err := s.Svc.GetStatus(Ctx(t), &pb.GetStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if st.GetTask() != Task || len(st.GetDevices()) != 1 || st.GetDevices()[0] != Device {
			t.Errorf("status = %v, want task %s device %s", st, Task, Device)
		}
	})

	t.Run("RunGraph", func(t *testing.T) {
		s := NewSuite(t, connect)
		h := s.Register(t, "sess", func(sc *graph.Scope) {
			x := ops.Placeholder(sc, "x", tensor.Float32, tensor.MakeShape(2))
			sc.AddNode("Identity", "y", []graph.Output{ops.Mul(sc, x, ops.Const(sc, float32(3)))}, nil)
		})
		resp, err := s.Svc.RunGraph(Ctx(t), &pb.RunGraphRequest{SessionHandle: "sess", GraphHandle: h, StepId: 1,
			Feeds:   []*pb.NamedTensor{{Name: "x:0", Tensor: graph.TensorToProto(tensor.MustFromSlice([]float32{1, 2}, 2))}},
			Fetches: []string{"y:0"}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := graph.TensorFromProto(resp.GetFetches()[0].GetTensor())
		if err != nil {
			t.Fatal(err)
		}
		if want := tensor.MustFromSlice([]float32{3, 6}, 2); !tensor.Equal(got, want) {
			t.Errorf("y = %v, want %v", got, want)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		s := NewSuite(t, connect)
		h := s.Register(t, "sess", func(sc *graph.Scope) { ops.Placeholder(sc, "x", tensor.Float32, tensor.MakeShape(2)) })
		tests := []struct {
			name string
			req  *pb.RunGraphRequest
			is   error
			msg  string
		}{
			{"unknown graph", &pb.RunGraphRequest{SessionHandle: "sess", GraphHandle: "nope", StepId: 2}, service.ErrNoGraph, "nope"},
			{"unknown fetch", &pb.RunGraphRequest{SessionHandle: "sess", GraphHandle: h, StepId: 3, Fetches: []string{"zz:0"}}, graph.ErrNotFound, "zz"},
			{"unknown target", &pb.RunGraphRequest{SessionHandle: "sess", GraphHandle: h, StepId: 4, Targets: []string{"tt"}}, graph.ErrNotFound, "tt"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := s.Svc.RunGraph(Ctx(t), tt.req)
				if !errors.Is(err, tt.is) || !strings.Contains(fmt.Sprint(err), tt.msg) || !strings.Contains(fmt.Sprint(err), Task) {
					t.Errorf("err = %v, want one wrapping %v and naming %q and the task", err, tt.is, tt.msg)
				}
			})
		}
	})

	t.Run("RecvTensor", func(t *testing.T) {
		tests := []struct {
			name string
			val  *tensor.Tensor
		}{
			{"float32", tensor.MustFromSlice([]float32{1, -2, 3.5, 4, 5, 6}, 2, 3)},
			{"float64 scalar", tensor.Scalar(float64(2.25))},
			{"int32", tensor.MustFromSlice([]int32{7, -8, 9}, 3)},
			{"int64", tensor.MustFromSlice([]int64{1 << 40, -3}, 2, 1)},
			{"uint8", tensor.MustFromSlice([]uint8{0, 255, 7}, 3)},
			{"bool", tensor.MustFromSlice([]bool{true, false, true}, 3)},
			{"empty", tensor.New(tensor.Float32, 0, 4)},
		}
		s := NewSuite(t, connect)
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				h, key := s.SendGraph(t, func(sc *graph.Scope) graph.Output { return ops.Const(sc, tt.val) })
				step := int64(100 + i)
				s.RunSend(t, h, step)
				got, err := s.Svc.RecvTensor(Ctx(t), step, key)
				if err != nil {
					t.Fatal(err)
				}
				if !tensor.Equal(got, tt.val) {
					t.Errorf("received %v, want %v", got, tt.val)
				}
			})
		}
	})

	t.Run("RecvTensorWaitsForSend", func(t *testing.T) {
		s := NewSuite(t, connect)
		h, key := s.SendGraph(t, func(sc *graph.Scope) graph.Output { return ops.Const(sc, float32(42)) })
		type result struct {
			t   *tensor.Tensor
			err error
		}
		done := make(chan result, 1)
		go func() {
			v, err := s.Svc.RecvTensor(Ctx(t), 7, key)
			done <- result{v, err}
		}()
		s.RunSend(t, h, 7)
		r := <-done
		if r.err != nil || r.t.Float32s()[0] != 42 {
			t.Fatalf("RecvTensor = %v, %v; want 42", r.t, r.err)
		}
	})

	t.Run("RecvTensorDeadline", func(t *testing.T) {
		s := NewSuite(t, connect)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := s.Svc.RecvTensor(ctx, 9, rendezvous.Key(Device, PeerDevice, "never:0"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want one wrapping context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("RecvTensor returned after %v, want about the 200ms deadline", d)
		}
	})

	t.Run("CleanupStepAborts", func(t *testing.T) {
		s := NewSuite(t, connect)
		errc := make(chan error, 1)
		go func() {
			_, err := s.Svc.RecvTensor(Ctx(t), 11, rendezvous.Key(Device, PeerDevice, "never:0"))
			errc <- err
		}()
		// Abort until the waiting RecvTensor fails: the abort may land
		// before the RecvTensor starts, which must then fail at once.
		if _, err := s.Svc.CleanupStep(Ctx(t), &pb.CleanupStepRequest{StepId: 11, AbortReason: "step 11 failed on /job:worker/task:1"}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if err == nil || !strings.Contains(err.Error(), "step 11") {
				t.Errorf("err = %v, want the step's failure", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("RecvTensor still waits 10s after its step was aborted")
		}
	})

	t.Run("Shutdown", func(t *testing.T) {
		s := NewSuite(t, connect)
		for range 2 {
			if _, err := s.Svc.Shutdown(Ctx(t), &pb.ShutdownRequest{Reason: "training finished"}); err != nil {
				t.Fatal(err)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.shutdown) != 1 || s.shutdown[0] != "training finished" {
			t.Errorf("OnShutdown calls = %q, want one with the reason", s.shutdown)
		}
	})

	t.Run("CloseSessionDropsGraphs", func(t *testing.T) {
		s := NewSuite(t, connect)
		h := s.Register(t, "s1", func(sc *graph.Scope) { ops.ConstNamed(sc, "c", float32(1)) })
		if _, err := s.Svc.CloseSession(Ctx(t), &pb.WorkerCloseSessionRequest{SessionHandle: "s1"}); err != nil {
			t.Fatal(err)
		}
		_, err := s.Svc.RunGraph(Ctx(t), &pb.RunGraphRequest{SessionHandle: "s1", GraphHandle: h, StepId: 1, Fetches: []string{"c:0"}})
		if !errors.Is(err, service.ErrNoGraph) {
			t.Errorf("err = %v, want one wrapping service.ErrNoGraph", err)
		}
	})

	t.Run("RecvTensor64MiB", func(t *testing.T) { testLargeRecv(t, connect, 16<<20) })
	t.Run("RecvTensor1GiB", func(t *testing.T) {
		if testing.Short() || !opts.HugeRecv {
			t.Skip("1 GiB transfer: only with Options.HugeRecv, and not under -short")
		}
		testLargeRecv(t, connect, 256<<20)
	})
}

// testLargeRecv moves a float32 tensor of n elements (a multiple of 1024)
// whose element k is k/1024 + (k%1024)/2, so that misplaced chunks show.
func testLargeRecv(t *testing.T, connect Connector, n int) {
	s := NewSuite(t, connect)
	const cols = 1024
	rows := n / cols
	h, key := s.SendGraph(t, func(sc *graph.Scope) graph.Output {
		col := make([]float32, rows)
		for i := range col {
			col[i] = float32(i)
		}
		row := make([]float32, cols)
		for j := range row {
			row[j] = float32(j) / 2
		}
		return ops.Add(sc, ops.Const(sc, tensor.MustFromSlice(col, rows, 1)), ops.Const(sc, tensor.MustFromSlice(row, 1, cols)))
	})
	s.RunSend(t, h, 1)
	start := time.Now()
	got, err := s.Svc.RecvTensor(Ctx(t), 1, key)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("%d MiB in %v (%.0f MB/s)", n*4>>20, d, float64(n*4)/d.Seconds()/1e6)
	if got.DType() != tensor.Float32 || got.Rank() != 2 || got.Shape()[0] != rows || got.Shape()[1] != cols || len(got.RawBytes()) != 4*n {
		t.Fatalf("got %v%v (%d bytes), want float32[%d %d]", got.DType(), got.Shape(), len(got.RawBytes()), rows, cols)
	}
	v := got.Float32s()
	for _, k := range []int{0, 1, cols - 1, cols, 1<<20 - 1, 1 << 20, 1<<20 + 1, n / 2, n/2 + 777, n - cols, n - 1} {
		if want := float32(k/cols) + float32(k%cols)/2; v[k] != want {
			t.Errorf("element %d = %v, want %v", k, v[k], want)
		}
	}
}
