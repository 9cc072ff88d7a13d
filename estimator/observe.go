package estimator

import (
	"os"
	"sync"
	"time"

	"github.com/distflow/distflow/localcluster"
	"github.com/distflow/distflow/metrics"
	"github.com/distflow/distflow/train"
)

// The training side of a task's Prometheus metrics (package metrics):
// step times, examples, the global step and loss, evaluation metrics and
// checkpoint saves, on the same registry as the task's transport series.
// The estimator owns the endpoint, not the task's server, so that it
// outlives Train and shows the evaluation that follows; it serves until
// Close.

// observed is an Estimator's metrics, made and served on first use.
type observed struct {
	once sync.Once
	m    *metrics.Task
	ep   *metrics.Endpoint
	err  error
}

// metricsAddress is where this task serves its metrics:
// RunConfig.MetricsAddress, else the free loopback port a local-cluster
// launcher gives its tasks ($DISTFLOW_METRICS_ADDR), else nowhere ("").
func (c RunConfig) metricsAddress() string {
	if c.MetricsAddress != "" {
		return c.MetricsAddress
	}
	return os.Getenv(localcluster.EnvMetricsAddress)
}

// serveMetrics makes the estimator's metrics and serves them, once; the
// error of that first attempt is returned to every later call.
func (e *Estimator) serveMetrics() error {
	o := &e.obs
	o.once.Do(func() {
		addr := e.cfg.metricsAddress()
		if addr == "" {
			return
		}
		job, index := "local", 0
		if e.cfg.Cluster != nil {
			job, index = e.cfg.Task.Job, e.cfg.Task.Index
		}
		m := metrics.New(job, index)
		m.AddDevices(e.cfg.Devices)
		ep, err := metrics.Listen(addr, m, e.cfg.Logger)
		if err != nil {
			o.err = err
			return
		}
		o.m, o.ep = m, ep
		e.cfg.Logger.Info("serving metrics", "url", ep.URL())
	})
	return o.err
}

// Metrics returns the estimator's metrics, nil when it serves none
// (RunConfig.MetricsAddress) or before the first Train.
func (e *Estimator) Metrics() *metrics.Task {
	if e.serveMetrics() != nil {
		return nil
	}
	return e.obs.m
}

// MetricsAddress returns the host:port of the estimator's metrics
// endpoint, "" when it serves none.
func (e *Estimator) MetricsAddress() string {
	if e.serveMetrics() != nil || e.obs.ep == nil {
		return ""
	}
	return e.obs.ep.Addr()
}

// metricsEndpoint is what the task's server reports in GetStatus.
func (e *Estimator) metricsEndpoint() *metrics.Endpoint {
	if e.serveMetrics() != nil {
		return nil
	}
	return e.obs.ep
}

// Close stops serving the estimator's metrics, if it does. The estimator
// may still be used; its metrics are then no longer served.
func (e *Estimator) Close() error {
	if e.serveMetrics() != nil || e.obs.ep == nil {
		return nil
	}
	return e.obs.ep.Close()
}

// observeStep records a training step of this replica.
func (r *replica) observeStep(took time.Duration, examples int, globalStep int64, loss float64) {
	m := r.e.obs.m
	if m == nil {
		return
	}
	m.ObserveStep(took, examples)
	m.SetGlobalStep(globalStep)
	m.SetLoss(loss)
}

// observeEval records an evaluation's metrics.
func (e *Estimator) observeEval(res map[string]float64) {
	m := e.Metrics()
	if m == nil {
		return
	}
	for name, v := range res {
		if name != "global_step" {
			m.SetEval(name, v)
		}
	}
}

// observeSync makes the chief's aggregation loop of synchronous training
// record its rounds and the stale gradients it dropped.
func (r *replica) observeSync(o *train.SyncReplicasOptimizer) {
	if m := r.e.obs.m; m != nil {
		o.Observe = func(round time.Duration, dropped int64) {
			m.ObserveSyncWait(round)
			m.AddStaleGradientsDropped(int(dropped))
		}
	}
}

// observeCheckpoints makes h record its saves.
func (r *replica) observeCheckpoints(h *train.CheckpointHook) *train.CheckpointHook {
	if m := r.e.obs.m; m != nil {
		h.Saved = func(_ int64, took time.Duration) { m.ObserveCheckpoint(took) }
	}
	return h
}

// observeCheckpoint records a checkpoint saved in took (the ring's rank 0
// saves without a hook).
func (r *replica) observeCheckpoint(took time.Duration) {
	r.e.obs.m.ObserveCheckpoint(took) // a nil Task records nothing
}
