package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/pki"
	"github.com/distflow/distflow/placement"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// benchCluster is a ps in its own distflow process and a worker task served
// in the benchmark's process, whose master the benchmark's session uses:
// what a worker of a real cluster does.
type benchCluster struct {
	spec   *cluster.Spec
	worker *server.Server
	psPID  int
}

func newBenchCluster(b *testing.B) *benchCluster {
	b.Helper()
	files, addrs := freeListeners(b, 2)
	spec, err := cluster.NewSpec(map[string][]string{"ps": {addrs[0]}, "worker": {addrs[1]}})
	if err != nil {
		b.Fatal(err)
	}
	psArgs := []string{"train", "--ps_hosts", addrs[0], "--worker_hosts", addrs[1], "--job_name", "ps", "--task_index", "0"}
	// DISTFLOW_BENCH_TLS=1 gives both tasks certificates: every connection
	// uses mutual TLS, as a cluster started with --certs-dir does.
	var certs string
	if os.Getenv("DISTFLOW_BENCH_TLS") != "" {
		certs = b.TempDir()
		if _, err := pki.Create(pki.CreateConfig{Dir: certs, Spec: spec}); err != nil {
			b.Fatal(err)
		}
		psArgs = append(psArgs, "--certs-dir", certs)
	}
	ps := startTestTask(b, "ps", files[0], psArgs...)
	ps.waitLine(b, "serving", 30*time.Second)
	l, err := net.FileListener(files[1])
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil)) // keep benchmark lines whole
	opts, err := pki.Security{CertsDir: certs}.TaskOptions(spec, cluster.TaskID{Job: "worker"}, quiet)
	if err != nil {
		b.Fatal(err)
	}
	// DISTFLOW_BENCH_GRPC_ONLY=1 turns the worker's tensor channel off:
	// both directions then move over gRPC (the ps falls back to it).
	opts.NoTensorChannel = os.Getenv("DISTFLOW_BENCH_GRPC_ONLY") != ""
	srv, err := server.New(server.Config{Cluster: spec, Task: cluster.TaskID{Job: "worker"}, Listener: l, Logger: quiet, RPC: opts})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	return &benchCluster{spec: spec, worker: srv, psPID: ps.cmd.Process.Pid}
}

func (c *benchCluster) session(b *testing.B, g *graph.Graph) *session.Session {
	sess, err := session.New(g, session.WithMaster(c.worker.Master(), &pb.SessionConfig{StepTimeoutMs: 60000}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sess.Close() })
	return sess
}

// cpuTime is the CPU time (user and system) used so far by the benchmark's
// process and the ps process together, from /proc (Linux; ok is false
// elsewhere). Unlike bandwidth it holds on a busy machine.
func (c *benchCluster) cpuTime() (d time.Duration, ok bool) {
	for _, pid := range []string{"self", strconv.Itoa(c.psPID)} {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return 0, false
		}
		// Fields after the command name, which ends at the last ')':
		// utime and stime are the 12th and 13th, in clock ticks (100 a second).
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 13 {
			return 0, false
		}
		for _, v := range f[11:13] {
			ticks, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, false
			}
			d += time.Duration(ticks) * 10 * time.Millisecond
		}
	}
	return d, true
}

