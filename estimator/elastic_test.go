package estimator_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// elasticCluster is a cluster whose tasks are goroutines of the test, each
// with its own estimator and server on a loopback listener, that the test
// can kill one by one (cancelling a task's context stops its server: its
// peers see the connection refused, as after a SIGKILL).
type elasticCluster struct {
	t      *testing.T
	spec   *cluster.Spec
	lis    map[cluster.TaskID]net.Listener
	cfg    estimator.RunConfig
	ctx    context.Context
	cancel context.CancelFunc
	logs   syncBuffer

	mu      sync.Mutex
	res     map[cluster.TaskID]*estimator.Result
	kills   map[cluster.TaskID]context.CancelFunc
	ended   map[cluster.TaskID]chan struct{} // closed when the task's Train returns
	results map[cluster.TaskID]error
	wg      sync.WaitGroup
	// models replaces linearModel for some tasks.
	models map[cluster.TaskID]estimator.ModelFn
}

// syncBuffer is a log that goroutines write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newElasticCluster(t *testing.T, jobs map[string]int, cfg estimator.RunConfig) *elasticCluster {
	t.Helper()
	c := &elasticCluster{t: t, lis: map[cluster.TaskID]net.Listener{}, kills: map[cluster.TaskID]context.CancelFunc{}, res: map[cluster.TaskID]*estimator.Result{},
		ended: map[cluster.TaskID]chan struct{}{}, results: map[cluster.TaskID]error{}}
	addrs := map[string][]string{}
	for _, job := range []string{"ps", "worker"} {
		for i := range jobs[job] {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addrs[job] = append(addrs[job], l.Addr().String())
			c.lis[cluster.TaskID{Job: job, Index: i}] = l
		}
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		t.Fatal(err)
	}
	c.spec, c.cfg = spec, cfg
	c.ctx, c.cancel = context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(func() { c.cancel(); c.wg.Wait() })
	return c
}

