package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startBoundTask starts `distflow args` as task of cluster (TF_CONFIG's
// "cluster" member), serving on its own address: when it dies, its port
// refuses connections, as a container's does, where a task on a listener
// that the test or a launcher holds would be queued for.
func startBoundTask(t *testing.T, name, cluster, job string, index int, args ...string) *task {
	t.Helper()
	tk := &task{name: name, seen: make(chan string, 10000), done: make(chan error, 1)}
	tk.cmd = exec.Command(binary, append(args, "-v")...)
	tk.cmd.Env = append(os.Environ(), fmt.Sprintf(`TF_CONFIG={%s, "task": {"type": %q, "index": %d}}`, cluster, job, index))
	tk.cmd.SysProcAttr = childAttrs()
	return tk.start(t)
}

// TestSyncWorkerKilledForGoodIsDroppedAtOnce: in a synchronous cluster
// started by hand, with the default step deadline (a lost deadline of
// 15 s), a worker is SIGKILLed and not restarted: its port refuses
// connections, and since it had answered before, the chief drops it at
// its next heartbeat (a second apart; the test allows 5 s) rather than
// after the lost deadline; the others train on and the run ends. Before,
// the heartbeat waited for the refused connection for half the lost
// deadline: the worker was named after 8.5 s and dropped after 15 s.
func TestSyncWorkerKilledForGoodIsDroppedAtOnce(t *testing.T) {
	addrs := rpcFreePorts(t, 4)
	cl := fmt.Sprintf(`"cluster": {"ps": [%q], "worker": [%q, %q, %q]}`, addrs[0], addrs[1], addrs[2], addrs[3])
	train := []string{"train", "--model", "linreg", "--steps", "2500", "--sync", "--log-every", "100", "--step-delay", "2ms"}
	ps := startBoundTask(t, "ps", cl, "ps", 0, train...)
	ws := make([]*task, 3)
	for i := range ws {
		ws[i] = startBoundTask(t, fmt.Sprintf("worker %d", i), cl, "worker", i, train...)
	}
	ws[0].waitLine(t, "global_step 2", 60*time.Second)
	if err := ws[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ws[2].wait(t, 10*time.Second)
	ws[0].waitLine(t, `msg="a replica is lost; going on without it" task=/job:worker/task:0 peer=/job:worker/task:2`, 30*time.Second)
	d := time.Since(killed)
	t.Logf("the killed worker was dropped %v after the kill", d.Round(time.Millisecond))
	if d > 5*time.Second {
		t.Errorf("the killed worker was dropped after %v; want at its next heartbeat, within 5 s (its port refuses connections)", d)
	}
	if !strings.Contains(ws[0].logs(), "its process has exited") {
		t.Errorf("the chief does not say that the worker's process has exited:\n%s", tail(ws[0].logs(), 20))
	}
	for i, w := range ws[:2] {
		if err := w.wait(t, 90*time.Second); err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, tail(w.logs(), 20))
		}
	}
	if err := ps.wait(t, 30*time.Second); err != nil {
		t.Errorf("ps: %v\n%s", err, tail(ps.logs(), 10))
	}
	if out := ws[0].output(); !strings.Contains(out, "linreg: global step 2500") {
		t.Errorf("the chief's result is not at global step 2500: %q", out)
	}
}

// TestLostPSIsNamedAsAPS: in an asynchronous cluster started by hand with
// checkpoints, the ps is SIGKILLed and started again with the same flags
// (as a supervisor would): the chief names what it lost, a ps task, and
// what happens next (the wait for its restart, then a restore from the
// checkpoint directory), not "a replica is lost; going on without it";
// it names its return too, and the run finishes.
func TestLostPSIsNamedAsAPS(t *testing.T) {
	dir := t.TempDir()
	addrs := rpcFreePorts(t, 3)
	cl := fmt.Sprintf(`"cluster": {"ps": [%q], "worker": [%q, %q]}`, addrs[0], addrs[1], addrs[2])
	train := []string{"train", "--model", "linreg", "--steps", "3000", "--log-every", "100", "--step-delay", "2ms",
		"--checkpoint-dir", dir, "--save-checkpoint-steps", "100"}
	ps := startBoundTask(t, "ps", cl, "ps", 0, train...)
	ws := make([]*task, 2)
	for i := range ws {
		ws[i] = startBoundTask(t, fmt.Sprintf("worker %d", i), cl, "worker", i, train...)
	}
	ws[0].waitLine(t, "saved a checkpoint", 60*time.Second)
	if err := ps.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ps.wait(t, 10*time.Second)
	ws[0].waitLine(t, `msg="a ps task is lost: the variables it holds are gone until it is restarted" task=/job:worker/task:0 peer=/job:ps/task:0`, 30*time.Second)
	if want := "then the chief restores its variables from the latest checkpoint in " + dir; !strings.Contains(ws[0].logs(), want) {
		t.Errorf("the chief does not say what happens next (%q):\n%s", want, tail(ws[0].logs(), 20))
	}
	ps = startBoundTask(t, "restarted ps", cl, "ps", 0, train...)
	ws[0].waitLine(t, "a lost ps task answers again", 30*time.Second)
	for i, w := range ws {
		if err := w.wait(t, 90*time.Second); err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, tail(w.logs(), 20))
		}
	}
	if err := ps.wait(t, 30*time.Second); err != nil {
		t.Errorf("ps: %v\n%s", err, tail(ps.logs(), 10))
	}
	for _, l := range strings.Split(ws[0].logs(), "\n") {
		if strings.Contains(l, `msg="a replica`) && strings.Contains(l, "peer=/job:ps/task:0") {
			t.Errorf("the chief calls the ps a replica: %s", l)
		}
	}
}
