package pki_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/pki"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/service"
	"github.com/distflow/distflow/worker"
)

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// claiming sends what creds send, but claims to come from task.
type claiming struct {
	creds credentials.PerRPCCredentials
	task  string
}

func (c claiming) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	md, err := c.creds.GetRequestMetadata(ctx, uri...)
	md = maps.Clone(md)
	md["distflow-task"] = c.task
	return md, err
}

func (c claiming) RequireTransportSecurity() bool { return false }

func claim(opts rpc.Options, task string) rpc.Options {
	opts.PerRPCCredentials = claiming{opts.PerRPCCredentials, task}
	return opts
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTokenIdentities: with a cluster token alone, a caller is the task or
// tool whose credential it presents, not the one it names. A real task
// (the ps, whose Shutdown only the chief may ask for) is served on
// loopback; a tool holding the token, or a tool token, that claims to be
// the chief is refused (PermissionDenied) and cannot stop it, run graphs
// or read its status; so is worker 1 claiming to be the chief; the chief
// itself stops it, and the task's log says who asked.
func TestTokenIdentities(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	spec, ps, err := cluster.FromFlags(addr, "127.0.0.1:1,127.0.0.1:2", "", "ps", 0)
	if err != nil {
		t.Fatal(err)
	}
	chief := cluster.TaskID{Job: "worker", Index: 0}
	token := writeFile(t, "token", "a-shared-secret-of-the-cluster-0123\n")
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	opts, err := pki.Security{TokenFile: token}.TaskOptions(spec, ps, log)
	if err != nil {
		t.Fatal(err)
	}
	opts.Logger = log
	var stopped atomic.Int32
	w := worker.New(worker.Config{Task: ps.String(), ShutdownFrom: []string{chief.String()}, Logger: log,
		OnShutdown: func(string) { stopped.Add(1) }})
	srv := rpc.NewServer(opts)
	rpc.RegisterWorker(srv, w)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	dial := func(t *testing.T, o rpc.Options) worker.Service {
		t.Helper()
		ws, c, err := rpc.DialWorker(addr, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return ws
	}
	ctx := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	taskOpts := func(t *testing.T, task cluster.TaskID) rpc.Options {
		o, err := pki.Security{TokenFile: token}.TaskOptions(spec, task, log)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	tool, err := pki.Security{TokenFile: token}.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	toolToken := filepath.Join(t.TempDir(), "tool.token")
	if err := pki.WriteToolToken(token, toolToken); err != nil {
		t.Fatal(err)
	}
	toolOnly, err := pki.Security{TokenFile: toolToken}.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		opts rpc.Options
		who  string // whose credential the refusal names
	}{
		{"a tool with the cluster token", claim(tool, chief.String()), "a tool"},
		{"a tool with a tool token", claim(toolOnly, chief.String()), "a tool"},
		{"worker 1", claim(taskOpts(t, cluster.TaskID{Job: "worker", Index: 1}), chief.String()), "/job:worker/task:1"},
	} {
		t.Run(tc.name+" as the chief", func(t *testing.T) {
			ws := dial(t, tc.opts)
			_, err := ws.Shutdown(ctx(t), &pb.ShutdownRequest{Reason: "an impostor"})
			if !errors.Is(err, service.ErrPermissionDenied) || !strings.Contains(err.Error(), "credential is "+tc.who+"'s") {
				t.Errorf("Shutdown: %v; want PermissionDenied naming %s", err, tc.who)
			}
			if stopped.Load() != 0 {
				t.Fatal("the impostor's Shutdown stopped the task")
			}
			if _, err := ws.RunGraph(ctx(t), &pb.RunGraphRequest{GraphHandle: "g", StepId: 1}); !errors.Is(err, service.ErrPermissionDenied) {
				t.Errorf("RunGraph: %v; want PermissionDenied", err)
			}
			if _, err := ws.GetStatus(ctx(t), &pb.GetStatusRequest{}); !errors.Is(err, service.ErrPermissionDenied) {
				t.Errorf("GetStatus: %v; want PermissionDenied", err)
			}
		})
	}

	t.Run("a tool as itself", func(t *testing.T) {
		for _, o := range []rpc.Options{tool, toolOnly} {
			ws := dial(t, o)
			if _, err := ws.GetStatus(ctx(t), &pb.GetStatusRequest{}); err != nil {
				t.Errorf("GetStatus: %v", err)
			}
			if _, err := ws.RunGraph(ctx(t), &pb.RunGraphRequest{GraphHandle: "g", StepId: 1}); !errors.Is(err, rpc.ErrUnauthenticated) {
				t.Errorf("RunGraph: %v; want a refusal", err)
			}
			if _, err := ws.Shutdown(ctx(t), &pb.ShutdownRequest{}); err == nil || stopped.Load() != 0 {
				t.Errorf("Shutdown: %v (stopped %d times); want a refusal", err, stopped.Load())
			}
		}
	})

	t.Run("a tool token is not a cluster token", func(t *testing.T) {
		if _, err := (pki.Security{TokenFile: toolToken}).TaskOptions(spec, chief, log); err == nil {
			t.Error("a task started with a tool token")
		}
	})

	t.Run("the token itself as a credential", func(t *testing.T) {
		// What tasks sent before credentials were derived: refused.
		raw := claim(rpc.Options{PerRPCCredentials: rawToken("a-shared-secret-of-the-cluster-0123")}, chief.String())
		_, err := dial(t, raw).Shutdown(ctx(t), &pb.ShutdownRequest{})
		if !errors.Is(err, rpc.ErrUnauthenticated) || stopped.Load() != 0 {
			t.Errorf("Shutdown: %v; want Unauthenticated", err)
		}
	})

	t.Run("the chief", func(t *testing.T) {
		if _, err := dial(t, taskOpts(t, chief)).Shutdown(ctx(t), &pb.ShutdownRequest{Reason: "done"}); err != nil || stopped.Load() != 1 {
			t.Fatalf("Shutdown: %v (stopped %d times)", err, stopped.Load())
		}
		if l := logs.String(); !strings.Contains(l, "caller=/job:worker/task:0 reason=done") {
			t.Errorf("the task's log does not say who stopped it:\n%s", l)
		}
	})
	if l := logs.String(); !strings.Contains(l, "claims to come from /job:worker/task:0, but its credential is /job:worker/task:1's") {
		t.Errorf("the refusals are not logged with who asked:\n%s", l)
	}
}

// rawToken sends a token as it is.
type rawToken string

func (r rawToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"distflow-cluster-token": string(r)}, nil
}

func (rawToken) RequireTransportSecurity() bool { return false }
