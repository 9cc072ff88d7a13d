package session

import (
	"context"
	"strconv"
	"time"

	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/executor"
	"github.com/distflow/distflow/graph"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/trace"
)

// LocalTask is the task name of a local session's timeline.
const LocalTask = "localhost"

// ClientTask is the task name of the client's own spans in a timeline.
const ClientTask = "client"

// RunTraced is Run that also records the step's timeline, as TensorFlow's
// RunOptions FULL_TRACE does: every task's kernels on the executor lanes
// that ran them, each Send and Recv with its bytes and rendezvous key, the
// master's RunGraph calls and the workers' RecvTensor calls, and the
// client's own span of the step, all on the client's clock (see
// trace.AlignOffset). A local session's timeline has one task, LocalTask.
// The result is the input of trace.Builder.Add; it belongs to the caller.
// On error no timeline is returned.
func (s *Session) RunTraced(ctx context.Context, feeds map[graph.Output]*tensor.Tensor, fetches []graph.Output, targets []*graph.Node) ([]*tensor.Tensor, *pb.StepStats, error) {
	start := time.Now()
	sig, vals, err := signature(feeds, fetches, targets)
	if err != nil {
		return nil, nil, err
	}
	var out []*tensor.Tensor
	var st *pb.StepStats
	if s.remote != nil {
		out, st, err = s.runRemoteTraced(ctx, sig, vals, true)
		if err != nil {
			return nil, nil, err
		}
	} else {
		e, err := s.executor(sig)
		if err != nil {
			return nil, nil, err
		}
		st = &pb.StepStats{}
		if ce, ok := e.(*executor.Executor); ok {
			var tr executor.StepTrace
			if out, err = ce.RunTraced(ctx, nil, vals, &tr); err != nil {
				return nil, nil, err
			}
			st.Tasks = append(st.Tasks, localStats(&tr))
		} else if te, ok := e.(*taskgraph.Executor); ok {
			// A step over accelerators: its host's part is traced, its
			// Recvs waiting for the devices' values; the kernels on the
			// device streams are not traced yet.
			var tr executor.StepTrace
			if out, err = te.RunStep(ctx, nil, vals, executor.StepOptions{Trace: &tr}); err != nil {
				return nil, nil, err
			}
			st.Tasks = append(st.Tasks, localStats(&tr))
		} else if out, err = e.Run(ctx, vals); err != nil {
			return nil, nil, err
		}
	}
	st.Tasks = append(st.Tasks, &pb.TaskStepStats{Task: ClientTask, Spans: []*pb.SpanStats{{
		Name: "Session.Run", Op: trace.OpStep, Thread: "session",
		StartUnixNanos: start.UnixNano(), EndUnixNanos: time.Now().UnixNano()}}})
	return out, st, nil
}

// TraceNextRun makes the next Run (or RunNamed) of s made with ctx, this
// very context, a traced one (RunTraced), and calls done with its
// timeline, or with its error, once it ends; an earlier request not taken
// yet is replaced. It is how a training hook traces the step its loop
// runs next: train.MonitoredSession hands the same ctx to its hooks'
// BeforeRun and to the step's Run, while other goroutines' Runs on the
// session (a sync queue runner) have contexts of their own and stay
// untraced. An untraced Run pays one atomic load for it.
func (s *Session) TraceNextRun(ctx context.Context, done func(*pb.StepStats, error)) {
	s.traceNext.Store(&traceRequest{ctx: ctx, done: done})
}

// traceRequest is a TraceNextRun not taken yet.
type traceRequest struct {
	ctx  context.Context
	done func(*pb.StepStats, error)
}

// takeTrace returns the pending trace request for a Run with ctx, if any,
// and forgets it.
func (s *Session) takeTrace(ctx context.Context) *traceRequest {
	req := s.traceNext.Load()
	if req == nil || req.ctx != ctx || !s.traceNext.CompareAndSwap(req, nil) {
		return nil
	}
	return req
}

// runTracedFor runs a step that TraceNextRun asked to trace.
func (s *Session) runTracedFor(ctx context.Context, req *traceRequest, feeds map[graph.Output]*tensor.Tensor, fetches []graph.Output, targets []*graph.Node) ([]*tensor.Tensor, error) {
	out, st, err := s.RunTraced(ctx, feeds, fetches, targets)
	req.done(st, err)
	return out, err
}

// localStats is the timeline of a local step.
func localStats(tr *executor.StepTrace) *pb.TaskStepStats {
	ts := &pb.TaskStepStats{Task: LocalTask}
	for _, nt := range tr.Nodes() {
		ts.Spans = append(ts.Spans, &pb.SpanStats{Name: nt.Node.Name(), Op: nt.Node.Op(),
			StartUnixNanos: nt.Start, EndUnixNanos: nt.End, Thread: "executor lane " + strconv.Itoa(int(nt.Lane)),
			Bytes: nt.OutBytes, Failed: nt.Failed, Shapes: nt.Shapes})
	}
	return ts
}
