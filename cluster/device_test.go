package cluster

import "testing"

// TestParseDeviceAllocs: rendezvous keys are parsed at every step, so a
// valid device name, in either form and any case, costs no allocation.
func TestParseDeviceAllocs(t *testing.T) {
	for _, s := range []string{
		"/job:ps/task:0/cpu:0",
		"/job:worker/task:123/gpu:456",
		"/job:ps/replica:0/task:0/device:CPU:0",
		"/job:localhost/replica:*/task:0/CPU:*",
		"/device:tpu:1",
		"",
	} {
		if n := testing.AllocsPerRun(100, func() {
			if _, err := ParseDevice(s); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("ParseDevice(%q): %v allocations, want 0", s, n)
		}
	}
}

func TestTaskNameFrom(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		shared   bool // the result is part of in
	}{
		{"/job:ps/task:0/cpu:0", "/job:ps/task:0", true},
		{"/job:worker/task:123", "/job:worker/task:123", true},
		{"/job:ps/task:1/device:CPU:0", "/job:ps/task:1", true},
		{"/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/task:0", false},
		{"/task:2/job:ps", "/job:ps/task:2", false},
		{"job:ps/task:2", "/job:ps/task:2", false},
		{"/job:ps/cpu:0", "", false},
		{"/task:0/cpu:0", "", false},
	} {
		d, err := ParseDevice(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got := d.TaskNameFrom(tc.in)
		if got != tc.want || got != d.TaskName() {
			t.Errorf("TaskNameFrom(%q) = %q, want %q", tc.in, got, tc.want)
		}
		n := testing.AllocsPerRun(100, func() { d.TaskNameFrom(tc.in) })
		if tc.shared && n != 0 {
			t.Errorf("TaskNameFrom(%q): %v allocations, want 0", tc.in, n)
		}
	}
}
