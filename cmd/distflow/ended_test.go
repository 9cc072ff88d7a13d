//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// rerunWithin is how long a run on a finished checkpoint directory may
// take, start to exit: it trains nothing.
const rerunWithin = 10 * time.Second

// dirState is what a directory holds: each file's size and modification
// time, by name.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fmt.Sprintf("%d bytes, %v, modified %s", fi.Size(), fi.Mode(), fi.ModTime().Format(time.RFC3339Nano))
	}
	return out
}

// TestRerunOnAFinishedDirectory runs the same training command twice on
// one checkpoint directory, in one process and as a local cluster in
// every strategy: the second run trains nothing, changes nothing in the
// directory, and exits 0 within rerunWithin with the first run's result
// (its global step and loss, and the same evaluation of the same model).
// Without the end marker, one process would train a step past --steps on
// each run, a cluster's chief would fail on the marker its first run left
// ("the chief has ended training") until the launcher gave up, and the
// ring would wait for its ranks' heartbeats to run out.
func TestRerunOnAFinishedDirectory(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"one process", nil},
		{"one process in-graph", []string{"--in-graph"}},
		{"async", []string{"--local-cluster", "ps=1,worker=2"}},
		{"sync", []string{"--local-cluster", "ps=1,worker=2", "--sync"}},
		{"sync with a backup worker", []string{"--local-cluster", "ps=1,worker=2", "--sync", "--replicas-to-aggregate", "1"}},
		{"staleness", []string{"--local-cluster", "ps=1,worker=2", "--staleness", "1"}},
		{"in-graph", []string{"--local-cluster", "ps=1,worker=2", "--in-graph"}},
		{"allreduce", []string{"--local-cluster", "worker=2", "--allreduce"}},
		{"allreduce through the ps", []string{"--local-cluster", "ps=1,worker=2", "--allreduce"}},
		{"averaging", []string{"--local-cluster", "worker=2", "--allreduce", "--average-every", "5"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{"train", "--model", "mlp", "--data", "embedded", "--steps", "40", "--log-every", "20",
				"--checkpoint-dir", dir, "--json"}, tc.args...)
			stdout, stderr, err := run(t, args...)
			if err != nil {
				t.Fatalf("the first run: %v\n%s", err, tail(stderr, 20))
			}
			first := lastJSON(t, stdout)
			before := dirState(t, dir)

			start := time.Now()
			stdout, stderr, err = run(t, args...)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("the run on the finished directory: %v\n%s", err, tail(stderr, 20))
			}
			if took > rerunWithin {
				t.Errorf("the run on the finished directory took %v; want at most %v\n%s", took.Round(time.Millisecond), rerunWithin, tail(stderr, 20))
			}
			if !strings.Contains(stderr, "training ended already at global step") {
				t.Errorf("the run on the finished directory did not say that training had ended:\n%s", tail(stderr, 20))
			}
			if strings.Contains(stderr, "did not exit within") {
				t.Errorf("a task was not told to stop:\n%s", tail(stderr, 20))
			}
			second := lastJSON(t, stdout)
			for _, k := range []string{"global_step", "local_step", "loss", "test_accuracy", "test_loss"} {
				if first[k] != second[k] {
					t.Errorf("%s: %v, the first run's %v", k, second[k], first[k])
				}
			}
			if after := dirState(t, dir); !maps.Equal(before, after) {
				t.Errorf("the run on the finished directory changed it:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// endMarkerHold is the test hook that makes a chief wait, once it has
// marked the end of training, until it is killed.
const endMarkerHold = "DISTFLOW_HOLD_AFTER_END_MARKER=1"

// TestChiefKilledAfterTheEndMarker kills (SIGKILL) the chief of a local
// cluster once it has marked the end of training and before it has told
// the ps tasks: the launcher restarts it, and the new chief finds the
// marker, tells the serving tasks to stop, and exits 0 with the result;
// the run ends 0, nothing left behind (a chief that took the marker as an
// error would exit 1 at every restart until the launcher gave up).
func TestChiefKilledAfterTheEndMarker(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"async", nil},
		{"sync", []string{"--sync"}},
		{"in-graph", []string{"--in-graph"}},
		{"allreduce through the ps", []string{"--allreduce"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var mu sync.Mutex
			var out bytes.Buffer
			cmd := exec.Command(binary, append([]string{"train", "-v", "--model", "mlp", "--data", "embedded", "--steps", "40",
				"--log-every", "20", "--local-cluster", "ps=1,worker=2", "--checkpoint-dir", dir}, tc.args...)...)
			cmd.Env = append(os.Environ(), endMarkerHold)
			cmd.Stdout = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
			cmd.SysProcAttr = childAttrs()
			cmd, ps, lines := startLauncherCmd(t, cmd)

			waitFor(t, lines, "[worker 0] ") // the chief runs
			waitFor(t, lines, "holding after the end-of-training marker")
			if _, err := os.Stat(filepath.Join(dir, "training_ended")); err != nil {
				t.Fatalf("the chief holds, but: %v", err)
			}
			killTask(t, ps, "worker", 0)
			waitForEach(t, lines, "not restarting", "worker 0 died (signal: killed); restarting it")
			waitForEach(t, lines, "did not exit within",
				"training ended already at global step",
				"shutdown requested: training finished (/job:worker/task:0, which found the end-of-training marker)")
			if err := waitExit(t, cmd); err != nil {
				t.Fatalf("the run failed: %v", err)
			}
			mu.Lock()
			stdout := out.String()
			mu.Unlock()
			if !strings.Contains(stdout, "/job:worker/task:0 mlp: global step") {
				t.Errorf("no result on stdout: %q", stdout)
			}
			noTasksLeft(t, ps)
		})
	}
}

