package trace

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	pb "github.com/distflow/distflow/proto/distflowpb"
)

// Event is one event of the Trace Event Format.
type Event struct {
	Name string `json:"name"`
	// Cat is the category: "kernel", "rpc", "step", "flow".
	Cat string `json:"cat,omitempty"`
	// Ph is the phase: "X" complete, "M" metadata, "s"/"f" flow start/end.
	Ph string `json:"ph"`
	// Ts and Dur are in microseconds, Ts from the file's first event; Dur
	// is written for complete events only.
	Ts  float64 `json:"ts"`
	Dur float64 `json:"dur"`
	Pid int     `json:"pid"`
	Tid int     `json:"tid"`
	// ID joins the two events of a flow; BP "e" binds its end to the
	// enclosing slice.
	ID   string         `json:"id,omitempty"`
	BP   string         `json:"bp,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// MarshalJSON writes dur on complete events only (always, even when 0):
// the other phases have none.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event // without this method
	var dur *float64
	if e.Ph == "X" {
		dur = &e.Dur
	}
	return json.Marshal(struct {
		plain
		Dur *float64 `json:"dur,omitempty"` // shadows plain's
	}{plain(e), dur})
}

// File is a Chrome trace file (the JSON Object Format).
type File struct {
	TraceEvents     []Event `json:"traceEvents"`
	DisplayTimeUnit string  `json:"displayTimeUnit,omitempty"`
	// OtherData holds the Unix time of ts 0 ("base_unix_nanos") and the
	// traced steps' IDs ("step_ids").
	OtherData map[string]any `json:"otherData,omitempty"`
}

// Categories of the events a Builder makes.
const (
	CatKernel = "kernel"
	CatRPC    = "rpc"
	CatStep   = "step"
	CatFlow   = "flow"
)

// Ops of SpanStats that are not kernels.
const (
	OpRPC  = "RPC"  // an RPC, as its caller saw it
	OpStep = "Step" // the whole step on a task (RunStep, RunGraph)
)

// Builder collects the timelines of traced steps into one File. The zero
// value is ready; it is not safe for concurrent use.
type Builder struct {
	steps []*pb.StepStats
}

// Add adds the timeline of one step. The builder keeps st: the caller must
// not modify it afterwards.
func (b *Builder) Add(st *pb.StepStats) {
	if st != nil {
		b.steps = append(b.steps, st)
	}
}

// Len returns the number of steps added.
func (b *Builder) Len() int { return len(b.steps) }

// span is a SpanStats on the client's clock, with its place in the file.
type span struct {
	s          *pb.SpanStats
	step       int64
	start, end int64 // Unix nanoseconds, client clock
	pid, tid   int
}

// File returns the Chrome trace of the steps added so far: one process per
// task (sorted by name, "client" first), one thread per track of a task
// (sorted by name, numbers in numeric order), each named by a metadata
// event.
func (b *Builder) File() *File {
	f := &File{TraceEvents: []Event{}, DisplayTimeUnit: "ms", OtherData: map[string]any{}}
	stepIDs := make([]int64, len(b.steps))
	threads := map[string]map[string]bool{} // by task
	for i, st := range b.steps {
		stepIDs[i] = st.GetStepId()
		for _, ts := range st.GetTasks() {
			if threads[ts.GetTask()] == nil {
				threads[ts.GetTask()] = map[string]bool{}
			}
			for _, s := range ts.GetSpans() {
				threads[ts.GetTask()][threadName(s)] = true
			}
		}
	}
	f.OtherData["step_ids"] = stepIDs

	// Processes and their threads, numbered in a stable order.
	pid := map[string]int{}
	tid := map[string]map[string]int{} // by task, by thread
	for i, task := range slices.SortedFunc(maps.Keys(threads), taskOrder) {
		p := i + 1
		pid[task], tid[task] = p, map[string]int{}
		f.TraceEvents = append(f.TraceEvents,
			Event{Name: "process_name", Ph: "M", Pid: p, Args: map[string]any{"name": task}},
			Event{Name: "process_sort_index", Ph: "M", Pid: p, Args: map[string]any{"sort_index": i}})
		for j, t := range slices.SortedFunc(maps.Keys(threads[task]), naturalOrder) {
			tid[task][t] = j + 1
			f.TraceEvents = append(f.TraceEvents,
				Event{Name: "thread_name", Ph: "M", Pid: p, Tid: j + 1, Args: map[string]any{"name": t}},
				Event{Name: "thread_sort_index", Ph: "M", Pid: p, Tid: j + 1, Args: map[string]any{"sort_index": j}})
		}
	}
	var spans []span
	for _, st := range b.steps {
		for _, ts := range st.GetTasks() {
			off := ts.GetClockOffsetNanos()
			for _, s := range ts.GetSpans() {
				start := s.GetStartUnixNanos() + off
				end := max(s.GetEndUnixNanos()+off, start) // a clock step backwards within a span
				spans = append(spans, span{s: s, step: st.GetStepId(), start: start, end: end,
					pid: pid[ts.GetTask()], tid: tid[ts.GetTask()][threadName(s)]})
			}
		}
	}
	if len(spans) == 0 {
		return f
	}
	base := spans[0].start
	for _, sp := range spans {
		base = min(base, sp.start)
	}
	f.OtherData["base_unix_nanos"] = base
	us := func(ns int64) float64 { return float64(ns-base) / 1e3 }

	// Complete events, ordered by time (and, at equal times, outer first)
	// so that readers that expect sorted events nest them right.
	slices.SortStableFunc(spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(b.end, a.end))
	})
	sends := map[flowKey]span{}
	for _, sp := range spans {
		s := sp.s
		e := Event{Name: s.GetName(), Ph: "X", Ts: us(sp.start), Dur: float64(sp.end-sp.start) / 1e3,
			Pid: sp.pid, Tid: sp.tid, Args: map[string]any{"step_id": sp.step}}
		switch s.GetOp() {
		case OpRPC:
			e.Cat = CatRPC
			e.Args["received_bytes"] = s.GetBytes()
			e.Args["sent_bytes"] = s.GetSentBytes()
		case OpStep:
			e.Cat = CatStep
		default:
			e.Cat = CatKernel
			e.Args["op"] = s.GetOp()
			e.Args["bytes"] = s.GetBytes()
			if sh := s.GetShapes(); sh != "" {
				e.Args["shapes"] = sh
			}
		}
		if p := s.GetPeer(); p != "" {
			e.Args["peer"] = p
		}
		if k := s.GetRendezvousKey(); k != "" {
			e.Args["rendezvous_key"] = k
		}
		if s.GetFailed() {
			e.Args["failed"] = true
		}
		f.TraceEvents = append(f.TraceEvents, e)
		if s.GetOp() == "Send" && s.GetRendezvousKey() != "" {
			sends[flowKey{sp.step, s.GetRendezvousKey()}] = sp
		}
	}
	// A flow arrow from each Send to its Recv, from the middle of one slice
	// to the middle of the other: each end is then strictly inside the
	// slice it binds to (the enclosing slice, bp "e"), even a slice of zero
	// duration at the microsecond.
	n := 0
	for _, sp := range spans {
		s := sp.s
		if s.GetOp() != "Recv" || s.GetRendezvousKey() == "" {
			continue
		}
		snd, ok := sends[flowKey{sp.step, s.GetRendezvousKey()}]
		if !ok {
			continue
		}
		n++
		id := strconv.Itoa(n)
		name := "tensor " + s.GetRendezvousKey()
		f.TraceEvents = append(f.TraceEvents,
			Event{Name: name, Cat: CatFlow, Ph: "s", BP: "e", ID: id, Ts: us((snd.start + snd.end) / 2), Pid: snd.pid, Tid: snd.tid},
			Event{Name: name, Cat: CatFlow, Ph: "f", BP: "e", ID: id, Ts: us((sp.start + sp.end) / 2), Pid: sp.pid, Tid: sp.tid})
	}
	return f
}

type flowKey struct {
	step int64
	key  string
}

// threadName is the track of a span; spans without one share "main".
func threadName(s *pb.SpanStats) string {
	if t := s.GetThread(); t != "" {
		return t
	}
	return "main"
}

// taskOrder sorts "client" first, then tasks by name.
func taskOrder(a, b string) int {
	if (a == "client") != (b == "client") {
		if a == "client" {
			return -1
		}
		return 1
	}
	return naturalOrder(a, b)
}

var digits = regexp.MustCompile(`\d+`)

// naturalOrder compares strings with their runs of digits as numbers, so
// that "lane 2" comes before "lane 10".
func naturalOrder(a, b string) int {
	pad := func(s string) string {
		return digits.ReplaceAllStringFunc(s, func(d string) string {
			d = strings.TrimLeft(d, "0")
			return strings.Repeat("0", max(0, 20-len(d))) + d
		})
	}
	return cmp.Or(strings.Compare(pad(a), pad(b)), strings.Compare(a, b))
}

// Write writes f as JSON to w.
func (f *File) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(f); err != nil {
		return fmt.Errorf("trace: writing the trace: %w", err)
	}
	return nil
}

// FileName is the name of the trace file whose first traced step ran at
// global step step: "trace-<step>.json". A directory's newest trace is the
// one with the highest step (Newest).
func FileName(step int64) string { return "trace-" + strconv.FormatInt(step, 10) + ".json" }

var fileNameRE = regexp.MustCompile(`^trace-(\d+)\.json$`)

// Newest returns the path of the trace file of dir with the highest step
// (see FileName), or "" when dir has none.
func Newest(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("trace: listing %s: %w", dir, err)
	}
	best, bestStep := "", int64(-1)
	for _, e := range ents {
		m := fileNameRE.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		if s, err := strconv.ParseInt(m[1], 10, 64); err == nil && s > bestStep {
			best, bestStep = filepath.Join(dir, e.Name()), s
		}
	}
	return best, nil
}

// WriteFile writes f to path atomically (a temporary file in the same
// directory, renamed), so that a reader never sees half a trace. The
// directory is created if needed.
func WriteFile(path string, f *File) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".trace-*.json.tmp")
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if err := f.Write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("trace: writing %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}

// AlignOffset returns what to add to the times of callee, the timeline a
// task returned for a call that the caller saw from start to end (Unix
// nanoseconds on the caller's clock), to put them on the caller's clock.
// The callee's own span of the call (its span of op "Step") must lie
// within the caller's: when it does (one machine, or synchronised clocks)
// the offset is 0; otherwise the two spans are centred on each other,
// which is exact when the request and the response take equally long.
func AlignOffset(start, end int64, callee *pb.TaskStepStats) int64 {
	for _, s := range callee.GetSpans() {
		if s.GetOp() != OpStep {
			continue
		}
		cs, ce := s.GetStartUnixNanos()+callee.GetClockOffsetNanos(), s.GetEndUnixNanos()+callee.GetClockOffsetNanos()
		if cs >= start && ce <= end {
			return 0
		}
		return ((start + end) - (cs + ce)) / 2
	}
	return 0
}
