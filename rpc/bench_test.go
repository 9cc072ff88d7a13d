package rpc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// BenchmarkRecvTensor measures the bandwidth of RecvTensor between two
// endpoints on loopback (a worker pulling a parameter from a ps), over the
// tensor channel and over gRPC. Each iteration runs a step that sends the
// tensor (timer stopped) and receives it (timed). cpu-ms/op is the CPU time
// of both ends together (the process's user and system time), which holds
// on a busy machine where the bandwidth does not.
func BenchmarkRecvTensor(b *testing.B) {
	for _, path := range []struct {
		name string
		cli  rpc.Options
	}{{"channel", rpc.Options{}}, {"grpc", rpc.Options{NoTensorChannel: true}}} {
		for _, size := range []int{4 << 10, 1 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", path.name, size>>10), func(b *testing.B) {
				s := &suite{Svc: serveWorker(b, worker.New(worker.Config{Task: suiteTask}), rpc.Options{}, path.cli)}
				h, key := s.SendGraph(b, func(sc *graph.Scope) graph.Output { return ops.Zeros(sc, tensor.Float32, size/4) })
				ctx := context.Background()
				b.SetBytes(int64(size))
				step := int64(0)
				var cpu time.Duration
				for b.Loop() {
					b.StopTimer()
					step++
					s.RunSend(b, h, step)
					start := cpuTime()
					b.StartTimer()
					if _, err := s.Svc.RecvTensor(ctx, step, key); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					cpu += cpuTime() - start
					b.StartTimer()
				}
				b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// BenchmarkRunGraphTiny measures the round trip of a tiny RunGraph over
// gRPC on loopback: the per-step overhead of the transport.
func BenchmarkRunGraphTiny(b *testing.B) {
	s := &suite{Svc: serveWorker(b, worker.New(worker.Config{Task: suiteTask}), rpc.Options{}, rpc.Options{})}
	h := s.Register(b, "sess", func(sc *graph.Scope) {
		x := ops.Placeholder(sc, "x", tensor.Float32, tensor.MakeShape(1))
		sc.AddNode("Identity", "y", []graph.Output{ops.Add(sc, x, x)}, nil)
	})
	req := &pb.RunGraphRequest{SessionHandle: "sess", GraphHandle: h,
		Feeds:   []*pb.NamedTensor{{Name: "x:0", Tensor: graph.TensorToProto(tensor.MustFromSlice([]float32{1}, 1))}},
		Fetches: []string{"y:0"}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		req.StepId++
		if _, err := s.Svc.RunGraph(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
