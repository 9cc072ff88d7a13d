package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadDevice is wrapped by the errors of ParseDevice: a device string
// does not parse.
var ErrBadDevice = errors.New("bad device name")

// Device is a device name, possibly partial: Job "" and Type "" mean
// unset, Task -1 and Index -1 mean unset. Type is lower case ("cpu").
// The zero Device is not the empty name; use ParseDevice("") or AnyDevice.
type Device struct {
	Job   string
	Task  int
	Type  string
	Index int
}

// AnyDevice returns the device name with every part unset (it matches
// every device).
func AnyDevice() Device { return Device{Task: -1, Index: -1} }

// ParseDevice parses a device name. Accepted parts, in any order, each at
// most once, separated by "/": "job:<identifier>", "replica:0", "task:<n>",
// "device:<TYPE>:<n>" (TensorFlow's long form; "*" or no index leaves it
// unset) and "cpu:<n>" or "gpu:<n>" (the short form). The empty string is the
// device with nothing set. Types are case-insensitive and kept in lower
// case:
//
//	"/job:ps/task:0/cpu:0"                    -> {ps 0 cpu 0}
//	"/job:ps/replica:0/task:0/device:CPU:0"   -> {ps 0 cpu 0}
//	"/job:worker"                             -> {worker -1 "" -1}
//
// Errors wrap ErrBadDevice and quote s.
func ParseDevice(s string) (Device, error) {
	d := AnyDevice()
	rest := strings.TrimPrefix(s, "/")
	if rest == "" {
		return d, nil
	}
	bad := func(format string, args ...any) (Device, error) {
		return AnyDevice(), fmt.Errorf("placement: %w %q: %s", ErrBadDevice, s, fmt.Sprintf(format, args...))
	}
	var seenJob, seenReplica, seenTask, seenType bool
	// Cut, not Split: a name parsed at every step (rendezvous keys) costs
	// no allocation.
	for more := true; more; {
		var part string
		part, rest, more = strings.Cut(rest, "/")
		key, val, ok := strings.Cut(part, ":")
		if !ok {
			return bad("part %q is not <key>:<value>", part)
		}
		switch key {
		case "job":
			if seenJob {
				return bad("the job is given twice")
			}
			seenJob = true
			if !isIdent(val) {
				return bad("job %q is not an identifier", val)
			}
			d.Job = val
		case "replica":
			if seenReplica {
				return bad("the replica is given twice")
			}
			seenReplica = true
			if val != "0" && val != "*" {
				return bad("replica %q: only replica 0 exists", val)
			}
		case "task":
			if seenTask {
				return bad("the task is given twice")
			}
			seenTask = true
			n, err := parseIndex(val)
			if err != nil {
				return bad("task %q: %v", val, err)
			}
			d.Task = n
		default:
			if seenType {
				return bad("the device type is given twice")
			}
			seenType = true
			typ, idx := key, val
			if key != "device" && shortType(key) == "" {
				return bad("unknown part %q (want job:, replica:, task:, device:<TYPE>:<n> or cpu:<n>)", part)
			}
			if key == "device" {
				typ, idx, _ = strings.Cut(val, ":")
				if idx == "" {
					idx = "*"
				}
			}
			if !isIdent(typ) {
				return bad("device type %q is not an identifier", typ)
			}
			n, err := parseIndex(idx)
			if err != nil {
				return bad("device index %q: %v", idx, err)
			}
			d.Type, d.Index = shortType(typ), n
			if d.Type == "" {
				d.Type = strings.ToLower(typ)
			}
		}
	}
	return d, nil
}

// shortTypes are the device types accepted in the short form "cpu:0"; any
// type may be written in the long form "device:TPU:0".
var shortTypes = [...]string{"cpu", "gpu"}

// shortType returns the short-form type s names in any case ("CPU" ->
// "cpu"), or "": unlike strings.ToLower, it allocates nothing.
func shortType(s string) string {
	for _, t := range shortTypes {
		if strings.EqualFold(s, t) {
			return t
		}
	}
	return ""
}

// parseIndex parses a non-negative decimal integer, or "*" (unset: -1).
func parseIndex(s string) (int, error) {
	if s == "*" {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	var buf [20]byte // Itoa would allocate for n >= 100
	if err != nil || n < 0 || string(strconv.AppendInt(buf[:0], int64(n), 10)) != s {
		return 0, errors.New("want a non-negative integer or *")
	}
	return n, nil
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || i > 0 && '0' <= r && r <= '9') {
			return false
		}
	}
	return true
}

