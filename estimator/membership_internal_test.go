package estimator

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/internal/testlog"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/worker"
)

// incarnated answers every status with its incarnation, which the test
// changes to stand for a new process on the address.
type incarnated struct {
	worker.Service
	inc atomic.Uint64
}

func (w *incarnated) GetStatus(context.Context, *pb.GetStatusRequest) (*pb.GetStatusResponse, error) {
	return &pb.GetStatusResponse{Incarnation: w.inc.Load()}, nil
}

// TestRestartedPSIsNamedAsAPS: a ps restarted between two heartbeats (a
// new incarnation answers) is named as a ps task whose variables are gone,
// with what becomes of them, not as "a replica was restarted".
func TestRestartedPSIsNamedAsAPS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := &incarnated{}
	ps.inc.Store(1)
	srv := rpc.NewServer(rpc.Options{Logger: slog.New(slog.DiscardHandler)})
	rpc.RegisterWorker(srv, ps)
	go srv.Serve(l)
	defer srv.Stop()
	spec, err := cluster.NewSpec(map[string][]string{"ps": {l.Addr().String()}, "worker": {"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	var logs testlog.Buffer
	changes := make(chan bool, 4)
	m := &membership{cfg: RunConfig{Cluster: spec, LostAfter: 500 * time.Millisecond, CheckpointDir: "/ckpt", WaitTimeout: time.Minute},
		log: slog.New(slog.NewTextHandler(&logs, nil)), peers: map[int]cluster.TaskID{-1: {Job: "ps"}},
		onChange: func(_ int, alive bool) { changes <- alive }}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	wait := m.watch(ctx)
	defer func() { cancel(); wait() }()
	for !m.hasAnswered(-1) {
		select {
		case <-ctx.Done():
			t.Fatal("the ps never answered a heartbeat")
		case <-time.After(10 * time.Millisecond):
		}
	}
	ps.inc.Store(2)
	for _, want := range []bool{false, true} {
		select {
		case alive := <-changes:
			if alive != want {
				t.Fatalf("change to alive=%v, want %v", alive, want)
			}
		case <-ctx.Done():
			t.Fatalf("no change to alive=%v after the restart:\n%s", want, logs.String())
		}
	}
	got := logs.String()
	if !strings.Contains(got, `msg="a ps task was restarted: the variables it held are gone" peer=/job:ps/task:0`) ||
		!strings.Contains(got, "the chief restores them from the latest checkpoint in /ckpt") || strings.Contains(got, "a replica") {
		t.Errorf("the restarted ps is not named as a ps, with what becomes of its variables:\n%s", got)
	}
}
