package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/data"
)

// These tests run clusters of real distflow processes talking gRPC over
// loopback sockets.

// TestLocalClusterMLPMatchesSingleProcess compares asynchronous training on
// a cluster with one process on the full Fashion-MNIST: its 10,000 test
// images measure accuracy to about 0.4 points (the embedded subset's 2,000,
// to 0.8: too coarse for a 1-point comparison). The learning rate is the
// one at which asynchronous updates, a step or two stale, converge like
// synchronous ones here (at 0.5 the gap varied from 0 to 1.7 points), and
// it decays to zero over the run: the last iterate of SGD at a constant
// rate moves by points from one step to the next, and a quiet machine's
// asynchronous runs ended 0.8241-0.8455 against the single process's 0.8547
// (with the decay: 0.8457-0.8460 against 0.8468).
func TestLocalClusterMLPMatchesSingleProcess(t *testing.T) {
	if _, err := os.Stat(data.DefaultFashionMNISTDir); err != nil {
		t.Skipf("needs the full Fashion-MNIST (apt-get install dataset-fashion-mnist): %v", err)
	}
	args := []string{"train", "--model", "mlp", "--data", data.DefaultFashionMNISTDir, "--epochs", "10", "--lr", "0.2", "--lr-decay", "linear", "--json"}
	stdout, stderr, err := run(t, args...)
	if err != nil {
		t.Fatalf("single process: %v\n%s", err, stderr)
	}
	single := lastJSON(t, stdout)["test_accuracy"].(float64)

	// Asynchronous runs differ from run to run (which stale gradient lands
	// when): about half a point here, on top of the 0.4 points the test
	// set measures to. A second run is allowed before the comparison fails.
	var res map[string]any
	var acc float64
	for attempt := 1; attempt <= 2; attempt++ {
		stdout, stderr, err = run(t, append(args, "--local-cluster", "ps=2,worker=2")...)
		if err != nil {
			t.Fatalf("local cluster: %v\n%s", err, stderr)
		}
		res = lastJSON(t, stdout)
		acc = res["test_accuracy"].(float64)
		t.Logf("run %d: test accuracy: single process %.4f, 2 ps + 2 workers asynchronous %.4f", attempt, single, acc)
		if math.Abs(acc-single) <= 0.01 {
			break
		}
	}
	if math.Abs(acc-single) > 0.01 {
		t.Errorf("cluster accuracy %.4f is not within 1 point of single-process %.4f", acc, single)
	}
	// Both ps tasks hold part of the variables (round-robin placement).
	ps, _ := res["ps_variables"].(map[string]any)
	for _, task := range []string{"/job:ps/task:0", "/job:ps/task:1"} {
		if vars, _ := ps[task].([]any); len(vars) == 0 {
			t.Errorf("%s holds no variables: %v", task, res["ps_variables"])
		}
	}
	for _, tag := range []string{"[ps 0]", "[ps 1]", "[worker 0]", "[worker 1]"} {
		if !strings.Contains(stderr, tag) {
			t.Errorf("no log lines prefixed %s", tag)
		}
	}
}

func TestLocalClusterInGraphReplication(t *testing.T) {
	stdout, stderr, err := run(t, "train", "--model", "mlp", "--data", "embedded", "--epochs", "10",
		"--local-cluster", "ps=1,worker=2", "--in-graph", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if acc := lastJSON(t, stdout)["test_accuracy"].(float64); acc < 0.78 {
		t.Errorf("in-graph replication: test accuracy %.4f, want >= 0.78", acc)
	}
}

func TestLocalClusterRejectsBadSpecs(t *testing.T) {
	for _, spec := range []string{"worker=2", "ps=1", "ps=1,gpu=2", "ps=x"} {
		_, stderr, err := run(t, "train", "--model", "linreg", "--local-cluster", spec)
		if err == nil || !strings.Contains(stderr, "--local-cluster") {
			t.Errorf("--local-cluster %s: %v %q", spec, err, stderr)
		}
	}
}

// task is one distflow process started by a test.
type task struct {
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    strings.Builder
	stdout strings.Builder
	seen   chan string // every stderr line
	done   chan error
}

// freeListeners returns n listening sockets on loopback as files to pass to
// children, and their addresses.
func freeListeners(t testing.TB, n int) ([]*os.File, []string) {
	t.Helper()
	var files []*os.File
	var addrs []string
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f, err := l.(*net.TCPListener).File()
		addrs = append(addrs, l.Addr().String())
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		files = append(files, f)
	}
	return files, addrs
}

// startTestTask starts distflow with args, serving on the inherited listener l.
func startTestTask(t testing.TB, name string, l *os.File, args ...string) *task {
	t.Helper()
	tk := &task{name: name, seen: make(chan string, 10000), done: make(chan error, 1)}
	tk.cmd = exec.Command(binary, append(args, "-v", "--listen-fd", "3")...)
	tk.cmd.ExtraFiles = []*os.File{l}
	tk.cmd.SysProcAttr = childAttrs()
	return tk.start(t)
}

