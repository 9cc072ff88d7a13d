//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
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

// startLauncherCmd is startLauncher for a command already made; the
// address it returns is the first the launcher names (a ps's, or a
// worker's in a cluster without ps).
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
			// The first address named: every task's TF_CONFIG holds it.
			if rest, ok := strings.CutPrefix(l, "local cluster: "); ok && strings.Contains(rest, " [") {
				_, addr, _ := strings.Cut(rest, "[")
				addr, _, _ = strings.Cut(addr, "]")
				return cmd, strings.Fields(addr)[0], lines
			}
		case <-deadline:
			t.Fatal("the launcher did not print the cluster")
		}
	}
}

// recovers runs `distflow train args` as a local cluster (recoveryRun),
// calls faults with its output lines while it runs, and checks that it
// succeeds, prints result (when not empty) and leaves no task behind.
func recovers(t *testing.T, faults func(lines <-chan string, ps string), result string, args ...string) {
	t.Helper()
	cmd, ps, lines, stdout := recoveryRun(t, append([]string{"train"}, args...)...)
	faults(lines, ps)
	if err := waitExit(t, cmd); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	if out := stdout(); result != "" && !strings.Contains(out, result) {
		t.Errorf("no %q on stdout: %q", result, out)
	}
	noTasksLeft(t, ps)
}

// TestAsyncChiefKilledIsRestarted: in an asynchronous run with checkpoints,
// SIGKILL the chief: the other workers keep training, the launcher starts
// the chief again, it resumes (from the variables the ps hold), ends training
// (its result is the run's) and stops the ps; no process is left behind.
func TestAsyncChiefKilledIsRestarted(t *testing.T) {
	dir := t.TempDir()
	recovers(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "checkpoint: saved")
		killTask(t, ps, "worker", 0)
		waitFor(t, lines, "local cluster: worker 0 died (signal: killed); restarting it on its address (1 of 3)")
		// The ps still hold the variables: the chief goes on from them, which
		// loses nothing (from the checkpoint when a ps was lost too).
		waitFor(t, lines, "the model is already initialised; continuing")
	}, "/job:worker/task:0 linreg: global step",
		"-v", "--model", "linreg", "--steps", "3000", "--local-cluster", "ps=1,worker=3",
		"--checkpoint-dir", dir, "--save-checkpoint-steps", "100", "--step-delay", "2ms", "--log-every", "100")
}

// TestSyncWorkerKilledIsRestarted: in a synchronous run of 3 workers, each
// update aggregating all 3, SIGKILL a worker: the launcher starts it again,
// it rejoins at the current global step (the chief lets it back in, or,
// restarted before its heartbeats ran out, never counted it lost), and the
// run finishes. (estimator's TestSyncGoesOnWithoutALostWorker shows the 2
// others going on within the step deadline while it is away.)
func TestSyncWorkerKilledIsRestarted(t *testing.T) {
	recovers(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "global_step 2")
		killTask(t, ps, "worker", 2)
		waitFor(t, lines, "local cluster: worker 2 died (signal: killed); restarting it on its address (1 of 3)")
		waitFor(t, lines, "[worker 2] /job:worker/task:2 linreg: global step 1500")
	}, "/job:worker/task:0 linreg: global step",
		"-v", "--model", "linreg", "--steps", "1500", "--local-cluster", "ps=1,worker=3",
		"--sync", "--replicas-to-aggregate", "3", "--step-timeout", "8s", "--step-delay", "2ms", "--log-every", "100")
}

// TestSyncChiefKilledIsRestarted: in a synchronous run with checkpoints,
// SIGKILL the chief, whose aggregation loop releases the workers: the
// launcher starts it again, it abandons the round its predecessor left
// half taken, releases the waiting workers, and the run finishes.
func TestSyncChiefKilledIsRestarted(t *testing.T) {
	dir := t.TempDir()
	recovers(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "checkpoint: saved")
		killTask(t, ps, "worker", 0)
		waitFor(t, lines, "local cluster: worker 0 died (signal: killed); restarting it on its address (1 of 3)")
		waitFor(t, lines, "sync replicas: abandoned a round; the live replicas go on")
	}, "/job:worker/task:0 linreg: global step 1500",
		"-v", "--model", "linreg", "--steps", "1500", "--local-cluster", "ps=1,worker=3",
		"--sync", "--checkpoint-dir", dir, "--save-checkpoint-steps", "100", "--step-timeout", "20s", "--step-delay", "2ms", "--log-every", "100")
}

