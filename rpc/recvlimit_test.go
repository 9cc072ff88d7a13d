package rpc_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

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
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(opts)
	w := worker.New(worker.Config{Task: "/job:worker/task:0"})
	rpc.RegisterWorker(srv, w)
	rpc.RegisterMaster(srv, master.New(master.Config{Task: "/job:worker/task:0", Devices: []string{"/job:worker/task:0/cpu:0"}}))
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