// start starts tk's command and reads its stderr into tk's output and
// lines; the test's cleanup kills it.
func (tk *task) start(t testing.TB) *task {
	t.Helper()
	stderr, err := tk.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	tk.cmd.Stdout = &lockedWriter{mu: &tk.mu, w: &tk.stdout}
	if err := tk.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			tk.mu.Lock()
			tk.out.WriteString(sc.Text() + "\n")
			tk.mu.Unlock()
			select {
			case tk.seen <- sc.Text():
			default:
			}
		}
		tk.done <- tk.cmd.Wait()
	}()
	t.Cleanup(func() { _ = tk.cmd.Process.Kill() })
	return tk
}

func (tk *task) logs() string {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return tk.out.String()
}

// output returns what the process wrote to stdout.
func (tk *task) output() string {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return tk.stdout.String()
}

// lockedWriter serialises writes to w with mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (lw *lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

// waitLine waits for a stderr line containing s.
func (tk *task) waitLine(t testing.TB, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line := <-tk.seen:
			if strings.Contains(line, s) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: no line with %q within %v; logs:\n%s", tk.name, s, timeout, tk.logs())
		}
	}
}

// waitAnyLine waits until one of tasks has logged a line containing s.
func waitAnyLine(t testing.TB, tasks []*task, s string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		for _, tk := range tasks {
			if strings.Contains(tk.logs(), s) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no task logged %q within %v", s, timeout)
		}
	}
}

// wait waits for the process to exit.
func (tk *task) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-tk.done:
		return err
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v; logs:\n%s", tk.name, timeout, tk.logs())
		return nil
	}
}

// startCluster starts 1 ps and n workers training linear regression for
// steps global steps, each process given the whole cluster on its flags.
func startCluster(t *testing.T, workers, steps int, extra ...string) (ps *task, ws []*task) {
	return startTasks(t, workers, append([]string{"train", "--model", "linreg", "--steps", strconv.Itoa(steps), "--log-every", "50",
		"--wait-timeout", "30s"}, extra...)...)
}

// startTasks starts 1 ps and n workers with args and the cluster's flags.
// A task's listener stays open in the test (see freeListeners), so that a
// task restarted with the same arguments serves on the same address.
func startTasks(t *testing.T, workers int, args ...string) (ps *task, ws []*task) {
	files, addrs := freeListeners(t, 1+workers)
	common := append(args, "--ps_hosts", addrs[0], "--worker_hosts", strings.Join(addrs[1:], ","))
	ps = startTestTask(t, "ps", files[0], append(common, "--job_name", "ps", "--task_index", "0")...)
	for i := 0; i < workers; i++ {
		ws = append(ws, startTestTask(t, fmt.Sprintf("worker %d", i), files[1+i],
			append(common, "--job_name", "worker", "--task_index", strconv.Itoa(i))...))
	}
	return ps, ws
}

func TestKillingOneWorkerLeavesTheOthersTraining(t *testing.T) {
	ps, ws := startCluster(t, 3, 3000)
	ws[2].waitLine(t, "local_step 50", 60*time.Second)
	if err := ws[2].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	ws[2].wait(t, 10*time.Second)
	for _, w := range ws[:2] {
		if err := w.wait(t, 120*time.Second); err != nil {
			t.Fatalf("%s failed after a peer died: %v\n%s", w.name, err, w.logs())
		}
	}
	// The others' increments may carry the chief's last reading past 3000.
	if last := lastFloat(t, ws[0].logs(), `global_step (\d+)/3000`); last < 3000 {
		t.Errorf("the chief stopped at global step %v, want 3000:\n%s", last, tail(ws[0].logs(), 5))
	}
	if err := ps.wait(t, 30*time.Second); err != nil {
		t.Errorf("ps did not exit cleanly: %v", err)
	}
}

