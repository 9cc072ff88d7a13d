package trace_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/trace"
)

const t0 = int64(1_700_000_000_000_000_000)

// step is a small two-task timeline: a Send on the ps, the Recv of its
// tensor on the worker with the RecvTensor call inside it, and the
// master's RunGraph calls; the worker's clock runs 5 µs ahead.
func step() *pb.StepStats {
	key := "/job:ps/task:0/cpu:0;/job:worker/task:0/cpu:0;w:0"
	return &pb.StepStats{StepId: 7, Tasks: []*pb.TaskStepStats{
		{Task: "client", Spans: []*pb.SpanStats{{Name: "Session.Run", Op: trace.OpStep, StartUnixNanos: t0, EndUnixNanos: t0 + 100_000, Thread: "session"}}},
		{Task: "/job:worker/task:0", ClockOffsetNanos: -5000, Spans: []*pb.SpanStats{
			{Name: "RunGraph", Op: trace.OpStep, StartUnixNanos: t0 + 15_000, EndUnixNanos: t0 + 85_000, Thread: "executor lane 0"},
			{Name: "w/read", Op: "Recv", StartUnixNanos: t0 + 20_000, EndUnixNanos: t0 + 60_000, Thread: "executor lane 10", Bytes: 400, Peer: "/job:ps/task:0", RendezvousKey: key},
			{Name: "RecvTensor", Op: trace.OpRPC, StartUnixNanos: t0 + 21_000, EndUnixNanos: t0 + 59_000, Thread: "executor lane 10", Bytes: 400, Peer: "/job:ps/task:0", RendezvousKey: key},
			{Name: "matmul", Op: "MatMul", StartUnixNanos: t0 + 61_000, EndUnixNanos: t0 + 70_000, Thread: "executor lane 2", Bytes: 40, Shapes: "[10,1]"},
		}},
		{Task: "/job:ps/task:0", Spans: []*pb.SpanStats{
			{Name: "RunGraph", Op: trace.OpStep, StartUnixNanos: t0 + 10_000, EndUnixNanos: t0 + 30_000, Thread: "executor lane 0"},
			{Name: "w/send", Op: "Send", StartUnixNanos: t0 + 11_000, EndUnixNanos: t0 + 12_000, Thread: "executor lane 0", Bytes: 400, Peer: "/job:worker/task:0", RendezvousKey: key},
			{Name: "RunGraph", Op: trace.OpRPC, StartUnixNanos: t0 + 5_000, EndUnixNanos: t0 + 95_000, Thread: "master: RunGraph on /job:worker/task:0", Bytes: 10, SentBytes: 20, Peer: "/job:worker/task:0"},
		}},
	}}
}

func TestBuilderFile(t *testing.T) {
	var b trace.Builder
	b.Add(step())
	f := b.File()
	var buf bytes.Buffer
	if err := f.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(buf.Bytes()); err != nil {
		t.Fatalf("Validate: %v\n%s", err, buf.String())
	}
	procs, threads := map[int]string{}, map[[2]int]string{}
	var recv, send, flowS, flowF *trace.Event
	for i := range f.TraceEvents {
		e := &f.TraceEvents[i]
		switch {
		case e.Name == "process_name":
			procs[e.Pid] = e.Args["name"].(string)
		case e.Name == "thread_name":
			threads[[2]int{e.Pid, e.Tid}] = e.Args["name"].(string)
		case e.Ph == "X" && e.Name == "w/read":
			recv = e
		case e.Ph == "X" && e.Name == "w/send":
			send = e
		case e.Ph == "s":
			flowS = e
		case e.Ph == "f":
			flowF = e
		}
	}
	// "client" first, then tasks by name; lanes in numeric order.
	if want := map[int]string{1: "client", 2: "/job:ps/task:0", 3: "/job:worker/task:0"}; !equalMaps(procs, want) {
		t.Errorf("processes %v, want %v", procs, want)
	}
	if got := threads[[2]int{3, 2}]; got != "executor lane 2" {
		t.Errorf("worker tid 2 is %q, want executor lane 2 (numeric order)", got)
	}
	if recv == nil || send == nil {
		t.Fatal("the Send or the Recv is missing")
	}
	// The worker's clock offset applies: its Recv starts 15 µs after the
	// client's first event.
	if recv.Ts != 15 || recv.Dur != 40 || recv.Args["bytes"] != int64(400) || recv.Args["op"] != "Recv" {
		t.Errorf("recv event %+v", *recv)
	}
	if send.Args["rendezvous_key"] != recv.Args["rendezvous_key"] {
		t.Errorf("send key %v, recv key %v", send.Args["rendezvous_key"], recv.Args["rendezvous_key"])
	}
	if flowS == nil || flowF == nil || flowS.ID != flowF.ID || flowS.Pid != send.Pid || flowF.Pid != recv.Pid || flowF.BP != "e" {
		t.Errorf("flow events %+v %+v", flowS, flowF)
	}
	if f.OtherData["base_unix_nanos"] != t0 {
		t.Errorf("base %v, want %d", f.OtherData["base_unix_nanos"], t0)
	}
}

