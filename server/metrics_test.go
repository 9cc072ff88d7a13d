package server_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/internal/abtest"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/metrics"
	"github.com/distflow/distflow/metrics/metricstest"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
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

// TestTransportMetrics trains the linear model across a ps and a worker
// that both serve metrics, and checks that the transport's series move
// between two scrapes: the worker's calls to the ps (RunGraph, by task
// name) and the tensors each side moved over the tensor channel.
func TestTransportMetrics(t *testing.T) {
	tc := newTestCluster(t, map[string]int{"ps": 1, "worker": 1})
	ctx := ctxTimeout(t, 30*time.Second)
	start := func(job string) *server.Server {
		s, err := server.New(server.Config{Cluster: tc.spec, Task: cluster.TaskID{Job: job}, Listener: tc.lis["/job:"+job+"/task:0"],
			Logger: quiet, MetricsAddress: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		return s
	}
	ps, w := start("ps"), start("worker")
	g, init := abtest.LinearModel(t, 0)
	sess, err := session.Open(ctx, w.Target(), g)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	steps := func(n int) {
		for range n {
			if _, err := sess.RunNamed(ctx, map[string]*tensor.Tensor{
				"x": tensor.MustFromSlice([]float32{0.5}, 1, 1), "y": tensor.MustFromSlice([]float32{2}, 1, 1),
			}, nil, []string{"train"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	scrape := func(s *server.Server) metricstest.Families {
		fams, err := metricstest.Scrape(ctx, "http://"+s.MetricsAddress()+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return fams
	}
	steps(3)
	w1, ps1 := scrape(w), scrape(ps)
	steps(5)
	w2, ps2 := scrape(w), scrape(ps)
	toPS := map[string]string{"peer": "/job:ps/task:0", "method": "RunGraph"}
	for _, c := range []struct {
		what         string
		before, then metricstest.Families
		name         string
		labels       map[string]string
	}{
		{"worker's RunGraph calls to the ps", w1, w2, "distflow_rpc_seconds", toPS},
		{"worker's RunGraph request bytes to the ps", w1, w2, "distflow_rpc_sent_bytes_total", toPS},
		// A training step's RunGraph returns nothing: the response bytes
		// are the tensors the worker fetched.
		{"worker's RecvTensor bytes from the ps", w1, w2, "distflow_rpc_received_bytes_total", map[string]string{"peer": "/job:ps/task:0", "method": "RecvTensor"}},
		{"worker's tensor bytes fetched from the ps", w1, w2, "distflow_tensor_channel_bytes_total", map[string]string{"peer": "/job:ps/task:0", "direction": "received"}},
		{"ps's tensor bytes fetched from the worker", ps1, ps2, "distflow_tensor_channel_bytes_total", map[string]string{"peer": "/job:worker/task:0", "direction": "received"}},
		{"ps's tensor bytes served", ps1, ps2, "distflow_tensor_channel_bytes_total", map[string]string{"direction": "sent"}},
	} {
		a, b := c.before.Sum(c.name, c.labels), c.then.Sum(c.name, c.labels)
		if !(a > 0 && b > a) {
			t.Errorf("%s: %s%v went %v -> %v, want a positive count that grows", c.what, c.name, c.labels, a, b)
		}
	}
	if t.Failed() {
		for _, m := range w2["distflow_rpc_seconds"].GetMetric() {
			t.Logf("worker rpc series: %v", m.GetLabel())
		}
		for _, m := range ps2["distflow_tensor_channel_bytes_total"].GetMetric() {
			t.Logf("ps channel series: %v", m.GetLabel())
		}
	}
}

// TestMetricsEndpointOutlivesServer gives a task an endpoint it does not
// own (an estimator's): GetStatus reports it, Stop leaves it serving, and a
// config with both an address and an endpoint is refused.
func TestMetricsEndpointOutlivesServer(t *testing.T) {
	tc := newTestCluster(t, map[string]int{"worker": 1})
	ctx := ctxTimeout(t, 10*time.Second)
	m := metrics.New("worker", 0)
	ep, err := metrics.Listen("127.0.0.1:0", m, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	id := cluster.TaskID{Job: "worker"}
	s, err := server.New(server.Config{Cluster: tc.spec, Task: id, Listener: tc.lis[id.String()], Logger: quiet, Metrics: m, MetricsEndpoint: ep})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ws, conn, err := rpc.DialWorker(strings.TrimPrefix(s.Target(), "grpc://"), rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := ws.GetStatus(ctx, &pb.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetMetricsAddress() != ep.Addr() || s.Metrics() != m {
		t.Errorf("GetStatus metrics_address %q, want the endpoint's %q", st.GetMetricsAddress(), ep.Addr())
	}
	s.Stop()
	if _, err := metricstest.Scrape(ctx, ep.URL()); err != nil {
		t.Errorf("the endpoint stopped with the server: %v", err)
	}
	_, err = server.New(server.Config{Cluster: tc.spec, Task: id, MetricsAddress: "127.0.0.1:0", MetricsEndpoint: ep})
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("an address and an endpoint: %v", err)
	}
}

// TestTransportMetricsOverGRPC is TestTransportMetrics with the tensor
// channel off: tensors stream over gRPC, and the RecvTensor streams' calls
// and bytes are recorded by the client's stream interceptor.
func TestTransportMetricsOverGRPC(t *testing.T) {
	tc := newTestCluster(t, map[string]int{"ps": 1, "worker": 1})
	ctx := ctxTimeout(t, 30*time.Second)
	var w *server.Server
	for _, job := range []string{"ps", "worker"} {
		s, err := server.New(server.Config{Cluster: tc.spec, Task: cluster.TaskID{Job: job}, Listener: tc.lis["/job:"+job+"/task:0"],
			Logger: quiet, MetricsAddress: "127.0.0.1:0", RPC: rpc.Options{NoTensorChannel: true}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		w = s
	}
	g, init := abtest.LinearModel(t, 0)
	sess, err := session.Open(ctx, w.Target(), g)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := sess.RunNamed(ctx, map[string]*tensor.Tensor{
			"x": tensor.MustFromSlice([]float32{0.5}, 1, 1), "y": tensor.MustFromSlice([]float32{2}, 1, 1),
		}, nil, []string{"train"}); err != nil {
			t.Fatal(err)
		}
	}
	fams, err := metricstest.Scrape(ctx, "http://"+w.MetricsAddress()+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	recv := map[string]string{"peer": "/job:ps/task:0", "method": "RecvTensor"}
	// W and b (4 bytes each) at least, every step.
	if calls, bytes := fams.Sum(metrics.RPCSeconds, recv), fams.Sum(metrics.RPCReceivedBytesTotal, recv); calls < 10 || bytes < 40 {
		t.Errorf("RecvTensor over gRPC: %v calls, %v bytes received; want at least 10 and 40", calls, bytes)
	}
	if v := fams.Sum(metrics.TensorChannelBytesTotal, nil); v != 0 {
		t.Errorf("%v bytes over a tensor channel that is off", v)
	}
}
