package main

import (
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTrainResumesFromCheckpoint(t *testing.T) {
	dir := t.TempDir()
	args := []string{"train", "--model", "linreg", "--checkpoint-dir", dir, "--save-checkpoint-steps", "100", "--json"}
	if _, stderr, err := run(t, append(args, "--steps", "300")...); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	stdout, stderr, err := run(t, append(args, "--steps", "600")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "resumed from a checkpoint") || !strings.Contains(stderr, "global_step=300") {
		t.Errorf("the second run did not resume at global step 300:\n%s", stderr)
	}
	res := lastJSON(t, stdout)
	if res["global_step"].(float64) != 600 || res["local_step"].(float64) != 300 {
		t.Errorf("global step %v after %v local steps, want 600 after 300", res["global_step"], res["local_step"])
	}
}

func TestTruncatedCheckpointFallsBackToThePreviousOne(t *testing.T) {
	dir := t.TempDir()
	args := []string{"train", "--model", "linreg", "--checkpoint-dir", dir, "--save-checkpoint-steps", "100"}
	if _, stderr, err := run(t, append(args, "--steps", "300")...); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "model.ckpt-*.data-*"))
	sort.Slice(shards, func(i, j int) bool { return ckptStep(shards[i]) < ckptStep(shards[j]) })
	if len(shards) < 2 {
		t.Fatalf("checkpoints: %v", shards)
	}
	newest, previous := shards[len(shards)-1], ckptStep(shards[len(shards)-2])
	fi, err := os.Stat(newest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(newest, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := run(t, append(args, "--steps", "400")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "level=WARN") || !strings.Contains(stderr, filepath.Base(newest)) {
		t.Errorf("no warning naming the truncated %s:\n%s", filepath.Base(newest), stderr)
	}
	if want := "global_step=" + strconv.Itoa(previous); !strings.Contains(stderr, "resumed from a checkpoint") || !strings.Contains(stderr, want) {
		t.Errorf("did not resume from the previous checkpoint (%s):\n%s", want, stderr)
	}
}

func ckptStep(path string) int {
	m := regexp.MustCompile(`model\.ckpt-(\d+)\.`).FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestRestartedChiefContinues kills the chief of an asynchronous run and
// starts it again: it finds the model alive on the ps and training
// finishes at the target global step with a converged model.
func TestRestartedChiefContinues(t *testing.T) {
	dir := t.TempDir()
	const steps = 4000
	ps, ws := startCluster(t, 2, steps, "--checkpoint-dir", dir, "--save-checkpoint-steps", "200", "--json")
	ws[0].waitLine(t, "saved a checkpoint", 60*time.Second)
	args := ws[0].cmd.Args[1:] // as started, ending with --listen-fd 3
	if err := ws[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	ws[0].wait(t, 10*time.Second)
	// The test still holds the chief's listening socket: the new chief
	// serves on the same address.
	chief := startTestTask(t, "restarted chief", ws[0].cmd.ExtraFiles[0], args[:len(args)-2]...)
	if err := chief.wait(t, 120*time.Second); err != nil {
		t.Fatalf("restarted chief: %v\n%s", err, chief.logs())
	}
	if err := ws[1].wait(t, 60*time.Second); err != nil {
		t.Fatalf("worker 1: %v\n%s", err, ws[1].logs())
	}
	if err := ps.wait(t, 30*time.Second); err != nil {
		t.Errorf("ps: %v", err)
	}
	logs := chief.logs()
	if !strings.Contains(logs, "already initialised") {
		t.Errorf("the restarted chief did not find the live model:\n%s", tail(logs, 10))
	}
	w, b := lastFloat(t, logs, `W ([\d.]+)`), lastFloat(t, logs, `b ([\d.]+)`)
	if math.Abs(w-2) > 0.1 || math.Abs(b-10) > 0.1 {
		t.Errorf("after the restart W = %.4f, b = %.4f", w, b)
	}
	if last := lastFloat(t, logs, `global_step (\d+)/`); last < steps {
		t.Errorf("the restarted chief stopped at global step %v, want %d", last, steps)
	}
}

func lastFloat(t *testing.T, s, pattern string) float64 {
	t.Helper()
	ms := regexp.MustCompile(pattern).FindAllStringSubmatch(s, -1)
	if len(ms) == 0 {
		t.Fatalf("no %s in:\n%s", pattern, tail(s, 5))
	}
	v, _ := strconv.ParseFloat(ms[len(ms)-1][1], 64)
	return v
}

// TestRestartedClusterResumes: a whole cluster started again (as after a
// lost ps) resumes from the latest complete checkpoint at its global step.
func TestRestartedClusterResumes(t *testing.T) {
	dir := t.TempDir()
	args := []string{"train", "--model", "linreg", "--local-cluster", "ps=2,worker=2", "--checkpoint-dir", dir,
		"--save-checkpoint-steps", "200", "--json"}
	stdout, stderr, err := run(t, append(args, "--steps", "1000")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	first := lastJSON(t, stdout)["global_step"].(float64)
	// Each ps writes the shard of the variables it holds.
	if shards, _ := filepath.Glob(filepath.Join(dir, "model.ckpt-*.data-*-of-00002")); len(shards) < 2 {
		t.Errorf("want one shard per ps task in each checkpoint, got %v", shards)
	}
	stdout, stderr, err = run(t, append(args, "--steps", "2000")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "resumed from a checkpoint") {
		t.Errorf("the second cluster did not resume:\n%s", tail(stderr, 20))
	}
	res := lastJSON(t, stdout)
	if gs := res["global_step"].(float64); gs < 2000 || res["local_step"].(float64) > 2000-first/2 {
		t.Errorf("second run: global step %v after %v local steps (first run ended at %v)", gs, res["local_step"], first)
	}
	if w, b := res["W"].(float64), res["b"].(float64); math.Abs(w-2) > 0.05 || math.Abs(b-10) > 0.1 {
		t.Errorf("W = %.4f, b = %.4f", w, b)
	}
}

// TestRestartedPSIsRecovered kills the ps of an asynchronous MLP run after
// a checkpoint and starts it again on the same address, as a supervisor
// would: the workers notice, wait for it, the chief restores the latest
// checkpoint (the ps lost every variable, the global step included) while
// the other worker waits for the model, and training finishes at the
// target global step with the accuracy of an uninterrupted run.
func TestRestartedPSIsRecovered(t *testing.T) {
	// At this learning rate an asynchronous run's test accuracy on the
	// embedded test set varies by about 0.4 points (standard deviation over
	// 21 uninterrupted runs, 0.819 to 0.832; 37 recovered runs had the same
	// mean): two runs differ by more than a point about one time in 13, so
	// an attempt that does is run again, both runs of it, up to three
	// attempts (two missed in a row once in CI, under the full suite's
	// load: 0.8330 and 0.8325 uninterrupted, 0.8205 and 0.8215 recovered).
	// A recovery that lost the model would miss every time. (At the
	// default rate of 0.5 runs spread over 5 points.)
	args := []string{"train", "--model", "mlp", "--data", "embedded", "--epochs", "20", "--lr", "0.1", "--log-every", "100", "--json"}
	var acc, want float64
	for attempt := 1; attempt <= 3; attempt++ {
		// The uninterrupted run's tasks are started as the recovered run's
		// are (not by --local-cluster, which shares the cores among them:
		// its runs came out 0.7 points lower on average).
		began := time.Now()
		_, uws := startTasks(t, 2, args...)
		for _, w := range uws {
			if err := w.wait(t, 120*time.Second); err != nil {
				t.Fatalf("uninterrupted run, %s: %v\n%s", w.name, err, tail(w.logs(), 20))
			}
		}
		want = lastJSON(t, uws[0].output())["test_accuracy"].(float64)
		t.Logf("run %d: the uninterrupted run took %v", attempt, time.Since(began).Round(time.Millisecond))

		dir := t.TempDir()
		began = time.Now()
		ps, ws := startTasks(t, 2, append(args, "--wait-timeout", "60s", "--checkpoint-dir", dir, "--save-checkpoint-steps", "100")...)
		// Both workers are training when the ps dies: a worker still
		// starting could otherwise see the chief finish alone, and find no
		// ps (stopped by the chief) to train with.
		ws[0].waitLine(t, "saved a checkpoint", 60*time.Second)
		ws[1].waitLine(t, "local_step", 60*time.Second)
		if err := ps.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		ps.wait(t, 10*time.Second)
		saved := lastFloat(t, ws[0].logs(), `saved a checkpoint.* global_step=(\d+)`)
		// The workers wait for the ps, saying so, until it is back (a
		// worker with no call in flight to the ps finds out at its next
		// step, which fails at once).
		addr := ps.cmd.Args[slices.Index(ps.cmd.Args, "--ps_hosts")+1]
		waitAnyLine(t, ws, "waiting for /job:ps/task:0 at "+addr, 30*time.Second)
		args := ps.cmd.Args[1 : len(ps.cmd.Args)-2] // as started, without --listen-fd 3
		restarted := startTestTask(t, "restarted ps", ps.cmd.ExtraFiles[0], args...)
		for _, w := range ws {
			if err := w.wait(t, 120*time.Second); err != nil {
				for _, tk := range append(ws, restarted) {
					t.Logf("%s:\n%s", tk.name, tail(tk.logs(), 40))
				}
				t.Fatalf("%s after the ps was restarted: %v", w.name, err)
			}
		}
		if err := restarted.wait(t, 30*time.Second); err != nil {
			t.Errorf("the restarted ps: %v", err)
		}
		for _, w := range ws {
			if !strings.Contains(w.logs(), "lost a task") || !strings.Contains(w.logs(), "recovered from a lost task") {
				t.Errorf("%s did not recover from the lost ps:\n%s", w.name, tail(w.logs(), 20))
			}
		}
		// The latest checkpoint: the one logged before the kill, or one
		// whose line came after it.
		if restored := lastFloat(t, ws[0].logs(), `resumed from a checkpoint.* global_step=(\d+)`); restored < saved {
			t.Errorf("the chief restored the checkpoint at global step %v, want the latest (%v or later)", restored, saved)
		}
		res := lastJSON(t, ws[0].output())
		if gs, target := res["global_step"].(float64), lastFloat(t, ws[0].logs(), `global_steps=(\d+)`); gs < target {
			t.Errorf("the chief stopped at global step %v, want %v", gs, target)
		}
		acc = res["test_accuracy"].(float64)
		took := time.Since(began)
		t.Logf("run %d: the recovered run took %v; ps killed after the checkpoint at global step %v; test accuracy %.4f, uninterrupted %.4f",
			attempt, took.Round(time.Millisecond), saved, acc, want)
		if took > 40*time.Second { // about 10 s is usual: say where the time went
			for _, tk := range append(ws, restarted) {
				t.Logf("%s:\n%s", tk.name, tk.logs())
			}
		}
		if math.Abs(acc-want) <= 0.01 {
			break
		}
	}
	if math.Abs(acc-want) > 0.01 {
		t.Errorf("test accuracy %.4f after the recovery is not within 1 point of the uninterrupted run's %.4f", acc, want)
	}
}

// TestPSBackAfterRefusedConnectionsIsRecovered: the ps stays down long
// enough for the connections to it to be refused and their retries to back
// off (its socket is closed, as when a machine's ps process dies), then a
// new one listens on the same address; the chief restores the checkpoint
// and both workers finish.
func TestPSBackAfterRefusedConnectionsIsRecovered(t *testing.T) {
	args := []string{"train", "--model", "mlp", "--data", "embedded", "--epochs", "20", "--lr", "0.1", "--log-every", "100", "--json",
		"--wait-timeout", "60s", "--checkpoint-dir", t.TempDir(), "--save-checkpoint-steps", "100"}
	ps, ws := startTasks(t, 2, args...)
	ws[0].waitLine(t, "saved a checkpoint", 60*time.Second)
	ws[1].waitLine(t, "local_step", 60*time.Second)
	if err := ps.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	ps.wait(t, 10*time.Second)
	addr := ps.cmd.Args[slices.Index(ps.cmd.Args, "--ps_hosts")+1]
	ps.cmd.ExtraFiles[0].Close() // nothing listens: connections are refused

	// The chief logs its wait every 3 s: a second line says that the ps
	// has refused connections for that long.
	waiting := "waiting for /job:ps/task:0 at " + addr
	for deadline := time.Now().Add(30 * time.Second); strings.Count(ws[0].logs(), waiting) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the chief did not wait for the ps twice within 30 s:\n%s", tail(ws[0].logs(), 20))
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	f, err := l.(*net.TCPListener).File()
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	restarted := startTestTask(t, "restarted ps", f, ps.cmd.Args[1:len(ps.cmd.Args)-2]...)
	for _, w := range ws {
		if err := w.wait(t, 120*time.Second); err != nil {
			for _, tk := range append(ws, restarted) {
				t.Logf("%s:\n%s", tk.name, tail(tk.logs(), 40))
			}
			t.Fatalf("%s after the ps came back: %v", w.name, err)
		}
	}
	if !strings.Contains(ws[0].logs(), "recovered from a lost task") {
		t.Errorf("the chief did not recover:\n%s", tail(ws[0].logs(), 20))
	}
}
