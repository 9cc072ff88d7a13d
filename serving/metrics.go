package serving

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/tensor"
)

// DefaultMetricsPath is where a Server answers Prometheus' scrapes: TF
// Serving's path (its monitoring config's prometheus_config.path).
const DefaultMetricsPath = "/monitoring/prometheus/metrics"

// The series a Server exports, under TF Serving's names (its /tensorflow/...
// metrics with '/' made ':', as its Prometheus exporter writes them), so
// that dashboards and alerts written for TF Serving read them unchanged.
// Latencies are in microseconds, as TF Serving's.
const (
	RequestCount    = ":tensorflow:serving:request_count"                    // counter{model_name,status}: predict requests by outcome
	RequestLatency  = ":tensorflow:serving:request_latency"                  // histogram{model_name,API,entrypoint}: a predict request, read to written
	RuntimeLatency  = ":tensorflow:serving:runtime_latency"                  // histogram{model_name,API,runtime}: one run of the model (a batch)
	QueuingLatency  = ":tensorflow:serving:batching_session:queuing_latency" // histogram{thread_pool_name}: a request's wait for its batch to run
	runtimeName     = "distflow"
	restEntrypoint  = "REST"
	predictAPI      = "predict"
	statusOK        = "OK"
	latencyBuckets0 = 10 // µs; TF Serving's Buckets::Exponential(10, 1.8, 33), up to about 20 minutes
)

// metricFamilies are the series of one process's servers, in a registry
// of their own with the process and Go runtime collectors.
type metricFamilies struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	runtime  *prometheus.HistogramVec
	queuing  *prometheus.HistogramVec
}

func newMetricFamilies() *metricFamilies {
	buckets := prometheus.ExponentialBuckets(latencyBuckets0, 1.8, 33)
	for i, b := range buckets { // 188.9568, not 188.95680000000002, in the scrapes
		buckets[i], _ = strconv.ParseFloat(strconv.FormatFloat(b, 'g', 8, 64), 64)
	}
	f := &metricFamilies{reg: prometheus.NewRegistry()}
	f.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: RequestCount, Help: "The total number of requests."},
		[]string{"model_name", "status"})
	f.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: RequestLatency,
		Help: "Distribution of wall time (in microseconds) for Tensorflow Serving request.", Buckets: buckets},
		[]string{"model_name", "API", "entrypoint"})
	f.runtime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: RuntimeLatency,
		Help: "Distribution of wall time (in microseconds) for Tensorflow runtime.", Buckets: buckets},
		[]string{"model_name", "API", "runtime"})
	f.queuing = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: QueuingLatency,
		Help: "Distribution of wall time (in microseconds) spent in the batching queue.", Buckets: buckets},
		[]string{"thread_pool_name"})
	f.reg.MustRegister(f.requests, f.latency, f.runtime, f.queuing,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return f
}

// handler answers scrapes of the registry.
func (f *metricFamilies) handler() http.Handler {
	return promhttp.HandlerFor(f.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// serverMetrics are one model's series. The model name is the only label
// a request chooses, and only the served models are counted, so that
// clients cannot grow the series without bound. Its methods do nothing on
// nil.
type serverMetrics struct {
	requests *prometheus.CounterVec
	ok       prometheus.Counter
	latency  prometheus.Observer
	runtime  prometheus.Observer
	queuing  prometheus.Observer
}

// model returns the series of the model called name.
func (f *metricFamilies) model(name string) *serverMetrics {
	return &serverMetrics{
		requests: f.requests,
		ok:       f.requests.WithLabelValues(name, statusOK),
		latency:  f.latency.WithLabelValues(name, predictAPI, restEntrypoint),
		runtime:  f.runtime.WithLabelValues(name, predictAPI, runtimeName),
		queuing:  f.queuing.WithLabelValues(name),
	}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// request counts a predict request of the served model that started at
// start and ended with herr (nil: answered 200).
func (m *serverMetrics) request(model string, start time.Time, herr *httpError) {
	if m == nil {
		return
	}
	m.latency.Observe(micros(time.Since(start)))
	if herr == nil {
		m.ok.Inc()
		return
	}
	m.requests.WithLabelValues(model, statusName(herr.status, herr.cause)).Inc()
}

// run records one run of the model, which took d.
func (m *serverMetrics) run(d time.Duration) {
	if m != nil {
		m.runtime.Observe(micros(d))
	}
}

// predict runs p on inputs and records the run.
func (m *serverMetrics) predict(ctx context.Context, p *savedmodel.Predictor, inputs map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	start := time.Now()
	out, err := p.Predict(ctx, inputs)
	m.run(time.Since(start))
	return out, err
}

// queued records a request's wait in the batching queue.
func (m *serverMetrics) queued(d time.Duration) {
	if m != nil {
		m.queuing.Observe(micros(d))
	}
}

// statusName is the gRPC status code (by name, as TF Serving's
// request_count labels them) of an answer with HTTP status status, the
// mapping of TF Serving's REST gateway read backwards; cause, when known,
// tells a deadline from a cancellation.
func statusName(status int, cause error) string {
	switch {
	case errors.Is(cause, context.DeadlineExceeded):
		return "DEADLINE_EXCEEDED"
	case errors.Is(cause, context.Canceled):
		return "CANCELLED"
	}
	switch status {
	case http.StatusOK:
		return statusOK
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusRequestEntityTooLarge:
		return "RESOURCE_EXHAUSTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusMethodNotAllowed:
		return "UNIMPLEMENTED"
	}
	return "INTERNAL"
}
