package server_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/metrics/metricstest"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/server"
)

// TestMetricsEndpoint starts a task with a metrics address, finds the
// endpoint through GetStatus over gRPC, and parses a scrape of it; a task
// without one reports an empty address, and a bad address is refused.
func TestMetricsEndpoint(t *testing.T) {
	tc := newTestCluster(t, map[string]int{"ps": 1, "worker": 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := server.New(server.Config{Cluster: tc.spec, Task: cluster.TaskID{Job: "ps"}, Listener: tc.lis["/job:ps/task:0"],
		Logger: quiet, MetricsAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Start(); err != nil {
		t.Fatal(err)
	}
	defer ps.Stop()
	w := tc.start(t, "worker", 0, nil)
	defer w.Stop()

	status := func(s *server.Server) *pb.GetStatusResponse {
		t.Helper()
		ws, conn, err := rpc.DialWorker(strings.TrimPrefix(s.Target(), "grpc://"), rpc.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		st, err := ws.GetStatus(ctx, &pb.GetStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	addr := status(ps).GetMetricsAddress()
	if addr == "" || addr != ps.MetricsAddress() {
		t.Fatalf("GetStatus metrics_address %q, server's %q", addr, ps.MetricsAddress())
	}
	if got := status(w).GetMetricsAddress(); got != "" || w.Metrics() != nil {
		t.Errorf("a task without metrics reports %q", got)
	}
	fams, err := metricstest.Scrape(ctx, "http://"+addr+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if err := fams.CheckTaskLabels("ps", "0"); err != nil {
		t.Error(err)
	}
	if fams["process_cpu_seconds_total"] == nil || fams["distflow_step_seconds"] == nil {
		t.Errorf("missing families; have %d", len(fams))
	}
	ps.Stop()
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Errorf("metrics still served at %s after Stop", addr)
	}

	_, err = server.New(server.Config{Cluster: tc.spec, Task: cluster.TaskID{Job: "ps"}, MetricsAddress: "9100"})
	if err == nil || !strings.Contains(err.Error(), "MetricsAddress") {
		t.Errorf("bad MetricsAddress: %v", err)
	}
}
