// Package abtest measures what a feature costs training, as a same-run A/B
// benchmark: two 1 ps + 1 worker clusters on loopback train the linear
// model (batch 1: the smallest step, where a fixed cost weighs most)
// through remote sessions, side by side, taking turns, so that both see the
// same machine load. One runs without the feature ("off"), one with it
// ("on"); running both without it is the control (A/A) that says what the
// machine's noise alone makes of the comparison.
package abtest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// Cluster is one side of a comparison: a ps and a worker, and a session
// on the worker's master that has initialized the linear model.
type Cluster struct {
	Servers []*server.Server // the ps, then the worker
	Graph   *graph.Graph
	addrs   map[string][]string
	sess    *session.Session

	took  time.Duration // wall time of the measured turns
	cpu   time.Duration // the process's CPU time during them
	steps int64
}

// Start starts a cluster on loopback. configure, when not nil, adjusts
// each task's server configuration before it starts.
func Start(tb testing.TB, configure func(*server.Config)) *Cluster {
	tb.Helper()
	var lis [2]net.Listener
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		lis[i] = l
	}
	addrs := map[string][]string{"ps": {lis[0].Addr().String()}, "worker": {lis[1].Addr().String()}}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{addrs: addrs}
	for i, id := range []cluster.TaskID{{Job: "ps"}, {Job: "worker"}} {
		cfg := server.Config{Cluster: spec, Task: id, Listener: lis[i], Logger: slog.New(slog.DiscardHandler)}
		if configure != nil {
			configure(&cfg)
		}
		s, err := server.New(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		if err := s.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(s.Stop)
		c.Servers = append(c.Servers, s)
	}
	g, init := LinearModel(tb, 0)
	c.Graph = g
	ctx := context.Background()
	if c.sess, err = session.Open(ctx, c.Servers[1].Target(), g); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.sess.Close() })
	if _, err := c.sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		tb.Fatal(err)
	}
	return c
}

// Addresses is the cluster's spec as job -> task addresses.
func (c *Cluster) Addresses() map[string][]string { return c.addrs }

var feeds = map[string]*tensor.Tensor{"x": tensor.MustFromSlice([]float32{0.5}, 1, 1), "y": tensor.MustFromSlice([]float32{2}, 1, 1)}

// run trains n steps and records each on the worker's metrics (when it
// has them) as the estimator's loop does. before runs first and counts in
// the turn's time: a feature's periodic work (a scrape, a poll).
func (c *Cluster) run(tb testing.TB, n int, before func()) {
	m := c.Servers[1].Metrics() // nil records nothing
	t0, c0 := time.Now(), CPUTime()
	if before != nil {
		before()
	}
	ctx := context.Background()
	for range n {
		start := time.Now()
		if _, err := c.sess.RunNamed(ctx, feeds, nil, []string{"train"}); err != nil {
			tb.Fatal(err)
		}
		c.steps++
		m.ObserveStep(time.Since(start), 1)
		m.SetGlobalStep(c.steps)
		m.SetLoss(0.5)
	}
	c.took += time.Since(t0)
	c.cpu += CPUTime() - c0
}

// Steps is how many steps the cluster has trained.
func (c *Cluster) Steps() int64 { return c.steps }

// Compare runs b.N steps on each side in turns of 100, either side going
// first in every other turn, after 100 steps of warm-up each (executors,
// connections). beforeOn is the "on" side's periodic work, run at the
// start of each of its turns. It reports both throughputs (wall time), the
// process's CPU time per step, and the cost of each in percent: on a
// loaded machine the CPU time is the steadier figure.
func Compare(b *testing.B, off, on *Cluster, beforeOn func()) {
	off.run(b, 100, nil)
	on.run(b, 100, beforeOn)
	for _, c := range []*Cluster{off, on} {
		c.took, c.cpu = 0, 0
	}
	b.ResetTimer()
	const turn = 100
	for done := 0; done < b.N; done += turn {
		n := min(turn, b.N-done)
		if done/turn%2 == 0 {
			off.run(b, n, nil)
			on.run(b, n, beforeOn)
		} else {
			on.run(b, n, beforeOn)
			off.run(b, n, nil)
		}
	}
	b.StopTimer()
	offRate, onRate := float64(b.N)/off.took.Seconds(), float64(b.N)/on.took.Seconds()
	b.ReportMetric(offRate, "off-steps/s")
	b.ReportMetric(onRate, "on-steps/s")
	b.ReportMetric(100*(1-onRate/offRate), "cost-%")
	offCPU, onCPU := off.cpu.Seconds()*1e6/float64(b.N), on.cpu.Seconds()*1e6/float64(b.N)
	b.ReportMetric(offCPU, "off-cpu-µs/step")
	b.ReportMetric(onCPU, "on-cpu-µs/step")
	b.ReportMetric(100*(onCPU/offCPU-1), "cpu-cost-%")
}

// LinearModel builds y = x*W + b with W and b on the ps, a squared loss
// and a gradient-descent update ("train"), for worker task; feeds "x" and
// "y" are 1x1.
func LinearModel(tb testing.TB, task int) (g *graph.Graph, init *graph.Node) {
	tb.Helper()
	s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
		PSTasks: 1, WorkerDevice: fmt.Sprintf("/job:worker/task:%d", task)}))
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(1, 1))
	y := ops.Placeholder(s, "y", tensor.Float32, tensor.MakeShape(1, 1))
	w := ops.NewVariable(s, "W", tensor.Float32, []int{1, 1}, ops.ZerosInit())
	b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
	pred := ops.Add(s, ops.MatMul(s, x, w.Value(), false, false), b.Value())
	loss := ops.Mean(s, ops.Square(s, ops.Sub(s, pred, y)), nil, false)
	grads, err := grad.Gradients(s, []graph.Output{loss}, []graph.Output{w.Value(), b.Value()}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	lr := ops.Scalar(s, tensor.Float32, 0.02)
	ops.Group(s, "train",
		ops.ApplyGradientDescent(s, w.Value(), lr, grads[0]),
		ops.ApplyGradientDescent(s, b.Value(), lr, grads[1]))
	init = ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		tb.Fatal(err)
	}
	return s.Graph(), init
}
