package server_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// TestCleanupWithADeadPSFailsFast: closing a session whose ps has died
// (its address refuses connections) returns at once, not after the close's
// deadline (3 s).
func TestCleanupWithADeadPSFailsFast(t *testing.T) {
	var lis []net.Listener
	var addrs []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis, addrs = append(lis, l), append(addrs, l.Addr().String())
	}
	spec, self, err := cluster.FromFlags(addrs[0], addrs[1], "", "worker", 0)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	start := func(task cluster.TaskID, l net.Listener) *server.Server {
		srv, err := server.New(server.Config{Cluster: spec, Task: task, Listener: l, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		return srv
	}
	ps := start(cluster.TaskID{Job: "ps", Index: 0}, lis[0])
	wk := start(self, lis[1])

	s := graph.NewScope()
	v := ops.NewVariable(s.WithDevice("/job:ps/task:0"), "v", tensor.Float32, nil, ops.ZerosInit())
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph(), session.WithMaster(wk.Master(), &pb.SessionConfig{DefaultDevice: self.String()}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Run(ctx, nil, []graph.Output{v.Value()}, nil); err != nil {
		t.Fatal(err)
	}
	ps.Stop()
	began := time.Now()
	err = sess.Close()
	if took := time.Since(began); took > time.Second {
		t.Errorf("closing the session took %v with the ps gone (%v), want well under the 3 s deadline", took, err)
	}
}
