//go:build unix

package dashboard_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/dashboard"
	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// BenchmarkDashboardOverhead measures the cost of the dashboard to
// training: the linear model's step (batch 1, the smallest step, where a
// fixed cost per second weighs most) through a remote session on a 1 ps +
// 1 worker cluster on loopback with metrics on, on two such clusters side
// by side, one watched by a dashboard and one not, taking turns every 100
// steps so that both see the same machine load. The dashboard polls its
// cluster as it does when serving (GetStatus and a /metrics scrape of each
// task, and a snapshot for the page), once a second of the "on" turns, so
// that its polls count against them. b.N is the steps of each. It reports
// both throughputs (wall time), the CPU time of the process per step, and
// the cost of each in percent: on a loaded machine the CPU time is the
// steadier figure. DASHBOARD_BENCH_AA=1 polls neither (the control: what
// the machine's noise alone makes of the same comparison).
//
//	go test ./dashboard -run '^$' -bench DashboardOverhead -benchtime 3000x
func BenchmarkDashboardOverhead(b *testing.B) {
	quiet := slog.New(slog.DiscardHandler)
	feeds := map[string]*tensor.Tensor{"x": tensor.MustFromSlice([]float32{0.5}, 1, 1), "y": tensor.MustFromSlice([]float32{2}, 1, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type setup struct {
		sess    *session.Session
		servers []*server.Server
		dash    *dashboard.Dashboard
		took    time.Duration
		cpu     time.Duration // of the whole process while it ran
		step    int64
	}
	start := func() *setup {
		var lis [2]net.Listener
		for i := range lis {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			lis[i] = l
		}
		addrs := map[string][]string{"ps": {lis[0].Addr().String()}, "worker": {lis[1].Addr().String()}}
		spec, err := cluster.NewSpec(addrs)
		if err != nil {
			b.Fatal(err)
		}
		st := &setup{}
		for i, id := range []cluster.TaskID{{Job: "ps"}, {Job: "worker"}} {
			s, err := server.New(server.Config{Cluster: spec, Task: id, Listener: lis[i], Logger: quiet, MetricsAddress: "127.0.0.1:0"})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Stop)
			st.servers = append(st.servers, s)
		}
		prober := dashboard.NewRPCProber(rpc.Options{})
		b.Cleanup(func() { prober.Close() })
		if st.dash, err = dashboard.New(dashboard.Config{Tasks: dashboard.TasksOf(addrs), Prober: prober, Logger: quiet}); err != nil {
			b.Fatal(err)
		}
		g, init := linearModel(b)
		st.dash.SetGraph(dashboard.FromGraph(g, "/job:worker/task:0"))
		if st.sess, err = session.Open(ctx, st.servers[1].Target(), g); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.sess.Close() })
		if _, err := st.sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
			b.Fatal(err)
		}
		return st
	}
	off, on := start(), start()
	var lastPoll time.Time
	polls := 0
	// The control polls neither.
	aa := os.Getenv("DASHBOARD_BENCH_AA") != ""
	// poll polls as Dashboard.Run does every Interval.
	poll := func() {
		if aa || time.Since(lastPoll) < pollEvery() {
			return
		}
		lastPoll = time.Now()
		on.dash.Poll(ctx)
		polls++
	}
	steps := func(st *setup, n int) {
		m := st.servers[1].Metrics()
		t0, c0 := time.Now(), cpuTime()
		if st == on {
			poll()
		}
		for range n {
			start := time.Now()
			if _, err := st.sess.RunNamed(ctx, feeds, nil, []string{"train"}); err != nil {
				b.Fatal(err)
			}
			st.step++
			m.ObserveStep(time.Since(start), 1) // as the estimator's loop does
			m.SetGlobalStep(st.step)
			m.SetLoss(0.5)
		}
		st.took += time.Since(t0)
		st.cpu += cpuTime() - c0
	}
	steps(off, 100) // warm-up: executors, connections
	steps(on, 100)
	off.took, on.took, off.cpu, on.cpu, polls = 0, 0, 0, 0, 0
	b.ResetTimer()
	const turn = 100
	for done := 0; done < b.N; done += turn {
		n := min(turn, b.N-done)
		steps(off, n)
		steps(on, n)
	}
	offRate, onRate := float64(b.N)/off.took.Seconds(), float64(b.N)/on.took.Seconds()
	b.ReportMetric(offRate, "off-steps/s")
	b.ReportMetric(onRate, "on-steps/s")
	b.ReportMetric(100*(1-onRate/offRate), "cost-%")
	offCPU, onCPU := off.cpu.Seconds()*1e6/float64(b.N), on.cpu.Seconds()*1e6/float64(b.N)
	b.ReportMetric(offCPU, "off-cpu-µs/step")
	b.ReportMetric(onCPU, "on-cpu-µs/step")
	b.ReportMetric(100*(onCPU/offCPU-1), "cpu-cost-%")
	b.ReportMetric(float64(polls), "polls")
}

