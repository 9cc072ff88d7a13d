package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/distflow/distflow/device"
)

// DeviceMemoryBytes is a gauge{device,platform,card,logical_gpu,kind} of
// each accelerator's allocator: kind "in_use", "peak" or "limit", read
// when scraped. card is the card it lives on and logical_gpu its ordinal
// among the machine's (logical) GPUs, which tell apart the tasks that all
// call their first GPU "GPU:0".
const DeviceMemoryBytes = "distflow_device_memory_bytes"

// deviceCollector reads the allocators of a task's accelerators at each
// scrape, so that allocations pay nothing for the metrics.
type deviceCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	devs map[string]device.Device // by name
}

func (c *deviceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *deviceCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, d := range c.devs {
		st, in := d.Allocator().Stats(), d.Info()
		card, logical := itoa(in.Physical), itoa(in.Logical)
		for _, kv := range []struct {
			kind string
			v    int64
		}{{"in_use", st.InUse}, {"peak", st.Peak}, {"limit", st.Limit}} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(kv.v), name, in.Platform, card, logical, kv.kind)
		}
	}
}

// AddDevices adds the memory of devs to the task's metrics
// (DeviceMemoryBytes); a device already added is not added again.
func (t *Task) AddDevices(devs []device.Device) {
	if t == nil || len(devs) == 0 {
		return
	}
	t.devOnce.Do(func() {
		t.devices = &deviceCollector{devs: map[string]device.Device{},
			desc: prometheus.NewDesc(DeviceMemoryBytes, "Memory of each accelerator's caching allocator, by kind: in use, peak, and the limit it may hold.",
				[]string{"device", "platform", "card", "logical_gpu", "kind"}, prometheus.Labels{"job": t.job, "task": itoa(t.index)})}
		t.reg.MustRegister(t.devices)
	})
	t.devices.mu.Lock()
	defer t.devices.mu.Unlock()
	for _, d := range devs {
		t.devices.devs[d.Info().Name] = d
	}
}
