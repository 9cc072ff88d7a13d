// Package strategytest is the conformance suite of estimator.Strategy:
// every strategy, built in or a user's, runs Run, which trains a small
// linear model on a cluster of goroutines over loopback and checks what
// the one training loop promises under any strategy: the user's hooks see
// begin, the session, every step and the end, in order; the model
// directory gets training events; training stops exactly at the target
// step, or where a hook asks; the final checkpoint is saved, and a run on
// the finished directory trains nothing; a worker lost as a crash loses
// it (its connections cut mid-step), for good or restarted on its
// address, costs what the strategy's Recovery says it survives: the
// others reach the target without waiting out a step deadline, and a
// restarted worker trains again.
package strategytest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/checkpoint/bundle"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/testlog"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/summary"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// Run runs the suite for strategy s on a cluster of jobs ("ps" and
// "worker" counts; the strategy's Validate must accept it).
func Run(t *testing.T, s estimator.Strategy, jobs map[string]int) {
	t.Run("hooks and events", func(t *testing.T) { hooksAndEvents(t, s, jobs) })
	t.Run("stop at the target and stay stopped", func(t *testing.T) { stopAndStay(t, s, jobs) })
	t.Run("a hook stops training", func(t *testing.T) { hookStops(t, s, jobs) })
	t.Run("a worker lost for good", func(t *testing.T) { lostWorker(t, s, jobs, false) })
	t.Run("a worker lost and restarted", func(t *testing.T) { lostWorker(t, s, jobs, true) })
}

// Cluster is a cluster of goroutines training one model, each task with
// its own estimator and server on a loopback listener.
type Cluster struct {
	// Model and Input are the model and the training input (nil: the
	// suite's linear model y = 2x + 10 and its input).
	Model estimator.ModelFn
	Input estimator.InputFn
	// Jobs counts the tasks of jobs "ps" and "worker".
	Jobs     map[string]int
	Strategy estimator.Strategy
	// Steps is the global step to train to.
	Steps int64
	// Task, when set, adjusts a task's configuration and returns the hooks
	// it trains with.
	Task func(task cluster.TaskID, cfg *estimator.RunConfig) []estimator.Hook
	// Lose, when set, loses a task while the cluster trains.
	Lose *Loss
}

// Loss is a task lost while the cluster trains, as a crash loses it:
// the connections to it are cut and it stops mid-step, with no goodbye.
type Loss struct {
	Task cluster.TaskID
	// AfterChiefStep is the chief's local step after which the task is
	// lost.
	AfterChiefStep int64
	// Restart starts the task again on its address, with a new estimator,
	// as a supervisor restarts a process with the same flags.
	Restart bool
}

