package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/sim"
	"github.com/distflow/distflow/metrics"
	"github.com/distflow/distflow/rpc"
)

// TestMetricsScrapeIsBounded: a /metrics that streams without end is cut
// off with an error naming it, in both formats the dashboard reads.
func TestMetricsScrapeIsBounded(t *testing.T) {
	// Families of 32 KiB each (a long help text): the cap is reached in
	// about 500 of them, quickly even under the race detector.
	help := strings.Repeat("h", 32<<10)
	text := func(i int) []byte {
		return fmt.Appendf(nil, "# HELP m%d %s\nm%d{task=\"/job:ps/task:0\"} 1\n", i, help, i)
	}
	proto := func(i int) []byte {
		var b bytes.Buffer
		name, typ, v := fmt.Sprintf("m%d", i), dto.MetricType_GAUGE, 1.0
		protodelim.MarshalTo(&b, &dto.MetricFamily{Name: &name, Help: &help, Type: &typ, Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: &v}}}})
		return b.Bytes()
	}
	for contentType, family := range map[string]func(int) []byte{
		"text/plain; version=0.0.4": text,
		"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited": proto,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			for i := 0; r.Context().Err() == nil; {
				var batch []byte
				for range 8 {
					batch = append(batch, family(i)...)
					i++
				}
				if _, err := w.Write(batch); err != nil {
					return
				}
			}
		}))
		p := NewRPCProber(rpc.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := p.Metrics(ctx, srv.URL+"/metrics")
		cancel()
		p.Close()
		srv.Close()
		if want := fmt.Sprintf("over %d MiB", maxScrapeBytes>>20); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one saying %q", contentType, err, want)
		}
	}
}

// TestPollDevices: a task's distflow_device_memory_bytes reaches
// /api/cluster as its devices, in ordinal order and as fresh as its last
// scrape; tasks that export none have none.
func TestPollDevices(t *testing.T) {
	spec := fakeSpec(1, 1)
	d, fc, c := newFake(t, spec)
	ctx := context.Background()
	h := d.Handler()
	const MiB = 1 << 20
	gpus := []DeviceMemory{
		{Name: "GPU:0", Platform: "sim", InUse: 12 * MiB, Peak: 40 * MiB, Limit: 900 * MiB},
		{Name: "GPU:2", Platform: "sim", Card: 1, Logical: 5, InUse: 1, Peak: 2, Limit: 900 * MiB},
		{Name: "GPU:10", Platform: "sim", Card: 3, Logical: 13, InUse: 0, Peak: 0, Limit: 900 * MiB},
	}
	worker := spec["worker"][0]
	fc.mu.Lock()
	fc.tasks[worker].devices = gpus
	fc.mu.Unlock()

	// Decoded afresh each time: json.Unmarshal into a used slice keeps
	// the fields an element omits.
	cluster := func() map[string]TaskStatus {
		var cl clusterJSON
		getJSON(t, h, "/api/cluster", &cl)
		return byName(cl.Tasks)
	}
	if got := cluster()["/job:worker/task:0"].Devices; got != nil {
		t.Fatalf("before a poll: devices %+v, want none", got)
	}
	d.Poll(ctx)
	tasks := cluster()
	if got := tasks["/job:worker/task:0"].Devices; !reflect.DeepEqual(got, gpus) {
		t.Errorf("worker devices:\n got %+v\nwant %+v", got, gpus)
	}
	for _, name := range []string{"/job:chief/task:0", "/job:ps/task:0"} {
		if got := tasks[name].Devices; got != nil {
			t.Errorf("%s: devices %+v, want none (it exports no device memory)", name, got)
		}
	}

	// A later scrape replaces the numbers; a task restarted without
	// accelerators has none again.
	fc.mu.Lock()
	fc.tasks[worker].devices = []DeviceMemory{{Name: "GPU:0", Platform: "cuda", InUse: 5, Peak: 50, Limit: 500}}
	fc.mu.Unlock()
	c.add(time.Second)
	d.Poll(ctx)
	if got, want := cluster()["/job:worker/task:0"].Devices, []DeviceMemory{{Name: "GPU:0", Platform: "cuda", InUse: 5, Peak: 50, Limit: 500}}; !reflect.DeepEqual(got, want) {
		t.Errorf("after a second scrape: %+v, want %+v", got, want)
	}
	fc.mu.Lock()
	fc.tasks[worker].devices, fc.tasks[worker].incarnation = nil, 2
	fc.mu.Unlock()
	c.add(time.Second)
	d.Poll(ctx)
	if got := cluster()["/job:worker/task:0"]; got.Devices != nil || got.Restarts != 1 {
		t.Errorf("restarted on its CPU: devices %+v, restarts %d; want none, 1", got.Devices, got.Restarts)
	}
}

// TestDeviceMemoryFromATask reads the family as a task exports it (package
// metrics over simulated accelerators), in both formats the dashboard
// reads.
func TestDeviceMemoryFromATask(t *testing.T) {
	devs, err := sim.New(sim.Config{Cards: 2, CardBytes: 1 << 30}).Open(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	buf, err := devs[1].Allocator().Alloc(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New("worker", 0)
	m.AddDevices(devs)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	want := []DeviceMemory{{Name: "GPU:0", Platform: "sim"}, {Name: "GPU:1", Platform: "sim", Card: 1, Logical: 1, InUse: 3 << 20, Peak: 3 << 20}}
	for i := range want {
		want[i].Limit = devs[i].Info().LimitBytes
	}

	p := NewRPCProber(rpc.Options{})
	defer p.Close()
	fams, err := p.Metrics(context.Background(), srv.URL+"/metrics") // protocol buffers
	if err != nil {
		t.Fatal(err)
	}
	if got := deviceMemory(fams); !reflect.DeepEqual(got, want) {
		t.Errorf("protobuf:\n got %+v\nwant %+v", got, want)
	}
	devs[1].Allocator().Free(buf)
	want[1].InUse = 0
	resp, err := http.Get(srv.URL + "/metrics") // text
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if fams, err = ParseMetrics(resp.Body); err != nil {
		t.Fatal(err)
	}
	if got := deviceMemory(fams); !reflect.DeepEqual(got, want) {
		t.Errorf("text:\n got %+v\nwant %+v", got, want)
	}
}
