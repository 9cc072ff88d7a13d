package localcluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/localcluster"
)

// recorder is a Config.Stdout or Stderr that keeps what Run wrote and
// passes on the cluster's addresses from Run's first line.
type recorder struct {
	mu      sync.Mutex
	b       strings.Builder
	named   bool
	cluster chan map[string][]string
}

func newRecorder() *recorder { return &recorder{cluster: make(chan map[string][]string, 1)} }

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.b.Write(p)
	if s, ok := strings.CutPrefix(string(p), "local cluster: "); ok && !r.named {
		r.named = true
		r.cluster <- parseClusterLine(s)
	}
	return len(p), nil
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.String()
}

// parseClusterLine reads "ps [a], worker [b c]; ..." into addresses by job.
func parseClusterLine(s string) map[string][]string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), ";")
	addrs := map[string][]string{}
	for _, m := range regexp.MustCompile(`(\w+) \[([^\]]*)\]`).FindAllStringSubmatch(s, -1) {
		addrs[m[1]] = strings.Fields(m[2])
	}
	return addrs
}

// testRun is a Run started by a test.
type testRun struct {
	stdout, stderr *recorder
	marker         string // in every task's environment
	cancel         context.CancelFunc
	done           chan error
	once           sync.Once
	err            error
}

// start starts Run with cfg, its output recorded, and a marker in its
// tasks' environment. The run is cancelled at the end of the test.
func start(t *testing.T, cfg localcluster.Config) *testRun {
	t.Helper()
	r := &testRun{
		stdout: newRecorder(),
		stderr: newRecorder(),
		marker: fmt.Sprintf("LCTEST_RUN=%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "-"), os.Getpid(), time.Now().UnixNano()),
		done:   make(chan error, 1),
	}
	cfg.Env = append(cfg.Env, r.marker, "LCTEST_DIR="+t.TempDir(), quickRaceExit())
	cfg.Stdout, cfg.Stderr = r.stdout, r.stderr
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- localcluster.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		r.wait(t)
	})
	return r
}

// wait returns what Run returned.
func (r *testRun) wait(t *testing.T) error {
	t.Helper()
	r.once.Do(func() {
		select {
		case r.err = <-r.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("Run did not return within a minute:\n%s", r.stderr)
		}
	})
	return r.err
}

// cluster returns the addresses Run printed.
func (r *testRun) cluster(t *testing.T) map[string][]string {
	t.Helper()
	select {
	case addrs := <-r.stderr.cluster:
		return addrs
	case err := <-r.done:
		r.done <- err
		t.Fatalf("Run returned %v before naming the cluster:\n%s", err, r.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not name the cluster within 30 s:\n%s", r.stderr)
	}
	return nil
}

// quickRaceExit is a GORACE setting for tasks built with the race
// detector: they would otherwise wait a second before exiting, and a run
// waits for one task after another.
func quickRaceExit() string {
	return strings.TrimSpace("GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0")
}

// tasksWith lists the live processes started by Run (EnvTask=1) whose
// environment holds marker, on Linux; elsewhere, nil.
func tasksWith(marker string) []string {
	var found []string
	paths, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		env := strings.Split(string(b), "\x00")
		if !contains(env, marker) || !contains(env, localcluster.EnvTask+"=1") {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if !strings.Contains(string(stat), ") Z ") { // zombies are already dead
			found = append(found, filepath.Base(filepath.Dir(p)))
		}
	}
	return found
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkTasks checks that n tasks of the run are alive, on Linux.
func checkTasks(t *testing.T, marker string, n int) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	if got := tasksWith(marker); len(got) != n {
		t.Errorf("%d tasks running (pids %v), want %d", len(got), got, n)
	}
}

// wantTaskError checks that err is a *TaskError naming job index with exit
// status code.
func wantTaskError(t *testing.T, err error, job string, index, code int) {
	t.Helper()
	var te *localcluster.TaskError
	var ee *exec.ExitError
	switch {
	case !errors.As(err, &te):
		t.Fatalf("Run: %v, want a *TaskError", err)
	case te.Job != job || te.Index != index:
		t.Errorf("Run: %v, want it to name %s %d", err, job, index)
	case !errors.As(err, &ee) || ee.ExitCode() != code:
		t.Errorf("Run: %v, want exit status %d", err, code)
	}
	if want := fmt.Sprintf("localcluster: %s %d failed: exit status %d", job, index, code); err.Error() != want {
		t.Errorf("Run: %q, want %q", err, want)
	}
}

func wantIn(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("no %q in %s:\n%s", w, what, s)
		}
	}
}

