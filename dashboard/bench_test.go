package dashboard_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/distflow/distflow/dashboard"
	"github.com/distflow/distflow/internal/abtest"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/server"
)

// BenchmarkDashboardOverhead measures the cost of the dashboard to
// training (abtest.Compare), both sides with metrics on: "on" is watched by
// a dashboard that polls it as it does when serving (GetStatus and a
// /metrics scrape of each task, and a snapshot for the page), once a
// second of its turns, so that its polls count against them.
// DASHBOARD_BENCH_AA=1 polls neither: the control.
//
//	go test ./dashboard -run '^$' -bench DashboardOverhead -benchtime 3000x
func BenchmarkDashboardOverhead(b *testing.B) {
	withMetrics := func(c *server.Config) { c.MetricsAddress = "127.0.0.1:0" }
	off, on := abtest.Start(b, withMetrics), abtest.Start(b, withMetrics)
	prober := dashboard.NewRPCProber(rpc.Options{})
	b.Cleanup(func() { prober.Close() })
	dash, err := dashboard.New(dashboard.Config{Tasks: dashboard.TasksOf(on.Addresses()), Prober: prober, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	dash.SetGraph(dashboard.FromGraph(on.Graph, "/job:worker/task:0"))
	aa := os.Getenv("DASHBOARD_BENCH_AA") != ""
	var lastPoll time.Time
	polls := 0
	poll := func() { // as Dashboard.Run does every Interval
		if aa || time.Since(lastPoll) < pollEvery() {
			return
		}
		lastPoll = time.Now()
		dash.Poll(context.Background())
		polls++
	}
	abtest.Compare(b, off, on, poll)
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

// BenchmarkPoll is one poll of a 1 ps + 1 worker cluster with metrics on:
// what the dashboard costs the machine every Interval, client and tasks.
//
//	go test ./dashboard -run '^$' -bench 'Poll$' -benchmem
func BenchmarkPoll(b *testing.B) {
	c := abtest.Start(b, func(c *server.Config) { c.MetricsAddress = "127.0.0.1:0" })
	prober := dashboard.NewRPCProber(rpc.Options{})
	b.Cleanup(func() { prober.Close() })
	d, err := dashboard.New(dashboard.Config{Tasks: dashboard.TasksOf(c.Addresses()), Prober: prober, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	d.Poll(ctx)
	b.ResetTimer()
	c0 := abtest.CPUTime()
	for range b.N {
		d.Poll(ctx)
	}
	b.ReportMetric(float64((abtest.CPUTime()-c0).Microseconds())/float64(b.N), "cpu-µs/poll")
}