// start runs task (again, on a fresh listener at its address when it ran
// before) and returns at once.
func (c *elasticCluster) start(task cluster.TaskID, steps int64, hooks ...estimator.Hook) {
	c.t.Helper()
	l := c.lis[task]
	if l == nil {
		addr, _ := c.spec.Address(task)
		var err error
		if l, err = net.Listen("tcp", addr); err != nil {
			c.t.Fatalf("listening again on %s for %s: %v", addr, task, err)
		}
	}
	c.lis[task] = nil // a Train that ends closes it
	cfg := c.cfg
	cfg.Cluster, cfg.Task, cfg.Listener, cfg.Seed = c.spec, task, l, 1
	cfg.Logger = slog.New(slog.NewTextHandler(&c.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("self", task.String())
	cfg.Progress = &c.logs
	model := linearModel
	if m := c.models[task]; m != nil {
		model = m
	}
	est, err := estimator.New(model, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, kill := context.WithCancel(c.ctx)
	ended := make(chan struct{})
	c.mu.Lock()
	c.kills[task] = kill
	c.ended[task] = ended
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(ended)
		res, err := est.Train(ctx, linearInput(1000, true), estimator.Stop{MaxSteps: steps}, hooks...)
		c.mu.Lock()
		c.results[task], c.res[task] = err, res
		c.mu.Unlock()
	}()
}

// kill stops task as a crash would: its steps are cut short and its
// server stops answering.
func (c *elasticCluster) kill(task cluster.TaskID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kills[task]()
}

// killAndWait kills task and waits until its Train has returned (its
// server no longer holds its address).
func (c *elasticCluster) killAndWait(task cluster.TaskID) {
	c.mu.Lock()
	ended := c.ended[task]
	c.mu.Unlock()
	c.kill(task)
	<-ended
}

func (c *elasticCluster) wait() map[cluster.TaskID]error {
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results
}

// stepTimes records when the chief saw each global step.
type stepTimes struct {
	estimator.BaseHook
	mu     sync.Mutex
	at     map[int64]time.Time
	onStep func(gs int64)
}

func (h *stepTimes) AfterRun(_ context.Context, step *train.StepContext, _ []*tensor.Tensor) error {
	h.mu.Lock()
	if h.at == nil {
		h.at = map[int64]time.Time{}
	}
	h.at[step.GlobalStep] = time.Now()
	h.mu.Unlock()
	if h.onStep != nil {
		h.onStep(step.GlobalStep)
	}
	return nil
}

// firstAfter returns the first global step above gs and when it was seen.
func (h *stepTimes) firstAfter(gs int64) (int64, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	best := int64(-1)
	for s := range h.at {
		if s > gs && (best < 0 || s < best) {
			best = s
		}
	}
	return best, h.at[best]
}

// TestSyncGoesOnWithoutALostWorker: 3 workers, 3 replicas to aggregate; a
// worker dies, and within one step deadline the chief aggregates the 2
// that are left, the global step counting on to the end. The loss is
// logged naming the task.
func TestSyncGoesOnWithoutALostWorker(t *testing.T) {
	const stepTimeout = 5 * time.Second
	c := newElasticCluster(t, map[string]int{"ps": 1, "worker": 3}, estimator.RunConfig{
		Strategy: estimator.Sync{ReplicasToAggregate: 3}, StepTimeout: stepTimeout, WaitTimeout: 20 * time.Second,
		LostAfter: time.Second,
	})
	victim := cluster.TaskID{Job: "worker", Index: 2}
	var once sync.Once
	var killedAt time.Time
	var killedStep int64
	h := &stepTimes{}
	h.onStep = func(gs int64) {
		if gs >= 40 {
			once.Do(func() { killedAt, killedStep = time.Now(), gs; c.kill(victim) })
		}
	}
	const steps = 150
	c.start(cluster.TaskID{Job: "ps"}, steps)
	c.start(cluster.TaskID{Job: "worker", Index: 0}, steps, h)
	c.start(cluster.TaskID{Job: "worker", Index: 1}, steps)
	c.start(victim, steps)
	results := c.wait()
	if err := results[cluster.TaskID{Job: "worker"}]; err != nil {
		t.Fatalf("the chief: %v\n%s", err, c.logs.String())
	}
	if err := results[cluster.TaskID{Job: "worker", Index: 1}]; err != nil {
		t.Errorf("worker 1: %v", err)
	}
	if killedAt.IsZero() {
		t.Fatal("the victim was never killed")
	}
	// The chief's steps go on past the kill: a few rounds later (the
	// round in flight is abandoned) within one step deadline.
	gs, at := h.firstAfter(killedStep + 3)
	if gs < 0 || at.Sub(killedAt) > stepTimeout {
		t.Errorf("after the kill at global step %d: step %d at +%v; want one within the step deadline %v\n%s",
			killedStep, gs, at.Sub(killedAt), stepTimeout, c.logs.String())
	}
	if gs, _ := h.firstAfter(steps - 1); gs < steps {
		t.Errorf("the chief's last global step %d; want %d", gs, steps)
	}
	logs := c.logs.String()
	if testing.Verbose() {
		t.Logf("killed at global step %d; step %d %v later\n%s", killedStep, gs, at.Sub(killedAt), logs)
	}
	if !strings.Contains(logs, "a replica is lost") || !strings.Contains(logs, "peer=/job:worker/task:2") {
		t.Errorf("the logs do not name the lost task:\n%s", logs)
	}
}

// TestSyncLetsALostWorkerBackIn: a worker of a sync cluster dies and
// starts again with the same task id; it rejoins at the current global
// step, the chief aggregates its gradients again, and every task finishes.
func TestSyncLetsALostWorkerBackIn(t *testing.T) {
	// Steps of a few milliseconds: a killed worker is known gone at once
	// (its address refuses connections), and training must outlast its
	// restart and the heartbeat that lets it back in.
	c := newElasticCluster(t, map[string]int{"ps": 1, "worker": 3}, estimator.RunConfig{
		Strategy: estimator.Sync{}, StepTimeout: 5 * time.Second, WaitTimeout: 20 * time.Second, LostAfter: time.Second,
		StepDelay: 5 * time.Millisecond,
	})
	victim := cluster.TaskID{Job: "worker", Index: 2}
	at := make(chan int64, 100)
	h := &stepTimes{onStep: func(gs int64) {
		select {
		case at <- gs:
		default:
		}
	}}
	const steps = 300
	c.start(cluster.TaskID{Job: "ps"}, steps)
	c.start(cluster.TaskID{Job: "worker", Index: 0}, steps, h)
	c.start(cluster.TaskID{Job: "worker", Index: 1}, steps)
	c.start(victim, steps)
	phase := 0
	var restartedAt int64
	deadline := time.After(60 * time.Second)
	for phase < 3 {
		var gs int64
		select {
		case gs = <-at:
		case <-deadline:
			t.Fatalf("phase %d after 60 s: the chief's steps stopped before the victim was let back in\n%s", phase, c.logs.String())
		}
		if phase == 0 && gs >= 30 {
			c.kill(victim)
			phase = 1
		}
		if phase == 1 && strings.Contains(c.logs.String(), "a replica is lost") {
			restartedAt = gs
			c.start(victim, steps)
			phase = 2
		}
		if phase == 2 && strings.Contains(c.logs.String(), "letting it back in") {
			phase = 3
		}
	}
	results := c.wait()
	for task, err := range results {
		if task != victim && err != nil {
			t.Errorf("%s: %v", task, err)
		}
	}
	if results[victim] != nil {
		t.Fatalf("phase %d; the restarted victim: %v\n%s", phase, results[victim], c.logs.String())
	}
	logs := c.logs.String()
	if !strings.Contains(logs, "letting it back in") {
		t.Errorf("the chief never let the victim back in:\n%s", logs)
	}
	// The restarted worker trained from the global step of its restart,
	// not from 0: its first progress line says so.
	if gs, _ := h.firstAfter(steps - 1); gs < steps {
		t.Errorf("the chief's last global step %d; want %d", gs, steps)
	}
	if testing.Verbose() {
		t.Logf("restarted at global step %d\n%s", restartedAt, logs)
	}
}

// waitLog waits until the logs after offset from hold s, or one of or,
// and returns the offset after the first found.
func (c *elasticCluster) waitLog(from int, s string, or ...string) int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		logs := c.logs.String()
		end := -1
		for _, w := range append([]string{s}, or...) {
			if i := strings.Index(logs[from:], w); i >= 0 && (end < 0 || from+i+len(w) < end) {
				end = from + i + len(w)
			}
		}
		if end >= 0 {
			return end
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("none of %q in the logs within 30 s:\n%s", append([]string{s}, or...), logs[from:])
		}
		time.Sleep(5 * time.Millisecond) // polling the logs, not synchronising
	}
}

