//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRingLeaderPausedUntilTheOthersExitEndsAtOnce: SIGSTOP rank 0 of an
// all-reduce run of 3 (the chief, the ring's leader) until ranks 1 and 2
// have finished training without it and exited; after SIGCONT rank 0,
// whose peers refuse connections, ends within a few seconds rather than
// send its views and "training is over" to the ranks that have exited and
// wait on each its whole deadline (twice the lost deadline: 10 s here;
// 30 s with the default step deadline).
func TestRingLeaderPausedUntilTheOthersExitEndsAtOnce(t *testing.T) {
	dir := t.TempDir()
	cmd, addr, lines, stdout := recoveryRun(t, "train", "-v", "--model", "mlp", "--data", "embedded", "--steps", "600",
		"--local-cluster", "worker=3", "--allreduce", "--checkpoint-dir", dir, "--save-checkpoint-steps", "100",
		"--step-timeout", "20s", "--log-every", "50")
	waitFor(t, lines, "[worker 0] /job:worker/task:0: local_step 150 ")
	signalTask(t, addr, "worker", 0, syscall.SIGSTOP)
	waitForEach(t, lines, "", "[worker 1] /job:worker/task:1 mlp: global step 600", "[worker 2] /job:worker/task:2 mlp: global step 600")
	// Ranks 1 and 2 have exited once rank 0 is the only task left.
	deadline := time.Now().Add(30 * time.Second)
	for len(tasksOf(addr)) > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("ranks 1 and 2 still run 30 s after their result: pids %v", tasksOf(addr))
		}
		time.Sleep(50 * time.Millisecond) // polling the process table, not synchronising
	}
	// The launcher closes an exited task's socket a moment after the
	// process is gone; until then a connection to it is queued, not
	// refused, as to a stopped peer's. Resume rank 0 once both refuse.
	for _, peer := range workerAddrs(t, addr)[1:] {
		for {
			c, err := net.DialTimeout("tcp", peer, time.Second)
			if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
				break
			}
			if c != nil {
				c.Close()
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still accepts connections after its rank exited", peer)
			}
			time.Sleep(20 * time.Millisecond) // polling the port, not synchronising
		}
	}
	signalTask(t, addr, "worker", 0, syscall.SIGCONT)
	resumed := time.Now()
	if err := waitExit(t, cmd); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	d := time.Since(resumed)
	t.Logf("rank 0 ended %v after SIGCONT", d.Round(time.Millisecond))
	if d > 5*time.Second {
		t.Errorf("rank 0 ended %v after SIGCONT; want within 5 s (its peers had exited)", d)
	}
	if out := stdout(); !strings.Contains(out, "/job:worker/task:0 mlp: global step 600") {
		t.Errorf("no result of rank 0 on stdout: %q", out)
	}
	noTasksLeft(t, addr)
}

// TestAllReduceThroughThePSAgreesAfterAPSRestart: with --allreduce through
// two ps tasks, SIGSTOP worker 1, SIGKILL ps 0 and let the launcher start
// it again, then SIGCONT worker 1. Worker 0 saw the ps die, worker 1 did
// not; ranks that chose their routes alone would take different routes for
// the same operation (the ring and the servers) or finish it differently
// (one had every sum before the ps died, the other none), and each wait for
// the other until its deadline (about a minute with the default step
// deadline). The operation fails on both, the leader sends a new view with
// the route both take, and the run ends within seconds of the SIGCONT.
func TestAllReduceThroughThePSAgreesAfterAPSRestart(t *testing.T) {
	cmd, addr, lines, stdout := recoveryRun(t, "train", "-v", "--model", "mlp", "--data", "embedded", "--steps", "300",
		"--local-cluster", "ps=2,worker=2", "--allreduce", "--log-every", "50")
	waitFor(t, lines, "[worker 0] /job:worker/task:0: local_step 100 ")
	signalTask(t, addr, "worker", 1, syscall.SIGSTOP)
	killTask(t, addr, "ps", 0)
	waitFor(t, lines, "local cluster: ps 0 died (signal: killed); restarting it on its address (1 of 3)")
	waitFor(t, lines, `msg="server: started" task=/job:ps/task:0`)
	signalTask(t, addr, "worker", 1, syscall.SIGCONT)
	resumed := time.Now()
	if err := waitExit(t, cmd); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	d := time.Since(resumed)
	t.Logf("the run ended %v after SIGCONT", d.Round(time.Millisecond))
	if d > 15*time.Second {
		t.Errorf("the run ended %v after SIGCONT; want within 15 s (200 steps take a few)", d)
	}
	if out := stdout(); !strings.Contains(out, "/job:worker/task:0 mlp: global step 300") {
		t.Errorf("no result of the chief on stdout: %q", out)
	}
	noTasksLeft(t, addr)
}

// workerAddrs returns the worker addresses of the cluster whose first
// address is addr, from a running task's TF_CONFIG.
func workerAddrs(t *testing.T, addr string) []string {
	t.Helper()
	for _, pid := range tasksOf(addr) {
		env, _ := os.ReadFile("/proc/" + pid + "/environ")
		for _, kv := range strings.Split(string(env), "\x00") {
			v, ok := strings.CutPrefix(kv, "TF_CONFIG=")
			if !ok {
				continue
			}
			var cfg struct {
				Cluster map[string][]string `json:"cluster"`
			}
			if err := json.Unmarshal([]byte(v), &cfg); err != nil {
				t.Fatalf("TF_CONFIG of %s: %v", pid, err)
			}
			return cfg.Cluster["worker"]
		}
	}
	t.Fatalf("no task of %s with a TF_CONFIG", addr)
	return nil
}