func wantNotIn(t *testing.T, what, s string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(s, w) {
			t.Errorf("%q in %s:\n%s", w, what, s)
		}
	}
}

// gomaxprocs is the GOMAXPROCS a task gets from a run with training tasks.
func gomaxprocs(training int) int {
	if v, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil {
		return v
	}
	return max(1, runtime.GOMAXPROCS(0)/training)
}

// TestRunGivesEachTaskItsConfigAndSocket: every task reads its TF_CONFIG and
// serves on its inherited socket at the address Run named, with its share of
// the cores; the chief's stdout is the run's, and the others' output stays
// hidden.
func TestRunGivesEachTaskItsConfigAndSocket(t *testing.T) {
	r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 2, Worker: 2, Chief: 1}, Args: []string{"serve"}})
	addrs := r.cluster(t)
	procs := gomaxprocs(3)
	for _, job := range []string{"chief", "ps", "worker"} {
		if len(addrs[job]) != map[string]int{"chief": 1, "ps": 2, "worker": 2}[job] {
			t.Fatalf("addresses %v", addrs)
		}
		for i, a := range addrs[job] {
			if got, want := ask(a, "who"), fmt.Sprintf("%s %d %d 1", job, i, procs); got != want {
				t.Errorf("%s %d at %s answered %q, want %q", job, i, a, got, want)
			}
		}
	}
	checkTasks(t, r.marker, 5)
	for _, job := range []string{"worker", "chief", "ps"} {
		for _, a := range addrs[job] {
			ask(a, "quit")
		}
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v\n%s", err, r.stderr)
	}
	checkTasks(t, r.marker, 0)
	if got, want := r.stdout.String(), "hello from chief 0\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	// Quiet: the cluster, and the chief's stderr.
	lines := strings.Split(strings.TrimSuffix(r.stderr.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "local cluster: ps [127.0.0.1:") || lines[1] != "[chief 0] hello from chief 0" {
		t.Errorf("stderr:\n%s\nwant the cluster's line and [chief 0] hello from chief 0", r.stderr)
	}
	if procs := os.Getenv("GOMAXPROCS"); procs == "" {
		wantIn(t, "stderr", lines[0], fmt.Sprintf("; each task uses %d of %d cores", gomaxprocs(3), runtime.GOMAXPROCS(0)))
	}
}

// TestVerboseShowsEveryTask: with Verbose, every task's output is shown,
// prefixed, and worker 0 is the chief of a cluster without a chief job. A
// GOMAXPROCS in Config.Env wins.
func TestVerboseShowsEveryTask(t *testing.T) {
	r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 1, Worker: 2}, Args: []string{"serve"},
		Verbose: true, Env: []string{"GOMAXPROCS=3"}})
	addrs := r.cluster(t)
	for _, job := range []string{"ps", "worker"} {
		for i, a := range addrs[job] {
			if got, want := ask(a, "who"), fmt.Sprintf("%s %d 3 1", job, i); got != want {
				t.Errorf("%s %d answered %q, want %q", job, i, got, want)
			}
		}
	}
	for _, a := range append(addrs["worker"], addrs["ps"]...) {
		ask(a, "quit")
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v\n%s", err, r.stderr)
	}
	if got, want := r.stdout.String(), "hello from worker 0\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	stderr := r.stderr.String()
	wantIn(t, "stderr", stderr, "local cluster: started ps 0 (pid ", "local cluster: started worker 1 (pid ",
		"[ps 0] hello from ps 0\n", "[worker 1] hello from worker 1\n", "[worker 0] hello from worker 0\n")
	wantNotIn(t, "stderr", stderr, "each task uses")
	if n := strings.Count(stderr, "[worker 1] hello from worker 1\n"); n != 2 {
		t.Errorf("worker 1's hello on stdout and stderr: %d lines, want 2", n)
	}
}

