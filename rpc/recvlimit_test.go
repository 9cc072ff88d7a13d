package rpc_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/metadata"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/worker"
)

// allocated returns the bytes allocated so far (runtime.MemStats.TotalAlloc),
// after a collection.
func allocated() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// serveTask serves a worker and a master on loopback with opts and returns
// the address.
func serveTask(t *testing.T, opts rpc.Options) string {
	return serveTaskWith(t, opts, worker.Config{}, master.Config{})
}

// serveTaskWith is serveTask with the worker's and master's configs.
func serveTaskWith(t *testing.T, opts rpc.Options, wc worker.Config, mc master.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(opts)
	wc.Task = "/job:worker/task:0"
	rpc.RegisterWorker(srv, worker.New(wc))
	mc.Task, mc.Devices = "/job:worker/task:0", []string{"/job:worker/task:0/cpu:0"}
	rpc.RegisterMaster(srv, master.New(mc))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestDefaultReceiveLimit: with the default Options a server refuses a
// request that says it is larger than DefaultMaxRecvMessageBytes from its
// length prefix, with codes.ResourceExhausted, without reading or
// allocating it. The request is written by hand (HTTP/2 without TLS): a
// gRPC message header announcing the size, and 1 MiB of it.
func TestDefaultReceiveLimit(t *testing.T) {
	addr := serveTask(t, rpc.Options{})
	client := &http.Client{Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	defer client.CloseIdleConnections()
	body := make([]byte, 5+1<<20)
	binary.BigEndian.PutUint32(body[1:5], rpc.DefaultMaxRecvMessageBytes+1)
	for _, method := range []string{"/distflow.WorkerService/RegisterGraph", "/distflow.MasterService/CreateSession"} {
		t.Run(method, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+method, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/grpc")
			req.Header.Set("TE", "trailers")
			before, start := allocated(), time.Now()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			took, grown := time.Since(start), allocated()-before
			status := resp.Trailer.Get("Grpc-Status") + resp.Header.Get("Grpc-Status")
			msg := resp.Trailer.Get("Grpc-Message") + resp.Header.Get("Grpc-Message")
			t.Logf("status %s %q in %v, %d bytes allocated", status, msg, took, grown)
			if status != "8" { // codes.ResourceExhausted
				t.Errorf("a request announcing %d bytes: status %s %q, want 8 (ResourceExhausted)", rpc.DefaultMaxRecvMessageBytes+1, status, msg)
			}
			if grown > 32<<20 {
				t.Errorf("refusing it allocated %d bytes", grown)
			}
		})
	}
}

// TestOversizedGraphRefusedUnread: a RegisterGraph or CreateSession larger
// than the server's Options.MaxMessageBytes, sent by a client of the
// package, fails with ResourceExhausted before the server reads it: what is
// allocated is the client's encoding of the request (twice its size), where
// a server that reads and decodes it allocates 5 to 7 times its size.
func TestOversizedGraphRefusedUnread(t *testing.T) {
	addr := serveTask(t, rpc.Options{MaxMessageBytes: rpc.MinMessageBytes})
	s := graph.NewScope()
	ops.ConstNamed(s, "c", make([]float32, 4*rpc.MinMessageBytes/4)) // 4 times the limit
	gd := s.Graph().ToProto()
	size := uint64(4 * rpc.MinMessageBytes)
	ws, wc, err := rpc.DialWorker(addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	ms, mc, err := rpc.DialMaster(addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	calls := map[string]func() error{
		"RegisterGraph": func() error {
			_, err := ws.RegisterGraph(ctx, &pb.RegisterGraphRequest{SessionHandle: "s", Graph: gd})
			return err
		},
		"CreateSession": func() error {
			_, err := ms.CreateSession(ctx, &pb.CreateSessionRequest{Graph: gd})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			before, start := allocated(), time.Now()
			err := call()
			took, grown := time.Since(start), allocated()-before
			t.Logf("%v in %v, %d bytes allocated for a request of %d", err, took, grown, size)
			if err == nil || !strings.Contains(err.Error(), "ResourceExhausted") && !strings.Contains(err.Error(), "larger than max") {
				t.Errorf("a request of %d bytes to a server receiving %d: %v, want ResourceExhausted", size, rpc.MinMessageBytes, err)
			}
			if grown > 3*size {
				t.Errorf("%d bytes allocated for a request of %d: the server read it", grown, size)
			}
		})
	}
}

// TestLimitsPerNamedCaller: over gRPC, the worker's and the master's limits
// count per caller as the transport names it (Options.Identify), whatever
// names a caller gives its sessions.
func TestLimitsPerNamedCaller(t *testing.T) {
	identify := func(ctx context.Context, method string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("test-caller"); len(v) == 1 {
			return v[0], nil
		}
		return "", errors.New("no caller")
	}
	addr := serveTaskWith(t, rpc.Options{Identify: identify}, worker.Config{MaxCallerSessions: 2}, master.Config{MaxSessions: 1})
	ws, wc, err := rpc.DialWorker(addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	ms, mc, err := rpc.DialMaster(addr, rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	as := func(caller string) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		return metadata.AppendToOutgoingContext(ctx, "test-caller", caller)
	}
	gd := graph.NewScope().Graph().ToProto()
	register := func(caller, session string) error {
		_, err := ws.RegisterGraph(as(caller), &pb.RegisterGraphRequest{SessionHandle: session, Graph: gd})
		return err
	}
	for _, session := range []string{"a", "b"} {
		if err := register("/job:worker/task:1", session); err != nil {
			t.Fatalf("session %s: %v", session, err)
		}
	}
	if err := register("/job:worker/task:1", "c"); err == nil || !strings.Contains(err.Error(), "worker.Config.MaxCallerSessions") || !strings.Contains(err.Error(), "/job:worker/task:1") {
		t.Errorf("a third session of one caller: %v, want an error naming the caller and worker.Config.MaxCallerSessions", err)
	}
	if err := register("/job:worker/task:2", "c"); err != nil {
		t.Errorf("a session of another caller: %v", err)
	}
	if _, err := ms.CreateSession(as("client:tool"), &pb.CreateSessionRequest{Graph: gd}); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.CreateSession(as("client:tool"), &pb.CreateSessionRequest{Graph: gd}); err == nil || !strings.Contains(err.Error(), "master.Config.MaxSessions") {
		t.Errorf("a second session of one tool: %v, want an error naming master.Config.MaxSessions", err)
	}
	if _, err := ms.CreateSession(as("client:other"), &pb.CreateSessionRequest{Graph: gd}); err != nil {
		t.Errorf("a session of another tool: %v", err)
	}
}
