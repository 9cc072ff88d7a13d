package master_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/trace"
	"github.com/distflow/distflow/worker"
	"github.com/distflow/distflow/worker/workertest"
)

// skewed is a worker whose wall clock runs ahead by skew: the times of the
// timelines it returns are shifted.
type skewed struct {
	worker.Service
	skew time.Duration
}

func (s skewed) RunGraph(ctx context.Context, req *pb.RunGraphRequest) (*pb.RunGraphResponse, error) {
	resp, err := s.Service.RunGraph(ctx, req)
	for _, sp := range resp.GetStepStats().GetSpans() {
		sp.StartUnixNanos += int64(s.skew)
		sp.EndUnixNanos += int64(s.skew)
	}
	return resp, err
}

// TestRunStepTraceAlignsClocks traces a step over a ps whose clock is an
// hour ahead: the master returns every part's timeline, the ps's with the
// offset that puts its RunGraph inside the master's call, the worker's
// (same clock) with none, and its own spans last.
func TestRunStepTraceAlignsClocks(t *testing.T) {
	const ps, wk = "/job:ps/task:0", "/job:worker/task:0"
	net := workertest.NewCluster(ps, wk)
	net.Add(ps, skewed{Service: net.Local(ps), skew: time.Hour})
	m := master.New(master.Config{Task: wk, Workers: net.From(wk), Logger: quiet})
	s := graph.NewScope()
	v := ops.NewVariable(s.WithDevice("/job:ps"), "v", tensor.Float32, []int{2}, ops.OnesInit())
	ops.Identity(s.SubScope("double"), ops.Mul(s, v.Value(), ops.Const(s, float32(2))))
	ctx := context.Background()
	cs, err := m.CreateSession(ctx, &pb.CreateSessionRequest{Graph: s.Graph().ToProto()})
	if err != nil {
		t.Fatal(err)
	}
	h := cs.GetSessionHandle()
	if _, err := m.RunStep(ctx, &pb.RunStepRequest{SessionHandle: h, Targets: []string{"v/Assign"}}); err != nil {
		t.Fatal(err)
	}
	plain, err := m.RunStep(ctx, &pb.RunStepRequest{SessionHandle: h, Fetches: []string{"double/Identity:0"}})
	if err != nil || plain.GetStepStats() != nil {
		t.Fatalf("untraced step: stats %v, err %v; want none", plain.GetStepStats(), err)
	}
	out, err := m.RunStep(ctx, &pb.RunStepRequest{SessionHandle: h, Fetches: []string{"double/Identity:0"}, Options: &pb.RunOptions{Trace: true}})
	if err != nil {
		t.Fatal(err)
	}
	st := out.GetStepStats()
	tasks := st.GetTasks()
	if len(tasks) != 3 || tasks[2].GetTask() != wk || tasks[2].GetSpans()[0].GetName() != "RunStep" {
		t.Fatalf("timelines of %d tasks, last %v; want the ps's, the worker's and the master's own last", len(tasks), tasks[len(tasks)-1])
	}
	calls := map[string]*pb.SpanStats{} // the master's RunGraph calls, by task
	for _, sp := range tasks[2].GetSpans() {
		if sp.GetName() == "RunGraph" {
			calls[sp.GetPeer()] = sp
			if sp.GetSentBytes() <= 0 || sp.GetBytes() <= 0 {
				t.Errorf("RunGraph on %s: %d bytes sent, %d received", sp.GetPeer(), sp.GetSentBytes(), sp.GetBytes())
			}
		}
	}
	for _, ts := range tasks[:2] {
		var span *pb.SpanStats
		kernels := 0
		for _, sp := range ts.GetSpans() {
			switch sp.GetOp() {
			case trace.OpStep:
				span = sp
			case trace.OpRPC:
			default:
				kernels++
			}
		}
		call := calls[ts.GetTask()]
		if span == nil || call == nil || kernels == 0 {
			t.Fatalf("%s: step span %v, call %v, %d kernels", ts.GetTask(), span, call, kernels)
		}
		off := ts.GetClockOffsetNanos()
		if ts.GetTask() == wk && off != 0 {
			t.Errorf("the worker shares the master's clock, offset %v", time.Duration(off))
		}
		if ts.GetTask() == ps && (time.Duration(-off) < time.Hour-time.Second || time.Duration(-off) > time.Hour+time.Second) {
			t.Errorf("the ps runs an hour ahead, offset %v", time.Duration(off))
		}
		// Aligned, the task's RunGraph lies within the master's call, up
		// to the asymmetry the centring cannot know.
		start, end := span.GetStartUnixNanos()+off, span.GetEndUnixNanos()+off
		slack := int64(call.GetEndUnixNanos()-call.GetStartUnixNanos()) / 2
		if start < call.GetStartUnixNanos()-slack || end > call.GetEndUnixNanos()+slack {
			t.Errorf("%s: aligned RunGraph [%d, %d] outside the call [%d, %d]", ts.GetTask(), start, end, call.GetStartUnixNanos(), call.GetEndUnixNanos())
		}
	}
	var b trace.Builder
	b.Add(st)
	data, err := json.Marshal(b.File())
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(data); err != nil {
		t.Fatal(err)
	}
}