// TestRingLosesAWorkerAndGrowsBack: a ring of 3 workers (all-reduce, and
// periodic averaging) loses one (killed): within one step deadline the
// other 2 go on among themselves; the worker starts again with the same
// task id and the ring grows back to 3; training finishes.
func TestRingLosesAWorkerAndGrowsBack(t *testing.T) {
	for _, strategy := range []estimator.Strategy{estimator.AllReduce{}, estimator.Averaging{Every: 3}} {
		t.Run(strategy.String(), func(t *testing.T) {
			const stepTimeout = 5 * time.Second
			c := newElasticCluster(t, map[string]int{"worker": 3}, estimator.RunConfig{
				Strategy: strategy, StepTimeout: stepTimeout, WaitTimeout: 20 * time.Second, LostAfter: time.Second,
				LogEverySteps: 10, StepDelay: 5 * time.Millisecond,
			})
			victim := cluster.TaskID{Job: "worker", Index: 2}
			const steps = 1000
			c.start(cluster.TaskID{Job: "worker", Index: 0}, steps)
			c.start(cluster.TaskID{Job: "worker", Index: 1}, steps)
			c.start(victim, steps)
			off := c.waitLog(0, "/job:worker/task:0: local_step 50 ")
			c.kill(victim)
			killed := time.Now()
			off = c.waitLog(off, "(2 ranks)")
			if d := time.Since(killed); d > stepTimeout {
				t.Errorf("the 2 others went on %v after the kill; want within the step deadline %v", d, stepTimeout)
			}
			c.start(victim, steps)
			c.waitLog(off, "(3 ranks)")
			// Declared lost before it came back, it "answers again"; back
			// before its lost deadline, its new incarnation tells.
			if back := c.logs.String()[off:]; !strings.Contains(back, "a lost replica answers again; letting it back in") &&
				!strings.Contains(back, "a replica was restarted; letting the new process in") {
				t.Errorf("rank 0 never said it let the restarted worker in:\n%s", back)
			}
			results := c.wait()
			for task, err := range results {
				if err != nil {
					t.Errorf("%s: %v", task, err)
				}
			}
			logs := c.logs.String()
			if !strings.Contains(logs, "the ring re-forms") || !strings.Contains(logs, "peer=/job:worker/task:2") {
				t.Errorf("the logs do not say that the ring re-formed without /job:worker/task:2")
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("%s", logs)
			}
		})
	}
}

