//go:build unix

package metrics_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/distflow/distflow/metrics"
)

// BenchmarkScrape is the cost of one scrape of a task that talks to 16
// peers with 8 methods each (Gather and the text encoding, as a
// Prometheus scrape runs them; the process and Go collectors included),
// and BenchmarkObserveStep that of recording one training step.
// cpu-ns/op, the process's CPU time per operation, is the figure to read
// on a loaded machine.
func BenchmarkScrape(b *testing.B) {
	m := metrics.New("worker", 3)
	for p := range 16 {
		peer := fmt.Sprintf("/job:worker/task:%d", p)
		for _, method := range []string{"RunGraph", "RecvTensor", "RegisterGraph", "CleanupStep", "GetStatus", "RunStep", "CreateSession", "Chunks"} {
			m.RPC(peer, method).Observe(time.Millisecond, 100, 100)
		}
		m.TensorChannel(peer).Received(100)
	}
	h := m.Handler()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	b.ReportAllocs()
	c0 := processCPU()
	var size int
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
		size = w.Body.Len()
	}
	b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(size), "bytes/scrape")
}

func BenchmarkObserveStep(b *testing.B) {
	m := metrics.New("worker", 3)
	var step int64
	c0 := processCPU()
	for b.Loop() {
		step++
		m.ObserveStep(time.Millisecond, 100)
		m.SetGlobalStep(step)
		m.SetLoss(0.5)
	}
	b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the user and system time of the process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