// TestFailingChiefStopsEverything: when the chief fails, every task is
// stopped and Run names the chief and its exit status, whatever
// TolerateWorkerLoss says; worker 0 is not the chief when there is a chief
// job.
func TestFailingChiefStopsEverything(t *testing.T) {
	for _, tc := range []struct {
		jobs  localcluster.Jobs
		chief string
	}{
		{localcluster.Jobs{PS: 1, Worker: 2}, "worker 0"},
		{localcluster.Jobs{PS: 1, Worker: 2, Chief: 1}, "chief 0"},
	} {
		t.Run(tc.chief, func(t *testing.T) {
			r := start(t, localcluster.Config{Jobs: tc.jobs, Args: []string{"chief-fails"}, TolerateWorkerLoss: true})
			job, _, _ := strings.Cut(tc.chief, " ")
			wantTaskError(t, r.wait(t), job, 0, 6)
			checkTasks(t, r.marker, 0)
			if got, want := r.stdout.String(), "hello from "+tc.chief+"\nthe chief's result\n"; got != want {
				t.Errorf("stdout %q, want %q", got, want)
			}
			stderr := r.stderr.String()
			wantIn(t, "stderr", stderr, "["+tc.chief+"] about to fail\n", "local cluster: "+tc.chief+" failed (exit status 6); stopping every task\n")
			wantNotIn(t, "stderr", stderr, "hello from worker 1", "hello from ps 0")
		})
	}
}

// TestCancelStopsEverything: cancelling the context stops every task, one
// that ignores SIGTERM too, and Run returns the context's error.
func TestCancelStopsEverything(t *testing.T) {
	for _, mode := range []string{"serve", "stubborn"} {
		t.Run(mode, func(t *testing.T) {
			r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 1, Worker: 2}, Args: []string{mode},
				StopGrace: 200 * time.Millisecond})
			addrs := r.cluster(t)
			for _, a := range append(addrs["ps"], addrs["worker"]...) {
				ask(a, "who") // it runs, and in stubborn mode, ignores SIGTERM
			}
			checkTasks(t, r.marker, 3)
			r.cancel()
			if err := r.wait(t); !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v, want %v", err, context.Canceled)
			}
			checkTasks(t, r.marker, 0)
			wantIn(t, "stderr", r.stderr.String(), "local cluster: interrupted; stopping every task\n")
		})
	}
}

// TestRestartPS: a ps that dies is restarted on its address when RestartPS
// is set, at most MaxPSRestarts times, and its last lines are shown; without
// RestartPS, it ends the run.
func TestRestartPS(t *testing.T) {
	t.Run("restarted", func(t *testing.T) {
		r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 1, Worker: 1}, Args: []string{"ps-crashes"},
			Env: []string{"LCTEST_CRASHES=1"}, RestartPS: true})
		if err := r.wait(t); err != nil {
			t.Fatalf("Run: %v\n%s", err, r.stderr)
		}
		// The chief asked the address TF_CONFIG gave it, and ps 0 answered
		// in its second life.
		if got := r.stdout.String(); !regexp.MustCompile(`(?m)^ps answered: ps 0 \d+ 2$`).MatchString(got) {
			t.Errorf("stdout %q, want ps 0's answer after a restart", got)
		}
		wantIn(t, "stderr", r.stderr.String(),
			"local cluster: ps 0 died (exit status 1); restarting it on its address (1 of 3)\n[ps 0] hello from ps 0\n",
			"[ps 0] ps 0 crashing (start 1)\n")
		wantNotIn(t, "stderr", r.stderr.String(), "ps 0 crashing (start 2)")
	})
	t.Run("at most MaxPSRestarts times", func(t *testing.T) {
		r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 1, Worker: 1}, Args: []string{"ps-crashes"},
			Env: []string{"LCTEST_CRASHES=100"}, RestartPS: true, MaxPSRestarts: 2})
		wantTaskError(t, r.wait(t), "ps", 0, 1)
		checkTasks(t, r.marker, 0)
		wantIn(t, "stderr", r.stderr.String(), "restarting it on its address (2 of 2)\n",
			"local cluster: ps 0 failed (exit status 1); stopping every task\n", "[ps 0] ps 0 crashing (start 3)\n")
	})
	t.Run("not without RestartPS", func(t *testing.T) {
		r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 1, Worker: 1}, Args: []string{"ps-crashes"},
			Env: []string{"LCTEST_CRASHES=1"}})
		wantTaskError(t, r.wait(t), "ps", 0, 1)
		checkTasks(t, r.marker, 0)
		wantNotIn(t, "stderr", r.stderr.String(), "restarting")
	})
}