// TestCollectiveCheckpoints: all-reduce and averaging save checkpoints
// (rank 0) as the other strategies do, and a run given the same
// directory resumes from the latest.
func TestCollectiveCheckpoints(t *testing.T) {
	for _, strategy := range []estimator.Strategy{estimator.AllReduce{}, estimator.Averaging{Every: 2}} {
		t.Run(strategy.String(), func(t *testing.T) {
			dir := t.TempDir()
			cfg := estimator.RunConfig{Strategy: strategy, StepTimeout: 5 * time.Second, WaitTimeout: 20 * time.Second,
				CheckpointDir: dir, SaveCheckpointsSteps: 30}
			c := newElasticCluster(t, map[string]int{"worker": 2}, cfg)
			for i := range 2 {
				c.start(cluster.TaskID{Job: "worker", Index: i}, 100)
			}
			for task, err := range c.wait() {
				if err != nil {
					t.Fatalf("%s: %v", task, err)
				}
			}
			for _, step := range []string{"30", "60", "90", "100"} {
				if _, err := os.Stat(filepath.Join(dir, "model.ckpt-"+step+".index")); err != nil {
					t.Errorf("no checkpoint at step %s: %v", step, err)
				}
			}
			c = newElasticCluster(t, map[string]int{"worker": 2}, cfg)
			for i := range 2 {
				c.start(cluster.TaskID{Job: "worker", Index: i}, 150)
			}
			for task, err := range c.wait() {
				if err != nil {
					t.Fatalf("resumed, %s: %v", task, err)
				}
			}
			if logs := c.logs.String(); !strings.Contains(logs, "resumed from a checkpoint") || !strings.Contains(logs, "first_step=101") {
				t.Errorf("the second run did not resume from step 100:\n%s", logs)
			}
			if _, err := os.Stat(filepath.Join(dir, "model.ckpt-150.index")); err != nil {
				t.Errorf("no final checkpoint of the resumed run: %v", err)
			}
		})
	}
}

// TestStalenessBoundIgnoresALostWorker: with bounded staleness, a worker
// that dies no longer holds the others back once it is lost, and one
// started again with its task id takes up at the others' step.
func TestStalenessBoundIgnoresALostWorker(t *testing.T) {
	const stepTimeout = 5 * time.Second
	c := newElasticCluster(t, map[string]int{"ps": 1, "worker": 3}, estimator.RunConfig{
		Strategy: estimator.Staleness{Bound: 2}, StepTimeout: stepTimeout, WaitTimeout: 20 * time.Second, LostAfter: time.Second,
		StepDelay: 2 * time.Millisecond,
	})
	victim := cluster.TaskID{Job: "worker", Index: 2}
	at := make(chan int64, 1000)
	h := &stepTimes{onStep: func(gs int64) {
		select {
		case at <- gs:
		default:
		}
	}}
	const steps = 900
	c.start(cluster.TaskID{Job: "ps"}, steps)
	c.start(cluster.TaskID{Job: "worker", Index: 0}, steps, h)
	c.start(cluster.TaskID{Job: "worker", Index: 1}, steps)
	c.start(victim, steps)
	var killedAt time.Time
	var killedStep int64
	phase := 0
	deadline := time.After(60 * time.Second)
	for phase < 3 {
		var gs int64
		select {
		case gs = <-at:
		case <-deadline:
			t.Fatalf("phase %d after 60 s: the chief's steps stopped before the victim was let back in\n%s", phase, c.logs.String())
		}
		if phase == 0 && gs >= 60 {
			c.kill(victim)
			killedAt, killedStep, phase = time.Now(), gs, 1
		}
		if phase == 1 && strings.Contains(c.logs.String(), "a replica is lost") {
			c.start(victim, steps)
			phase = 2
		}
		if phase == 2 && strings.Contains(c.logs.String(), "letting it back in") {
			phase = 3
		}
	}
	results := c.wait()
	for task, err := range results {
		if err != nil {
			t.Errorf("%s: %v", task, err)
		}
	}
	// The chief's steps went on past the bound without the victim.
	gs, when := h.firstAfter(killedStep + 3*2)
	if gs < 0 || when.Sub(killedAt) > stepTimeout {
		t.Errorf("after the kill at global step %d: step %d at +%v; want one within %v", killedStep, gs, when.Sub(killedAt), stepTimeout)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("%s", c.logs.String())
	}
}