// Run trains c and returns the chief's estimator and every task's result
// (of a restarted task, its last run's); it fails t if a task fails,
// other than a lost one as it is lost.
func (c Cluster) Run(t *testing.T) (*estimator.Estimator, []*estimator.Result) {
	t.Helper()
	if c.Model == nil {
		c.Model = LinearModel
	}
	if c.Input == nil {
		c.Input = LinearInput(1000, true)
	}
	addrs := map[string][]string{}
	lis := map[cluster.TaskID]net.Listener{}
	for _, job := range []string{"ps", "worker"} {
		for i := range c.Jobs[job] {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addrs[job] = append(addrs[job], l.Addr().String())
			lis[cluster.TaskID{Job: job, Index: i}] = l
		}
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := &run{c: c, t: t, spec: spec, ctx: ctx, cancel: cancel, lost: make(chan struct{})}
	for task, l := range lis {
		r.start(task, l, false)
	}
	r.wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if r.chief == nil {
		t.Fatal("no task ended as the chief")
	}
	if c.Lose != nil && !r.isLost() {
		t.Fatalf("the chief trained no local step %d: %s was not lost", c.Lose.AfterChiefStep, c.Lose.Task)
	}
	return r.chief, r.results
}

// stepTimeout is the step deadline, and the wait timeout, of the tasks.
const stepTimeout = 20 * time.Second

// run is one Cluster.Run in progress.
type run struct {
	c      Cluster
	t      *testing.T
	spec   *cluster.Spec
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// lost is closed once the lost task is to be lost.
	lost     chan struct{}
	loseOnce sync.Once

	mu      sync.Mutex
	chief   *estimator.Estimator
	results []*estimator.Result
}

// isLost reports whether the lost task has been lost.
func (r *run) isLost() bool {
	select {
	case <-r.lost:
		return true
	default:
		return false
	}
}

// start trains task on l in a goroutine (restarted: again, after it was
// lost).
func (r *run) start(task cluster.TaskID, l net.Listener, restarted bool) {
	c, t := r.c, r.t
	cl := &cutListener{Listener: l}
	tctx, tcancel := context.WithCancel(r.ctx)
	cfg := estimator.RunConfig{
		Cluster: r.spec, Task: task, Strategy: c.Strategy, Listener: cl, Seed: 1,
		Logger: slog.New(slog.DiscardHandler), Progress: io.Discard, WaitTimeout: stepTimeout, StepTimeout: stepTimeout,
	}
	var hooks []estimator.Hook
	if c.Task != nil {
		hooks = c.Task(task, &cfg)
	}
	losing := c.Lose != nil && c.Lose.Task == task && !restarted
	if c.Lose != nil && task == r.chiefTask() {
		hooks = append(hooks, &loseHook{at: c.Lose.AfterChiefStep, lose: func() { r.loseOnce.Do(func() { close(r.lost) }) }})
	}
	est, err := estimator.New(c.Model, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.wg.Go(func() {
		if losing {
			go func() {
				select {
				case <-r.lost:
					cl.cut()
					tcancel()
				case <-tctx.Done():
				}
			}()
		}
		res, err := est.Train(tctx, c.Input, estimator.Stop{MaxSteps: c.Steps}, hooks...)
		tcancel()
		if losing && r.isLost() {
			if c.Lose.Restart {
				l, lerr := net.Listen("tcp", cl.Addr().String())
				if lerr != nil {
					t.Errorf("restarting %s: %v", task, lerr)
					r.cancel()
					return
				}
				r.start(task, l, true)
			}
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			t.Errorf("%s: %v", task, err)
			r.cancel()
			return
		}
		if res.Chief {
			r.chief = est
		}
		r.results = append(r.results, res)
	})
}

// chiefTask is the task that trains as the chief: worker 0.
func (r *run) chiefTask() cluster.TaskID { return cluster.TaskID{Job: "worker", Index: 0} }

// loseHook calls lose after the chief's local step at.
type loseHook struct {
	estimator.BaseHook
	at   int64
	lose func()
}

func (h *loseHook) AfterRun(_ context.Context, step *train.StepContext, _ []*tensor.Tensor) error {
	if step.LocalStep == h.at {
		h.lose()
	}
	return nil
}

// cutListener is a task's listener whose connections can be cut at once,
// as a crashed process's are.
type cutListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
	isCut bool
}

func (l *cutListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isCut {
		conn.Close()
		return nil, net.ErrClosed
	}
	l.conns = append(l.conns, conn)
	return conn, nil
}

// cut closes the listener and every connection it accepted.
func (l *cutListener) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.isCut = true
	l.Listener.Close()
	for _, c := range l.conns {
		c.Close()
	}
}

// LinearModel is y = w x + b, trained by gradient descent on the squared
// error, with the mean absolute error as its metric and w logged.
func LinearModel(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
	w := ops.NewVariable(s, "w", tensor.Float32, []int{1, 1}, ops.ZerosInit())
	b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
	pred := ops.BiasAdd(s, ops.MatMul(s, f.Get(s, "x"), w.Value(), false, false), b.Value())
	spec := &estimator.Spec{Predictions: map[string]graph.Output{"y": pred}}
	if mode == estimator.Predict {
		return spec, nil
	}
	spec.Loss = ops.Mean(s, ops.SquaredDifference(s, pred, labels), nil, false)
	spec.Optimizer = train.NewGradientDescent(0.05)
	spec.EvalMetrics = map[string]estimator.Metric{"mae": estimator.MeanMetric(s, ops.Abs(s, ops.Sub(s, pred, labels)))}
	spec.Log = map[string]graph.Output{"w": w.Value()}
	return spec, nil
}