// TestRestartChief: a chief that dies is restarted on its address (the
// workers and ps go on meanwhile), and its second life ends the run; no
// task is left behind.
func TestRestartChief(t *testing.T) {
	r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 1, Worker: 2}, Args: []string{"chief-crashes"},
		RestartChief: true, PSExitGrace: 100 * time.Millisecond})
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v\n%s", err, r.stderr)
	}
	checkTasks(t, r.marker, 0)
	// Worker 1 lived through the chief's death: still its first life.
	if got := r.stdout.String(); !regexp.MustCompile(`(?m)^chief again \(start 2\); worker 1 is worker 1 \d+ 1$`).MatchString(got) {
		t.Errorf("stdout %q, want the chief's second life and worker 1's first", got)
	}
	wantIn(t, "stderr", r.stderr.String(), "local cluster: worker 0 died (exit status 1); restarting it on its address (1 of 3)\n")

	// Without RestartChief the chief's death ends the run, as before.
	r = start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 1, Worker: 2}, Args: []string{"chief-crashes"}, RestartWorkers: true})
	wantTaskError(t, r.wait(t), "worker", 0, 1)
	checkTasks(t, r.marker, 0)
}

// TestRestartWorkers: a worker that dies is restarted on its address and
// the run ends when the training tasks have; the ps that does not exit by
// itself is stopped, so nothing is left behind.
func TestRestartWorkers(t *testing.T) {
	r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 1, Worker: 2}, Args: []string{"worker-crashes"},
		RestartWorkers: true, PSExitGrace: 100 * time.Millisecond})
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v\n%s", err, r.stderr)
	}
	checkTasks(t, r.marker, 0)
	wantIn(t, "stdout", r.stdout.String(), "worker 1 is back\n")
	wantIn(t, "stderr", r.stderr.String(), "local cluster: worker 1 died (exit status 1); restarting it on its address (1 of 3)\n",
		"local cluster: ps 0 did not exit within 100ms of the end of training; stopping it\n")
}

// TestWorkerLoss: a failing worker other than the chief ends the run unless
// TolerateWorkerLoss, and its last lines are shown either way.
func TestWorkerLoss(t *testing.T) {
	for _, tolerate := range []bool{true, false} {
		t.Run(fmt.Sprint("tolerate=", tolerate), func(t *testing.T) {
			// Without TolerateWorkerLoss the chief waits to be stopped: a
			// chief that ended as worker 1 died could be seen to end first
			// (each exit is seen when the task's output is drained), and
			// worker 1's exit would then come after the end of training.
			mode := "worker-lost"
			if !tolerate {
				mode = "worker-lost-chief-waits"
			}
			r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 1, Worker: 2}, Args: []string{mode},
				TolerateWorkerLoss: tolerate})
			err := r.wait(t)
			checkTasks(t, r.marker, 0)
			stderr := r.stderr.String()
			// The last 50 of its 202 lines (two hellos, 200 dying), in the
			// order they were read: its stdout's and stderr's may mix.
			wantIn(t, "stderr", stderr, "[worker 1] ... (152 earlier lines not kept)\n", "dying, line 199\n")
			wantNotIn(t, "stderr", stderr, "dying, line 1\n")
			if n := strings.Count(stderr, "[worker 1] "); n != 51 {
				t.Errorf("%d lines of worker 1, want 51", n)
			}
			if tolerate {
				if err != nil {
					t.Fatalf("Run: %v\n%s", err, stderr)
				}
				wantIn(t, "stdout", r.stdout.String(), "worker 1 is gone\n")
				// The chief ends as worker 1 dies: either exit may be seen
				// first, and either way the run goes on to its end.
				if !strings.Contains(stderr, "local cluster: worker 1 failed (exit status 4); the others go on\n") {
					wantIn(t, "stderr", stderr, "local cluster: worker 1 exited after the chief ended training (exit status 4); not restarting it\n")
				}
				return
			}
			wantTaskError(t, err, "worker", 1, 4)
			wantIn(t, "stderr", stderr, "local cluster: worker 1 failed (exit status 4); stopping every task\n")
		})
	}
}