// signalTask sends sig to the local-cluster task job index.
func signalTask(t *testing.T, ps, job string, index int, sig syscall.Signal) {
	t.Helper()
	want := `"task":{"type":"` + job + `","index":` + string(rune('0'+index)) + `}`
	for _, pid := range tasksOf(ps) {
		env, _ := os.ReadFile("/proc/" + pid + "/environ")
		if strings.Contains(string(env), want) {
			if err := syscall.Kill(atoi(pid), sig); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("found no %s %d among the tasks %v", job, index, tasksOf(ps))
}

// TestSyncWorkerStoppedIsReported: SIGSTOP a worker of a synchronous run:
// the chief reports it lost, naming it, within twice its lost deadline
// (a quarter of the 8 s step deadline) and goes on with the others; after
// SIGCONT it is let back in, and the run finishes.
func TestSyncWorkerStoppedIsReported(t *testing.T) {
	recovers(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "global_step 2")
		signalTask(t, ps, "worker", 2, syscall.SIGSTOP)
		stopped := time.Now()
		waitFor(t, lines, `msg="a replica is lost; going on without it" task=/job:worker/task:0 peer=/job:worker/task:2`)
		if d := time.Since(stopped); d > 4*time.Second {
			t.Errorf("the stopped worker was reported after %v; want within twice its lost deadline, 4 s", d)
		}
		waitFor(t, lines, "sync replicas: abandoned a round; the live replicas go on")
		signalTask(t, ps, "worker", 2, syscall.SIGCONT)
		waitFor(t, lines, "a lost replica answers again; letting it back in")
	}, "",
		"-v", "--model", "linreg", "--steps", "1200", "--local-cluster", "ps=1,worker=3",
		"--sync", "--step-timeout", "8s", "--step-delay", "2ms", "--log-every", "100")
}

// TestAllReduceRankKilledRejoins: SIGKILL a rank of an all-reduce run:
// the ring re-forms without it, the launcher starts it again, it rejoins
// (not silent for 90 s), and the run finishes.
func TestAllReduceRankKilledRejoins(t *testing.T) {
	recovers(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "step 200/")
		killTask(t, ps, "worker", 2)
		waitFor(t, lines, "local cluster: worker 2 died (signal: killed); restarting it on its address (1 of 3)")
		waitFor(t, lines, `msg="the ring re-forms"`)
		waitFor(t, lines, "(3 ranks)")
	}, "/job:worker/task:0 linreg: global step",
		"-v", "--model", "linreg", "--steps", "1500", "--local-cluster", "worker=3",
		"--allreduce", "--step-timeout", "8s", "--step-delay", "2ms", "--log-every", "100")
}

// TestInGraphSurvivesWorkerAndPSLoss: in-graph replication with
// checkpoints: SIGKILL the worker that serves a tower, then the ps; the
// launcher restarts each on its address, the chief waits for them and
// goes on (the ps's shard restored from the latest checkpoint), and the
// run finishes with nothing left behind.
func TestInGraphSurvivesWorkerAndPSLoss(t *testing.T) {
	dir := t.TempDir()
	recovers(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "checkpoint: saved")
		killTask(t, ps, "worker", 1)
		waitFor(t, lines, "local cluster: worker 1 died (signal: killed); restarting it on its address (1 of 3)")
		waitFor(t, lines, "recovered from a lost task")
		killTask(t, ps, "ps", 0)
		waitFor(t, lines, "local cluster: ps 0 died (signal: killed); restarting it on its address (1 of 3)")
		waitFor(t, lines, "recovered from a lost task")
	}, "/job:worker/task:0 linreg: global step",
		"-v", "--model", "linreg", "--steps", "1500", "--local-cluster", "ps=1,worker=2",
		"--in-graph", "--checkpoint-dir", dir, "--save-checkpoint-steps", "100", "--step-timeout", "10s", "--step-delay", "2ms", "--log-every", "100")
}

