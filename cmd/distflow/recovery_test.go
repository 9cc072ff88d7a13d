package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// killTask kills (SIGKILL) the local-cluster task whose TF_CONFIG names
// job and index among the tasks of the cluster with ps address ps.
func killTask(t *testing.T, ps, job string, index int) {
	t.Helper()
	want := `"task":{"type":"` + job + `","index":` + string(rune('0'+index)) + `}`
	for _, pid := range tasksOf(ps) {
		env, _ := os.ReadFile("/proc/" + pid + "/environ")
		if strings.Contains(string(env), want) {
			p, _ := os.FindProcess(atoi(pid))
			if p.Kill() == nil {
				return
			}
		}
	}
	t.Fatalf("found no %s %d among the tasks %v", job, index, tasksOf(ps))
}

// recoveryRun starts a local-cluster training run with args, collecting
// its stdout, and its stderr as lines.
func recoveryRun(t *testing.T, args ...string) (cmd *exec.Cmd, ps string, lines <-chan string, stdout func() string) {
	t.Helper()
	var mu sync.Mutex
	var out bytes.Buffer
	cmd = exec.Command(binary, args...)
	cmd.Stdout = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	cmd.SysProcAttr = childAttrs()
	cmd, ps, lines = startLauncherCmd(t, cmd)
	return cmd, ps, lines, func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// startLauncherCmd is startLauncher for a command already made.
func startLauncherCmd(t *testing.T, cmd *exec.Cmd) (*exec.Cmd, string, <-chan string) {
	t.Helper()
	lines := startStreaming(t, cmd)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the launcher exited before printing the cluster")
			}
			if _, rest, ok := strings.Cut(l, "local cluster: ps ["); ok {
				addr, _, _ := strings.Cut(rest, "]")
				return cmd, strings.Fields(addr)[0], lines
			}
		case <-deadline:
			t.Fatal("the launcher did not print the cluster")
		}
	}
}

// TestAsyncChiefKilledIsRestarted: in an asynchronous run with checkpoints,
// SIGKILL the chief: the other workers keep training, the launcher starts
// the chief again, it resumes (from the variables the ps hold), ends training
// (its result is the run's) and stops the ps; no process is left behind.
func TestAsyncChiefKilledIsRestarted(t *testing.T) {
	dir := t.TempDir()
	cmd, ps, lines, stdout := recoveryRun(t, "train", "-v", "--model", "linreg", "--steps", "3000", "--local-cluster", "ps=1,worker=3",
		"--checkpoint-dir", dir, "--save-checkpoint-steps", "100", "--step-delay", "2ms", "--log-every", "100")
	waitFor(t, lines, "checkpoint: saved")
	killTask(t, ps, "worker", 0)
	waitFor(t, lines, "local cluster: worker 0 died (signal: killed); restarting it on its address (1 of 3)")
	// The ps still hold the variables: the chief goes on from them, which
	// loses nothing (from the checkpoint when a ps was lost too).
	waitFor(t, lines, "the model is already initialised; continuing")
	if err := waitExit(t, cmd); err != nil {
		t.Fatalf("the run failed after its chief was restarted: %v", err)
	}
	if out := stdout(); !strings.Contains(out, "/job:worker/task:0 linreg: global step") {
		t.Errorf("no result of the restarted chief on stdout: %q", out)
	}
	noTasksLeft(t, ps)
}

// TestSyncWorkerKilledIsRestarted: in a synchronous run of 3 workers, each
// update aggregating all 3, SIGKILL a worker: the launcher starts it again,
// it rejoins at the current global step (the chief lets it back in, or,
// restarted before its heartbeats ran out, never counted it lost), and the
// run finishes. (estimator's TestSyncGoesOnWithoutALostWorker shows the 2
// others going on within the step deadline while it is away.)
func TestSyncWorkerKilledIsRestarted(t *testing.T) {
	cmd, ps, lines, stdout := recoveryRun(t, "train", "-v", "--model", "linreg", "--steps", "1500", "--local-cluster", "ps=1,worker=3",
		"--sync", "--replicas-to-aggregate", "3", "--step-timeout", "8s", "--step-delay", "2ms", "--log-every", "100")
	waitFor(t, lines, "global_step 2")
	killTask(t, ps, "worker", 2)
	waitFor(t, lines, "local cluster: worker 2 died (signal: killed); restarting it on its address (1 of 3)")
	waitFor(t, lines, "[worker 2] /job:worker/task:2 linreg: global step 1500")
	if err := waitExit(t, cmd); err != nil {
		t.Fatalf("the run failed after a worker was killed: %v", err)
	}
	if out := stdout(); !strings.Contains(out, "/job:worker/task:0 linreg: global step") {
		t.Errorf("no result on stdout: %q", out)
	}
	noTasksLeft(t, ps)
}

// TestSyncChiefKilledIsRestarted: in a synchronous run with checkpoints,
// SIGKILL the chief, whose aggregation loop releases the workers: the
// launcher starts it again, it abandons the round its predecessor left
// half taken, releases the waiting workers, and the run finishes.
func TestSyncChiefKilledIsRestarted(t *testing.T) {
	dir := t.TempDir()
	cmd, ps, lines, stdout := recoveryRun(t, "train", "-v", "--model", "linreg", "--steps", "1500", "--local-cluster", "ps=1,worker=3",
		"--sync", "--checkpoint-dir", dir, "--save-checkpoint-steps", "100", "--step-timeout", "20s", "--step-delay", "2ms", "--log-every", "100")
	waitFor(t, lines, "checkpoint: saved")
	killTask(t, ps, "worker", 0)
	waitFor(t, lines, "local cluster: worker 0 died (signal: killed); restarting it on its address (1 of 3)")
	waitFor(t, lines, "sync replicas: abandoned a round; the live replicas go on")
	if err := waitExit(t, cmd); err != nil {
		t.Fatalf("the run failed after its chief was restarted: %v", err)
	}
	if out := stdout(); !strings.Contains(out, "/job:worker/task:0 linreg: global step 1500") {
		t.Errorf("no result of the restarted chief on stdout: %q", out)
	}
	noTasksLeft(t, ps)
}
