package master

import (
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/trace"
)

// stepTrace is the master's record of a traced step: its RunStep, each
// partition's RunGraph call as the master saw it, and the timelines the
// workers returned.
type stepTrace struct {
	start time.Time

	mu    sync.Mutex
	calls []rpcCall // per partition
}

type rpcCall struct {
	task       string
	start, end time.Time
	sent, recv int64
	failed     bool
	stats      *pb.TaskStepStats
}

func newStepTrace() *stepTrace { return &stepTrace{start: time.Now()} }

// call records partition i's RunGraph call on task, from start to now.
func (st *stepTrace) call(i int, task string, start time.Time, req *pb.RunGraphRequest, resp *pb.RunGraphResponse, err error) {
	c := rpcCall{task: task, start: start, end: time.Now(), sent: int64(proto.Size(req)), failed: err != nil}
	if resp != nil {
		c.recv = int64(proto.Size(resp))
		c.stats = resp.GetStepStats()
	}
	st.mu.Lock()
	st.calls[i] = c
	st.mu.Unlock()
}

// stats returns the step's timeline on the master's clock: the master's
// own spans under its task, and each worker's, with the offset that puts
// its clock on the master's (trace.AlignOffset).
func (st *stepTrace) stats(task string, stepID int64) *pb.StepStats {
	if task == "" {
		task = "master"
	}
	out := &pb.StepStats{StepId: stepID}
	own := &pb.TaskStepStats{Task: task}
	own.Spans = append(own.Spans, &pb.SpanStats{Name: "RunStep", Op: trace.OpStep, Thread: "master",
		StartUnixNanos: st.start.UnixNano(), EndUnixNanos: time.Now().UnixNano()})
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, c := range st.calls {
		own.Spans = append(own.Spans, &pb.SpanStats{Name: "RunGraph", Op: trace.OpRPC, Thread: "master: RunGraph on " + c.task,
			StartUnixNanos: c.start.UnixNano(), EndUnixNanos: c.end.UnixNano(), Bytes: c.recv, SentBytes: c.sent,
			Peer: c.task, Failed: c.failed})
		if c.stats == nil {
			continue
		}
		c.stats.ClockOffsetNanos += trace.AlignOffset(c.start.UnixNano(), c.end.UnixNano(), c.stats)
		out.Tasks = append(out.Tasks, c.stats)
	}
	out.Tasks = append(out.Tasks, own)
	return out
}
