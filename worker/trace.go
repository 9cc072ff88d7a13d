package worker

import (
	"strconv"
	"sync"
	"time"

	"github.com/distflow/distflow/executor"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/placement"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/trace"
)

// stepTrace is what a traced RunGraph records beside the executor's
// timeline: the span of the call on this task, and the RecvTensor calls
// its Recvs made to other tasks.
type stepTrace struct {
	exec  executor.StepTrace
	start time.Time

	mu   sync.Mutex
	rpcs []*pb.SpanStats
}

// recvTensor records a RecvTensor call to peer for key, from start to now.
func (st *stepTrace) recvTensor(peer, key string, start time.Time, t *tensor.Tensor, err error) {
	s := &pb.SpanStats{Name: "RecvTensor", Op: trace.OpRPC, StartUnixNanos: start.UnixNano(), EndUnixNanos: time.Now().UnixNano(),
		Peer: peer, RendezvousKey: key, Failed: err != nil}
	if t != nil {
		s.Bytes = int64(t.NumElements()) * int64(t.DType().Size())
	}
	st.mu.Lock()
	st.rpcs = append(st.rpcs, s)
	st.mu.Unlock()
}

// laneName is the track of an executor lane in a trace.
func laneName(lane int32) string { return "executor lane " + strconv.Itoa(int(lane)) }

// stats returns the task's timeline of the step: the RunGraph call on lane
// 0 (the goroutine that served it), every kernel on its lane, and each
// RecvTensor call on the lane of the Recv that made it, so that it nests
// in that Recv.
func (st *stepTrace) stats(task string) *pb.TaskStepStats {
	out := &pb.TaskStepStats{Task: task}
	out.Spans = append(out.Spans, &pb.SpanStats{Name: "RunGraph", Op: trace.OpStep, Thread: laneName(0),
		StartUnixNanos: st.start.UnixNano(), EndUnixNanos: time.Now().UnixNano()})
	recvLane := map[string]string{}
	for _, nt := range st.exec.Nodes() {
		n := nt.Node
		s := &pb.SpanStats{Name: n.Name(), Op: n.Op(), StartUnixNanos: nt.Start, EndUnixNanos: nt.End,
			Thread: laneName(nt.Lane), Bytes: nt.OutBytes, Failed: nt.Failed, Shapes: nt.Shapes}
		switch n.Op() {
		case "Send":
			s.Bytes = nt.InBytes
			s.RendezvousKey, s.Peer = transfer(n, "recv_device")
		case "Recv":
			s.RendezvousKey, s.Peer = transfer(n, "send_device")
			recvLane[s.RendezvousKey] = s.Thread
		}
		out.Spans = append(out.Spans, s)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, s := range st.rpcs {
		s.Thread = recvLane[s.RendezvousKey]
		if s.Thread == "" {
			s.Thread = "RecvTensor"
		}
		out.Spans = append(out.Spans, s)
	}
	return out
}

// transfer returns the rendezvous key of a Send or Recv node and the task
// at the other end (the task of its device attr peerAttr).
func transfer(n *graph.Node, peerAttr string) (key, peer string) {
	key = rendezvous.Key(n.AttrString("send_device"), n.AttrString("recv_device"), n.AttrString("tensor_name"))
	if d, err := placement.ParseDevice(n.AttrString(peerAttr)); err == nil {
		peer = d.TaskName()
	}
	return key, peer
}
