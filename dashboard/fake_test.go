package dashboard

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	pb "github.com/distflow/distflow/proto/distflowpb"
)

// fakeTask is one task of a fakeCluster.
type fakeTask struct {
	alive       bool
	incarnation uint64
	step        int64   // distflow_global_step
	steps       float64 // distflow_step_seconds count
	stepSecs    float64 // its sum
	examples    float64
	loss        float64
	accuracy    float64
	cpu         float64
	checkpoints float64
	stale       float64
	// devices are exported as distflow_device_memory_bytes, in reverse
	// order as a task's map may write them; none: the family is absent,
	// as on a task without accelerators.
	devices []DeviceMemory
}

// fakeCluster answers as tasks would, from memory; its metrics go through
// the Prometheus text format and parser, as real ones do.
type fakeCluster struct {
	mu    sync.Mutex
	tasks map[string]*fakeTask // by address
}

func newFakeCluster(spec map[string][]string) *fakeCluster {
	f := &fakeCluster{tasks: map[string]*fakeTask{}}
	for _, addrs := range spec {
		for _, a := range addrs {
			f.tasks[a] = &fakeTask{alive: true, incarnation: 1, loss: 2.3}
		}
	}
	return f
}

// fakeSpec is a cluster of 1 chief, workers and ps tasks on fake addresses.
func fakeSpec(workers, ps int) map[string][]string {
	spec := map[string][]string{"chief": {"10.0.0.1:2222"}}
	for i := range workers {
		spec["worker"] = append(spec["worker"], fmt.Sprintf("10.0.1.%d:2222", i))
	}
	for i := range ps {
		spec["ps"] = append(spec["ps"], fmt.Sprintf("10.0.2.%d:2222", i))
	}
	return spec
}

func (f *fakeCluster) task(addr string) *fakeTask {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tasks[addr]
}

// step advances every live task: n steps of secs each.
func (f *fakeCluster) step(n int, secs float64, skip ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for a, t := range f.tasks {
		if !t.alive || contains(skip, a) {
			continue
		}
		t.step += int64(n)
		t.steps += float64(n)
		t.stepSecs += float64(n) * secs
		t.examples += float64(n * 100)
		t.loss *= 0.97
		t.accuracy = min(0.9, t.accuracy+0.01)
		t.cpu += 0.5
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (f *fakeCluster) Status(ctx context.Context, addr string) (*pb.GetStatusResponse, error) {
	t := f.task(addr)
	if t == nil {
		return nil, fmt.Errorf("fake: no task at %s", addr)
	}
	f.mu.Lock()
	alive, inc := t.alive, t.incarnation
	f.mu.Unlock()
	if !alive {
		return nil, errors.New("connection refused")
	}
	st := &pb.GetStatusResponse{Task: addr, Incarnation: inc,
		Variables: []*pb.VariableStatus{{Name: "w", Bytes: 4096, Initialized: true}}}
	setMetricsAddress(st, "m-"+addr)
	return st, nil
}

// setMetricsAddress sets GetStatusResponse.metrics_address by reflection,
// so that the tests build against protos with or without it (without it,
// the fake serves no metrics).
func setMetricsAddress(st *pb.GetStatusResponse, addr string) {
	if f := reflect.ValueOf(st).Elem().FieldByName("MetricsAddress"); f.IsValid() {
		f.SetString(addr)
	}
}

func (f *fakeCluster) Metrics(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://m-"), "/metrics")
	t := f.task(addr)
	if t == nil {
		return nil, fmt.Errorf("fake: no metrics at %s", url)
	}
	f.mu.Lock()
	if !t.alive {
		f.mu.Unlock()
		return nil, errors.New("connection refused")
	}
	text := fmt.Sprintf(`# TYPE distflow_global_step gauge
distflow_global_step{job="x",task="0"} %d
# TYPE distflow_loss gauge
distflow_loss{job="x",task="0"} %g
# TYPE distflow_eval_metric gauge
distflow_eval_metric{job="x",task="0",name="accuracy"} %g
# TYPE distflow_examples_total counter
distflow_examples_total{job="x",task="0"} %g
# TYPE distflow_step_seconds histogram
distflow_step_seconds_bucket{job="x",task="0",le="+Inf"} %g
distflow_step_seconds_sum{job="x",task="0"} %g
distflow_step_seconds_count{job="x",task="0"} %g
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total %g
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 5.24288e+07
# TYPE distflow_checkpoints_saved_total counter
distflow_checkpoints_saved_total{job="x",task="0"} %g
# TYPE distflow_stale_gradients_dropped_total counter
distflow_stale_gradients_dropped_total{job="x",task="0"} %g
`, t.step, t.loss, t.accuracy, t.examples, t.steps, t.stepSecs, t.steps, t.cpu, t.checkpoints, t.stale)
	if len(t.devices) > 0 {
		text += "# TYPE distflow_device_memory_bytes gauge\n"
		for _, d := range slices.Backward(t.devices) {
			for kind, v := range map[string]int64{"in_use": d.InUse, "peak": d.Peak, "limit": d.Limit} {
				text += fmt.Sprintf("distflow_device_memory_bytes{job=\"x\",task=\"0\",device=%q,platform=%q,card=\"%d\",logical_gpu=\"%d\",kind=%q} %d\n",
					d.Name, d.Platform, d.Card, d.Logical, kind, v)
			}
		}
	}
	f.mu.Unlock()
	return ParseMetrics(strings.NewReader(text))
}

// clock is a time the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