// TestSyncPSKilledIsRestored: SIGKILL the ps of a synchronous run with
// checkpoints: the launcher restarts it, the chief restores its shard
// from the latest checkpoint and sets the sync state up again (the
// accumulators and token queues lived on the ps), every worker resumes,
// and the run finishes.
func TestSyncPSKilledIsRestored(t *testing.T) {
	dir := t.TempDir()
	recovers(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "checkpoint: saved")
		killTask(t, ps, "ps", 0)
		waitFor(t, lines, "local cluster: ps 0 died (signal: killed); restarting it on its address (1 of 3)")
		waitFor(t, lines, "recovered from a lost task")
	}, "/job:worker/task:0 linreg: global step 1500",
		"-v", "--model", "linreg", "--steps", "1500", "--local-cluster", "ps=1,worker=3",
		"--sync", "--checkpoint-dir", dir, "--save-checkpoint-steps", "100", "--step-timeout", "10s", "--step-delay", "2ms", "--log-every", "100")
}

// TestStalenessPSKilledIsRestored: SIGKILL the ps of a bounded-staleness
// run with checkpoints: the ps is restarted and restored (the step
// counters with it), every replica recovers in its own process, whatever
// part of its step the loss hit (the wait for the slowest, the step, the
// count after it), and the run finishes. A replica that exited on the loss
// and was restarted hid it (CI saw that about once in three runs).
func TestStalenessPSKilledIsRestored(t *testing.T) {
	dir := t.TempDir()
	recovers(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "checkpoint: saved")
		killTask(t, ps, "ps", 0)
		waitForEach(t, lines, "died (exit status",
			"local cluster: ps 0 died (signal: killed); restarting it on its address (1 of 3)",
			`msg="recovered from a lost task" task=/job:worker/task:0`,
			`msg="recovered from a lost task" task=/job:worker/task:1`)
	}, "/job:worker/task:0 linreg: global step",
		"-v", "--model", "linreg", "--steps", "3000", "--local-cluster", "ps=1,worker=2",
		"--staleness", "2", "--checkpoint-dir", dir, "--save-checkpoint-steps", "100", "--step-timeout", "10s", "--step-delay", "2ms", "--log-every", "100")
}

// TestWorkerStoppedWhileTheChiefEndsExits: SIGSTOP a worker of an
// asynchronous run with checkpoints and let the chief end training and
// stop the ps meanwhile; after SIGCONT the worker finds the ps gone and
// the chief's end-of-training marker, says so and exits 0, well before the
// launcher's own end grace (10 s) would stop it; the run succeeds with
// nothing left behind (RELIABILITY.md run 4, sync-backup seed 20, hung
// here for its 60 s deadline).
func TestWorkerStoppedWhileTheChiefEndsExits(t *testing.T) {
	dir := t.TempDir()
	cmd, ps, lines, stdout := recoveryRun(t, "train", "-v", "--model", "linreg", "--steps", "1500", "--local-cluster", "ps=1,worker=2",
		"--checkpoint-dir", dir, "--save-checkpoint-steps", "100", "--step-delay", "2ms", "--log-every", "100")
	waitFor(t, lines, "checkpoint: saved")
	signalTask(t, ps, "worker", 1, syscall.SIGSTOP)
	waitFor(t, lines, `msg="stopped task" task=/job:worker/task:0 stopped=/job:ps/task:0`)
	signalTask(t, ps, "worker", 1, syscall.SIGCONT)
	resumed := time.Now()
	if err := waitExit(t, cmd); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	if d := time.Since(resumed); d > 8*time.Second {
		t.Errorf("the run ended %v after the stopped worker resumed; want within 8 s", d)
	}
	if out := stdout(); !strings.Contains(out, "/job:worker/task:0 linreg: global step 1500") {
		t.Errorf("no result of the chief on stdout: %q", out)
	}
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	all := strings.Join(rest, "\n")
	if !strings.Contains(all, "training ended while this replica") {
		t.Errorf("worker 1 did not say that training had ended:\n%s", all)
	}
	if strings.Contains(all, "after the chief ended training; stopping it") {
		t.Errorf("the launcher had to stop worker 1:\n%s", all)
	}
	noTasksLeft(t, ps)
}

