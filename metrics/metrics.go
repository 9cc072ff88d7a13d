package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// The names of distflow's own series (besides the process_* and go_*
// collectors'), as a dashboard or an alert rule reads them. Every series
// also has the constant labels job and task.
const (
	StepSeconds                = "distflow_step_seconds"                  // histogram: one training step of this replica
	ExamplesTotal              = "distflow_examples_total"                // counter: examples this replica trained on
	GlobalStep                 = "distflow_global_step"                   // gauge: the global step last seen
	Loss                       = "distflow_loss"                          // gauge: the last step's loss
	EvalMetric                 = "distflow_eval_metric"                   // gauge{name}: the last evaluation's metrics
	RPCSeconds                 = "distflow_rpc_seconds"                   // histogram{peer,method}: calls this task made
	RPCSentBytesTotal          = "distflow_rpc_sent_bytes_total"          // counter{peer,method}: request bytes
	RPCReceivedBytesTotal      = "distflow_rpc_received_bytes_total"      // counter{peer,method}: response bytes
	TensorChannelBytesTotal    = "distflow_tensor_channel_bytes_total"    // counter{peer,direction}: tensor bytes
	SyncAggregationWaitSeconds = "distflow_sync_aggregation_wait_seconds" // histogram: waits for the other replicas' gradients
	StaleGradientsDropped      = "distflow_stale_gradients_dropped_total" // counter: gradients too old to apply
	CheckpointSaveSeconds      = "distflow_checkpoint_save_seconds"       // histogram: one checkpoint save
	CheckpointsSavedTotal      = "distflow_checkpoints_saved_total"       // counter: checkpoints saved
)

// Names lists distflow's own metric names, sorted.
var Names = []string{
	CheckpointSaveSeconds, CheckpointsSavedTotal, DeviceMemoryBytes, EvalMetric, ExamplesTotal, GlobalStep, Loss,
	RPCReceivedBytesTotal, RPCSeconds, RPCSentBytesTotal, StaleGradientsDropped, StepSeconds,
	SyncAggregationWaitSeconds, TensorChannelBytesTotal,
}

// Directions of TensorChannelBytesTotal.
const (
	Sent     = "sent"
	Received = "received"
)

// Task is the metrics of one task. Its methods are safe for concurrent use
// and do nothing on a nil *Task, so that code with metrics turned off
// needs no branches.
type Task struct {
	job   string
	index int
	reg   *prometheus.Registry

	stepSeconds     prometheus.Histogram
	examples        prometheus.Counter
	globalStep      prometheus.Gauge
	loss            prometheus.Gauge
	eval            *prometheus.GaugeVec
	rpcSeconds      *prometheus.HistogramVec
	rpcSent         *prometheus.CounterVec
	rpcReceived     *prometheus.CounterVec
	tensorBytes     *prometheus.CounterVec
	syncWait        prometheus.Histogram
	staleDropped    prometheus.Counter
	checkpointSave  prometheus.Histogram
	checkpointsSave prometheus.Counter

	devOnce sync.Once
	devices *deviceCollector // AddDevices

	mu       sync.RWMutex
	rpcs     map[rpcKey]*RPC
	channels map[string]*Channel
}

type rpcKey struct{ peer, method string }