// TestRingEndsWhenTheRanksDisagree: a rank that builds another model
// than the others' cannot take part in their all-reduce, whichever view
// the ring re-forms in: training ends with an error that says so, rather
// than the ring re-forming for ever. It ends on every rank: the rank that
// finds the mismatch tells the others (allreduce's failure notices), so
// that the leader does not wait for its step deadline at every view and
// then train on alone.
func TestRingEndsWhenTheRanksDisagree(t *testing.T) {
	c := newElasticCluster(t, map[string]int{"worker": 2}, estimator.RunConfig{
		Strategy: estimator.AllReduce{}, StepTimeout: 2 * time.Second, WaitTimeout: 20 * time.Second, LostAfter: time.Second,
		LogEverySteps: 10,
	})
	odd := cluster.TaskID{Job: "worker", Index: 1}
	c.models = map[cluster.TaskID]estimator.ModelFn{odd: func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		spec, err := linearModel(s, f, labels, mode)
		if err != nil || mode != estimator.Train {
			return spec, err
		}
		// One more weight than the others have.
		v := ops.NewVariable(s, "extra", tensor.Float32, []int{3}, ops.ZerosInit())
		spec.Loss = ops.Add(s, spec.Loss, ops.Mean(s, ops.Square(s, v.Value()), nil, false))
		return spec, nil
	}}
	for i := range 2 {
		c.start(cluster.TaskID{Job: "worker", Index: i}, 100)
	}
	ended := 0
	for task, err := range c.wait() {
		if err == nil {
			continue
		}
		if !strings.Contains(err.Error(), "views in a row because the ranks' data do not match") || !errors.Is(err, allreduce.ErrMismatch) {
			t.Errorf("%s: %v; want the ranks' disagreement named", task, err)
		}
		ended++
	}
	if ended != 2 {
		t.Errorf("%d of 2 ranks ended with an error; want both to learn that their models differ", ended)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("%s", c.logs.String())
	}
}