// trainedBlocks reads the blocks of examples the replicas trained, from
// the file $DISTFLOW_TRAINED_BLOCKS named: each line "task: start size",
// and on a ring "task: start size step generation". A ring step trained
// again in a newer view replaces the older view's: the member whose step
// finished after the others had given it up (it was stopped mid-step)
// took their model at the next sync, and its step's update went with its
// own. It fails on a block trained twice, and returns the number of
// blocks below the highest one that nobody trained.
func trainedBlocks(t *testing.T, path string) (blocks, missing int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		text, who              string
		start, size, step, gen int
	}
	var lines []line
	newest := map[int]int{} // a ring step's newest generation
	gens := map[int]map[int]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 && len(f) != 5 {
			t.Fatalf("trained blocks: bad line %q", l)
		}
		ln := line{text: l, who: f[0], start: atoi(f[1]), size: atoi(f[2]), step: -1}
		if len(f) == 5 {
			ln.step, ln.gen = atoi(f[3]), atoi(f[4])
			if gens[ln.step] == nil {
				gens[ln.step] = map[int]bool{}
			}
			gens[ln.step][ln.gen] = true
			newest[ln.step] = max(newest[ln.step], ln.gen)
		}
		lines = append(lines, ln)
	}
	for step, g := range gens {
		if len(g) > 1 {
			t.Logf("ring step %d was trained in %d views; the newest, %d, counts", step, len(g), newest[step])
		}
	}
	by := map[int]string{}
	size, top := 0, -1
	for _, l := range lines {
		if l.step >= 0 && l.gen != newest[l.step] {
			continue
		}
		if size == 0 {
			size = l.size
		}
		if l.size != size || l.start%size != 0 {
			t.Fatalf("trained blocks: %q is not a block of %d", l.text, size)
		}
		// A position is one example of one epoch (a permutation per
		// epoch): a position trained twice is an example doubled.
		if who, ok := by[l.start]; ok {
			t.Errorf("block at %d trained twice: by %s and by %s", l.start, who, l.who)
		}
		by[l.start] = l.who
		top = max(top, l.start/size)
	}
	for k := 0; k <= top; k++ {
		if _, ok := by[k*size]; !ok {
			missing++
		}
	}
	return len(by), missing
}

// trainBlocks runs `distflow train args` as a local cluster whose tasks
// log the batches they train, calls faults with its output lines while it
// runs, and checks that it succeeds and leaves no task behind; it returns
// the batches trained and how many were skipped (trainedBlocks).
func trainBlocks(t *testing.T, faults func(lines <-chan string, ps string), args ...string) (blocks, missing int) {
	t.Helper()
	log := t.TempDir() + "/trained"
	cmd := exec.Command(binary, append([]string{"train"}, args...)...)
	cmd.Env = append(os.Environ(), "DISTFLOW_TRAINED_BLOCKS="+log)
	cmd.SysProcAttr = childAttrs()
	cmd, ps, lines := startLauncherCmd(t, cmd)
	if faults != nil {
		faults(lines, ps)
	}
	if err := waitExit(t, cmd); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	blocks, missing = trainedBlocks(t, log)
	t.Logf("%d blocks trained, %d skipped", blocks, missing)
	noTasksLeft(t, ps)
	return blocks, missing
}

// TestAsyncWorkerKilledNeitherSkipsNorDoubles: SIGKILL a worker of an
// asynchronous run mid-epoch; the launcher restarts it. The replicas
// claim their batches from a cursor on the ps, so the restarted worker
// does not repeat its epoch's start and the others read what it would
// have: no example is trained twice, and the only ones skipped are the
// killed worker's batch in flight and the one it had claimed (2), and the
// one each process claimed with its last step (3 processes).
func TestAsyncWorkerKilledNeitherSkipsNorDoubles(t *testing.T) {
	blocks, missing := trainBlocks(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "[worker 1] /job:worker/task:1: local_step 50")
		killTask(t, ps, "worker", 1)
		waitFor(t, lines, "local cluster: worker 1 died (signal: killed); restarting it on its address (1 of 3)")
		waitFor(t, lines, "[worker 1] /job:worker/task:1: local_step 50")
	}, "-v", "--model", "mlp", "--data", "embedded", "--steps", "400", "--local-cluster", "ps=1,worker=2",
		"--step-delay", "2ms", "--log-every", "50")
	if blocks < 400 {
		t.Errorf("%d blocks trained; want at least the 400 global steps", blocks)
	}
	if missing > 5 {
		t.Errorf("%d blocks skipped; want at most 5 (2 of the killed worker, the last claim of each of 3 processes)", missing)
	}
}

