package server_test

import (
	"context"
	"net"
	"testing"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/abtest"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// maxRemoteStepAllocs bounds the allocations of one remote linreg step with
// every task in this process: the client and its master on the worker, the
// ps over the tensor channel on loopback. The twelfth session took it from
// 386 to 137; the margin is for the runtime's own.
const maxRemoteStepAllocs = 160

// TestRemoteStepAllocations keeps the remote step's allocations from
// creeping back: names, plans, requests and batches are made once, not at
// every step (docs/BENCHMARKS.md, twelfth session).
func TestRemoteStepAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocations (sync.Pool drops items at random)")
	}
	var lis [2]net.Listener
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i] = l
	}
	spec, err := cluster.NewSpec(map[string][]string{"ps": {lis[0].Addr().String()}, "worker": {lis[1].Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	var w *server.Server
	for i, id := range []cluster.TaskID{{Job: "ps"}, {Job: "worker"}} {
		s, err := server.New(server.Config{Cluster: spec, Task: id, Listener: lis[i], Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		w = s
	}
	g, init := abtest.LinearModel(t, 0)
	sess, err := session.New(g, session.WithMaster(w.Master(), &pb.SessionConfig{StepTimeoutMs: 60000}))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	feeds := map[string]*tensor.Tensor{"x": tensor.MustFromSlice([]float32{0.5}, 1, 1), "y": tensor.MustFromSlice([]float32{2}, 1, 1)}
	step := func() {
		if _, err := sess.RunNamed(ctx, feeds, nil, []string{"train"}); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // plans, executors, connections and pools made
		step()
	}
	n := testing.AllocsPerRun(500, step)
	t.Logf("%.0f allocations per remote step (at most %d)", n, maxRemoteStepAllocs)
	if n > maxRemoteStepAllocs {
		t.Errorf("a remote step made %.0f allocations, more than %d: something is made at every step that was made once", n, maxRemoteStepAllocs)
	}
}
