//go:build unix

package estimator

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/worker"
)

// heldStatus is a task whose first GetStatus is never answered (it ends
// with the caller's deadline) and whose later ones are answered at once.
type heldStatus struct {
	worker.Service
	calls atomic.Int32
	first chan struct{} // closed when the first call arrives
}

func (h *heldStatus) GetStatus(ctx context.Context, _ *pb.GetStatusRequest) (*pb.GetStatusResponse, error) {
	if h.calls.Add(1) == 1 {
		close(h.first)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &pb.GetStatusResponse{}, nil
}

const pauseChildEnv = "DISTFLOW_TEST_STATUS_CHILD"

// TestStatusAcrossOwnPause: a process that is stopped (SIGSTOP) while it
// asks a task for its status, past the call's deadline, asks again when
// it resumes rather than report the task unreadable (the chief's warning
// "cannot read the status of a ps task" after its own pause). Without a
// pause, a call that is not answered within its deadline fails, once.
// The asking process is this test binary run again, so that the stop
// stops it and not the test.
func TestStatusAcrossOwnPause(t *testing.T) {
	if addr := os.Getenv(pauseChildEnv); addr != "" {
		_, err := statusAcrossPauses(context.Background(), addr, time.Second, rpc.Options{})
		fmt.Printf("status: %v\n", err)
		return
	}
	for _, paused := range []bool{true, false} {
		t.Run(fmt.Sprintf("paused=%v", paused), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			task := &heldStatus{first: make(chan struct{})}
			srv := rpc.NewServer(rpc.Options{Logger: slog.New(slog.DiscardHandler)})
			rpc.RegisterWorker(srv, task)
			go srv.Serve(l)
			defer srv.Stop()
			child := exec.Command(os.Args[0], "-test.run=^TestStatusAcrossOwnPause$")
			child.Env = append(os.Environ(), pauseChildEnv+"="+l.Addr().String())
			out, err := child.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			defer child.Process.Kill()
			select {
			case <-task.first:
			case <-time.After(20 * time.Second):
				t.Fatal("the child did not ask for the status")
			}
			if paused {
				// The call is in flight: stop the child past its deadline
				// (the fault's length, not a wait for an event).
				if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Second)
				if err := child.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
			}
			var result string
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if r, ok := strings.CutPrefix(sc.Text(), "status: "); ok {
					result = r
				}
			}
			if err := child.Wait(); err != nil {
				t.Fatalf("child: %v", err)
			}
			switch {
			case paused && result != "<nil>":
				t.Errorf("stopped past the deadline of its call: %s; want the status, asked again on resuming", result)
			case !paused && (result == "<nil>" || task.calls.Load() != 1):
				t.Errorf("a call not answered within its deadline: %s after %d calls; want a failure after 1", result, task.calls.Load())
			}
		})
	}
}
