package rpc_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// BenchmarkRecvTensor measures the bandwidth of RecvTensor between two gRPC
// endpoints on loopback (a worker pulling a parameter from a ps). Each
// iteration runs a step that sends the tensor (timer stopped) and receives
// it over gRPC (timed).
func BenchmarkRecvTensor(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			s := &suite{svc: serveWorker(b, worker.New(worker.Config{Task: suiteTask}), rpc.Options{}, rpc.Options{})}
			h, key := s.sendGraph(b, func(sc *graph.Scope) graph.Output { return ops.Zeros(sc, tensor.Float32, size/4) })
			ctx := context.Background()
			b.SetBytes(int64(size))
			step := int64(0)
			for b.Loop() {
				b.StopTimer()
				step++
				s.runSend(b, h, step)
				b.StartTimer()
				if _, err := s.svc.RecvTensor(ctx, step, key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRunGraphTiny measures the round trip of a tiny RunGraph over
// gRPC on loopback: the per-step overhead of the transport.
func BenchmarkRunGraphTiny(b *testing.B) {
	s := &suite{svc: serveWorker(b, worker.New(worker.Config{Task: suiteTask}), rpc.Options{}, rpc.Options{})}
	h := s.register(b, "sess", func(sc *graph.Scope) {
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
		if _, err := s.svc.RunGraph(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