// LinearInput feeds batches of 10 of n examples of y = 2x + 10 (with a
// little noise): in training each replica its shard, reshuffled, for ever
// (repeat); otherwise every example once.
func LinearInput(n int, repeat bool) estimator.InputFn {
	return func(ic estimator.InputContext) (*estimator.Input, error) {
		x, y := data.Linear(n, ic.Seed, 2, 10, 0.01)
		ds, err := data.FromTensors(x, y)
		if err != nil {
			return nil, err
		}
		ds = ds.Shard(ic.NumReplicas, ic.ReplicaIndex)
		if repeat {
			ds = ds.Shuffle(n, ic.Seed).Repeat(-1)
		}
		return &estimator.Input{Dataset: ds.Batch(10, repeat), Features: []string{"x"}}, nil
	}
}

// orderHook records the calls of a replica's hooks in order, fetches a
// tensor it adds in Begin, and asks to stop at local step stopAt (0:
// never).
type orderHook struct {
	// progress is the replica's progress lines.
	progress testlog.Buffer

	mu      sync.Mutex
	calls   []string
	stopAt  int64
	extra   graph.Output
	fetched float64
}

func (h *orderHook) record(call string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call)
}

func (h *orderHook) Begin(s *graph.Scope) error {
	h.record("begin")
	h.extra = ops.Scalar(s, tensor.Float32, 42)
	return nil
}

func (h *orderHook) AfterCreateSession(context.Context, *session.Session) error {
	h.record("created")
	return nil
}

func (h *orderHook) BeforeRun(context.Context, *train.StepContext) ([]graph.Output, error) {
	h.record("before")
	return []graph.Output{h.extra}, nil
}

func (h *orderHook) AfterRun(_ context.Context, step *train.StepContext, extra []*tensor.Tensor) error {
	h.record("after")
	h.fetched = extra[0].Float64At(0)
	if step.LocalStep == h.stopAt {
		step.RequestStop()
	}
	return nil
}

func (h *orderHook) End(context.Context, *train.MonitoredSession) error {
	h.record("end")
	return nil
}

// check reports how the calls break the order begin, created, (before,
// after) per step, end, for a replica that took steps steps.
func (h *orderHook) check(steps int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	want := []string{"begin", "created"}
	for range steps {
		want = append(want, "before", "after")
	}
	want = append(want, "end")
	calls := h.calls
	if n := len(calls); n >= 2 && calls[n-2] == "before" && calls[n-1] == "end" {
		// A step cut short by the end of training (a ring's member whose
		// leader's hooks ended it) gets no AfterRun, as a failed step.
		calls = append(calls[:n-2:n-2], "end")
	}
	if !slices.Equal(calls, want) {
		return fmt.Errorf("hook calls %s; want begin, created, before and after %d times, end", summarize(h.calls), steps)
	}
	if steps > 0 && h.fetched != 42 {
		return fmt.Errorf("the hook's extra fetch gave %v, want 42", h.fetched)
	}
	return nil
}

// summarize shortens a list of calls, runs of one call counted.
func summarize(calls []string) string {
	var b strings.Builder
	for i := 0; i < len(calls); {
		j := i
		for j < len(calls) && calls[j] == calls[i] {
			j++
		}
		if i > 0 {
			b.WriteString(" ")
		}
		if j-i > 1 {
			fmt.Fprintf(&b, "%sx%d", calls[i], j-i)
		} else {
			b.WriteString(calls[i])
		}
		i = j
	}
	return b.String()
}

// withHooks is a Cluster whose tasks share the model directory dir and
// each get an orderHook, returned by task.
func withHooks(s estimator.Strategy, jobs map[string]int, steps int64, dir string, stopAt int64) (Cluster, map[string]*orderHook) {
	var mu sync.Mutex
	hooks := map[string]*orderHook{}
	return Cluster{Jobs: jobs, Strategy: s, Steps: steps, Task: func(task cluster.TaskID, cfg *estimator.RunConfig) []estimator.Hook {
		mu.Lock()
		defer mu.Unlock()
		h := &orderHook{}
		cfg.ModelDir, cfg.LogEverySteps, cfg.Progress = dir, 10, &h.progress
		if task.Index == 0 {
			h.stopAt = stopAt // the chief's, in every strategy
		}
		hooks[task.String()] = h
		return []estimator.Hook{h}
	}}, hooks
}