// BenchmarkParameterTransfer moves a float32 variable between a ps process
// and a worker (the benchmark's process) as training does: pull (the
// worker reads the ps's variable: Send on the ps, RecvTensor from the
// worker) and push (the ps assigns it a worker variable's value: RecvTensor
// from the ps). fetch and feed (64 MiB only) are a client's session moving
// the same tensor: pull and push plus the copies of fetching it from the
// step or feeding it into the step. MB/s is the bandwidth; cpu-ms/op the
// CPU time of both processes per transfer (see cpuTime).
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
		u := ops.NewVariable(onWorker, "u_"+size.name, tensor.Float32, []int{n}, ops.ConstantInit(1.5))
		pull := ops.Identity(onWorker, v.Value())
		push := ops.Assign(onPS, v.Value(), ops.Identity(onWorker, u.Value()))
		x := ops.Placeholder(onWorker, "x", tensor.Float32, tensor.MakeShape(n))
		feed := ops.Assign(onPS, v.Value(), ops.Identity(onWorker, x))
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
		bench := func(name string, run func() error) {
			b.Run(name+"/"+size.name, func(b *testing.B) {
				b.SetBytes(int64(size.bytes))
				for range 3 { // warm up: connections, buffers, the heap's size
					if err := run(); err != nil {
						b.Fatal(err)
					}
				}
				cpu0, cpuOK := c.cpuTime()
				for b.Loop() {
					if err := run(); err != nil {
						b.Fatal(err)
					}
				}
				if cpu1, ok := c.cpuTime(); ok && cpuOK {
					b.ReportMetric((cpu1-cpu0).Seconds()*1e3/float64(b.N), "cpu-ms/op")
				}
			})
		}
		bench("pull", func() error {
			_, err := sess.Run(ctx, nil, nil, []*graph.Node{pull.Node})
			return err
		})
		bench("push", func() error {
			_, err := sess.Run(ctx, nil, nil, []*graph.Node{push.Node})
			return err
		})
		if size.name != "64MiB" {
			continue
		}
		bench("fetch", func() error {
			_, err := sess.Run(ctx, nil, []graph.Output{pull}, nil)
			return err
		})
		bench("feed", func() error {
			_, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: value}, nil, []*graph.Node{feed.Node})
			return err
		})
	}
}

// BenchmarkLinearRegressionStep is the per-step overhead of training through
// a cluster (variables on a ps process) against the local session, batch 1.
// cpu-µs/step is the CPU time of both processes of the cluster per step
// (see cpuTime), which holds on a busy machine where the time does not.
func BenchmarkLinearRegressionStep(b *testing.B) {
	x := tensor.MustFromSlice([]float32{0.5}, 1, 1)
	y := tensor.MustFromSlice([]float32{11}, 1, 1)
	bench := func(b *testing.B, s *graph.Scope, open func(g *graph.Graph) *session.Session, cpuTime func() (time.Duration, bool)) {
		m, err := models.Build(s, "linreg", models.Config{Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		trainOp, err := train.Minimize(s, train.NewGradientDescent(0.01), m.Loss, train.CreateGlobalStep(s))
		if err != nil {
			b.Fatal(err)
		}
		initOp := ops.GlobalVariablesInitializer(s)
		sess := open(s.Graph())
		ctx := context.Background()
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{initOp}); err != nil {
			b.Fatal(err)
		}
		feeds := map[graph.Output]*tensor.Tensor{m.Input: x, m.Label: y}
		step := func() {
			if _, err := sess.Run(ctx, feeds, []graph.Output{m.Loss}, []*graph.Node{trainOp}); err != nil {
				b.Fatal(err)
			}
		}
		step()
		took := make([]time.Duration, b.N) // for the median, which a slow tail does not move; made before the timer
		b.ResetTimer()
		var cpu0 time.Duration
		cpuOK := cpuTime != nil
		if cpuOK {
			cpu0, cpuOK = cpuTime()
		}
		for i := 0; i < b.N; i++ {
			start := time.Now()
			step()
			took[i] = time.Since(start)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/step")
		slices.Sort(took)
		b.ReportMetric(float64(took[b.N/2].Nanoseconds())/1e3, "median-µs/step")
		if cpuOK {
			if cpu1, ok := cpuTime(); ok {
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/step")
			}
		}
	}
	b.Run("local", func(b *testing.B) {
		bench(b, graph.NewScope(), func(g *graph.Graph) *session.Session {
			sess, err := session.New(g)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { sess.Close() })
			return sess
		}, nil)
	})
	b.Run("cluster", func(b *testing.B) {
		c := newBenchCluster(b)
		s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
			PSTasks: 1, WorkerDevice: "/job:worker/task:0"}))
		bench(b, s, func(g *graph.Graph) *session.Session { return c.session(b, g) }, c.cpuTime)
	})
}