// TestPermanentFailureEndsTheRun: a worker that exits with ExitPermanent
// (its own input or computation failed) is neither restarted nor let go,
// whatever the config tolerates: a restart would fail the same way, and a
// run that went on without it would end well having left out its work.
func TestPermanentFailureEndsTheRun(t *testing.T) {
	r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 1, Worker: 2}, Args: []string{"worker-fails-for-good"},
		RestartWorkers: true, TolerateWorkerLoss: true})
	wantTaskError(t, r.wait(t), "worker", 1, localcluster.ExitPermanent)
	checkTasks(t, r.marker, 0)
	stderr := r.stderr.String()
	wantIn(t, "stderr", stderr, "[worker 1] worker 1: a label out of range (start 1)\n",
		"local cluster: worker 1 failed (exit status 3) in its own input or computation, which a restart would repeat; stopping every task\n")
	wantNotIn(t, "stderr", stderr, "restarting", "(start 2)", "the others go on")
}

// TestPSStoppedAfterTraining: ps tasks that do not exit by themselves once
// training ended are stopped after PSExitGrace, and the run succeeds.
func TestPSStoppedAfterTraining(t *testing.T) {
	r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 2, Worker: 1}, Args: []string{"ps-lingers"},
		PSExitGrace: 100 * time.Millisecond})
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v\n%s", err, r.stderr)
	}
	checkTasks(t, r.marker, 0)
	wantIn(t, "stderr", r.stderr.String(),
		"local cluster: ps 0 did not exit within 100ms of the end of training; stopping it\n",
		"local cluster: ps 1 did not exit within 100ms of the end of training; stopping it\n")
}

// TestWorkersStoppedAfterTheChiefEnds: once the chief has exited 0 (and
// stopped the ps), a worker still running is stopped after EndGrace with
// a line naming it, is not restarted although it fails, and the run
// succeeds; meanwhile the ps's address refuses connections rather than
// queueing them for no one (sync-backup seed 20 of RELIABILITY.md run 4).
func TestWorkersStoppedAfterTheChiefEnds(t *testing.T) {
	r := start(t, localcluster.Config{Jobs: localcluster.Jobs{PS: 1, Worker: 2}, Args: []string{"worker-lingers"},
		RestartPS: true, RestartWorkers: true, RestartChief: true, EndGrace: 200 * time.Millisecond})
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v\n%s", err, r.stderr)
	}
	checkTasks(t, r.marker, 0)
	stderr := r.stderr.String()
	wantIn(t, "stderr", stderr, "local cluster: worker 1 exited after the chief ended training (exit status 5); not restarting it\n",
		"[worker 1] ps 0 refuses: true\n")
	if !regexp.MustCompile(`local cluster: worker 1 still runs \d+(\.\d+)?m?s after the chief ended training; stopping it\n`).MatchString(stderr) {
		t.Errorf("stderr %q: no line saying worker 1 is stopped after the chief ended training", stderr)
	}
	wantNotIn(t, "stderr", stderr, "restarting it on its address")
}

// TestOutputLinesNeverInterleave: tasks writing at once, in pieces that cut
// lines, still give whole lines, each with its own task's prefix.
func TestOutputLinesNeverInterleave(t *testing.T) {
	r := start(t, localcluster.Config{Jobs: localcluster.Jobs{Worker: 3}, Args: []string{"chatty"}, Verbose: true})
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v\n%s", err, r.stderr)
	}
	counts := map[string]int{}
	line := regexp.MustCompile(`^\[(worker \d)\] (worker \d) says (\d+) on (/dev/std(?:out|err)) (=*)$`)
	for _, l := range strings.Split(strings.TrimSuffix(r.stderr.String(), "\n"), "\n") {
		if strings.HasPrefix(l, "local cluster: ") || strings.HasSuffix(l, "] hello from "+l[1:9]) {
			continue
		}
		m := line.FindStringSubmatch(l)
		if m == nil || m[1] != m[2] || len(m[5]) != atoi(m[3])%70 {
			t.Fatalf("a garbled line: %.200q", l)
		}
		counts[m[1]+" "+m[4]]++
	}
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout.String(), "\n"), "\n") {
		if l == "hello from worker 0" {
			continue
		}
		if m := line.FindStringSubmatch("[worker 0] " + l); m == nil || m[2] != "worker 0" || len(m[5]) != atoi(m[3])%70 {
			t.Fatalf("a garbled line on stdout: %.200q", l)
		}
		counts["stdout"]++
	}
	want := map[string]int{"worker 0 /dev/stderr": 500, "worker 1 /dev/stdout": 500, "worker 1 /dev/stderr": 500,
		"worker 2 /dev/stdout": 500, "worker 2 /dev/stderr": 500, "stdout": 500}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("lines %v, want %v", counts, want)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestLongLines: the chief's stdout passes unchanged, a last line without