// TestRingReformsNeitherSkipsNorDoubles: SIGKILL a rank of an all-reduce
// run of 3 mid-epoch: the ring goes on with 2 and grows back to 3 when the
// launcher has restarted it. Every member of a view reads its batch at the
// view's input position plus its place in the view, so no example is
// trained twice, and at most the killed rank's batch of the step it died
// in is lost.
func TestRingReformsNeitherSkipsNorDoubles(t *testing.T) {
	blocks, missing := trainBlocks(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "step 50/")
		killTask(t, ps, "worker", 2)
		waitFor(t, lines, "local cluster: worker 2 died (signal: killed); restarting it on its address (1 of 3)")
		waitFor(t, lines, `msg="the ring re-forms"`)
		waitFor(t, lines, "(3 ranks)")
	}, "-v", "--model", "mlp", "--data", "embedded", "--steps", "300", "--local-cluster", "worker=3",
		"--allreduce", "--step-timeout", "8s", "--step-delay", "2ms", "--log-every", "50")
	if blocks < 600 {
		t.Errorf("%d blocks trained; want at least 600 (300 steps, most of them by 3 ranks)", blocks)
	}
	// The killed rank's batch, and one more when the kill cut a step short
	// unevenly: a member that finished the step's all-reduce (its update
	// holds every member's gradient) is furthest on, and the view takes its
	// input position, so a member whose step failed there never logs the
	// batch its gradient went into. Neither is trained twice.
	if missing > 2 {
		t.Errorf("%d blocks skipped; want at most 2 (the killed rank's, and a member's whose step was cut short)", missing)
	}
}

// TestSyncRoundsTrainTheSameBatches: in synchronous training each replica
// claims its next batch once its round is over, so round k trains the
// batches k*n to k*n+n-1 of the n replicas whatever their timing (a
// replica that starts late cannot take a batch of an earlier round), and
// two runs with the same seed are the same run.
func TestSyncRoundsTrainTheSameBatches(t *testing.T) {
	log := t.TempDir() + "/trained"
	cmd := exec.Command(binary, "train", "--model", "mlp", "--data", "embedded", "--steps", "60", "--local-cluster", "ps=1,worker=2",
		"--sync", "--log-every", "50")
	cmd.Env = append(os.Environ(), "DISTFLOW_TRAINED_BLOCKS="+log)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the run failed: %v\n%s", err, out)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	byTask := map[string][]int{} // each replica's blocks, in the order trained
	size := 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("trained blocks: bad line %q", l)
		}
		size = atoi(f[2])
		byTask[f[0]] = append(byTask[f[0]], atoi(f[1])/size)
	}
	if len(byTask) != 2 {
		t.Fatalf("blocks trained by %d replicas, want 2: %v", len(byTask), byTask)
	}
	var a, c []int
	for _, blocks := range byTask {
		if a == nil {
			a = blocks
		} else {
			c = blocks
		}
	}
	for k := range min(len(a), len(c)) {
		if got := []int{min(a[k], c[k]), max(a[k], c[k])}; got[0] != 2*k || got[1] != 2*k+1 {
			t.Errorf("round %d trained blocks %v, want [%d %d]", k, got, 2*k, 2*k+1)
		}
	}
}

// TestInGraphClaimsEachBatchOnce: with in-graph replication the chief
// claims a batch per tower with each step: every batch is trained once,
// and only the last claim (one batch per tower) is left untrained.
func TestInGraphClaimsEachBatchOnce(t *testing.T) {
	blocks, missing := trainBlocks(t, nil, "--model", "mlp", "--data", "embedded", "--steps", "120", "--local-cluster", "ps=1,worker=2",
		"--in-graph", "--log-every", "50")
	if blocks != 240 || missing != 0 {
		t.Errorf("%d batches trained, %d skipped; want 240 (120 steps of 2 towers), none skipped", blocks, missing)
	}
}

