//go:build unix

package rpc

import (
	"context"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/metrics"
	pb "github.com/distflow/distflow/proto/distflowpb"
)

// BenchmarkCallMetrics is the cost that metrics add to one unary call (a
// RunGraph with two small feeds, just marshalled as gRPC would) and to one
// tensor fetched over the channel, against calls that do nothing.
// cpu-ns/op, the process's CPU time per call, is the figure to read on a
// loaded machine, where ns/op also counts the time spent descheduled.
func BenchmarkCallMetrics(b *testing.B) {
	m := metrics.New("worker", 0)
	cm := &callMetrics{m: m, peer: "/job:ps/task:0"}
	x := &pb.TensorProto{Dtype: pb.DataType_DT_FLOAT32, Dims: []int64{1, 1}, Content: make([]byte, 4)}
	req := &pb.RunGraphRequest{SessionHandle: "session-1", GraphHandle: "graph-1", StepId: 7,
		Feeds: []*pb.NamedTensor{{Name: "x", Tensor: x}, {Name: "y", Tensor: x}}, Targets: []string{"train"}}
	reply := &pb.RunGraphResponse{}
	invoke := func(_ context.Context, _ string, req, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		return nil
	}
	ctx := context.Background()
	const method = "/distflow.WorkerService/RunGraph"
	if _, err := proto.Marshal(req); err != nil { // as gRPC does: fills the size cache
		b.Fatal(err)
	}
	b.Run("unary", func(b *testing.B) {
		b.ReportAllocs()
		c0 := processCPU()
		for b.Loop() {
			_ = cm.unary(ctx, method, req, reply, nil, invoke)
		}
		b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
	})
	p := &tensorPool{addr: "127.0.0.1:1", opts: Options{Metrics: m}}
	p.meterPool()
	b.Run("tensor-channel", func(b *testing.B) {
		b.ReportAllocs()
		c0 := processCPU()
		for b.Loop() {
			p.countReceived(time.Millisecond, 40, 27, 4096)
		}
		b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
	})
}

// processCPU is the user and system time of the process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
