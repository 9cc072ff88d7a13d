package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// benchCluster is a ps in its own distflow process and a worker task served
// in the benchmark's process, whose master the benchmark's session uses:
// what a worker of a real cluster does.
type benchCluster struct {
	spec   *cluster.Spec
	worker *server.Server
}

func newBenchCluster(b *testing.B) *benchCluster {
	b.Helper()
	files, addrs := freeListeners(b, 2)
	ps := startTestTask(b, "ps", files[0], "train", "--ps_hosts", addrs[0], "--worker_hosts", addrs[1],
		"--job_name", "ps", "--task_index", "0")
	ps.waitLine(b, "serving", 30*time.Second)
	spec, err := cluster.NewSpec(map[string][]string{"ps": {addrs[0]}, "worker": {addrs[1]}})
	if err != nil {
		b.Fatal(err)
	}
	l, err := inheritedListenerFromFile(files[1])
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil)) // keep benchmark lines whole
	srv, err := server.New(server.Config{Cluster: spec, Task: cluster.TaskID{Job: "worker"}, Listener: l, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	return &benchCluster{spec: spec, worker: srv}
}

func (c *benchCluster) session(b *testing.B, g *graph.Graph) *session.Session {
	sess, err := session.New(g, session.WithMaster(c.worker.Master(), &pb.SessionConfig{StepTimeoutMs: 60000}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sess.Close() })
	return sess
}

// BenchmarkParameterTransfer moves a float32 variable between a ps process
// and a worker: pull (the worker reads the variable: Send on the ps, Recv
// over gRPC on the worker) and push (the worker feeds a tensor assigned to
// the variable on the ps). MB/s is the bandwidth.
func BenchmarkParameterTransfer(b *testing.B) {
	c := newBenchCluster(b)
	ctx := context.Background()
	for _, size := range []struct {
		name  string
		bytes int
	}{{"4KiB", 4 << 10}, {"1MiB", 1 << 20}, {"64MiB", 64 << 20}} {
		n := size.bytes / 4
		s := graph.NewScope()
		onPS, onWorker := s.WithDevice("/job:ps/task:0"), s.WithDevice("/job:worker/task:0")
		v := ops.NewVariable(onPS, "v_"+size.name, tensor.Float32, []int{n}, ops.ZerosInit())
		pull := ops.Identity(onWorker, v.Value())
		x := ops.Placeholder(onWorker, "x", tensor.Float32, tensor.MakeShape(n))
		push := ops.Assign(onPS, v.Value(), ops.Identity(onWorker, x))
		init := ops.GlobalVariablesInitializer(s)
		if err := s.Err(); err != nil {
			b.Fatal(err)
		}
		sess := c.session(b, s.Graph())
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
			b.Fatal(err)
		}
		value := tensor.New(tensor.Float32, n)
		for i := range value.Float32s() {
			value.Float32s()[i] = float32(i)
		}
		b.Run("pull/"+size.name, func(b *testing.B) {
			b.SetBytes(int64(size.bytes))
			for i := 0; i < b.N; i++ {
				if _, err := sess.Run(ctx, nil, []graph.Output{pull}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("push/"+size.name, func(b *testing.B) {
			b.SetBytes(int64(size.bytes))
			for i := 0; i < b.N; i++ {
				if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: value}, nil, []*graph.Node{push.Node}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLinearRegressionStep is the per-step overhead of training through
// a cluster (variables on a ps process) against the local session, batch 1.
func BenchmarkLinearRegressionStep(b *testing.B) {
	f := trainFlags{model: "linreg", staleness: -1}
	if err := f.applyDefaults(); err != nil {
		b.Fatal(err)
	}
	x := tensor.MustFromSlice([]float32{0.5}, 1, 1)
	y := tensor.MustFromSlice([]float32{11}, 1, 1)
	bench := func(b *testing.B, s *graph.Scope, open func(g *graph.Graph) *session.Session) {
		j, err := buildJob(s, f, []string{""}, 1, 0)
		if err != nil {
			b.Fatal(err)
		}
		sess := open(s.Graph())
		ctx := context.Background()
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{j.initOp}); err != nil {
			b.Fatal(err)
		}
		feeds := map[graph.Output]*tensor.Tensor{j.towers[0].Input: x, j.towers[0].Label: y}
		step := func() {
			if _, err := sess.Run(ctx, feeds, []graph.Output{j.towers[0].Loss}, []*graph.Node{j.trainOp}); err != nil {
				b.Fatal(err)
			}
		}
		step()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			step()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/step")
	}
	b.Run("local", func(b *testing.B) {
		bench(b, graph.NewScope(), func(g *graph.Graph) *session.Session {
			sess, err := session.New(g)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { sess.Close() })
			return sess
		})
	})
	b.Run("cluster", func(b *testing.B) {
		c := newBenchCluster(b)
		s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
			PSTasks: 1, WorkerDevice: "/job:worker/task:0"}))
		bench(b, s, func(g *graph.Graph) *session.Session { return c.session(b, g) })
	})
}
