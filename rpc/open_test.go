package rpc_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/rpc/rpctest"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
)

// TestOpenSessionRefusesPlaintextOffLoopback: session.Open dials in
// plaintext, so it refuses a master that is not on loopback before any
// connection, and names the way to give the cluster's options.
func TestOpenSessionRefusesPlaintextOffLoopback(t *testing.T) {
	s := graph.NewScope()
	ops.Const(s, float32(1))
	for _, target := range []string{"grpc://10.0.0.1:2222", "grpc://[2001:db8::1]:2222", "grpc://ps0.example:2222"} {
		_, err := session.Open(context.Background(), target, s.Graph())
		if err == nil || !strings.Contains(err.Error(), "rpc.OpenSession") {
			t.Errorf("session.Open(%s): err = %v, want a refusal naming rpc.OpenSession", target, err)
		}
	}
}

// TestOpenSessionTLS: OpenSession reaches a task that serves TLS only with
// the options it is given; session.Open's plaintext to the same task fails.
func TestOpenSessionTLS(t *testing.T) {
	serverTLS, clientTLS := rpctest.SelfSignedTLS(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := cluster.NewSpec(map[string][]string{"worker": {lis.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Cluster: spec, Task: cluster.TaskID{Job: "worker"}, Listener: lis,
		RPC: rpc.Options{TLS: serverTLS}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	s := graph.NewScope()
	c := ops.Mul(s, ops.Const(s, float32(3)), ops.Const(s, float32(2)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	sess, err := rpc.OpenSession(ctx, srv.Target(), s.Graph(), rpc.Options{TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].Float32s()[0]; got != 6 {
		t.Errorf("3*2 = %v over TLS", got)
	}
	if err := sess.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}

	plain, err := session.Open(ctx, srv.Target(), s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if _, err := plain.Run(short, nil, []graph.Output{c}, nil); err == nil {
		t.Error("a plaintext session ran a step on a TLS-only task")
	}
}
