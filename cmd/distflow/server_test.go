package main

import (
	"bufio"
	"context"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// rpcFreePorts returns n loopback addresses that were free a moment ago.
func rpcFreePorts(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, l.Addr().String())
		defer l.Close()
	}
	return addrs
}

// rpcServerProc is a `distflow server` child process.
type rpcServerProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr strings.Builder
	ready  chan struct{} // closed when it printed "serving"
	exited chan error
}

func rpcStartServer(t *testing.T, args ...string) *rpcServerProc {
	t.Helper()
	p := &rpcServerProc{cmd: exec.Command(binary, append([]string{"server"}, args...)...), ready: make(chan struct{}), exited: make(chan error, 1)}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "serving ") {
				once.Do(func() { close(p.ready) })
			}
		}
	})
	wg.Go(func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	})
	go func() {
		wg.Wait()
		p.exited <- p.cmd.Wait()
	}()
	select {
	case <-p.ready:
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("distflow server exited before serving: %v\n%s", err, p.logs())
	case <-time.After(20 * time.Second):
		t.Fatalf("distflow server did not start in 20s:\n%s", p.logs())
	}
	return p
}

func (p *rpcServerProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// wait waits for the process to exit and checks it exited with status 0
// and logged why.
func (p *rpcServerProc) waitClean(t *testing.T, why string) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Fatalf("distflow server exited with %v, want status 0; logs:\n%s", err, p.logs())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("distflow server still running 20s after being told to stop:\n%s", p.logs())
	}
	if !strings.Contains(p.logs(), why) {
		t.Errorf("logs do not say %q:\n%s", why, p.logs())
	}
}

// TestServerCommand runs a ps as a real process, uses it from this process
// through a remote session, and stops it the two ways a ps ends.
func TestServerCommand(t *testing.T) {
	tests := []struct {
		name string
		args func(ps, worker string) []string
		stop func(t *testing.T, p *rpcServerProc, ps string)
		why  string
	}{
		{
			name: "flags, SIGTERM",
			args: func(ps, w string) []string {
				return []string{"--ps_hosts", ps, "--worker-hosts", w, "--job_name", "ps", "--task-index", "0"}
			},
			stop: func(t *testing.T, p *rpcServerProc, _ string) { p.cmd.Process.Signal(syscall.SIGTERM) },
			why:  "signal received",
		},
		{
			name: "flags, Shutdown RPC",
			args: func(ps, w string) []string {
				return []string{"--ps_hosts=" + ps, "--worker_hosts=" + w, "--job_name=ps", "--task_index=0"}
			},
			stop: func(t *testing.T, _ *rpcServerProc, ps string) {
				c, closer, err := rpc.DialWorker(ps, rpc.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer closer.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := c.Shutdown(ctx, &pb.ShutdownRequest{Reason: "training finished"}); err != nil {
					t.Fatal(err)
				}
			},
			why: "training finished",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addrs := rpcFreePorts(t, 2)
			p := rpcStartServer(t, tt.args(addrs[0], addrs[1])...)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s := graph.NewScope().WithDevice("/job:ps/task:0")
			v := ops.NewVariable(s, "v", tensor.Float32, []int{2}, ops.ConstantInit(3))
			double := ops.Add(s, v.Value(), v.Value())
			init := ops.GlobalVariablesInitializer(s)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			sess, err := session.Open(ctx, "grpc://"+addrs[0], s.Graph())
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
				t.Fatal(err)
			}
			out, err := sess.Run(ctx, nil, []graph.Output{double}, nil)
			if err != nil || !tensor.Equal(out[0], tensor.MustFromSlice([]float32{6, 6}, 2)) {
				t.Fatalf("v+v = %v, %v; want [6 6]", out, err)
			}
			sess.Close()
			tt.stop(t, p, addrs[0])
			p.waitClean(t, tt.why)
		})
	}
}

// TestServerCommandRejectsBadCluster: malformed flags fail before serving.
func TestServerCommandRejectsBadCluster(t *testing.T) {
	_, stderr, err := run(t, "server", "--ps_hosts", "127.0.0.1:1", "--job_name", "ps", "--task_index", "3")
	if err == nil || !strings.Contains(stderr, "3") {
		t.Errorf("err = %v, stderr = %q; want a failure naming the bad index", err, stderr)
	}
	_, stderr, err = run(t, "server")
	if err == nil || !strings.Contains(stderr, "TF_CONFIG") {
		t.Errorf("err = %v, stderr = %q; want a failure explaining how to give the cluster", err, stderr)
	}
}
