package train_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
	"github.com/distflow/distflow/worker/workertest"
)

// monitoredQuadratic builds min (w - 3)^2 with SGD and a global step.
type monitoredQuadratic struct {
	s       *graph.Scope
	w       *ops.Variable
	loss    graph.Output
	step    *graph.Node
	init    *graph.Node
	ready   graph.Output
	numVars int
}

func newMonitoredQuadratic(t *testing.T) *monitoredQuadratic {
	t.Helper()
	s := graph.NewScope()
	return buildQuadratic(t, s, s)
}

// buildQuadratic builds the model in s, its variables (w and the global
// step) in vars.
func buildQuadratic(t *testing.T, s, vars *graph.Scope) *monitoredQuadratic {
	t.Helper()
	w := ops.NewVariable(vars, "w", tensor.Float32, nil, ops.ZerosInit())
	loss := ops.Square(s, ops.Sub(s, w.Value(), ops.Scalar(s, tensor.Float32, 3)))
	step, err := train.Minimize(s, train.NewGradientDescent(0.1), loss, train.CreateGlobalStep(vars))
	if err != nil {
		t.Fatal(err)
	}
	q := &monitoredQuadratic{s: s, w: w, loss: loss, step: step, init: ops.GlobalVariablesInitializer(s)}
	q.ready, q.numVars = train.ReadyOp(s, ops.GlobalVariables(s.Graph()))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return q
}

func (q *monitoredQuadratic) config(sess *session.Session, chief bool) train.MonitoredConfig {
	return train.MonitoredConfig{Session: sess, IsChief: chief, InitOp: q.init, Ready: q.ready, Variables: q.numVars}
}

func TestMonitoredSessionStopsAtStepAndCheckpoints(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := newMonitoredQuadratic(t)
	saver, err := checkpoint.NewSaver(q.s, nil, checkpoint.SaverConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	run := func(last int64) (*train.MonitoredSession, int) {
		sess, err := session.New(q.s.Graph())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sess.Close() })
		cfg := q.config(sess, true)
		cfg.Saver = saver
		cfg.Hooks = []train.Hook{train.StopAtStepHook{Last: last}, train.NanGuardHook{Loss: q.loss},
			&train.CheckpointHook{Saver: saver, Schedule: &checkpoint.Schedule{Steps: 10}}}
		ms, err := train.NewMonitoredSession(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		steps := 0
		for !ms.ShouldStop() {
			if _, err := ms.Run(ctx, nil, nil, []*graph.Node{q.step}); err != nil {
				t.Fatal(err)
			}
			steps++
		}
		if err := ms.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return ms, steps
	}
	ms, steps := run(25)
	if steps != 25 || ms.RestoredStep != -1 {
		t.Fatalf("first run: %d steps, restored %d; want 25 steps from scratch", steps, ms.RestoredStep)
	}
	// A new process resumes from the final checkpoint.
	ms, steps = run(40)
	if ms.RestoredStep != 25 || steps != 15 {
		t.Errorf("second run: restored at %d and ran %d steps; want 25 and 15", ms.RestoredStep, steps)
	}
}