// a newline and a line of 512 KiB included; a 3 MiB line on stderr comes out
// in 1 MiB pieces, each prefixed.
func TestLongLines(t *testing.T) {
	r := start(t, localcluster.Config{Jobs: localcluster.Jobs{Worker: 1}, Args: []string{"long"}})
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v\n%.1000s", err, r.stderr)
	}
	if got, want := r.stdout.String(), "hello from worker 0\n"+strings.Repeat("o", 512<<10)+"\nend\nno newline"; got != want {
		t.Errorf("stdout: %d bytes, want %d", len(got), len(want))
	}
	piece := "[worker 0] " + strings.Repeat("e", 1<<20) + "\n"
	if !strings.HasSuffix(r.stderr.String(), "[worker 0] hello from worker 0\n"+piece+piece+piece) {
		t.Errorf("stderr: %d bytes, not ending in three 1 MiB pieces", len(r.stderr.String()))
	}
}

// TestRunChecksItsConfig: a bad Config is an error before anything starts,
// and so is Run in a task.
func TestRunChecksItsConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  localcluster.Config
		want string
	}{
		{localcluster.Config{}, "no worker"},
		{localcluster.Config{Jobs: localcluster.Jobs{Worker: 1, Chief: 2}}, "at most one chief"},
		{localcluster.Config{Jobs: localcluster.Jobs{Worker: 65}}, "out of range"},
		{localcluster.Config{Jobs: localcluster.Jobs{Worker: 1}, Env: []string{"TF_CONFIG={}"}}, "sets TF_CONFIG, which Run sets"},
		{localcluster.Config{Jobs: localcluster.Jobs{Worker: 1}, Env: []string{"NOEQUALS"}}, `"NOEQUALS" is not KEY=value`},
		{localcluster.Config{Jobs: localcluster.Jobs{Worker: 1}, StopGrace: -1}, "StopGrace -1ns is negative"},
	} {
		err := localcluster.Run(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "localcluster: ") {
			t.Errorf("Run(%+v): %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
	t.Setenv(localcluster.EnvTask, "1")
	if err := localcluster.Run(context.Background(), localcluster.Config{Jobs: localcluster.Jobs{Worker: 1}}); !errors.Is(err, localcluster.ErrInTask) {
		t.Errorf("Run in a task: %v, want ErrInTask", err)
	}
}

// TestTasksDieWithTheLauncher: on Linux, killing the launcher (SIGKILL: it
// has no say) kills its tasks.
func TestTasksDieWithTheLauncher(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux's")
	}
	marker := fmt.Sprintf("LCTEST_RUN=%s-%d-%d", t.Name(), os.Getpid(), time.Now().UnixNano())
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "LCTEST_LAUNCHER=1", marker, quickRaceExit())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Scan()
		first <- sc.Text()
		for sc.Scan() {
		}
	}()
	var addrs map[string][]string
	select {
	case l := <-first:
		s, ok := strings.CutPrefix(l, "local cluster: ")
		if !ok {
			t.Fatalf("the launcher's first line: %q", l)
		}
		addrs = parseClusterLine(s)
	case <-time.After(30 * time.Second):
		t.Fatal("the launcher did not name its cluster within 30 s")
	}
	for _, a := range append(addrs["ps"], addrs["worker"]...) {
		ask(a, "who")
	}
	checkTasks(t, marker, 3)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for len(tasksWith(marker)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("tasks %v still run 10 s after their launcher was killed", tasksWith(marker))
		}
		time.Sleep(20 * time.Millisecond) // polling the process table for the kernel's work, not synchronising
	}
}