func hooksAndEvents(t *testing.T, s estimator.Strategy, jobs map[string]int) {
	dir := t.TempDir()
	c, hooks := withHooks(s, jobs, 60, dir, 0)
	_, results := c.Run(t)
	trained := 0
	for _, res := range results {
		if res.Served {
			continue
		}
		if err := hooks[res.Task].check(res.LocalSteps); err != nil {
			t.Errorf("%s: %v", res.Task, err)
		}
		if res.LocalSteps < 10 {
			continue // no progress window ended: no events
		}
		trained++
		checkProgress(t, res, hooks[res.Task].progress.String(), 60)
		task, err := cluster.ParseTaskID(res.Task)
		if err != nil {
			t.Fatal(err)
		}
		checkEvents(t, dir, fmt.Sprintf("%s-%d", task.Job, task.Index))
	}
	if trained == 0 {
		t.Error("no replica trained a progress window")
	}
}

// progressLine is a progress line, in one format whatever the strategy;
// a ring's adds its size after the throughput.
var progressLine = regexp.MustCompile(`^\S+: local_step (\d+)  global_step (\d+)/(\d+)  loss [-+.\deE]+  avg_step \S+  \d+ examples/s.*  w [-+.\deE]+$`)

// checkProgress checks the progress lines of a replica's training of
// target steps, one every 10 local steps (and at the last), that res
// describes.
func checkProgress(t *testing.T, res *estimator.Result, out string, target int) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < res.LocalSteps/10 {
		t.Errorf("%s: %d progress lines for %d local steps, want one every 10:\n%s", res.Task, len(lines), res.LocalSteps, out)
	}
	for _, l := range lines {
		m := progressLine.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("%s: progress line %q is not local_step N  global_step G/%d  loss L  avg_step D  R examples/s ...  w V", res.Task, l, target)
			continue
		}
		if m[3] != strconv.Itoa(target) {
			t.Errorf("%s: progress line %q: target %s, want %d", res.Task, l, m[3], target)
		}
	}
}

// checkEvents checks that dir holds the event file of one task (named
// with suffix) with the loss, the throughput, the logged w and a
// histogram of the weights.
func checkEvents(t *testing.T, dir, suffix string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"+suffix))
	if len(files) != 1 {
		t.Errorf("%s: event files of %s: %v; want one", dir, suffix, files)
		return
	}
	evs, err := summary.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]int{}
	for _, e := range evs {
		for _, v := range e.GetSummary().GetValue() {
			tags[v.GetTag()]++
		}
	}
	for _, want := range []string{"loss", "examples_per_second", "w", "w_1"} {
		if tags[want] == 0 && (want != "w_1" || tags["w"] < 2) {
			t.Errorf("%s: no %q among the events' tags %v", files[0], want, tags)
		}
	}
}

func stopAndStay(t *testing.T, s estimator.Strategy, jobs map[string]int) {
	dir := t.TempDir()
	const steps = 80
	c, _ := withHooks(s, jobs, steps, dir, 0)
	est, results := c.Run(t)
	// Replicas that apply their own updates unsynchronised (asynchronous
	// training) each stop on a global step read with their last step,
	// which may lag the others' updates: each may take one step past the
	// target, as in TensorFlow.
	over := int64(0)
	if u := s.Update(jobs["worker"]); u.PullsFromPS && u.Averaged == 1 && !u.ChiefOnly {
		over = int64(jobs["worker"])
	}
	var final int64
	for _, res := range results {
		if res.Chief {
			final = res.GlobalStep
		}
	}
	if final < steps || final > steps+over {
		t.Errorf("the chief ended at global step %d; want the target, %d (+%d)", final, steps, over)
	}
	if _, step, err := bundle.Latest(dir); err != nil || step != final {
		t.Fatalf("the latest checkpoint in %s: step %d (%v); want the final step, %d", dir, step, err, final)
	}
	w, err := est.VariableValue("w")
	if err != nil {
		t.Fatal(err)
	}
	// Again on the finished directory: nothing trains, and the model is
	// the one trained.
	c, hooks := withHooks(s, jobs, steps, dir, 0)
	est, results = c.Run(t)
	for task, h := range hooks {
		if slices.Contains(h.calls, "before") {
			t.Errorf("%s: hook calls %s on a finished directory; want no step", task, summarize(h.calls))
		}
	}
	for _, res := range results {
		if res.Chief && res.GlobalStep != final {
			t.Errorf("the chief's result on the finished directory: global step %d; want the first run's, %d", res.GlobalStep, final)
		}
	}
	again, err := est.VariableValue("w")
	if err != nil {
		t.Fatal(err)
	}
	if again.Float64At(0) != w.Float64At(0) {
		t.Errorf("w is %v after a run on the finished directory; it was %v", again, w)
	}
}

