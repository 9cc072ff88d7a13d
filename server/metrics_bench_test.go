package server_test

import (
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/distflow/distflow/internal/abtest"
	"github.com/distflow/distflow/server"
)

// BenchmarkMetricsOverhead measures the cost of metrics to training
// (abtest.Compare): "on" serves /metrics on both tasks, records every
// step as the estimator does, and is scraped every scrapeEvery within its
// turns, so that serving the scrapes counts against it. calls/step is the
// RPCs recorded per step, to weigh with the cost of recording one (rpc's
// BenchmarkCallMetrics). DISTFLOW_METRICS_AA=1 runs both sides without
// metrics: the control.
//
//	go test ./server -run '^$' -bench MetricsOverhead -benchtime 4000x -count 5
//	DISTFLOW_METRICS_AA=1 go test ./server -run '^$' -bench MetricsOverhead -benchtime 4000x -count 5
func BenchmarkMetricsOverhead(b *testing.B) {
	metricsOn := func(c *server.Config) { c.MetricsAddress = "127.0.0.1:0" }
	if os.Getenv("DISTFLOW_METRICS_AA") == "1" {
		metricsOn = nil
	}
	off, on := abtest.Start(b, nil), abtest.Start(b, metricsOn)
	var lastScrape time.Time
	scrape := func() { // as a Prometheus scraping every scrapeEvery would
		if on.Servers[1].Metrics() == nil || time.Since(lastScrape) < scrapeEvery {
			return
		}
		lastScrape = time.Now()
		for _, s := range on.Servers {
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
	abtest.Compare(b, off, on, scrape)
	var calls uint64
	for _, s := range on.Servers {
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
	b.ReportMetric(float64(calls)/float64(on.Steps()), "calls/step")
}

// scrapeEvery is how often BenchmarkMetricsOverhead scrapes: a third of
// Prometheus' default interval (15 s).
const scrapeEvery = 5 * time.Second
