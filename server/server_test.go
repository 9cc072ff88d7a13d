package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/internal/abtest"

	"google.golang.org/grpc/metadata"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/testlog"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/rpc/rpctest"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// quiet discards logs.
var quiet = slog.New(slog.DiscardHandler)

// testCluster is a set of listeners on 127.0.0.1:0 and the spec naming them.
type testCluster struct {
	spec *cluster.Spec
	lis  map[string]net.Listener // by task name
}

// newTestCluster listens on one free loopback port per task.
func newTestCluster(t testing.TB, jobs map[string]int) *testCluster {
	t.Helper()
	tc := &testCluster{lis: map[string]net.Listener{}}
	addrs := map[string][]string{}
	for job, n := range jobs {
		for i := range n {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			addrs[job] = append(addrs[job], l.Addr().String())
			tc.lis[cluster.TaskID{Job: job, Index: i}.String()] = l
		}
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		t.Fatal(err)
	}
	tc.spec = spec
	return tc
}

// start starts the server of a task on its listener.
func (tc *testCluster) start(t testing.TB, job string, index int, log *slog.Logger) *server.Server {
	t.Helper()
	return tc.startWith(t, job, index, log, rpc.Options{})
}

// startWith starts the server of a task with the given transport options.
func (tc *testCluster) startWith(t testing.TB, job string, index int, log *slog.Logger, opts rpc.Options) *server.Server {
	t.Helper()
	id := cluster.TaskID{Job: job, Index: index}
	if log == nil {
		log = quiet
	}
	s, err := server.New(server.Config{Cluster: tc.spec, Task: id, Listener: tc.lis[id.String()], Logger: log, RPC: opts})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestBetweenGraphTraining runs 1 ps and 2 workers on loopback; each worker
// trains the shared linear model through its own remote session.
func TestBetweenGraphTraining(t *testing.T) {
	tc := newTestCluster(t, map[string]int{"ps": 1, "worker": 2})
	ps := tc.start(t, "ps", 0, nil)
	workers := []*server.Server{tc.start(t, "worker", 0, nil), tc.start(t, "worker", 1, nil)}
	ctx := ctxTimeout(t, 60*time.Second)

	sessions := make([]*session.Session, 2)
	for i, w := range workers {
		g, init := abtest.LinearModel(t, i)
		sess, err := session.Open(ctx, w.Target(), g)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sess.Close() })
		sessions[i] = sess
		if i == 0 { // the chief initialises the shared variables
			if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, sess := range sessions {
		wg.Go(func() {
			for k := range 300 {
				v := float32((k+i)%10) / 10
				_, err := sess.RunNamed(ctx, map[string]*tensor.Tensor{
					"x": tensor.MustFromSlice([]float32{v}, 1, 1), "y": tensor.MustFromSlice([]float32{2*v + 1}, 1, 1),
				}, nil, []string{"train"})
				if err != nil {
					errs[i] = fmt.Errorf("worker %d step %d: %w", i, k, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	out, err := sessions[1].RunNamed(ctx, nil, []string{"W", "b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, b := out[0].Float32s()[0], out[1].Float32s()[0]
	if w < 1.2 || w > 2.8 || b < 0.6 || b > 1.4 {
		t.Errorf("after 600 shared steps W = %v, b = %v; want about 2 and 1", w, b)
	}

	// The variables live on the ps, and only there.
	for _, srv := range []*server.Server{ps, workers[0]} {
		st, err := srv.Worker().GetStatus(ctx, &pb.GetStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, v := range st.GetVariables() {
			names[v.GetName()] = v.GetInitialized()
		}
		onPS := srv == ps
		if names["W"] != onPS || names["b"] != onPS {
			t.Errorf("%s holds variables %v; want W and b initialised on the ps only", srv.Task(), names)
		}
	}
	// GetStatus over gRPC from a client shows the same.
	c, closer, err := rpc.DialWorker(strings.TrimPrefix(ps.Target(), "grpc://"), rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	st, err := c.GetStatus(ctx, &pb.GetStatusRequest{})
	if err != nil || st.GetTask() != "/job:ps/task:0" || len(st.GetVariables()) < 2 {
		t.Errorf("GetStatus of the ps over gRPC = %v, %v; want its task and variables", st, err)
	}
}

// TestShutdownEndsJoin: a Shutdown RPC (the chief declaring training
// finished) makes the ps's Join return nil.
func TestShutdownEndsJoin(t *testing.T) {
	tc := newTestCluster(t, map[string]int{"ps": 1, "worker": 1})
	ps := tc.start(t, "ps", 0, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	joined := make(chan error, 1)
	go func() { joined <- ps.Join(ctx) }()

	c, closer, err := rpc.DialWorker(strings.TrimPrefix(ps.Target(), "grpc://"), rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if _, err := c.Shutdown(ctx, &pb.ShutdownRequest{Reason: "training finished"}); err != nil {
		t.Fatal(err)
	}
	if err := <-joined; err != nil {
		t.Fatalf("Join = %v, want nil after Shutdown", err)
	}
	if r := ps.StopReason(); !strings.Contains(r, "training finished") {
		t.Errorf("StopReason = %q, want the shutdown's reason", r)
	}
	// Join on a stopped server returns at once; a Join whose ctx ends first
	// returns ctx.Err().
	if err := ps.Join(context.Background()); err != nil {
		t.Errorf("Join after stop = %v", err)
	}
	w := tc.start(t, "worker", 0, nil)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.Join(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Join with an ending ctx = %v, want DeadlineExceeded", err)
	}
}

// TestWorkerStartsBeforePS: a worker whose step needs the ps waits for it
// (logging who it waits for) and works once the ps is up.
func TestWorkerStartsBeforePS(t *testing.T) {
	tc := newTestCluster(t, map[string]int{"ps": 1, "worker": 1})
	// The ps's port is reserved by its listener but nobody serves it yet:
	// free it so that connections are refused until the ps starts.
	psName := "/job:ps/task:0"
	psAddr := tc.lis[psName].Addr().String()
	tc.lis[psName].Close()
	var logs testlog.Buffer
	w := tc.start(t, "worker", 0, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx := ctxTimeout(t, 60*time.Second)
	g, init := abtest.LinearModel(t, 0)
	sess, err := session.Open(ctx, w.Target(), g)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	done := make(chan error, 1)
	go func() {
		_, err := sess.Run(ctx, nil, nil, []*graph.Node{init})
		done <- err
	}()
	// Start the ps once the worker has logged that it waits for it.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "waiting for "+psName+" at "+psAddr) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not log that it waits for the ps; logs:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	l, err := net.Listen("tcp", psAddr)
	if err != nil {
		t.Skipf("cannot listen on the ps's port again: %v", err)
	}
	tc.lis[psName] = l
	tc.start(t, "ps", 0, nil)
	if err := <-done; err != nil {
		t.Fatalf("init after the ps started: %v", err)
	}
	out, err := sess.RunNamed(ctx, nil, []string{"W"}, nil)
	if err != nil || out[0].Float32s()[0] != 0 {
		t.Errorf("W = %v, %v; want 0", out, err)
	}
}

// TestMissingPeerFailsStep: a step that needs a task that never starts
// fails within its deadline (the session's step timeout) with an error
// naming the task.
func TestMissingPeerFailsStep(t *testing.T) {
	tc := newTestCluster(t, map[string]int{"ps": 1, "worker": 1})
	tc.lis["/job:ps/task:0"].Close()
	w := tc.start(t, "worker", 0, nil)
	g, init := abtest.LinearModel(t, 0)
	sess, err := session.Open(context.Background(), w.Target(), g, session.WithConfig(&pb.SessionConfig{StepTimeoutMs: 1500}))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = sess.Run(ctx, nil, nil, []*graph.Node{init})
	if err == nil || !strings.Contains(err.Error(), "/job:ps/task:0") {
		t.Fatalf("err = %v, want a failure naming /job:ps/task:0", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the step failed after %v, want about its 1.5s deadline", d)
	}
	t.Logf("error: %v", err)
}

// tokenCreds attaches a bearer token to every call; it requires TLS.
type tokenCreds string

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(c)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return true }

// TestSecureCluster: with TLS and a token check on every task, a step's
// RPCs and tensors (gRPC and the tensor channel on one port) pass between
// the tasks, and a client without the token is refused.
func TestSecureCluster(t *testing.T) {
	serverTLS, clientTLS := rpctest.SelfSignedTLS(t)
	opts := rpc.Options{
		// One config serves and dials: the certificate and the roots that trust it.
		TLS: &tls.Config{Certificates: serverTLS.Certificates, RootCAs: clientTLS.RootCAs},
		Authenticate: func(ctx context.Context) error {
			if md, _ := metadata.FromIncomingContext(ctx); slices.Equal(md.Get("authorization"), []string{"Bearer s3cret"}) {
				return nil
			}
			return errors.New("bad or missing token")
		},
		PerRPCCredentials: tokenCreds("s3cret"),
	}
	tc := newTestCluster(t, map[string]int{"ps": 1, "worker": 1})
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	tc.startWith(t, "ps", 0, log, opts)
	w := tc.startWith(t, "worker", 0, log, opts)
	addr := strings.TrimPrefix(w.Target(), "grpc://")
	ctx := ctxTimeout(t, 60*time.Second)

	m, closer, err := rpc.DialMaster(addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	g, init := abtest.LinearModel(t, 0)
	sess, err := session.New(g, session.WithMaster(m, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := sess.RunNamed(ctx, map[string]*tensor.Tensor{
			"x": tensor.MustFromSlice([]float32{1}, 1, 1), "y": tensor.MustFromSlice([]float32{3}, 1, 1),
		}, nil, []string{"train"}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := sess.RunNamed(ctx, nil, []string{"W", "b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w, b := out[0].Float32s()[0], out[1].Float32s()[0]; w <= 0 || b <= 0 {
		t.Errorf("after 20 steps toward y = 3 at x = 1: W = %v, b = %v; want both above 0", w, b)
	}

	if strings.Contains(logs.String(), "tensor channel") {
		t.Errorf("tensors did not go over the tensor channel; logs:\n%s", logs.String())
	}

	noToken := opts
	noToken.PerRPCCredentials = nil
	m2, closer2, err := rpc.DialMaster(addr, noToken)
	if err != nil {
		t.Fatal(err)
	}
	defer closer2.Close()
	if _, err := m2.ListDevices(ctx, &pb.ListDevicesRequest{}); !errors.Is(err, rpc.ErrUnauthenticated) {
		t.Errorf("ListDevices without the token: err = %v, want ErrUnauthenticated", err)
	}
}
