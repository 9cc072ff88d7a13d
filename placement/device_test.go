package placement_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/placement"
)

func dev(job string, task int, typ string, index int) placement.Device {
	return placement.Device{Job: job, Task: task, Type: typ, Index: index}
}

func TestParseDevice(t *testing.T) {
	for _, tc := range []struct {
		in, str string
		want    placement.Device
	}{
		{"", "", placement.AnyDevice()},
		{"/", "", placement.AnyDevice()},
		{"/job:ps/task:0/cpu:0", "/job:ps/task:0/cpu:0", dev("ps", 0, "cpu", 0)},
		{"/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/task:0/cpu:0", dev("ps", 0, "cpu", 0)},
		{"/job:worker", "/job:worker", dev("worker", -1, "", -1)},
		{"/job:worker/task:1", "/job:worker/task:1", dev("worker", 1, "", -1)},
		{"/cpu:0", "/cpu:0", dev("", -1, "cpu", 0)},
		{"/device:GPU:1", "/gpu:1", dev("", -1, "gpu", 1)},
		{"/device:TPU:0", "/device:tpu:0", dev("", -1, "tpu", 0)},
		{"/job:ps/task:1/device:CPU:*", "/job:ps/task:1/cpu:*", dev("ps", 1, "cpu", -1)},
		{"/device:CPU", "/cpu:*", dev("", -1, "cpu", -1)},
		{"job:ps/task:2", "/job:ps/task:2", dev("ps", 2, "", -1)},
		{"/task:3/job:w_1", "/job:w_1/task:3", dev("w_1", 3, "", -1)},
		{"/job:localhost/replica:*/task:0/CPU:0", "/job:localhost/task:0/cpu:0", dev("localhost", 0, "cpu", 0)},
	} {
		got, err := placement.ParseDevice(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDevice(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if got.String() != tc.str {
			t.Errorf("ParseDevice(%q).String() = %q, want %q", tc.in, got.String(), tc.str)
		}
		if back, err := placement.ParseDevice(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q: %+v, %v", tc.in, back, err)
		}
	}
}

func TestParseDeviceErrors(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"/job:ps/task:x", "task"},
		{"/job:ps/job:w", "job is given twice"},
		{"/job:1ps", "not an identifier"},
		{"/job:", "not an identifier"},
		{"/replica:1", "only replica 0"},
		{"/task:-1", "non-negative"},
		{"/task:01", "non-negative"},
		{"/task:1/task:1", "task is given twice"},
		{"/jobps", "not <key>:<value>"},
		{"/job:ps//task:0", "not <key>:<value>"},
		{"/job:ps/cpu:0/gpu:0", "type is given twice"},
		{"/device:C-PU:0", "not an identifier"},
		{"/cpu:zero", "device index"},
		{"/job:ps/tusk:0", "unknown part"},
	} {
		_, err := placement.ParseDevice(tc.in)
		if !errors.Is(err, placement.ErrBadDevice) || !strings.Contains(err.Error(), "\""+tc.in+"\"") || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ParseDevice(%q) error = %v; want ErrBadDevice naming the string and %q", tc.in, err, tc.why)
		}
	}
}

func TestDeviceParts(t *testing.T) {
	full := dev("ps", 2, "cpu", 0)
	if full.TaskName() != "/job:ps/task:2" || !full.IsFull() {
		t.Errorf("TaskName/IsFull of %v", full)
	}
	if p := dev("ps", -1, "cpu", 0); p.TaskName() != "" || p.IsFull() {
		t.Errorf("TaskName/IsFull of %v", p)
	}
	if m, ok := dev("ps", -1, "", -1).Compatible(dev("", 1, "cpu", -1)); !ok || m != dev("ps", 1, "cpu", -1) {
		t.Errorf("Compatible = %v %v", m, ok)
	}
	if _, ok := dev("ps", 0, "", -1).Compatible(dev("ps", 1, "", -1)); ok {
		t.Error("tasks 0 and 1 are compatible")
	}
}

func TestMergeDevices(t *testing.T) {
	const def = "/job:worker/task:1/cpu:0"
	for _, tc := range []struct{ req, def, want string }{
		{"", def, def},
		{"/job:ps", def, "/job:ps/cpu:0"},
		{"/job:ps/task:0", def, "/job:ps/task:0/cpu:0"},
		{"/task:2", def, "/job:worker/task:2/cpu:0"},
		{"/job:worker", def, def},
		{"/gpu:1", def, "/job:worker/task:1/gpu:1"},
		{"/device:GPU", def, "/job:worker/task:1/gpu:*"},
		{"/job:ps/task:0", "", "/job:ps/task:0"},
		{"/job:ps/replica:0/task:0/device:CPU:0", "/job:worker", "/job:ps/task:0/cpu:0"},
	} {
		got, err := placement.MergeDevices(tc.req, tc.def)
		if err != nil || got != tc.want {
			t.Errorf("MergeDevices(%q, %q) = %q, %v; want %q", tc.req, tc.def, got, err, tc.want)
		}
	}
	if _, err := placement.MergeDevices("/job:ps", "/bad"); !errors.Is(err, placement.ErrBadDevice) {
		t.Errorf("bad default: %v", err)
	}
}

func TestFilterDevices(t *testing.T) {
	spec, err := cluster.NewSpec(map[string][]string{"ps": {"p0:1", "p1:1"}, "worker": {"w0:1", "w1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	all := placement.DevicesOf(spec)
	if want := []string{"/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0", "/job:worker/task:0/cpu:0", "/job:worker/task:1/cpu:0"}; !reflect.DeepEqual(all, want) {
		t.Fatalf("DevicesOf = %v", all)
	}
	for _, tc := range []struct {
		name    string
		filters []string
		want    []string
		err     error
		msg     string
	}{
		{"none", nil, all, nil, ""},
		{"ps", []string{"/job:ps"}, all[:2], nil, ""},
		{"ps and self", []string{"/job:worker/task:1", "/job:ps"}, []string{all[0], all[1], all[3]}, nil, ""},
		{"long form", []string{"/job:ps/replica:0/task:1/device:CPU:0"}, all[1:2], nil, ""},
		{"all cpus", []string{"/cpu:0"}, all, nil, ""},
		{"no match", []string{"/job:ps", "/job:chief"}, nil, placement.ErrNoDevice, `"/job:chief"`},
		{"bad filter", []string{"/job:ps/task:x"}, nil, placement.ErrBadDevice, `"/job:ps/task:x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := placement.FilterDevices(all, tc.filters)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("error = %v, want %v naming %s", err, tc.err, tc.msg)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("FilterDevices = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := placement.FilterDevices([]string{"/job:ps/bad"}, nil); !errors.Is(err, placement.ErrBadDevice) {
		t.Errorf("bad device: %v", err)
	}
}

func FuzzParseDevice(f *testing.F) {
	for _, s := range []string{"", "/job:ps/task:0/cpu:0", "/job:ps/replica:0/task:0/device:CPU:0", "/device:TPU:*", "/task:1/job:w", "/job:ps//x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := placement.ParseDevice(s)
		if err != nil {
			if !errors.Is(err, placement.ErrBadDevice) {
				t.Fatalf("error %v does not wrap ErrBadDevice", err)
			}
			return
		}
		back, err := placement.ParseDevice(d.String())
		if err != nil || back != d {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, d, d.String(), back, err)
		}
	})
}
