package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBadFlagsFailBeforeAnythingStarts checks that every flag is checked
// before data is loaded or a process started: each case fails at once,
// naming the flag, and no local cluster is started.
func TestBadFlagsFailBeforeAnythingStarts(t *testing.T) {
	cluster := []string{"--local-cluster", "ps=1,worker=2"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--epochs", "NaN"}, "--epochs NaN"},
		{[]string{"--epochs", "0"}, "--epochs 0"},
		{[]string{"--epochs", "-1"}, "--epochs -1"},
		{[]string{"--steps", "0"}, "--steps 0"},
		{[]string{"--steps", "-5"}, "--steps -5"},
		{[]string{"--staleness", "-2"}, "--staleness -2"},
		{[]string{"--save-checkpoint-steps", "-1"}, "--save-checkpoint-steps -1"},
		{[]string{"--save-checkpoint-secs", "-1"}, "--save-checkpoint-secs -1"},
		{[]string{"--step-timeout", "0s"}, "--step-timeout 0s"},
		{[]string{"--wait-timeout", "-1s"}, "--wait-timeout -1s"},
		{[]string{"--optimizer", "lbfgs"}, `--optimizer "lbfgs"`},
		{[]string{"--ps-strategy", "random"}, `--ps-strategy "random"`},
		{[]string{"--lr-decay", "cosin"}, `--lr-decay: learning-rate schedule "cosin": want none, linear`},
		{[]string{"--lr-decay", "step,rate=0.1"}, `--lr-decay: learning-rate schedule "step,rate=0.1": step needs rate=R and every=N`},
		{[]string{"--clip-global-norm", "-3"}, "--clip-global-norm -3"},
		{[]string{"--weight-decay", "-1"}, "--weight-decay -1"},
		{[]string{"--lr-decay", "linear,end=2"}, `--lr-decay: learning-rate schedule "linear,end=2"`},
		{append([]string{"--sync", "--in-graph"}, cluster...), "choose one"},
		{append([]string{"--allreduce", "--staleness", "1"}, cluster...), "choose one"},
		{[]string{"--average-every", "3"}, "--average-every goes with --allreduce"},
		{[]string{"--replicas-to-aggregate", "2"}, "--replicas-to-aggregate goes with --sync"},
		{[]string{"--sync"}, "strategy sync coordinates the workers of a cluster"},
		{[]string{"--strategy", "allreduce"}, "strategy allreduce coordinates the workers of a cluster"},
		{[]string{"--strategy", "ring"}, `--strategy: estimator: unknown strategy "ring"`},
		{[]string{"--compression", "fp16"}, "--compression fp16: one process sends nothing between tasks"},
		{[]string{"--pull-compression", "bf16"}, "--pull-compression bf16: one process sends nothing between tasks"},
		{append([]string{"--strategy", "sync", "--allreduce"}, cluster...), "say the strategy twice"},
		{[]string{"--local-cluster", "ps=1,worker=2", "--strategy", "averaging:2"}, "drop the ps tasks"},
		{[]string{"--local-cluster", "ps=1,worker=x"}, "--local-cluster"},
		{[]string{"--local-cluster", "ps=1,worker=2", "--allreduce", "--average-every", "2"}, "drop the ps tasks"},
		{[]string{"--eopchs", "3"}, "did you mean --epochs"},
		{[]string{"--ps_hosts", "localhost:2222", "--worker_hosts", "127.0.0.1:2222", "--job_name", "worker"}, "same address"},
	} {
		args := append([]string{"train", "--model", "mlp", "--data", "embedded"}, tc.args...)
		start := time.Now()
		_, stderr, err := run(t, args...)
		if err == nil {
			t.Errorf("%v: succeeded", tc.args)
			continue
		}
		if !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "panic") {
			t.Errorf("%v: stderr %q does not name %q", tc.args, stderr, tc.want)
		}
		if strings.Contains(stderr, "local cluster:") || strings.Contains(stderr, "local_step") {
			t.Errorf("%v: started before failing:\n%s", tc.args, stderr)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v: failed after %v; want at once", tc.args, d)
		}
	}
}

// TestMissingPSIsNamedAfterTheWaitTimeout starts a worker whose ps never
// comes up: it fails after --wait-timeout (not the longer step deadline)
// with an error naming the ps task and its address.
func TestMissingPSIsNamedAfterTheWaitTimeout(t *testing.T) {
	files, addrs := freeListeners(t, 2)
	files[0].Close() // nothing serves the ps address
	start := time.Now()
	w := startTestTask(t, "worker", files[1], "train", "--model", "linreg", "--steps", "100",
		"--ps_hosts", addrs[0], "--worker_hosts", addrs[1], "--job_name", "worker",
		"--wait-timeout", "2s", "--step-timeout", "1m")
	err := w.wait(t, 30*time.Second)
	if err == nil {
		t.Fatal("the worker succeeded without its ps")
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the worker failed after %v; want about the 2 s wait timeout", d)
	}
	if logs := w.logs(); !strings.Contains(logs, "/job:ps/task:0") || !strings.Contains(logs, addrs[0]) {
		t.Errorf("the error does not name the missing ps and its address:\n%s", tail(logs, 5))
	}
}

// TestLocalClusterIsQuietByDefault checks the output of a short local
// cluster run: the cluster line, one progress line per interval of the
// chief, the result, and nothing of the other tasks.
func TestLocalClusterIsQuietByDefault(t *testing.T) {
	cmd := exec.Command(binary, "train", "--model", "linreg", "--steps", "300", "--local-cluster", "ps=1,worker=2")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()+stderr.String()), "\n")
	// 1 cluster line, 3 or 4 progress lines, 1 result line.
	if len(lines) > 6 {
		t.Errorf("%d lines of output; want at most 6:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if strings.Contains(l, "[ps 0]") || strings.Contains(l, "[worker 1]") || strings.Contains(l, "level=INFO") {
			t.Errorf("a line that only -v shows: %s", l)
		}
	}
	out, errOut, err := run(t, "train", "--model", "linreg", "--steps", "300", "--quiet")
	if err != nil || strings.TrimSpace(errOut) != "" || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("--quiet: err %v, stdout %q, stderr %q; want the result line alone", err, out, errOut)
	}
}

// TestUnknownTFConfigFieldsAreWarnedOf runs a single process with a
// TF_CONFIG that misspells a field.
func TestUnknownTFConfigFieldsAreWarnedOf(t *testing.T) {
	cmd := exec.Command(binary, "train", "--model", "linreg", "--steps", "10")
	cmd.Env = append(os.Environ(), `TF_CONFIG={"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}, "clustre": {}}`)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if !strings.Contains(stderr.String(), `"clustre"`) {
		t.Errorf("no warning naming the unknown field (err %v):\n%s", err, stderr.String())
	}
}

// TestDivergedAllReduceSaysSo: an all-reduce run whose model diverges ends
// with an error that says so (it crashed printing the result with "json:
// unsupported value: NaN").
func TestDivergedAllReduceSaysSo(t *testing.T) {
	_, stderr, err := run(t, "train", "--model", "linreg", "--steps", "300", "--lr", "1e6",
		"--local-cluster", "worker=2", "--allreduce", "--json")
	if err == nil {
		t.Fatal("a diverging run succeeded")
	}
	if strings.Contains(stderr, "json:") || !(strings.Contains(stderr, "not a finite number") || strings.Contains(stderr, "non-finite value")) {
		t.Errorf("stderr does not say the model diverged:\n%s", tail(stderr, 10))
	}
}