// TestRingGoesOnWhileRankZeroIsStopped: SIGSTOP rank 0 (the chief, the
// ring's leader) of an all-reduce run of 3: within twice the step
// deadline rank 1, the lowest rank alive, leads and the ring goes on with
// 2; after SIGCONT rank 0 takes the lead back with the model of the ranks
// that went on, the ring grows back to 3 and the run finishes. No batch is
// trained twice.
func TestRingGoesOnWhileRankZeroIsStopped(t *testing.T) {
	const stepTimeout = 8 * time.Second
	dir := t.TempDir()
	_, missing := trainBlocks(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "[worker 0] /job:worker/task:0: local_step 50 ")
		signalTask(t, ps, "worker", 0, syscall.SIGSTOP)
		stopped := time.Now()
		waitFor(t, lines, "every lower rank is lost: this rank leads the ring")
		waitFor(t, lines, "(2 ranks)")
		if d := time.Since(stopped); d > 2*stepTimeout {
			t.Errorf("the ring went on with 2 ranks %v after rank 0 was stopped; want within twice the step deadline, %v", d, 2*stepTimeout)
		}
		waitFor(t, lines, "[worker 1] /job:worker/task:1: local_step 200 ")
		signalTask(t, ps, "worker", 0, syscall.SIGCONT)
		resumed := time.Now()
		waitFor(t, lines, "a lower rank leads the ring again; following it")
		// Rank 1 tells rank 0 of its views once rank 0 answers again, so
		// rank 0 takes the lead back at once, not when its step of the
		// old view fails at the step deadline (two leaders until then).
		if d := time.Since(resumed); d > stepTimeout/2 {
			t.Errorf("rank 0 took the lead back %v after SIGCONT; want well within the step deadline, %v", d, stepTimeout)
		}
		waitFor(t, lines, "took the model of the member furthest on")
		waitFor(t, lines, "(3 ranks)")
	}, "-v", "--model", "mlp", "--data", "embedded", "--steps", "800", "--local-cluster", "worker=3", "--checkpoint-dir", dir,
		"--allreduce", "--step-timeout", stepTimeout.String(), "--step-delay", "5ms", "--log-every", "50")
	// The step rank 0 was stopped in: the other ranks' batches of it are
	// read again after the re-form; rank 0's own was in flight.
	if missing > 2 {
		t.Errorf("%d blocks skipped; want at most 2", missing)
	}
}

// TestRingRankZeroKilledKeepsTheRingsProgress: SIGKILL rank 0 of an
// all-reduce run with checkpoints, well after its last checkpoint: the
// launcher restarts it, it restores that checkpoint, and the members agree
// on the model of the ranks that trained on (not the older checkpoint's),
// so no step is lost; the run finishes.
func TestRingRankZeroKilledKeepsTheRingsProgress(t *testing.T) {
	dir := t.TempDir()
	recovers(t, func(lines <-chan string, ps string) {
		waitFor(t, lines, "checkpoint: saved")
		waitFor(t, lines, "[worker 1] /job:worker/task:1: local_step 150 ")
		killTask(t, ps, "worker", 0)
		waitFor(t, lines, "local cluster: worker 0 died (signal: killed); restarting it on its address (1 of 3)")
		l := waitFor(t, lines, `msg="took the model of the member furthest on" task=/job:worker/task:0`)
		if !strings.Contains(l, "/job:worker/task:0") {
			t.Errorf("the member that took the others' model is not the restarted rank 0: %s", l)
		}
		waitFor(t, lines, "(3 ranks)")
	}, "/job:worker/task:0 linreg: global step 1000",
		"-v", "--model", "linreg", "--steps", "1000", "--local-cluster", "worker=3", "--checkpoint-dir", dir, "--save-checkpoint-steps", "100",
		"--allreduce", "--step-timeout", "8s", "--step-delay", "3ms", "--log-every", "50")
}