// TestKillingThePSFailsWorkersClearly: a ps that dies for good fails the
// workers with an error naming it, within the step and wait deadlines:
// at once without checkpoints to recover from, after waiting for it with
// them.
func TestKillingThePSFailsWorkersClearly(t *testing.T) {
	const stepTimeout, waitTimeout = 3 * time.Second, 3 * time.Second
	tests := []struct {
		name  string
		extra []string
		want  string
	}{
		{name: "no checkpoints", want: "/job:ps/task:0"},
		{name: "recovery gives up", extra: []string{"--checkpoint-dir", "", "--wait-timeout", waitTimeout.String()},
			want: "did not come back within " + waitTimeout.String()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if i := slices.Index(tc.extra, "--checkpoint-dir"); i >= 0 {
				tc.extra[i+1] = t.TempDir()
			}
			ps, ws := startCluster(t, 2, 1000000, append([]string{"--step-timeout", stepTimeout.String()}, tc.extra...)...)
			ws[0].waitLine(t, "local_step 50", 60*time.Second)
			ws[1].waitLine(t, "local_step 50", 60*time.Second)
			if err := ps.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			for _, w := range ws {
				err := w.wait(t, 4*stepTimeout+waitTimeout+10*time.Second)
				if err == nil {
					t.Fatalf("%s exited cleanly after the ps died", w.name)
				}
				last := tail(w.logs(), 1)
				if !strings.Contains(last, "/job:ps/task:0") || !strings.Contains(last, tc.want) {
					t.Errorf("%s's error does not name the ps (%q):\n%s", w.name, tc.want, tail(w.logs(), 5))
				}
				t.Logf("%s failed %v after the ps was killed: %s", w.name, time.Since(killed).Round(time.Millisecond), last)
			}
		})
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// runKillingPS runs `distflow args` (a local cluster, with -v) to its end,
// SIGKILLing ps index at the first line of its output that holds trigger,
// and returns its standard output and its logs. It fails the test if the
// run fails, does not end within 120 s, or ends before the trigger.
func runKillingPS(t *testing.T, index int, trigger string, args ...string) (stdout, logs string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.SysProcAttr = childAttrs()
	var out, log strings.Builder
	cmd.Stdout = &out
	lines := startStreaming(t, cmd)
	pid := regexp.MustCompile(fmt.Sprintf(`local cluster: started ps %d \(pid (\d+)\)`, index))
	psPID, killed := 0, false
	deadline := time.After(120 * time.Second)
	for done := false; !done; {
		select {
		case line, ok := <-lines:
			if !ok {
				done = true
				break
			}
			log.WriteString(line + "\n")
			if m := pid.FindStringSubmatch(line); m != nil && psPID == 0 {
				psPID, _ = strconv.Atoi(m[1])
			}
			if !killed && psPID > 0 && strings.Contains(line, trigger) {
				p, _ := os.FindProcess(psPID)
				if err := p.Kill(); err != nil {
					t.Fatal(err)
				}
				killed = true
			}
		case <-deadline:
			t.Fatalf("the run did not end within 120 s:\n%s", tail(log.String(), 30))
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, tail(log.String(), 30))
	}
	if !killed {
		t.Fatalf("the run ended before %q:\n%s", trigger, tail(log.String(), 30))
	}
	return out.String(), log.String()
}

// TestLocalClusterRestartsADeadPS: with checkpoints, --local-cluster
// supervises its ps: one that dies is restarted on its address, and the
// workers recover and finish training.
func TestLocalClusterRestartsADeadPS(t *testing.T) {
	stdout, logs := runKillingPS(t, 0, "saved a checkpoint", "train", "-v", "--model", "mlp", "--data", "embedded", "--epochs", "10", "--lr", "0.1",
		"--local-cluster", "ps=1,worker=2", "--checkpoint-dir", t.TempDir(), "--save-checkpoint-steps", "100", "--json")
	for _, want := range []string{"local cluster: ps 0 died", "restarting it on its address", "resumed from a checkpoint"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no %q in the logs:\n%s", want, tail(logs, 30))
		}
	}
	res := lastJSON(t, stdout)
	if gs := res["global_step"].(float64); gs < 800 { // 10 epochs of 8,000 examples, batch 100
		t.Errorf("global step %v, want 800", gs)
	}
	// About 0.80 (0.788 to 0.8025 in 8 runs); TestRestartedPSIsRecovered
	// compares the accuracy with an uninterrupted run's.
	if acc := res["test_accuracy"].(float64); acc < 0.75 {
		t.Errorf("test accuracy %.4f after the restart, want about 0.8", acc)
	}
}

// TestLearningRateDecayEndsAtZero: a run with --lr-decay linear,steps=N
// trains N steps; a second run from its checkpoint to 1.5 N with the same
// schedule applies a rate of zero, so its model, and its accuracy, are
// the first's to the last digit. The step the rate reads is the restored
// global step: on the ps, and on every rank of the ring.
func TestLearningRateDecayEndsAtZero(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"async", []string{"--local-cluster", "ps=1,worker=2"}},
		{"allreduce", []string{"--local-cluster", "worker=2", "--allreduce"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			accuracy := func(steps string) float64 {
				args := append([]string{"train", "--model", "mlp", "--data", "embedded", "--steps", steps,
					"--lr-decay", "linear,steps=100", "--checkpoint-dir", dir, "--json"}, tc.args...)
				stdout, stderr, err := run(t, args...)
				if err != nil {
					t.Fatalf("%v: %v\n%s", args, err, stderr)
				}
				return lastJSON(t, stdout)["test_accuracy"].(float64)
			}
			first := accuracy("100")
			if again := accuracy("150"); again != first {
				t.Errorf("test accuracy %.4f after 50 steps at a rate of zero; want the 100 steps' %.4f unchanged", again, first)
			}
		})
	}
}
