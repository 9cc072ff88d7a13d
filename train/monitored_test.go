package train_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
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
	w := ops.NewVariable(s, "w", tensor.Float32, nil, ops.ZerosInit())
	loss := ops.Square(s, ops.Sub(s, w.Value(), ops.Scalar(s, tensor.Float32, 3)))
	step, err := train.Minimize(s, train.NewGradientDescent(0.1), loss, train.CreateGlobalStep(s))
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