func equalMaps(a, b map[int]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestValidateRefuses(t *testing.T) {
	named := `{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"p"}},{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"t"}}`
	for _, tc := range []struct{ name, json, want string }{
		{"not an object", `[]`, "not a JSON object"},
		{"no events", `{}`, "no traceEvents"},
		{"no name", `{"traceEvents":[{"ph":"X","pid":1,"tid":1,"ts":0,"dur":1}]}`, "no name"},
		{"no pid", `{"traceEvents":[{"name":"a","ph":"X","tid":1,"ts":0,"dur":1}]}`, "pid and tid"},
		{"no dur", `{"traceEvents":[` + named + `,{"name":"a","ph":"X","pid":1,"tid":1,"ts":0}]}`, "numeric ts and dur"},
		{"negative dur", `{"traceEvents":[` + named + `,{"name":"a","ph":"X","pid":1,"tid":1,"ts":0,"dur":-1}]}`, "negative"},
		{"unnamed pid", `{"traceEvents":[{"name":"a","ph":"X","pid":2,"tid":1,"ts":0,"dur":1}]}`, "no process_name"},
		{"unnamed tid", `{"traceEvents":[` + named + `,{"name":"a","ph":"X","pid":1,"tid":2,"ts":0,"dur":1}]}`, "no thread_name"},
		{"overlap", `{"traceEvents":[` + named + `,{"name":"a","ph":"X","pid":1,"tid":1,"ts":0,"dur":10},{"name":"b","ph":"X","pid":1,"tid":1,"ts":5,"dur":10}]}`, "after the slice it starts in"},
		{"lone flow", `{"traceEvents":[` + named + `,{"name":"a","ph":"X","pid":1,"tid":1,"ts":0,"dur":1},{"name":"a","ph":"s","id":"1","pid":1,"tid":1,"ts":0}]}`, "flow 1"},
		{"flow outside slices", `{"traceEvents":[` + named + `,{"name":"a","ph":"X","pid":1,"tid":1,"ts":0,"dur":1},{"name":"a","ph":"s","id":"1","pid":1,"tid":1,"ts":0.5},{"name":"a","ph":"f","bp":"e","id":"1","pid":1,"tid":1,"ts":3}]}`, "in no slice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := trace.Validate([]byte(tc.json))
			if !errors.Is(err, trace.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
	ok := `{"traceEvents":[` + named + `,{"name":"a","ph":"X","pid":1,"tid":1,"ts":0,"dur":10},{"name":"b","ph":"X","pid":1,"tid":1,"ts":2,"dur":3},{"name":"c","ph":"X","pid":1,"tid":1,"ts":10,"dur":1}]}`
	if err := trace.Validate([]byte(ok)); err != nil {
		t.Errorf("nested and consecutive slices refused: %v", err)
	}
}

func TestWriteFileAndNewest(t *testing.T) {
	dir := t.TempDir()
	if p, err := trace.Newest(dir); err != nil || p != "" {
		t.Fatalf("Newest of an empty dir = %q, %v", p, err)
	}
	var b trace.Builder
	b.Add(step())
	for _, s := range []int64{9, 100, 20} {
		if err := trace.WriteFile(filepath.Join(dir, trace.FileName(s)), b.File()); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "trace-x.json"), []byte("{}"), 0o644)
	p, err := trace.Newest(dir)
	if err != nil || filepath.Base(p) != "trace-100.json" {
		t.Fatalf("Newest = %q, %v; want trace-100.json", p, err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(data); err != nil {
		t.Fatal(err)
	}
	var f trace.File
	if err := json.Unmarshal(data, &f); err != nil || len(f.TraceEvents) == 0 {
		t.Fatalf("read back: %v, %d events", err, len(f.TraceEvents))
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 4 {
		t.Errorf("%d entries in the dir, want 4 (no temporary files left)", len(ents))
	}
}

func TestAlignOffset(t *testing.T) {
	callee := func(start, end, off int64) *pb.TaskStepStats {
		return &pb.TaskStepStats{ClockOffsetNanos: off, Spans: []*pb.SpanStats{
			{Name: "k", Op: "MatMul", StartUnixNanos: 0, EndUnixNanos: 1},
			{Name: "RunGraph", Op: trace.OpStep, StartUnixNanos: start, EndUnixNanos: end},
		}}
	}
	for _, tc := range []struct {
		name       string
		start, end int64
		callee     *pb.TaskStepStats
		want       int64
	}{
		{"within the call", 100, 200, callee(120, 180, 0), 0},
		{"same clock, at the edges", 100, 200, callee(100, 200, 0), 0},
		{"callee an hour ahead", 100, 200, callee(3600e9+130, 3600e9+170, 0), -3600e9},
		{"callee behind, centred", 1000, 2000, callee(100, 300, 0), 1300},
		{"its own offset counted", 100, 200, callee(20, 80, 100), 0},
		{"no step span", 100, 200, &pb.TaskStepStats{}, 0},
	} {
		if got := trace.AlignOffset(tc.start, tc.end, tc.callee); got != tc.want {
			t.Errorf("%s: AlignOffset = %d, want %d", tc.name, got, tc.want)
		}
	}
}
