package rpc

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/distflow/distflow/metrics"
	pb "github.com/distflow/distflow/proto/distflowpb"
)

// TestCallMetricsAllocs checks that recording a unary call on its
// connection's resolved series allocates nothing beyond the call itself.
func TestCallMetricsAllocs(t *testing.T) {
	m := metrics.New("worker", 0)
	cm := &callMetrics{m: m, peer: "/job:ps/task:0"}
	req := &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: "g", StepId: 7}
	reply := &pb.RunGraphResponse{}
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ctx := context.Background()
	const method = "/distflow.WorkerService/RunGraph"
	if err := cm.unary(ctx, method, req, reply, nil, invoke); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(200, func() { _ = cm.unary(ctx, method, req, reply, nil, invoke) }); n != 0 {
		t.Errorf("%v allocations per recorded call, want 0", n)
	}
	if r := m.RPC("/job:ps/task:0", "RunGraph"); r != cm.series(method) {
		t.Error("the connection's series are not the task's")
	}
}

// TestNoMetricsNoInterceptors checks that Options without Metrics add
// nothing to a connection.
func TestNoMetricsNoInterceptors(t *testing.T) {
	if do := (Options{}).metricsDialOptions("127.0.0.1:1"); len(do) != 0 {
		t.Errorf("%d dial options without metrics", len(do))
	}
	o := Options{Metrics: metrics.New("ps", 0), metricsPeer: "/job:worker/task:1"}
	if got := o.peerLabel("127.0.0.1:1"); got != "/job:worker/task:1" {
		t.Errorf("peer label %q", got)
	}
}