// pollEvery is dashboard.DefaultInterval, or $DASHBOARD_BENCH_POLL (to
// magnify the cost of a poll when looking for it).
func pollEvery() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("DASHBOARD_BENCH_POLL")); err == nil {
		return d
	}
	return dashboard.DefaultInterval
}

// cpuTime is the user and system time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// linearModel builds y = x*W + b with W and b on the ps, a squared loss
// and a gradient-descent update ("train"), for worker 0.
func linearModel(b *testing.B) (g *graph.Graph, init *graph.Node) {
	s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
		PSTasks: 1, WorkerDevice: "/job:worker/task:0"}))
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(1, 1))
	y := ops.Placeholder(s, "y", tensor.Float32, tensor.MakeShape(1, 1))
	w := ops.NewVariable(s, "W", tensor.Float32, []int{1, 1}, ops.ZerosInit())
	bias := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
	pred := ops.Add(s, ops.MatMul(s, x, w.Value(), false, false), bias.Value())
	loss := ops.Mean(s, ops.Square(s, ops.Sub(s, pred, y)), nil, false)
	grads, err := grad.Gradients(s, []graph.Output{loss}, []graph.Output{w.Value(), bias.Value()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	lr := ops.Scalar(s, tensor.Float32, 0.02)
	ops.Group(s, "train",
		ops.ApplyGradientDescent(s, w.Value(), lr, grads[0]),
		ops.ApplyGradientDescent(s, bias.Value(), lr, grads[1]))
	init = ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		b.Fatal(err)
	}
	return s.Graph(), init
}

// BenchmarkPoll is one poll of a 1 ps + 1 worker cluster with metrics on:
// what the dashboard costs the machine every Interval, client and tasks.
//
//	go test ./dashboard -run '^$' -bench 'Poll$' -benchmem
func BenchmarkPoll(b *testing.B) {
	quiet := slog.New(slog.DiscardHandler)
	var lis [2]net.Listener
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lis[i] = l
	}
	addrs := map[string][]string{"ps": {lis[0].Addr().String()}, "worker": {lis[1].Addr().String()}}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		b.Fatal(err)
	}
	for i, id := range []cluster.TaskID{{Job: "ps"}, {Job: "worker"}} {
		s, err := server.New(server.Config{Cluster: spec, Task: id, Listener: lis[i], Logger: quiet, MetricsAddress: "127.0.0.1:0"})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Stop)
	}
	prober := dashboard.NewRPCProber(rpc.Options{})
	b.Cleanup(func() { prober.Close() })
	d, err := dashboard.New(dashboard.Config{Tasks: dashboard.TasksOf(addrs), Prober: prober, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	d.Poll(ctx)
	b.ResetTimer()
	c0 := cpuTime()
	for range b.N {
		d.Poll(ctx)
	}
	b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/poll")
}
