package estimator_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/metrics"
	"github.com/distflow/distflow/metrics/metricstest"
)

// TestTrainingMetrics trains synchronously on 1 ps + 2 workers, each task
// serving its metrics, with checkpoints, then evaluates on the chief, and
// scrapes every task: the workers' steps, examples and global step, the
// chief's aggregation rounds, checkpoint saves and evaluation, and the
// ps's served tensors are there, under each task's labels.
func TestTrainingMetrics(t *testing.T) {
	const steps = 30
	spec, lis := loopbackTasks(t, cluster.TaskID{Job: "ps"}, cluster.TaskID{Job: "worker"}, cluster.TaskID{Job: "worker", Index: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ests = map[cluster.TaskID]*estimator.Estimator{}
		res  = map[cluster.TaskID]*estimator.Result{}
	)
	for task, l := range lis {
		est, err := estimator.New(linearModel, estimator.RunConfig{
			Cluster: spec, Task: task, Strategy: estimator.Sync{}, Listener: l, Seed: 1, ModelDir: dir, SaveCheckpointsSteps: 10,
			Logger: quiet, Progress: io.Discard, WaitTimeout: 20 * time.Second, StepTimeout: 20 * time.Second,
			MetricsAddress: "127.0.0.1:0",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { est.Close() })
		ests[task] = est
		wg.Go(func() {
			r, err := est.Train(ctx, linearInput(1000, true), estimator.Stop{MaxSteps: steps})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("%s: %v", task, err)
				cancel()
				return
			}
			res[task] = r
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	chief := cluster.TaskID{Job: "worker"}
	eval, err := ests[chief].Evaluate(ctx, linearInput(100, false))
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(task cluster.TaskID) metricstest.Families {
		t.Helper()
		addr := ests[task].MetricsAddress()
		if addr == "" {
			t.Fatalf("%s serves no metrics", task)
		}
		fams, err := metricstest.Scrape(ctx, "http://"+addr+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if err := fams.CheckTaskLabels(task.Job, string(rune('0'+task.Index))); err != nil {
			t.Error(err)
		}
		return fams
	}
	atLeast := func(task cluster.TaskID, fams metricstest.Families, name string, labels map[string]string, min float64) {
		t.Helper()
		if v := fams.Sum(name, labels); v < min {
			t.Errorf("%s: %s%v = %v, want at least %v", task, name, labels, v, min)
		}
	}
	for _, w := range []cluster.TaskID{chief, {Job: "worker", Index: 1}} {
		fams := scrape(w)
		r := res[w]
		atLeast(w, fams, metrics.StepSeconds, nil, float64(r.LocalSteps))
		atLeast(w, fams, metrics.ExamplesTotal, nil, float64(r.LocalSteps*r.BatchSize))
		atLeast(w, fams, metrics.GlobalStep, nil, 1)
		atLeast(w, fams, metrics.RPCSeconds, map[string]string{"peer": "/job:ps/task:0", "method": "RunGraph"}, float64(r.LocalSteps))
	}
	fams := scrape(chief)
	atLeast(chief, fams, metrics.GlobalStep, nil, steps)
	atLeast(chief, fams, metrics.SyncAggregationWaitSeconds, nil, steps/2) // rounds the chief saw complete
	atLeast(chief, fams, metrics.CheckpointsSavedTotal, nil, 2)            // at steps 10, 20 and the last
	atLeast(chief, fams, metrics.CheckpointSaveSeconds, nil, 2)
	if got := fams.Sum(metrics.EvalMetric, map[string]string{"name": "loss"}); got != eval["loss"] {
		t.Errorf("chief: %s{name=loss} = %v, Evaluate said %v", metrics.EvalMetric, got, eval["loss"])
	}
	if fams[metrics.StaleGradientsDropped] == nil {
		t.Errorf("chief: no %s", metrics.StaleGradientsDropped)
	}
	ps := cluster.TaskID{Job: "ps"}
	atLeast(ps, scrape(ps), metrics.TensorChannelBytesTotal, map[string]string{"direction": metrics.Sent}, 1)
}

// TestRingMetrics trains with the ring all-reduce on 2 workers serving
// metrics: each rank's chunk streams to the other are recorded (the
// client-streaming Chunks calls, with their bytes), and rank 0's
// checkpoints.
func TestRingMetrics(t *testing.T) {
	addrs := map[string][]string{}
	lis := map[cluster.TaskID]net.Listener{}
	for i := range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs["worker"] = append(addrs["worker"], l.Addr().String())
		lis[cluster.TaskID{Job: "worker", Index: i}] = l
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	var wg sync.WaitGroup
	ests := map[cluster.TaskID]*estimator.Estimator{}
	for task, l := range lis {
		est, err := estimator.New(linearModel, estimator.RunConfig{
			Cluster: spec, Task: task, Strategy: estimator.AllReduce{}, Listener: l, Seed: 1, ModelDir: dir, SaveCheckpointsSteps: 10,
			Logger: quiet, Progress: io.Discard, WaitTimeout: 20 * time.Second, StepTimeout: 20 * time.Second,
			MetricsAddress: "127.0.0.1:0",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { est.Close() })
		ests[task] = est
		wg.Go(func() {
			if _, err := est.Train(ctx, linearInput(1000, true), estimator.Stop{MaxSteps: 20}); err != nil {
				t.Errorf("%s: %v", task, err)
				cancel()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for task, est := range ests {
		fams, err := metricstest.Scrape(ctx, "http://"+est.MetricsAddress()+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		chunks := map[string]string{"method": "Chunks"}
		calls, sent := fams.Sum(metrics.RPCSeconds, chunks), fams.Sum(metrics.RPCSentBytesTotal, chunks)
		if calls < 20 || sent <= 0 {
			t.Errorf("%s: %v Chunks calls sending %v bytes, want one a step at least, with bytes", task, calls, sent)
		}
		if steps := fams.Sum(metrics.StepSeconds, nil); steps < 20 {
			t.Errorf("%s: %v steps recorded, want 20", task, steps)
		}
		if saved := fams.Sum(metrics.CheckpointsSavedTotal, nil); task.Index == 0 && saved < 2 {
			t.Errorf("%s (rank 0, which saves): %v checkpoints recorded, want 2 at least", task, saved)
		}
	}
}