// TestRingTakesARestartedRankAtOnce: a rank killed and started again at
// once (before its heartbeats could count it lost) is seen as a new
// process (its incarnation): the step that waited for the old one is cut
// short and the ring re-forms with the new one, well within the step
// deadline.
func TestRingTakesARestartedRankAtOnce(t *testing.T) {
	const stepTimeout = 20 * time.Second
	// Lost after 10 s: this in-process kill stops the victim's server,
	// which may wait its 5 s grace for a call in flight (CI saw it); the
	// peers must not count the victim lost before it is back.
	c := newElasticCluster(t, map[string]int{"worker": 3}, estimator.RunConfig{
		Strategy: estimator.AllReduce{}, StepTimeout: stepTimeout, WaitTimeout: 30 * time.Second, LostAfter: 10 * time.Second,
		LogEverySteps: 10, StepDelay: 5 * time.Millisecond,
	})
	victim := cluster.TaskID{Job: "worker", Index: 2}
	const steps = 600
	c.start(cluster.TaskID{Job: "worker", Index: 0}, steps)
	c.start(cluster.TaskID{Job: "worker", Index: 1}, steps)
	c.start(victim, steps)
	off := c.waitLog(0, "/job:worker/task:0: local_step 50 ")
	c.killAndWait(victim)
	killed := time.Now()
	c.start(victim, steps)
	off = c.waitLog(off, "a replica was restarted; letting the new process in")
	c.waitLog(off, `msg="the ring re-forms"`)
	if d := time.Since(killed); d > stepTimeout/2 {
		t.Errorf("the ring re-formed %v after the restart; want well within the step deadline %v", d, stepTimeout)
	}
	for task, err := range c.wait() {
		if err != nil {
			t.Errorf("%s: %v", task, err)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("%s", c.logs.String())
	}
}

// TestRingGoesOnWithoutRankZero: the ring of 3 loses rank 0 (the chief,
// its leader). Within the lost deadline rank 1, the lowest rank alive,
// takes the lead and the ring goes on with 2, saving checkpoints; rank 0
// started again takes the lead back with the model of the ranks that went
// on (not its older checkpoint's), and training ends with rank 0 keeping
// the model. Without rank 0 to the end, rank 1 ends training, saves the
// final checkpoint and marks the end; rank 0 started afterwards takes the
// final checkpoint rather than training again.
func TestRingGoesOnWithoutRankZero(t *testing.T) {
	const stepTimeout = 5 * time.Second
	chief := cluster.TaskID{Job: "worker", Index: 0}
	for _, restart := range []string{"during", "after"} {
		t.Run("restart "+restart, func(t *testing.T) {
			dir := t.TempDir()
			c := newElasticCluster(t, map[string]int{"worker": 3}, estimator.RunConfig{
				Strategy: estimator.AllReduce{}, StepTimeout: stepTimeout, WaitTimeout: 20 * time.Second, LostAfter: time.Second,
				LogEverySteps: 10, StepDelay: 5 * time.Millisecond, CheckpointDir: dir, SaveCheckpointsSteps: 50,
			})
			const steps = 600
			for i := range 3 {
				c.start(cluster.TaskID{Job: "worker", Index: i}, steps)
			}
			off := c.waitLog(0, "/job:worker/task:0: local_step 100 ")
			c.killAndWait(chief)
			killed := time.Now()
			off = c.waitLog(off, "every lower rank is lost: this rank leads the ring")
			off = c.waitLog(off, "(2 ranks)")
			if d := time.Since(killed); d > stepTimeout {
				t.Errorf("the 2 others went on %v after rank 0 was killed; want within the step deadline %v", d, stepTimeout)
			}
			if restart == "during" {
				c.waitLog(off, "/job:worker/task:1: local_step 300 ")
				c.start(chief, steps)
				c.waitLog(off, "a lower rank leads the ring again; following it")
				c.waitLog(off, "took the model of the member furthest on")
				c.waitLog(off, "/job:worker/task:0: local_step ")
			} else {
				// Rank 1 ends training: the others return.
				for _, i := range []int{1, 2} {
					c.mu.Lock()
					ended := c.ended[cluster.TaskID{Job: "worker", Index: i}]
					c.mu.Unlock()
					<-ended
				}
				if _, err := os.Stat(filepath.Join(dir, "model.ckpt-600.index")); err != nil {
					t.Errorf("rank 1 saved no final checkpoint: %v", err)
				}
				c.start(chief, steps)
			}
			for task, err := range c.wait() {
				if err != nil {
					t.Errorf("%s: %v", task, err)
				}
			}
			logs := c.logs.String()
			if restart == "after" && !strings.Contains(logs, "another rank ended training while this one was away; taking the final checkpoint") &&
				!strings.Contains(logs, "training has ended already: taking the final checkpoint") && !strings.Contains(logs, "first_step=601") {
				t.Errorf("the late chief did not take the final checkpoint")
			}
			if _, err := os.Stat(filepath.Join(dir, "model.ckpt-600.index")); err != nil {
				t.Errorf("no checkpoint at the last step: %v", err)
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("%s", logs)
			}
		})
	}
}

// TestSyncChiefEndsAtTheTarget: a worker of a sync cluster aggregating
// all 3 is killed as the last round begins: the round is abandoned and
// every live replica released without an update, so the chief's last step
// did not move the global step although its estimate (the step read as
// it started, plus one) says it did. The chief trains on to the target:
// its result and its final checkpoint are at the target step, not one
// short (a chaos run, sync-backup seed 20, ended at 799 of 800).
func TestSyncChiefEndsAtTheTarget(t *testing.T) {
	dir := t.TempDir()
	c := newElasticCluster(t, map[string]int{"ps": 1, "worker": 3}, estimator.RunConfig{
		Strategy: estimator.Sync{ReplicasToAggregate: 3}, StepTimeout: 5 * time.Second, WaitTimeout: 20 * time.Second,
		LostAfter: time.Second, CheckpointDir: dir, StepDelay: 2 * time.Millisecond,
	})
	victim := cluster.TaskID{Job: "worker", Index: 2}
	const steps = 60
	var once sync.Once
	h := &stepTimes{onStep: func(gs int64) {
		if gs >= steps-1 {
			once.Do(func() { c.kill(victim) })
		}
	}}
	chief := cluster.TaskID{Job: "worker"}
	c.start(cluster.TaskID{Job: "ps"}, steps)
	c.start(chief, steps, h)
	c.start(cluster.TaskID{Job: "worker", Index: 1}, steps)
	c.start(victim, steps)
	results := c.wait()
	if err := results[chief]; err != nil {
		t.Fatalf("the chief: %v\n%s", err, c.logs.String())
	}
	c.mu.Lock()
	res := c.res[chief]
	c.mu.Unlock()
	if res.GlobalStep != steps {
		t.Errorf("the chief's result is at global step %d; want %d\n%s", res.GlobalStep, steps, c.logs.String())
	}
	if testing.Verbose() {
		t.Logf("%s", c.logs.String())
	}
}
