//go:build unix

package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// BenchmarkMetricsOverhead measures the cost of metrics to training: the
// linear model's step (batch 1, the smallest step, where a fixed cost per
// call weighs most) through a remote session on a 1 ps + 1 worker cluster
// on loopback, on two such clusters side by side, one with metrics off and
// one with them on, taking turns every 100 steps (each going first in
// every other turn) so that both see the same machine load. "on" serves
// /metrics on both tasks, records every step as the estimator does, and is
// scraped every scrapeEvery (within its turns, so that serving the scrapes
// counts against it). b.N is the steps of each. It reports both
// throughputs (wall time) and the CPU time of the process per step, and
// the cost of each in percent: on a loaded machine the CPU time is the
// steadier figure; calls/step is the RPCs recorded per step.
//
//	go test ./server -run '^$' -bench MetricsOverhead -benchtime 4000x -count 5
//	DISTFLOW_METRICS_AA=1 go test ./server -run '^$' -bench MetricsOverhead -benchtime 4000x -count 5
func BenchmarkMetricsOverhead(b *testing.B) {
	feeds := map[string]*tensor.Tensor{"x": tensor.MustFromSlice([]float32{0.5}, 1, 1), "y": tensor.MustFromSlice([]float32{2}, 1, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type setup struct {
		sess    *session.Session
		servers []*server.Server
		took    time.Duration
		cpu     time.Duration // of the whole process while it ran
		step    int64
	}
	start := func(on bool) *setup {
		var lis [2]net.Listener
		for i := range lis {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			lis[i] = l
		}
		spec, err := cluster.NewSpec(map[string][]string{"ps": {lis[0].Addr().String()}, "worker": {lis[1].Addr().String()}})
		if err != nil {
			b.Fatal(err)
		}
		st := &setup{}
		for i, id := range []cluster.TaskID{{Job: "ps"}, {Job: "worker"}} {
			cfg := server.Config{Cluster: spec, Task: id, Listener: lis[i], Logger: quiet}
			if on {
				cfg.MetricsAddress = "127.0.0.1:0"
			}
			s, err := server.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Stop)
			st.servers = append(st.servers, s)
		}
		g, init := linearModel(b, 0)
		if st.sess, err = session.Open(ctx, st.servers[1].Target(), g); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.sess.Close() })
		if _, err := st.sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
			b.Fatal(err)
		}
		return st
	}
	// DISTFLOW_METRICS_AA=1 runs both with metrics off: a control of the
	// noise and of any bias between the two clusters.
	off, on := start(false), start(os.Getenv("DISTFLOW_METRICS_AA") != "1")
	var lastScrape time.Time
	scrape := func() { // as a Prometheus scraping every 5 s (a third of its default interval) would
		if time.Since(lastScrape) < scrapeEvery {
			return
		}
		lastScrape = time.Now()
		for _, s := range on.servers {
			// The task's part only: reading the text is the scraper's work.
			resp, err := http.Get("http://" + s.MetricsAddress() + "/metrics")
			if err != nil {
				b.Fatal(err)
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatal(resp.Status, err)
			}
		}
	}
	steps := func(st *setup, n int) {
		m := st.servers[1].Metrics() // nil when off: records nothing
		t0, c0 := time.Now(), cpuTime()
		if m != nil {
			scrape()
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
	off.took, on.took, off.cpu, on.cpu = 0, 0, 0, 0
	b.ResetTimer()
	const turn = 100
	for done := 0; done < b.N; done += turn {
		n := min(turn, b.N-done)
		if done/turn%2 == 0 { // either goes first as often
			steps(off, n)
			steps(on, n)
		} else {
			steps(on, n)
			steps(off, n)
		}
	}
	offRate, onRate := float64(b.N)/off.took.Seconds(), float64(b.N)/on.took.Seconds()
	b.ReportMetric(offRate, "off-examples/s")
	b.ReportMetric(onRate, "on-examples/s")
	b.ReportMetric(100*(1-onRate/offRate), "cost-%")
	offCPU, onCPU := off.cpu.Seconds()*1e6/float64(b.N), on.cpu.Seconds()*1e6/float64(b.N)
	b.ReportMetric(offCPU, "off-cpu-µs/step")
	b.ReportMetric(onCPU, "on-cpu-µs/step")
	b.ReportMetric(100*(onCPU/offCPU-1), "cpu-cost-%")
	// The calls recorded per step (both tasks), to weigh with the cost of
	// recording one (rpc's BenchmarkCallMetrics).
	var calls uint64
	for _, s := range on.servers {
		if s.Metrics() == nil { // the control
			continue
		}
		fams, err := s.Metrics().Gatherer().Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == "distflow_rpc_seconds" {
				for _, m := range f.GetMetric() {
					calls += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	b.ReportMetric(float64(calls)/float64(on.step), "calls/step")
}

// scrapeEvery is how often BenchmarkMetricsOverhead scrapes: a third of
// Prometheus' default interval (15 s).
const scrapeEvery = 5 * time.Second

// cpuTime is the user and system time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
