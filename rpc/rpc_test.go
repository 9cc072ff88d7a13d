package rpc_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/internal/testlog"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/service"
	"github.com/distflow/distflow/worker"
)

// tokenCreds attaches a bearer token to every call.
type tokenCreds string

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(c)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return false }

// checkToken is an Options.Authenticate accepting the token "s3cret".
func checkToken(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 && v[0] == "Bearer s3cret" {
		return nil
	}
	return errors.New("bad or missing token")
}

// TestAuthenticate: the interceptors check every unary and streaming call,
// and the tensor channel every request.
func TestAuthenticate(t *testing.T) {
	w := worker.New(worker.Config{Task: suiteTask})
	srvOpts := rpc.Options{Authenticate: checkToken}
	tests := []struct {
		name string
		cli  rpc.Options
		ok   bool
	}{
		{"no token", rpc.Options{}, false},
		{"wrong token", rpc.Options{PerRPCCredentials: tokenCreds("guess")}, false},
		{"good token", rpc.Options{PerRPCCredentials: tokenCreds("s3cret")}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serveWorker(t, w, srvOpts, tt.cli)
			ctx := ctxT(t)
			_, err := c.GetStatus(ctx, &pb.GetStatusRequest{})
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			_, serr := c.RecvTensor(short, 1, rendezvous.Key(suiteDev, peerDev, "x:0"))
			if tt.ok {
				if err != nil || !errors.Is(serr, context.DeadlineExceeded) {
					t.Errorf("GetStatus: %v, RecvTensor: %v; want success and a wait", err, serr)
				}
				return
			}
			for _, e := range []error{err, serr} {
				if !errors.Is(e, rpc.ErrUnauthenticated) || !strings.Contains(e.Error(), "bad or missing token") {
					t.Errorf("err = %v, want one wrapping ErrUnauthenticated with the check's message", e)
				}
			}
			wantChannel(t, c) // the refusal came over the tensor channel
		})
	}
}

