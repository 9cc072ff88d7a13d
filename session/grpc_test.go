package session_test

import (
	"context"
	"net"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/session/sessiontest"
	"github.com/distflow/distflow/worker/workertest"
)

// TestGRPCConformance runs the suite against grpc://: a master (over an
// in-process worker) served by package rpc on loopback.
func TestGRPCConformance(t *testing.T) {
	const task = "/job:localhost/task:0"
	net0 := workertest.NewCluster(task)
	m := master.New(master.Config{Task: task, Workers: net0.From(task)})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(rpc.Options{})
	rpc.RegisterMaster(srv, m)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	sessiontest.Test(t, func(t *testing.T, g *graph.Graph) *session.Session {
		s, err := session.Open(context.Background(), "grpc://"+lis.Addr().String(), g)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