// String returns the canonical short form, "/job:ps/task:0/cpu:0"; unset
// parts are left out ("/job:ps", "/cpu:0"; a type without an index prints
// as "/cpu:*"; an index without a type is not printed; types other than cpu
// and gpu print in the long form "/device:tpu:0"). The device with
// nothing set prints as "". ParseDevice(d.String()) returns d.
func (d Device) String() string {
	var b strings.Builder
	if d.Job != "" {
		b.WriteString("/job:" + d.Job)
	}
	if d.Task >= 0 {
		b.WriteString("/task:" + strconv.Itoa(d.Task))
	}
	if d.Type != "" {
		if shortType(d.Type) == d.Type {
			b.WriteString("/" + d.Type + ":")
		} else {
			b.WriteString("/device:" + d.Type + ":")
		}
		if d.Index >= 0 {
			b.WriteString(strconv.Itoa(d.Index))
		} else {
			b.WriteString("*")
		}
	}
	return b.String()
}

// TaskName returns the task part, "/job:ps/task:0", or "" if the job or the
// task is unset.
func (d Device) TaskName() string {
	if d.Job == "" || d.Task < 0 {
		return ""
	}
	return TaskID{Job: d.Job, Index: d.Task}.String()
}

// TaskNameFrom returns d.TaskName(), as a part of s when s begins with it,
// so that no string is built: s is the name d was parsed from, which
// begins with the task name when written as String writes it.
func (d Device) TaskNameFrom(s string) string {
	if d.Job == "" || d.Task < 0 {
		return ""
	}
	rest, ok := strings.CutPrefix(s, "/job:")
	if ok {
		rest, ok = strings.CutPrefix(rest, d.Job)
	}
	if ok {
		rest, ok = strings.CutPrefix(rest, "/task:")
	}
	var buf [20]byte
	if ok {
		rest, ok = strings.CutPrefix(rest, string(strconv.AppendInt(buf[:0], int64(d.Task), 10)))
	}
	if ok {
		return s[:len(s)-len(rest)]
	}
	return d.TaskName()
}

// IsFull reports whether every part is set.
func (d Device) IsFull() bool { return d.Job != "" && d.Task >= 0 && d.Type != "" && d.Index >= 0 }

// Merge returns d with its unset parts taken from defaults: d's own parts
// win. Parts are hierarchical: a task is relative to its job and an index
// to its type, so when d names a job other than defaults' job it does not
// inherit defaults' task (and likewise for the index of another type).
// "/job:ps" merged with defaults "/job:worker/task:1/cpu:0" is
// "/job:ps/cpu:0", any ps task; "/task:2" merged with it is
// "/job:worker/task:2/cpu:0".
func (d Device) Merge(defaults Device) Device {
	out := d
	if out.Job == "" {
		out.Job = defaults.Job
	}
	if out.Task < 0 && (d.Job == "" || d.Job == defaults.Job) {
		out.Task = defaults.Task
	}
	if out.Type == "" {
		out.Type = defaults.Type
	}
	if out.Index < 0 && (d.Type == "" || d.Type == defaults.Type) {
		out.Index = defaults.Index
	}
	return out
}

// Matches reports whether device agrees with every part d sets (d is the
// pattern; the empty pattern matches everything).
func (d Device) Matches(device Device) bool {
	return (d.Job == "" || d.Job == device.Job) &&
		(d.Task < 0 || d.Task == device.Task) &&
		(d.Type == "" || d.Type == device.Type) &&
		(d.Index < 0 || d.Index == device.Index)
}

// Compatible reports whether d and o set no part differently; if so it
// returns their union (the parts set in either).
func (d Device) Compatible(o Device) (Device, bool) {
	out := d
	if o.Job != "" {
		if d.Job != "" && d.Job != o.Job {
			return d, false
		}
		out.Job = o.Job
	}
	if o.Task >= 0 {
		if d.Task >= 0 && d.Task != o.Task {
			return d, false
		}
		out.Task = o.Task
	}
	if o.Type != "" {
		if d.Type != "" && d.Type != o.Type {
			return d, false
		}
		out.Type = o.Type
	}
	if o.Index >= 0 {
		if d.Index >= 0 && d.Index != o.Index {
			return d, false
		}
		out.Index = o.Index
	}
	return out, true
}
