package placement

import (
	"errors"
	"fmt"

	"github.com/distflow/distflow/cluster"
)

// Sentinel errors.
var (
	// ErrBadDevice: a device string does not parse.
	ErrBadDevice = cluster.ErrBadDevice
	// ErrNoDevice: no available device satisfies a request or a filter.
	ErrNoDevice = errors.New("no matching device")
	// ErrColocation: nodes that must share a device ask for different ones.
	ErrColocation = errors.New("conflicting colocated devices")
)

// Device is a device name, possibly partial (see cluster.Device): device
// names are parsed once, by cluster.ParseDevice.
type Device = cluster.Device

// AnyDevice returns the device name with every part unset.
func AnyDevice() Device { return cluster.AnyDevice() }

// ParseDevice parses a device name (see cluster.ParseDevice).
func ParseDevice(s string) (Device, error) { return cluster.ParseDevice(s) }

// MergeDevices parses request and defaults and returns
// request.Merge(defaults) as a string: the device a node asking for
// request gets in a context (a session, a device setter) whose default is
// defaults.
func MergeDevices(request, defaults string) (string, error) {
	r, err := ParseDevice(request)
	if err != nil {
		return "", err
	}
	d, err := ParseDevice(defaults)
	if err != nil {
		return "", err
	}
	return r.Merge(d).String(), nil
}

// DevicesOf returns one CPU device per task of spec, in task order:
// "/job:ps/task:0/cpu:0", ...
func DevicesOf(spec *cluster.Spec) []string {
	tasks := spec.Tasks()
	out := make([]string, len(tasks))
	for i, t := range tasks {
		out[i] = t.String() + "/cpu:0"
	}
	return out
}

// FilterDevices returns the devices (in their order) that match at least
// one filter ("/job:ps", "/job:worker/task:1"). No filters keeps every
// device. A filter that matches no device, or a string that does not
// parse, is an error naming it. The result is a new slice.
func FilterDevices(devices, filters []string) ([]string, error) {
	parsed := make([]Device, len(devices))
	for i, s := range devices {
		d, err := ParseDevice(s)
		if err != nil {
			return nil, err
		}
		parsed[i] = d
	}
	if len(filters) == 0 {
		return append([]string(nil), devices...), nil
	}
	keep := make([]bool, len(devices))
	for _, f := range filters {
		pat, err := ParseDevice(f)
		if err != nil {
			return nil, fmt.Errorf("placement: device filter: %w", err)
		}
		found := false
		for i, d := range parsed {
			if pat.Matches(d) {
				keep[i], found = true, true
			}
		}
		if !found {
			return nil, fmt.Errorf("placement: device filter %q: %w among %v", f, ErrNoDevice, devices)
		}
	}
	var out []string
	for i, s := range devices {
		if keep[i] {
			out = append(out, s)
		}
	}
	return out, nil
}
