package trace

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// ErrInvalid is wrapped by Validate's errors.
var ErrInvalid = errors.New("invalid Chrome trace")

// nestSlack is how far (in µs) a slice may end past the one enclosing it
// on its thread: the rounding of nanoseconds to float microseconds.
const nestSlack = 1e-3

// Validate checks that data is a Chrome trace in the JSON Object Format
// that Perfetto and chrome://tracing read as this package writes it: a
// "traceEvents" array whose events all have a name, a phase, a pid and a
// tid; complete ("X") events with a non-negative ts and dur; every pid
// named by a process_name and every thread of an X event by a thread_name
// metadata event; the X events of one thread nested (a slice that starts
// inside another ends inside it); every flow start with its end, each
// within a slice of its thread (the slice it binds to). It reads
// the JSON generically, so that a field the Event type would default is
// found missing.
func Validate(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return fmt.Errorf("trace: %w: not a JSON object: %v", ErrInvalid, err)
	}
	raw, ok := top["traceEvents"]
	if !ok {
		return fmt.Errorf("trace: %w: no traceEvents array", ErrInvalid)
	}
	var events []map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&events); err != nil {
		return fmt.Errorf("trace: %w: traceEvents: %v", ErrInvalid, err)
	}
	type thread struct{ pid, tid int64 }
	type slice struct{ ts, end float64 }
	procNamed, threadNamed := map[int64]bool{}, map[thread]bool{}
	slices_ := map[thread][]slice{}
	flows := map[string]int{}
	type flowEnd struct {
		th   thread
		ts   float64
		name string
	}
	var flowEnds []flowEnd
	for i, e := range events {
		name, _ := e["name"].(string)
		ph, _ := e["ph"].(string)
		if name == "" || ph == "" {
			return fmt.Errorf("trace: %w: event %d: no name or no ph", ErrInvalid, i)
		}
		pid, okp := integer(e["pid"])
		tid, okt := integer(e["tid"])
		if !okp || !okt {
			return fmt.Errorf("trace: %w: event %d (%s): pid and tid must be integers", ErrInvalid, i, name)
		}
		switch ph {
		case "M":
			args, _ := e["args"].(map[string]any)
			if n, _ := args["name"].(string); n == "" && (name == "process_name" || name == "thread_name") {
				return fmt.Errorf("trace: %w: event %d: %s without args.name", ErrInvalid, i, name)
			}
			switch name {
			case "process_name":
				procNamed[pid] = true
			case "thread_name":
				threadNamed[thread{pid, tid}] = true
			}
		case "X":
			ts, ok1 := number(e["ts"])
			dur, ok2 := number(e["dur"])
			if !ok1 || !ok2 {
				return fmt.Errorf("trace: %w: event %d (%s): a complete event needs numeric ts and dur", ErrInvalid, i, name)
			}
			if ts < 0 || dur < 0 {
				return fmt.Errorf("trace: %w: event %d (%s): negative ts %g or dur %g", ErrInvalid, i, name, ts, dur)
			}
			th := thread{pid, tid}
			slices_[th] = append(slices_[th], slice{ts, ts + dur})
		case "s", "f":
			ts, ok := number(e["ts"])
			if !ok {
				return fmt.Errorf("trace: %w: flow event %d (%s): no ts", ErrInvalid, i, name)
			}
			flowEnds = append(flowEnds, flowEnd{thread{pid, tid}, ts, name})
			id, _ := e["id"].(string)
			if id == "" {
				return fmt.Errorf("trace: %w: flow event %d (%s): no id", ErrInvalid, i, name)
			}
			if ph == "s" {
				flows[id]++
			} else {
				flows[id]--
			}
		default:
			return fmt.Errorf("trace: %w: event %d (%s): phase %q is not one this package writes", ErrInvalid, i, name, ph)
		}
	}
	for th, ss := range slices_ {
		if !procNamed[th.pid] {
			return fmt.Errorf("trace: %w: pid %d has no process_name", ErrInvalid, th.pid)
		}
		if !threadNamed[th] {
			return fmt.Errorf("trace: %w: pid %d tid %d has no thread_name", ErrInvalid, th.pid, th.tid)
		}
		slices.SortFunc(ss, func(a, b slice) int { return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(b.end, a.end)) })
		var open []float64 // ends of the enclosing slices
		for _, s := range ss {
			for len(open) > 0 && open[len(open)-1] <= s.ts+nestSlack {
				open = open[:len(open)-1]
			}
			if len(open) > 0 && s.end > open[len(open)-1]+nestSlack {
				return fmt.Errorf("trace: %w: pid %d tid %d: the slice at %g µs ends at %g µs, after the slice it starts in (%g µs)",
					ErrInvalid, th.pid, th.tid, s.ts, s.end, open[len(open)-1])
			}
			open = append(open, s.end)
		}
	}
	for _, f := range flowEnds {
		if !slices.ContainsFunc(slices_[f.th], func(s slice) bool { return s.ts <= f.ts && f.ts <= s.end }) {
			return fmt.Errorf("trace: %w: flow %s at %g µs on pid %d tid %d is in no slice of that thread", ErrInvalid, f.name, f.ts, f.th.pid, f.th.tid)
		}
	}
	for id, n := range flows {
		if n != 0 {
			return fmt.Errorf("trace: %w: flow %s has a start without an end or the reverse", ErrInvalid, id)
		}
	}
	return nil
}

func number(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

func integer(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}