// TestTLS: with Options.TLS on both ends calls work; a plaintext client
// cannot talk to a TLS server.
func TestTLS(t *testing.T) {
	srv, cli := testTLS(t)
	w := worker.New(worker.Config{Task: suiteTask})

	c := serveWorker(t, w, srv, cli)
	if st, err := c.GetStatus(ctxT(t), &pb.GetStatusRequest{}); err != nil || st.GetTask() != suiteTask {
		t.Errorf("GetStatus over TLS = %v, %v", st, err)
	}
	plain := serveWorker(t, w, srv, rpc.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := plain.GetStatus(ctx, &pb.GetStatusRequest{}); err == nil {
		t.Error("a plaintext client reached a TLS server")
	}
}

// TestWaitForTasks: tasks that come up late are waited for (and logged);
// tasks that never come up are named in the error at the deadline.
func TestWaitForTasks(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	late, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lateAddr := late.Addr().String()
	late.Close() // refused until the test serves it again
	never, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	neverAddr := never.Addr().String()
	never.Close()

	spec, err := cluster.NewSpec(map[string][]string{"ps": {up.Addr().String(), lateAddr}, "worker": {neverAddr}})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(l net.Listener, task string) {
		s := rpc.NewServer(rpc.Options{})
		rpc.RegisterWorker(s, worker.New(worker.Config{Task: task}))
		go s.Serve(l)
		t.Cleanup(s.Stop)
	}
	serve(up, "/job:ps/task:0")
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cache := rpc.NewWorkerCache(spec, "/job:client/task:0", nil, rpc.Options{Logger: log})
	defer cache.Close()

	t.Run("late task", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			done <- rpc.WaitForTasks(ctxT(t), cache, []string{"/job:ps/task:0", "/job:ps/task:1"}, log)
		}()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logs.String(), "waiting for /job:ps/task:1 at "+lateAddr) {
			if time.Now().After(deadline) {
				t.Fatalf("no log of the wait for /job:ps/task:1; logs:\n%s", logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		l, err := net.Listen("tcp", lateAddr)
		if err != nil {
			t.Skipf("cannot listen on %s again: %v", lateAddr, err)
		}
		serve(l, "/job:ps/task:1")
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("missing task", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := rpc.WaitForTasks(ctx, cache, []string{"/job:ps/task:0", "/job:worker/task:0"}, log)
		if !errors.Is(err, rpc.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) ||
			!strings.Contains(err.Error(), "/job:worker/task:0") || !strings.Contains(err.Error(), neverAddr) ||
			strings.Contains(err.Error(), "/job:ps/task:0") {
			t.Errorf("err = %v, want ErrUnavailable and DeadlineExceeded naming only /job:worker/task:0 and its address", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("WaitForTasks returned after %v, want about its 700ms deadline", d)
		}
	})

	t.Run("unknown task", func(t *testing.T) {
		if err := rpc.WaitForTasks(ctxT(t), cache, []string{"/job:nope/task:0"}, log); err == nil || !strings.Contains(err.Error(), "/job:nope/task:0") {
			t.Errorf("err = %v, want one naming the unknown task", err)
		}
	})
}

// TestLostTaskFailsFast: once a task of a WorkerCache has answered, a call
// that finds it gone fails at once with ErrUnavailable naming it, instead
// of waiting for it until the call's deadline; a task that comes back on
// the same address is called again.
func TestLostTaskFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	spec, err := cluster.NewSpec(map[string][]string{"ps": {addr}})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(l net.Listener) *rpc.Server {
		s := rpc.NewServer(rpc.Options{})
		rpc.RegisterWorker(s, worker.New(worker.Config{Task: "/job:ps/task:0"}))
		go s.Serve(l)
		t.Cleanup(s.Stop)
		return s
	}
	s := serve(l)
	cache := rpc.NewWorkerCache(spec, "/job:worker/task:0", nil, rpc.Options{})
	defer cache.Close()
	ps, err := cache.Worker("/job:ps/task:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps.GetStatus(ctxT(t), &pb.GetStatusRequest{}); err != nil {
		t.Fatal(err)
	}
	s.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"RunGraph", func() error {
			_, err := ps.RunGraph(ctx, &pb.RunGraphRequest{GraphHandle: "g", StepId: 1})
			return err
		}},
		{"RecvTensor", func() error { _, err := ps.RecvTensor(ctx, 1, "k"); return err }},
	} {
		err := call.do()
		if !errors.Is(err, rpc.ErrUnavailable) || !strings.Contains(err.Error(), "/job:ps/task:0") {
			t.Errorf("%s to the stopped task: %v, want ErrUnavailable naming /job:ps/task:0", call.name, err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the calls to the stopped task took %v, want them to fail at once, not wait for it", d)
	}

	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	serve(l)
	if err := rpc.WaitForTasks(ctxT(t), cache, []string{"/job:ps/task:0"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.GetStatus(ctxT(t), &pb.GetStatusRequest{}); err != nil {
		t.Errorf("GetStatus after the task came back: %v", err)
	}
}

// taskCreds names the calling task in every call's metadata, which
// identifyByHeader takes as the caller (a stand-in for a certificate).
type taskCreds string

func (c taskCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"x-task": string(c)}, nil
}
func (taskCreds) RequireTransportSecurity() bool { return false }

func identifyByHeader(ctx context.Context, method string) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-task"); len(v) == 1 {
		return v[0], nil
	}
	return "", errors.New("the call names no task")
}

// TestShutdownRefusedIsPermissionDenied: a Shutdown from a task other than
// the chief is answered PermissionDenied, and the client's error wraps
// service.ErrPermissionDenied; the chief's is obeyed.
func TestShutdownRefusedIsPermissionDenied(t *testing.T) {
	var stopped atomic.Int32
	w := worker.New(worker.Config{Task: suiteTask, ShutdownFrom: []string{"/job:worker/task:0"}, Logger: quiet,
		OnShutdown: func(string) { stopped.Add(1) }})
	srvOpts := rpc.Options{Identify: identifyByHeader}
	other := serveWorker(t, w, srvOpts, rpc.Options{PerRPCCredentials: taskCreds("/job:worker/task:1")})
	_, err := other.Shutdown(ctxT(t), &pb.ShutdownRequest{Reason: "not the chief"})
	var re *rpc.RemoteError
	if !errors.As(err, &re) || re.Code != codes.PermissionDenied || !errors.Is(err, service.ErrPermissionDenied) {
		t.Fatalf("Shutdown from worker 1: %v; want PermissionDenied wrapping service.ErrPermissionDenied", err)
	}
	if stopped.Load() != 0 {
		t.Fatal("the refused Shutdown stopped the task")
	}
	chief := serveWorker(t, w, srvOpts, rpc.Options{PerRPCCredentials: taskCreds("/job:worker/task:0")})
	if _, err := chief.Shutdown(ctxT(t), &pb.ShutdownRequest{Reason: "done"}); err != nil || stopped.Load() != 1 {
		t.Fatalf("Shutdown from the chief: %v (stopped %d times)", err, stopped.Load())
	}
}