// TestSyncWorkerStoppedPastTheDeadlineRejoins: SIGSTOP a worker of a
// synchronous run for longer than the step deadline: the chief goes on
// without it; resumed, its step in flight has outlived the deadline, and
// rather than exit (and be restarted by the launcher) it rejoins at the
// current global step and trains on (stopped between two steps, it is let
// back in); the run finishes.
func TestSyncWorkerStoppedPastTheDeadlineRejoins(t *testing.T) {
	const stepTimeout = 4 * time.Second
	// No --step-delay: a replica is inside a step nearly all the time, so
	// that the SIGSTOP lands in one (in a delay before a step, there is no
	// step to outlive the deadline, and nothing to rejoin from). Enough
	// steps that the others cannot finish while it is stopped: a quiet
	// machine runs over 1,000 of these steps a second.
	cmd, ps, lines, _ := recoveryRun(t, "train", "-v", "--model", "linreg", "--steps", "25000", "--local-cluster", "ps=1,worker=3",
		"--sync", "--step-timeout", stepTimeout.String(), "--log-every", "200")
	waitFor(t, lines, "global_step 2")
	signalTask(t, ps, "worker", 2, syscall.SIGSTOP)
	waitFor(t, lines, `msg="a replica is lost; going on without it" task=/job:worker/task:0 peer=/job:worker/task:2`)
	// The fault: stopped for longer than the step deadline (this is the
	// fault's length, not a wait for something to happen).
	time.Sleep(stepTimeout + time.Second)
	signalTask(t, ps, "worker", 2, syscall.SIGCONT)
	// Had it exited, the launcher would restart it: it must not die, and
	// it trains to the end (its result). A loaded machine spends more of
	// a replica's time between steps, and a stop that landed there leaves
	// no step to outlive the deadline: the chief lets it back in instead.
	var rejoined, letBackIn bool
	deadline := time.After(2 * time.Minute)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			switch {
			case !ok:
				t.Fatal("the output ended before worker 2's result")
			case strings.Contains(l, "worker 2 died"):
				t.Fatalf("worker 2 exited rather than rejoin: %s", l)
			case strings.Contains(l, "this replica's step outlived the step deadline; rejoining at the current global step"):
				rejoined = true
			case strings.Contains(l, "a lost replica answers again; letting it back in"):
				letBackIn = true
			case strings.Contains(l, "[worker 2] /job:worker/task:2 linreg: global step"):
				done = true
			}
		case <-deadline:
			t.Fatal("no result of worker 2 within 2 minutes")
		}
	}
	switch {
	case rejoined:
	case letBackIn:
		t.Log("the stop landed between worker 2's steps: it was let back in, with no step to rejoin from")
	default:
		t.Error("worker 2 neither rejoined nor was let back in")
	}
	if err := waitExit(t, cmd); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	noTasksLeft(t, ps)
}

// TestStoppedChiefAndPSAreNamed: a lost sync chief and a task stopped with
// SIGSTOP are named, not met with silence and a deadline error that names
// no task: SIGSTOP the chief of a
// synchronous run, or the ps of an asynchronous one; a worker (the chief,
// for the ps) names it, lost, within twice its lost deadline (a quarter
// of the 8 s step deadline); after SIGCONT the run finishes.
func TestStoppedChiefAndPSAreNamed(t *testing.T) {
	for _, tc := range []struct {
		name, job, watcher, peer, lost string
		args                           []string
	}{
		{"sync chief", "worker", "/job:worker/task:1", "/job:worker/task:0", "a replica is lost; going on without it", []string{"--sync"}},
		{"async ps", "ps", "/job:worker/task:0", "/job:ps/task:0", "a ps task is lost: the variables it holds are gone until it is restarted", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recovers(t, func(lines <-chan string, ps string) {
				// Not "global_step 2": two async workers' lines may read
				// 194 and 396, and none begin with a 2.
				waitFor(t, lines, "/job:worker/task:0: local_step 100 ")
				signalTask(t, ps, tc.job, 0, syscall.SIGSTOP)
				stopped := time.Now()
				l := waitFor(t, lines, `msg="`+tc.lost+`" task=`+tc.watcher+` peer=`+tc.peer)
				if d := time.Since(stopped); d > 4*time.Second {
					t.Errorf("the stopped %s was reported after %v; want within twice its lost deadline, 4 s", tc.peer, d)
				}
				if !strings.Contains(l, "waiting_for=") {
					t.Errorf("the report does not say what the cluster waits for: %s", l)
				}
				signalTask(t, ps, tc.job, 0, syscall.SIGCONT)
			}, "/job:worker/task:0 linreg: global step",
				append([]string{"-v", "--model", "linreg", "--steps", "1500", "--local-cluster", "ps=1,worker=2",
					"--step-timeout", "8s", "--step-delay", "2ms", "--log-every", "100"}, tc.args...)...)
		})
	}
}

// TestRingTowersReadEveryBlockOnce: the ranks of a ring with 2 towers
// each on logical GPUs read a block per tower from the view's input
// position: every block of the run once, none skipped.
func TestRingTowersReadEveryBlockOnce(t *testing.T) {
	blocks, missing := trainBlocks(t, nil, "--model", "mlp", "--data", "embedded", "--steps", "150", "--local-cluster", "worker=2",
		"--allreduce", "--gpus", "2", "--logical-gpus", "2", "--gpu-platform", "sim")
	if blocks != 600 || missing != 0 {
		t.Errorf("%d blocks trained, %d skipped; want 600 (150 steps of 2 ranks of 2 towers), none skipped", blocks, missing)
	}
}