func TestMonitoredSessionNanGuard(t *testing.T) {
	ctx := context.Background()
	s := graph.NewScope()
	w := ops.NewVariable(s, "w", tensor.Float32, nil, ops.ConstantInit(1))
	loss := ops.Log(s, ops.Sub(s, w.Value(), ops.Scalar(s, tensor.Float32, 2))) // log of a negative number
	init := ops.GlobalVariablesInitializer(s)
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ms, err := train.NewMonitoredSession(ctx, train.MonitoredConfig{Session: sess, IsChief: true, InitOp: init,
		Hooks: []train.Hook{train.NanGuardHook{Loss: loss}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Run(ctx, nil, nil, nil); !errors.Is(err, train.ErrNaNLoss) {
		t.Errorf("Run = %v, want ErrNaNLoss", err)
	}
}

// TestMonitoredSessionWaitsForTheChief: a replica opened before the chief
// waits until the chief has initialised the shared variables.
func TestMonitoredSessionWaitsForTheChief(t *testing.T) {
	ctx := context.Background()
	q := newMonitoredQuadratic(t)
	shared := kernel.NewResources() // the "ps": both sessions see its variables
	worker, err := session.New(q.s.Graph(), session.WithResources(shared))
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	opened := make(chan error, 1)
	go func() {
		cfg := q.config(worker, false)
		cfg.ReadyTimeout = time.Minute
		_, err := train.NewMonitoredSession(ctx, cfg)
		opened <- err
	}()
	chief, err := session.New(q.s.Graph(), session.WithResources(shared))
	if err != nil {
		t.Fatal(err)
	}
	defer chief.Close()
	if _, err := train.NewMonitoredSession(ctx, q.config(chief, true)); err != nil {
		t.Fatal(err)
	}
	if err := <-opened; err != nil {
		t.Errorf("the waiting replica: %v", err)
	}
}

func TestMonitoredSessionGivesUpWithoutAChief(t *testing.T) {
	q := newMonitoredQuadratic(t)
	sess, err := session.New(q.s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	cfg := q.config(sess, false)
	cfg.ReadyTimeout = 200 * time.Millisecond
	if _, err := train.NewMonitoredSession(context.Background(), cfg); !errors.Is(err, train.ErrNotReady) {
		t.Errorf("NewMonitoredSession = %v, want ErrNotReady", err)
	}
}

const (
	psTask = "/job:ps/task:0"
	wk0    = "/job:worker/task:0"
	wk1    = "/job:worker/task:1"
)

// replicatedQuadratic is the quadratic on 1 ps + 2 workers in memory: its
// variables on the ps, a master per worker, and a way to wait for the ps.
type replicatedQuadratic struct {
	*monitoredQuadratic
	net   *workertest.Network
	saver *checkpoint.Saver
	dir   string
}

func newReplicatedQuadratic(t *testing.T) *replicatedQuadratic {
	t.Helper()
	s := graph.NewScope()
	q := buildQuadratic(t, s, s.WithDevice(psTask))
	dir := t.TempDir()
	saver, err := checkpoint.NewSaver(s, nil, checkpoint.SaverConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return &replicatedQuadratic{monitoredQuadratic: q, net: workertest.NewCluster(psTask, wk0, wk1), saver: saver, dir: dir}
}

// session opens a session on the master of task.
func (r *replicatedQuadratic) session(t *testing.T, task string) *session.Session {
	t.Helper()
	m := master.New(master.Config{Task: task, Devices: []string{psTask + "/cpu:0", wk0 + "/cpu:0", wk1 + "/cpu:0"},
		Workers: r.net.From(task), Logger: slog.New(slog.DiscardHandler)})
	sess, err := session.New(r.s.Graph(), session.WithMaster(m, &pb.SessionConfig{DefaultDevice: task, DeviceFilters: []string{"/job:ps", task}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// waitForPS polls the ps until it answers or ctx ends.
func (r *replicatedQuadratic) waitForPS(ctx context.Context) error {
	w, err := r.net.Worker(psTask)
	if err != nil {
		return err
	}
	for {
		_, err := w.GetStatus(ctx, &pb.GetStatusRequest{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is not reachable: %w (%w)", psTask, err, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestMonitoredSessionRecoversFromARestartedPS: the ps is restarted (its
// variables are gone) after a checkpoint; the chief's next step restores
// the checkpoint, the other replica's waits for it, and both go on from the
// checkpoint's global step.
func TestMonitoredSessionRecoversFromARestartedPS(t *testing.T) {
	ctx := context.Background()
	r := newReplicatedQuadratic(t)
	open := func(task string, chief bool) *train.MonitoredSession {
		cfg := r.config(r.session(t, task), chief)
		cfg.Saver, cfg.WaitForCluster, cfg.ReadyTimeout = r.saver, r.waitForPS, 30*time.Second
		if chief {
			cfg.Hooks = []train.Hook{&train.CheckpointHook{Saver: r.saver, Schedule: &checkpoint.Schedule{Steps: 10}}}
		}
		ms, err := train.NewMonitoredSession(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	chief := open(wk0, true)
	other := open(wk1, false)
	for range 10 {
		for _, ms := range []*train.MonitoredSession{chief, other} {
			if _, err := ms.Run(ctx, nil, nil, []*graph.Node{r.step}); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, saved, err := checkpoint.Latest(r.dir)
	if err != nil || saved < 10 {
		t.Fatalf("the latest checkpoint is at global step %d (%v), want one at 10 or later", saved, err)
	}
	r.net.Restart(psTask)

	// The other replica finds out first and waits for the chief.
	otherDone := make(chan error, 1)
	go func() {
		_, err := other.Run(ctx, nil, nil, []*graph.Node{r.step})
		otherDone <- err
	}()
	out, err := chief.Run(ctx, nil, []graph.Output{r.w.Value()}, []*graph.Node{r.step})
	if err != nil {
		t.Fatalf("the chief's step after the restart: %v", err)
	}
	if err := <-otherDone; err != nil {
		t.Fatalf("the other replica's step after the restart: %v", err)
	}
	if chief.RestoredStep != saved || chief.Recoveries() != 1 || other.Recoveries() != 1 {
		t.Errorf("restored step %d, recoveries %d and %d; want %d, 1 and 1", chief.RestoredStep, chief.Recoveries(), other.Recoveries(), saved)
	}
	// The chief's step and perhaps the other replica's after the checkpoint
	// (GlobalStep is the chief's estimate, read as its step began: under
	// the race detector the other replica's may not have landed yet, nor
	// the chief's own, whose update the estimate then lacks).
	if gs := chief.GlobalStep(); gs < saved || gs > saved+2 {
		t.Errorf("global step %d after the recovery, want %d to %d: training goes on from the checkpoint", gs, saved, saved+2)
	}
	if w := out[0].Float64At(0); w <= 0 || w >= 3 {
		t.Errorf("w = %v after the recovery: not restored", w)
	}
}

// TestMonitoredSessionDoRecovers: work of a step outside Run (here a read
// of the ps) that loses the ps recovers as a step does and runs again; an
// error that is not a lost task is returned at once.
func TestMonitoredSessionDoRecovers(t *testing.T) {
	ctx := context.Background()
	r := newReplicatedQuadratic(t)
	sess := r.session(t, wk0)
	cfg := r.config(sess, true)
	cfg.Saver, cfg.WaitForCluster, cfg.ReadyTimeout = r.saver, r.waitForPS, 30*time.Second
	ms, err := train.NewMonitoredSession(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Run(ctx, nil, nil, []*graph.Node{r.step}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.saver.Save(ctx, sess, 1); err != nil {
		t.Fatal(err)
	}
	r.net.Restart(psTask)
	calls := 0
	var w float64
	err = ms.Do(ctx, func(ctx context.Context) error {
		calls++
		out, err := sess.Run(ctx, nil, []graph.Output{r.w.Value()}, nil)
		if err == nil {
			w = out[0].Float64At(0)
		}
		return err
	})
	if err != nil || calls != 2 || ms.Recoveries() != 1 || ms.RestoredStep != 1 {
		t.Fatalf("Do after a restart of the ps: %v after %d calls, %d recoveries, restored step %d; want nil, 2, 1, 1",
			err, calls, ms.Recoveries(), ms.RestoredStep)
	}
	if w <= 0 || w >= 3 {
		t.Errorf("w = %v after the recovery: not restored", w)
	}
	other := errors.New("not a lost task")
	calls = 0
	if err := ms.Do(ctx, func(context.Context) error { calls++; return other }); err != other || calls != 1 {
		t.Errorf("Do = %v after %d calls, want %v after 1", err, calls, other)
	}
}

// TestMonitoredSessionLostTaskFailures: without WaitForCluster, when the
// lost task does not come back in time, or after MaxRecoveries, the step
// fails naming the task.
func TestMonitoredSessionLostTaskFailures(t *testing.T) {
	tests := []struct {
		name string
		wait bool
		max  int
		// losses is how often the ps is restarted, each before a step; the
		// last step must fail. Zero: the ps is cut off for good.
		losses     int
		want       string
		recoveries int // attempted
	}{
		{name: "no WaitForCluster", losses: 1, want: "no such graph"},
		{name: "the ps does not come back", wait: true, want: "did not come back within", recoveries: 1},
		{name: "too many losses", wait: true, max: 2, losses: 3, want: "giving up after 2 recoveries", recoveries: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newReplicatedQuadratic(t)
			cfg := r.config(r.session(t, wk0), true)
			cfg.Saver, cfg.ReadyTimeout, cfg.MaxRecoveries = r.saver, 200*time.Millisecond, tc.max
			if tc.wait {
				cfg.WaitForCluster = r.waitForPS
			}
			ms, err := train.NewMonitoredSession(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			step := func() error {
				_, err := ms.Run(ctx, nil, nil, []*graph.Node{r.step})
				return err
			}
			if err := step(); err != nil {
				t.Fatal(err)
			}
			if tc.losses == 0 {
				r.net.Cut(psTask)
			}
			for i := 1; i < tc.losses; i++ {
				r.net.Restart(psTask)
				if err := step(); err != nil {
					t.Fatalf("the step after loss %d: %v", i, err)
				}
			}
			if tc.losses > 0 {
				r.net.Restart(psTask)
			}
			if err := step(); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), psTask) {
				t.Errorf("Run = %v, want an error naming %s with %q", err, psTask, tc.want)
			}
			if got := ms.Recoveries(); got != tc.recoveries {
				t.Errorf("%d recoveries, want %d", got, tc.recoveries)
			}
		})
	}
}