// TestHandStartedPSStoppedByTheRestartedChief: in a cluster started by
// hand, the chief is killed once it has marked the end of training: the ps
// still serves, waiting to be told. The chief started again finds the
// marker, tells the ps to stop, and exits 0; the ps exits 0 (otherwise the
// restarted chief exits 1 and the ps waits for ever).
func TestHandStartedPSStoppedByTheRestartedChief(t *testing.T) {
	name, value, _ := strings.Cut(endMarkerHold, "=")
	t.Setenv(name, value) // the hold is the chief's alone: only it marks the end
	dir := t.TempDir()
	ps, ws := startCluster(t, 2, 200, "--checkpoint-dir", dir)
	ws[0].waitLine(t, "holding after the end-of-training marker", 60*time.Second)
	args := ws[0].cmd.Args[1:] // as started, ending with --listen-fd 3
	if err := ws[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	ws[0].wait(t, 10*time.Second)
	if err := ws[1].wait(t, 30*time.Second); err != nil {
		t.Fatalf("worker 1: %v\n%s", err, ws[1].logs())
	}
	select {
	case err := <-ps.done:
		t.Fatalf("the ps exited (%v) before any chief told it to", err)
	default:
	}
	chief := startTestTask(t, "restarted chief", ws[0].cmd.ExtraFiles[0], args[:len(args)-2]...)
	if err := chief.wait(t, rerunWithin); err != nil {
		t.Fatalf("restarted chief: %v\n%s", err, chief.logs())
	}
	if err := ps.wait(t, rerunWithin); err != nil {
		t.Errorf("ps: %v\n%s", err, tail(ps.logs(), 5))
	}
	if !strings.Contains(ps.logs(), "which found the end-of-training marker") {
		t.Errorf("the ps was not stopped by the restarted chief:\n%s", tail(ps.logs(), 5))
	}
	marker, err := os.ReadFile(filepath.Join(dir, "training_ended"))
	if err != nil {
		t.Fatal(err)
	}
	step, _, _ := strings.Cut(string(marker), "\n")
	if want := "/job:worker/task:0 linreg: global step " + step + ","; !strings.Contains(chief.output(), want) {
		t.Errorf("the restarted chief's result is not at the marker's step (%q): %q", want, chief.output())
	}
}

// TestRestartAtTheLastStepWithoutTheMarker: a checkpoint at the last step
// without the marker (the chief died between its final checkpoint and the
// marker; or a directory trained by a build that wrote no marker) is
// finished too: the run takes no step, saves no checkpoint, writes the
// marker and reports the checkpoint's model (a run that always takes a
// step would train to 41 of 40).
func TestRestartAtTheLastStepWithoutTheMarker(t *testing.T) {
	dir := t.TempDir()
	args := []string{"train", "--model", "mlp", "--data", "embedded", "--steps", "40", "--checkpoint-dir", dir, "--json"}
	stdout, stderr, err := run(t, args...)
	if err != nil {
		t.Fatalf("the first run: %v\n%s", err, tail(stderr, 20))
	}
	first := lastJSON(t, stdout)
	if err := os.Remove(filepath.Join(dir, "training_ended")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	before := dirState(t, dir)
	stdout, stderr, err = run(t, args...)
	if err != nil {
		t.Fatalf("the run at the last step: %v\n%s", err, tail(stderr, 20))
	}
	if !strings.Contains(stderr, "the global step is at the target already: nothing to train") {
		t.Errorf("the run did not say that it had nothing to train:\n%s", tail(stderr, 20))
	}
	second := lastJSON(t, stdout)
	for _, k := range []string{"global_step", "test_accuracy", "test_loss"} {
		if first[k] != second[k] {
			t.Errorf("%s: %v, the first run's %v", k, second[k], first[k])
		}
	}
	after := dirState(t, dir)
	if _, ok := after["training_ended"]; !ok {
		t.Errorf("no marker after the run: %v", after)
	}
	delete(after, "training_ended")
	if !maps.Equal(before, after) {
		t.Errorf("the run changed the checkpoints:\nbefore %v\nafter  %v", before, after)
	}
}