// New returns the metrics of task index of job, in a registry of their
// own with the process and Go runtime collectors.
func New(job string, index int) *Task {
	t := &Task{job: job, index: index, reg: prometheus.NewRegistry(), rpcs: map[rpcKey]*RPC{}, channels: map[string]*Channel{}}
	r := prometheus.WrapRegistererWith(prometheus.Labels{"job": job, "task": strconv.Itoa(index)}, t.reg)
	// Steps take from a fraction of a millisecond (a small model in one
	// process) to many seconds (a large one waiting for its peers).
	stepBuckets := prometheus.ExponentialBuckets(0.0001, 2, 20) // 100 µs .. 52 s
	t.stepSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: StepSeconds,
		Help: "Duration of this replica's training steps (session run and hooks).", Buckets: stepBuckets})
	t.examples = prometheus.NewCounter(prometheus.CounterOpts{Name: ExamplesTotal,
		Help: "Training examples this replica consumed."})
	t.globalStep = prometheus.NewGauge(prometheus.GaugeOpts{Name: GlobalStep,
		Help: "The global step this replica last saw."})
	t.loss = prometheus.NewGauge(prometheus.GaugeOpts{Name: Loss,
		Help: "The loss of this replica's last step."})
	t.eval = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: EvalMetric,
		Help: "The metrics of the last evaluation, by name (accuracy, loss)."}, []string{"name"})
	t.rpcSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: RPCSeconds,
		Help: "Latency of the RPCs this task made, by peer (task or address) and method, seen by the caller.",
		// Half-decades: a task has a series per peer and method, so that
		// fewer buckets keep a large cluster's scrape small.
		Buckets: prometheus.ExponentialBucketsRange(0.0001, 10, 11)}, // 100 µs, 316 µs, 1 ms .. 10 s
		[]string{"peer", "method"})
	t.rpcSent = prometheus.NewCounterVec(prometheus.CounterOpts{Name: RPCSentBytesTotal,
		Help: "Bytes of the requests this task sent, by peer address and method (serialised messages)."}, []string{"peer", "method"})
	t.rpcReceived = prometheus.NewCounterVec(prometheus.CounterOpts{Name: RPCReceivedBytesTotal,
		Help: "Bytes of the responses this task received, by peer address and method (serialised messages)."}, []string{"peer", "method"})
	t.tensorBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: TensorChannelBytesTotal,
		Help: "Tensor bytes moved over the tensor channel, by peer and direction (sent: served to the peer, received: fetched from it)."},
		[]string{"peer", "direction"})
	t.syncWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: SyncAggregationWaitSeconds,
		Help: "Time a synchronous step waited for the other replicas' gradients.", Buckets: stepBuckets})
	t.staleDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: StaleGradientsDropped,
		Help: "Gradients dropped because they were computed for an older step."})
	t.checkpointSave = prometheus.NewHistogram(prometheus.HistogramOpts{Name: CheckpointSaveSeconds,
		Help: "Duration of checkpoint saves.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}) // 1 ms .. 131 s
	t.checkpointsSave = prometheus.NewCounter(prometheus.CounterOpts{Name: CheckpointsSavedTotal,
		Help: "Checkpoints saved."})
	r.MustRegister(t.stepSeconds, t.examples, t.globalStep, t.loss, t.eval, t.rpcSeconds, t.rpcSent, t.rpcReceived,
		t.tensorBytes, t.syncWait, t.staleDropped, t.checkpointSave, t.checkpointsSave,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return t
}

// Job returns the task's job ("" for a nil Task).
func (t *Task) Job() string {
	if t == nil {
		return ""
	}
	return t.job
}

// Index returns the task's index in its job.
func (t *Task) Index() int {
	if t == nil {
		return 0
	}
	return t.index
}

// Gatherer returns the task's registry, for tests and other exporters.
func (t *Task) Gatherer() prometheus.Gatherer {
	if t == nil {
		return prometheus.Gatherers{}
	}
	return t.reg
}

// ObserveStep records one training step of d that consumed examples.
func (t *Task) ObserveStep(d time.Duration, examples int) {
	if t == nil {
		return
	}
	t.stepSeconds.Observe(d.Seconds())
	t.examples.Add(float64(examples))
}

// SetGlobalStep records the global step last seen.
func (t *Task) SetGlobalStep(step int64) {
	if t != nil {
		t.globalStep.Set(float64(step))
	}
}

// SetLoss records the last step's loss.
func (t *Task) SetLoss(loss float64) {
	if t != nil {
		t.loss.Set(loss)
	}
}

// SetEval records an evaluation's metric (name: "accuracy", "loss", ...).
func (t *Task) SetEval(name string, v float64) {
	if t != nil {
		t.eval.WithLabelValues(name).Set(v)
	}
}

// ObserveCheckpoint records a checkpoint saved in d.
func (t *Task) ObserveCheckpoint(d time.Duration) {
	if t == nil {
		return
	}
	t.checkpointSave.Observe(d.Seconds())
	t.checkpointsSave.Inc()
}

// ObserveSyncWait records a synchronous step's wait for the other
// replicas' gradients.
func (t *Task) ObserveSyncWait(d time.Duration) {
	if t != nil {
		t.syncWait.Observe(d.Seconds())
	}
}

// AddStaleGradientsDropped counts n gradients dropped as stale.
func (t *Task) AddStaleGradientsDropped(n int) {
	if t != nil && n > 0 {
		t.staleDropped.Add(float64(n))
	}
}

// RPC is the series of one peer and method, resolved once (Task.RPC) so
// that recording a call allocates nothing. A nil *RPC records nothing.
type RPC struct {
	seconds  prometheus.Observer
	sent     prometheus.Counter
	received prometheus.Counter
}

// Observe records one call of d that sent and received so many bytes.
func (r *RPC) Observe(d time.Duration, sent, received int) {
	if r == nil {
		return
	}
	r.seconds.Observe(d.Seconds())
	if sent > 0 {
		r.sent.Add(float64(sent))
	}
	if received > 0 {
		r.received.Add(float64(received))
	}
}

// RPC returns the series of calls to peer (its address) of method (a gRPC
// method's short name, "RunGraph"), made once and then shared.
func (t *Task) RPC(peer, method string) *RPC {
	if t == nil {
		return nil
	}
	k := rpcKey{peer, method}
	t.mu.RLock()
	r := t.rpcs[k]
	t.mu.RUnlock()
	if r != nil {
		return r
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if r = t.rpcs[k]; r == nil {
		r = &RPC{seconds: t.rpcSeconds.WithLabelValues(peer, method),
			sent: t.rpcSent.WithLabelValues(peer, method), received: t.rpcReceived.WithLabelValues(peer, method)}
		t.rpcs[k] = r
	}
	return r
}

// Channel is the tensor channel's series of one peer. A nil *Channel
// records nothing.
type Channel struct {
	sent, received prometheus.Counter
}

// Sent counts n tensor bytes served to the peer.
func (c *Channel) Sent(n int) {
	if c != nil && n > 0 {
		c.sent.Add(float64(n))
	}
}

// Received counts n tensor bytes fetched from the peer.
func (c *Channel) Received(n int) {
	if c != nil && n > 0 {
		c.received.Add(float64(n))
	}
}

// TensorChannel returns the tensor channel's series of peer (an address
// or a task name), made once and then shared.
func (t *Task) TensorChannel(peer string) *Channel {
	if t == nil {
		return nil
	}
	t.mu.RLock()
	c := t.channels[peer]
	t.mu.RUnlock()
	if c != nil {
		return c
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c = t.channels[peer]; c == nil {
		c = &Channel{sent: t.tensorBytes.WithLabelValues(peer, Sent), received: t.tensorBytes.WithLabelValues(peer, Received)}
		t.channels[peer] = c
	}
	return c
}

func itoa(i int) string { return strconv.Itoa(i) }