func hookStops(t *testing.T, s estimator.Strategy, jobs map[string]int) {
	const steps, stopAt = 1000, 20
	c, _ := withHooks(s, jobs, steps, t.TempDir(), stopAt)
	_, results := c.Run(t)
	for _, res := range results {
		if res.Served {
			continue
		}
		if res.GlobalStep >= steps {
			t.Errorf("%s: trained to global step %d; the chief's hook asked to stop at its local step %d", res.Task, res.GlobalStep, stopAt)
		}
	}
}

// lostWorker loses the last worker (not the chief) mid-training, for good
// or restarted on its address, where the strategy's Recovery says that it
// survives that: the chief still ends at the target, with the final
// checkpoint, and without waiting out a step deadline.
func lostWorker(t *testing.T, s estimator.Strategy, jobs map[string]int, restart bool) {
	rec := s.Recovery()
	switch {
	case jobs["worker"] < 2:
		t.Skip("no worker other than the chief")
	case restart && !rec.RestartWorkers:
		t.Skipf("%s does not restart a lost worker (Recovery)", s)
	case !restart && !rec.ToleratesWorkerLoss:
		t.Skipf("%s does not tolerate a worker lost for good (Recovery)", s)
	}
	const steps = 300
	dir := t.TempDir()
	c, _ := withHooks(s, jobs, steps, dir, 0)
	lost := cluster.TaskID{Job: "worker", Index: jobs["worker"] - 1}
	c.Lose = &Loss{Task: lost, AfterChiefStep: 30, Restart: restart}
	// Steps of a few milliseconds leave the restarted worker time to
	// rejoin before the others reach the target.
	withHook := c.Task
	c.Task = func(task cluster.TaskID, cfg *estimator.RunConfig) []estimator.Hook {
		cfg.StepDelay = 5 * time.Millisecond
		return withHook(task, cfg)
	}
	start := time.Now()
	_, results := c.Run(t)
	took := time.Since(start)
	var final int64 = -1
	for _, res := range results {
		t.Logf("%s: %d local steps to global step %d", res.Task, res.LocalSteps, res.GlobalStep)
		if res.Task == lost.String() && !res.Served && res.LocalSteps == 0 {
			t.Errorf("%s, restarted, trained no step: it was not let back in", lost)
		}
		if res.Chief {
			final = res.GlobalStep
		}
	}
	over := int64(0)
	if u := s.Update(jobs["worker"]); u.PullsFromPS && u.Averaged == 1 && !u.ChiefOnly {
		over = int64(jobs["worker"])
	}
	if final < steps || final > steps+over {
		t.Errorf("the chief ended at global step %d; want the target, %d (+%d)", final, steps, over)
	}
	if _, step, err := bundle.Latest(dir); err != nil || step != final {
		t.Errorf("the latest checkpoint in %s: step %d (%v); want the final step, %d", dir, step, err, final)
	}
	// A run that waited out a step deadline for the lost worker took
	// longer than one.
	if took >= stepTimeout {
		t.Errorf("training took %s with %s lost: waiting out a deadline?", took.Round(time.Millisecond), c.Lose.Task)
	}
}
