package metrics_test

import (
	"context"
	"flag"
	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/sim"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/metrics"
	"github.com/distflow/distflow/metrics/metricstest"
)

var update = flag.Bool("update", false, "rewrite testdata/names.golden")

// TestNamesGolden scrapes a task's endpoint over HTTP, parses it with
// Prometheus' parser, and checks distflow's names against the contract
// that dashboards and alerts rely on (testdata/names.golden), the
// constant labels of every series, and the process and Go collectors.
func TestNamesGolden(t *testing.T) {
	m := metrics.New("worker", 1)
	// Labelled families appear once they have a series.
	m.SetEval("accuracy", 0.9)
	m.RPC("127.0.0.1:1", "RunGraph").Observe(time.Millisecond, 10, 20)
	m.TensorChannel("127.0.0.1:1").Received(100)
	// The second logical GPU of the card: its labels tell it from another
	// task's GPU:0.
	gpus, err := sim.New(sim.Config{Cards: 1}).Open(device.Options{Count: 1, Logical: 2, First: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer gpus[0].Close()
	buf, _ := gpus[0].Allocator().Alloc(1000)
	m.AddDevices(gpus)
	m.AddDevices(gpus) // again: once
	ep, err := metrics.Listen("127.0.0.1:0", m, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fams, err := metricstest.Scrape(ctx, ep.URL())
	if err != nil {
		t.Fatal(err)
	}
	if err := fams.CheckTaskLabels("worker", "1"); err != nil {
		t.Error(err)
	}
	var ours []string
	var process, goRuntime bool
	for name := range fams {
		switch {
		case strings.HasPrefix(name, "distflow_"):
			ours = append(ours, name)
		case strings.HasPrefix(name, "process_"):
			process = true
		case strings.HasPrefix(name, "go_"):
			goRuntime = true
		}
	}
	slices.Sort(ours)
	if !process || !goRuntime {
		t.Errorf("process collector %v, Go collector %v: want both", process, goRuntime)
	}
	mem := fams[metrics.DeviceMemoryBytes]
	if mem == nil || len(mem.GetMetric()) != 3 {
		t.Errorf("%s: %v, want the in-use, peak and limit bytes of GPU:0", metrics.DeviceMemoryBytes, mem)
	} else {
		for _, s := range mem.GetMetric() {
			if s.GetGauge().GetValue() < float64(buf.Size) {
				t.Errorf("%s %v: less than the %d bytes allocated", metrics.DeviceMemoryBytes, s, buf.Size)
			}
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["device"] != "GPU:0" || labels["card"] != "0" || labels["logical_gpu"] != "1" {
				t.Errorf("%s %v: want device GPU:0, card 0, logical_gpu 1", metrics.DeviceMemoryBytes, labels)
			}
		}
	}
	if !slices.Equal(ours, metrics.Names) {
		t.Errorf("served names %v, metrics.Names %v", ours, metrics.Names)
	}
	golden := filepath.Join("testdata", "names.golden")
	got := strings.Join(ours, "\n") + "\n"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("names changed (a dashboard or alert may read them; go test ./metrics -run TestNamesGolden -update if meant):\ngot:\n%swant:\n%s", got, want)
	}
	if v := fams.Sum(metrics.TensorChannelBytesTotal, map[string]string{"direction": metrics.Received}); v != 100 {
		t.Errorf("tensor channel received %v, want 100", v)
	}
	if v := fams.Sum(metrics.RPCSeconds, map[string]string{"method": "RunGraph", "peer": "127.0.0.1:1"}); v != 1 {
		t.Errorf("RunGraph calls %v, want 1", v)
	}
}

// TestNilTask checks that a nil Task records nothing and does not panic.
func TestNilTask(t *testing.T) {
	var m *metrics.Task
	m.ObserveStep(time.Second, 10)
	m.SetGlobalStep(1)
	m.SetLoss(1)
	m.SetEval("accuracy", 1)
	m.ObserveCheckpoint(time.Second)
	m.ObserveSyncWait(time.Second)
	m.AddStaleGradientsDropped(1)
	m.RPC("a", "b").Observe(time.Second, 1, 1)
	m.TensorChannel("a").Sent(1)
	if fams, err := m.Gatherer().Gather(); err != nil || len(fams) != 0 {
		t.Errorf("nil task gathered %d families, %v", len(fams), err)
	}
}

// TestRPCAllocs checks the hot path: recording a call on resolved series,
// and resolving them again, allocates nothing.
func TestRPCAllocs(t *testing.T) {
	m := metrics.New("ps", 0)
	r := m.RPC("127.0.0.1:2", "RecvTensor")
	c := m.TensorChannel("127.0.0.1:2")
	peer, method := "127.0.0.1:2", "RecvTensor"
	if n := testing.AllocsPerRun(100, func() {
		m.RPC(peer, method)
		r.Observe(time.Millisecond, 100, 1000)
		c.Received(1000)
	}); n != 0 {
		t.Errorf("%v allocations per call, want 0", n)
	}
}
