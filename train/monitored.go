package train

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// ErrNotReady is wrapped by the error of a non-chief replica whose model was
// not initialised by the chief within MonitoredConfig.ReadyTimeout.
var ErrNotReady = errors.New("the model is not ready")

// TaskLost reports whether err says that a task of the cluster was lost: it
// could not be reached (worker.ErrUnavailable), or it no longer knows the
// graphs registered on it because it was restarted (worker.ErrNoGraph).
// These are the errors a MonitoredSession with WaitForCluster recovers
// from; the rpc package keeps both kinds across the wire.
func TaskLost(err error) bool {
	return errors.Is(err, worker.ErrUnavailable) || errors.Is(err, worker.ErrNoGraph)
}

// defaultMaxRecoveries bounds a session's recoveries from lost tasks.
const defaultMaxRecoveries = 5

// Hook observes and steers a MonitoredSession, as TensorFlow's session run
// hooks do. Embed NoHook to implement only what is needed.
type Hook interface {
	// BeforeRun returns extra tensors to fetch with the coming step; an
	// error ends training before the step runs.
	BeforeRun(ctx context.Context, step *StepContext) ([]graph.Output, error)
	// AfterRun sees the step and the values of its extra fetches; it may
	// call step.RequestStop, or return an error to end training.
	AfterRun(ctx context.Context, step *StepContext, extra []*tensor.Tensor) error
	// End is called once by Close, after the last step.
	End(ctx context.Context, ms *MonitoredSession) error
}

// NoHook implements Hook with methods that do nothing.
type NoHook struct{}

// BeforeRun fetches nothing.
func (NoHook) BeforeRun(context.Context, *StepContext) ([]graph.Output, error) { return nil, nil }

// AfterRun does nothing.
func (NoHook) AfterRun(context.Context, *StepContext, []*tensor.Tensor) error { return nil }

// End does nothing.
func (NoHook) End(context.Context, *MonitoredSession) error { return nil }

// StepContext describes one step of a MonitoredSession to its hooks.
type StepContext struct {
	// LocalStep counts this process's steps, from 1.
	LocalStep int64
	// GlobalStep is the global step after this step (read with the step, so
	// with concurrent replicas it may lag by a step or two).
	GlobalStep int64
	// Session runs the step; hooks may run their own fetches on it.
	Session *session.Session
	stop    bool
}

// RequestStop asks the session to stop after this step.
func (s *StepContext) RequestStop() { s.stop = true }

// MonitoredConfig configures a MonitoredSession.
type MonitoredConfig struct {
	// Session runs the steps (local or remote); required.
	Session *session.Session
	// IsChief makes this replica initialise or restore the model; the
	// others wait until it is ready.
	IsChief bool
	// InitOp initialises the variables (for example
	// ops.GlobalVariablesInitializer); required for the chief.
	InitOp *graph.Node
	// AfterRestore, if set, runs after a restore: it initialises the
	// variables that checkpoints leave out.
	AfterRestore *graph.Node
	// Saver, if set, lets the chief resume from the latest complete
	// checkpoint instead of initialising.
	Saver *checkpoint.Saver
	// Ready counts the initialised variables (see ReadyOp) and Variables is
	// how many there are; without Ready, readiness is not checked.
	Ready     graph.Output
	Variables int
	// ReadyTimeout bounds how long a replica waits for the chief, and each
	// WaitForCluster call (0: 2 min).
	ReadyTimeout time.Duration
	// WaitForCluster, when set, makes the session recover from the loss of
	// a task, such as a ps killed and restarted by its supervisor: a step
	// that fails with a TaskLost error waits for the cluster with it (bounded
	// by ReadyTimeout), readies the model again as NewMonitoredSession does
	// (the chief finds it initialised, or restores the latest checkpoint,
	// every variable of it, since a restarted ps lost its share; the others
	// wait for the chief), and runs again. It must return nil once every
	// task the session uses answers, or an error naming the missing ones
	// when ctx ends. Nil means that such steps fail.
	WaitForCluster func(ctx context.Context) error
	// AfterRecovery, when set, runs after the model is ready again in a
	// recovery, before the step runs again: the state that a restarted ps
	// lost and no checkpoint holds (sync replicas' accumulators and token
	// queues, local steps) is set up there again.
	AfterRecovery func(ctx context.Context) error
	// MaxRecoveries bounds the recoveries of the session (0: 5); the loss
	// after the last one fails the step.
	MaxRecoveries int
	// GlobalStep is read with every step (default: the graph's).
	GlobalStep *ops.Variable
	Hooks      []Hook
	Logger     *slog.Logger
}

// ReadyOp returns a float32 scalar counting the initialised variables of
// vars, and their number, for MonitoredConfig.Ready and Variables.
func ReadyOp(s *graph.Scope, vars []*ops.Variable) (graph.Output, int) {
	if len(vars) == 0 {
		return ops.Scalar(s, tensor.Float32, 0), 0
	}
	flags := make([]graph.Output, len(vars))
	for i, v := range vars {
		flags[i] = ops.Cast(s, ops.IsVariableInitialized(s, v.Value()), tensor.Float32)
	}
	return ops.AddN(s, flags...), len(vars)
}

// MonitoredSession runs training steps the way a supervised replica does:
// opened, the model is ready (the chief has initialised it, restored it from
// the latest checkpoint, or found it already initialised by a chief before
// it; other replicas waited for that with backing-off checks and a log line
// every few seconds); each Run also runs the hooks; Close ends them.
// It is not safe for concurrent Runs.
type MonitoredSession struct {
	cfg       MonitoredConfig
	log       *slog.Logger
	localStep int64
	// globalStep is the global step read with the last step.
	globalStep int64
	stop       bool
	closed     bool
	recoveries int
	// RestoredStep is the global step of the checkpoint the chief resumed
	// from (at its start or in its latest recovery), or -1.
	RestoredStep int64
}

// NewMonitoredSession readies the model and returns the session.
func NewMonitoredSession(ctx context.Context, cfg MonitoredConfig) (*MonitoredSession, error) {
	if cfg.Session == nil {
		return nil, errors.New("train: monitored session: no Session")
	}
	if cfg.IsChief && cfg.InitOp == nil {
		return nil, errors.New("train: monitored session: the chief needs an InitOp")
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.MaxRecoveries == 0 {
		cfg.MaxRecoveries = defaultMaxRecoveries
	}
	if g := cfg.graphOf(); cfg.GlobalStep == nil && g != nil {
		cfg.GlobalStep = GlobalStep(g)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ms := &MonitoredSession{cfg: cfg, log: log, RestoredStep: -1}
	if err := ms.readyModel(ctx); err != nil {
		return nil, err
	}
	return ms, nil
}

// readyModel makes the model ready: the chief initialises, restores or
// continues; the others wait for it.
func (ms *MonitoredSession) readyModel(ctx context.Context) error {
	if ms.cfg.IsChief {
		return ms.initOrRestore(ctx)
	}
	return ms.waitReady(ctx)
}

// recover handles the failure of a step (or of a hook after it) with
// cause: when cause says a task was lost and WaitForCluster is set, it
// waits for the cluster and readies the model again, as often as that
// fails the same way, within MaxRecoveries for the session. It returns nil
// when the step can run again, else the error that ends training.
func (ms *MonitoredSession) recover(ctx context.Context, cause error) error {
	for {
		if ms.cfg.WaitForCluster == nil || !TaskLost(cause) || ctx.Err() != nil {
			return cause
		}
		if ms.recoveries >= ms.cfg.MaxRecoveries {
			return fmt.Errorf("train: giving up after %d recoveries from lost tasks: %w", ms.recoveries, cause)
		}
		ms.recoveries++
		ms.log.Warn("lost a task; waiting for the cluster, then readying the model again",
			"recovery", ms.recoveries, "max_recoveries", ms.cfg.MaxRecoveries, "err", cause)
		wctx, cancel := context.WithTimeout(ctx, ms.cfg.ReadyTimeout)
		err := ms.cfg.WaitForCluster(wctx)
		cancel()
		if err != nil {
			return fmt.Errorf("train: recovering from a lost task (%v): the cluster did not come back within %v: %w", cause, ms.cfg.ReadyTimeout, err)
		}
		if err := ms.readyModel(ctx); err != nil {
			cause = fmt.Errorf("train: readying the model after a lost task: %w", err)
			continue
		}
		if ms.cfg.AfterRecovery != nil {
			if err := ms.cfg.AfterRecovery(ctx); err != nil {
				cause = fmt.Errorf("train: after readying the model again: %w", err)
				continue
			}
		}
		ms.log.Info("recovered from a lost task", "recovery", ms.recoveries, "restored_step", ms.RestoredStep)
		return nil
	}
}

// Do runs fn, a step's work outside Run (a coordinator reading or writing
// its state on the ps around the step), recovering from a lost task as
// Run does: fn runs again once the cluster and the model are back. Work
// of the step that Run did not guard ended the replica's process when a
// ps was lost in it, and its restart hid the failure.
func (ms *MonitoredSession) Do(ctx context.Context, fn func(context.Context) error) error {
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if err = ms.recover(ctx, err); err != nil {
			return err
		}
	}
}

// Recoveries returns how many recoveries from a lost task the session has
// attempted.
func (ms *MonitoredSession) Recoveries() int { return ms.recoveries }

// graphOf returns the graph the configuration's nodes belong to, or nil.
func (c MonitoredConfig) graphOf() *graph.Graph {
	switch {
	case c.InitOp != nil:
		return c.InitOp.Graph()
	case c.Ready.Valid():
		return c.Ready.Node.Graph()
	}
	return nil
}

// ready returns how many variables are initialised (all, without Ready).
func (ms *MonitoredSession) ready(ctx context.Context) (int, error) {
	if !ms.cfg.Ready.Valid() {
		return ms.cfg.Variables, nil
	}
	out, err := ms.cfg.Session.Run(ctx, nil, []graph.Output{ms.cfg.Ready}, nil)
	if err != nil {
		return 0, err
	}
	return int(out[0].Float64At(0)), nil
}

func (ms *MonitoredSession) initOrRestore(ctx context.Context) error {
	sess := ms.cfg.Session
	if ms.cfg.Ready.Valid() {
		n, err := ms.ready(ctx)
		if err != nil {
			return fmt.Errorf("train: checking the model: %w", err)
		}
		if n == ms.cfg.Variables {
			ms.log.Info("the model is already initialised; continuing")
			return nil
		}
	}
	if sv := ms.cfg.Saver; sv != nil {
		step, ok, err := sv.RestoreLatest(ctx, sess)
		if err != nil {
			return fmt.Errorf("train: restoring from %s: %w", sv.Dir(), err)
		}
		if ok {
			if ms.cfg.AfterRestore != nil {
				if _, err := sess.Run(ctx, nil, nil, []*graph.Node{ms.cfg.AfterRestore}); err != nil {
					return fmt.Errorf("train: initialising after the restore: %w", err)
				}
			}
			ms.RestoredStep = step
			ms.log.Info("resumed from a checkpoint", "dir", sv.Dir(), "global_step", step)
			return nil
		}
	}
	ms.log.Info("initialising the model")
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{ms.cfg.InitOp}); err != nil {
		return fmt.Errorf("train: initialising the model: %w", err)
	}
	return nil
}

// waitReady polls, backing off from 20 ms to 1 s, until every variable is
// initialised, logging what it waits for every few seconds.
func (ms *MonitoredSession) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ms.cfg.ReadyTimeout)
	defer cancel()
	var lastLog time.Time
	for d := 20 * time.Millisecond; ; d = min(2*d, time.Second) {
		n, err := ms.ready(ctx)
		if err == nil && n == ms.cfg.Variables {
			ms.log.Info("the model is ready")
			return nil
		}
		if time.Since(lastLog) > 3*time.Second {
			ms.log.Info("waiting for the chief to initialise the model", "ready", n, "variables", ms.cfg.Variables, "last_error", err)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("train: %w within %v (%d of %d variables initialised): is the chief running? %w",
				ErrNotReady, ms.cfg.ReadyTimeout, n, ms.cfg.Variables, ctx.Err())
		case <-time.After(d):
		}
	}
}

// GlobalStep returns the global step after the last Run (read with that
// step: with concurrent replicas it may lag by a step or two), or 0.
func (ms *MonitoredSession) GlobalStep() int64 { return ms.globalStep }

// ShouldStop reports whether a hook asked to stop.
func (ms *MonitoredSession) ShouldStop() bool { return ms.stop }

// Session returns the underlying session.
func (ms *MonitoredSession) Session() *session.Session { return ms.cfg.Session }

// Run runs one training step (feeds, fetches and targets as in
// session.Run) with the hooks' extra fetches, then the hooks' AfterRun.
// With WaitForCluster set, a step that fails because a task was lost is
// run again once the cluster and the model have recovered (see
// MonitoredConfig.WaitForCluster); a hook that fails so after a step that
// ran ends its AfterRun calls for that step.
func (ms *MonitoredSession) Run(ctx context.Context, feeds map[graph.Output]*tensor.Tensor, fetches []graph.Output, targets []*graph.Node) ([]*tensor.Tensor, error) {
	if ms.closed {
		return nil, errors.New("train: monitored session: Run after Close")
	}
	step := &StepContext{LocalStep: ms.localStep + 1, Session: ms.cfg.Session}
	all := append([]graph.Output(nil), fetches...)
	if ms.cfg.GlobalStep != nil {
		all = append(all, ms.cfg.GlobalStep.Value())
	}
	all, bounds, err := ms.beforeRun(ctx, step, all)
	if err != nil {
		return nil, err
	}
	out, err := ms.cfg.Session.Run(ctx, feeds, all, targets)
	for err != nil {
		if err = ms.recover(ctx, err); err != nil {
			return nil, err
		}
		out, err = ms.cfg.Session.Run(ctx, feeds, all, targets)
	}
	if ms.cfg.GlobalStep != nil {
		// The read may precede this step's own increment.
		step.GlobalStep = int64(out[len(fetches)].Float64At(0)) + 1
		ms.globalStep = step.GlobalStep
	}
	if err := ms.afterRun(ctx, step, out, bounds); err != nil {
		if err := ms.recover(ctx, err); err != nil {
			return nil, err
		}
	}
	return out[:len(fetches)], nil
}

// StepFunc carries out one training step that takes more than one session
// run (an all-reduce step: the gradients, the ring, the update). It
// fetches extra with the step's forward run, and returns their values and
// the global step after the step.
type StepFunc func(ctx context.Context, extra []graph.Output) (globalStep int64, values []*tensor.Tensor, err error)

// RunStep runs the step that fn carries out with the hooks around it, as
// Run does for a step of one session run. A step that fails is not run
// again: the caller's protocol (a ring re-forming) recovers from it.
func (ms *MonitoredSession) RunStep(ctx context.Context, fn StepFunc) error {
	if ms.closed {
		return errors.New("train: monitored session: RunStep after Close")
	}
	step := &StepContext{LocalStep: ms.localStep + 1, Session: ms.cfg.Session}
	extra, bounds, err := ms.beforeRun(ctx, step, nil)
	if err != nil {
		return err
	}
	gs, values, err := fn(ctx, extra)
	if err != nil {
		return err
	}
	if len(values) != len(extra) {
		return fmt.Errorf("train: monitored session: the step returned %d values for the hooks' %d fetches", len(values), len(extra))
	}
	step.GlobalStep, ms.globalStep = gs, gs
	return ms.afterRun(ctx, step, values, bounds)
}

// beforeRun appends the hooks' extra fetches for step to all, and returns
// where the fetches of each hook lie in the result.
func (ms *MonitoredSession) beforeRun(ctx context.Context, step *StepContext, all []graph.Output) ([]graph.Output, [][2]int, error) {
	bounds := make([][2]int, len(ms.cfg.Hooks))
	for i, h := range ms.cfg.Hooks {
		extra, err := h.BeforeRun(ctx, step)
		if err != nil {
			return nil, nil, err
		}
		bounds[i] = [2]int{len(all), len(all) + len(extra)}
		all = append(all, extra...)
	}
	return all, bounds, nil
}

// afterRun counts the step that ran and calls the hooks' AfterRun with
// their values of out; the first hook that fails ends the calls.
func (ms *MonitoredSession) afterRun(ctx context.Context, step *StepContext, out []*tensor.Tensor, bounds [][2]int) error {
	ms.localStep++
	defer func() { ms.stop = ms.stop || step.stop }()
	for i, h := range ms.cfg.Hooks {
		if err := h.AfterRun(ctx, step, out[bounds[i][0]:bounds[i][1]]); err != nil {
			return err
		}
	}
	return nil
}

// Close runs the hooks' End (a final checkpoint, a summary flush) once.
func (ms *MonitoredSession) Close(ctx context.Context) error {
	if ms.closed {
		return nil
	}
	ms.closed = true
	var errs []error
	for _, h := range ms.cfg.Hooks {
		errs = append(errs, h.End(ctx, ms))
	}
	return errors.Join(errs...)
}

// StopAtStepHook requests a stop once the global step reaches Last.
type StopAtStepHook struct {
	NoHook
	Last int64
}

// AfterRun requests the stop.
func (h StopAtStepHook) AfterRun(_ context.Context, step *StepContext, _ []*tensor.Tensor) error {
	if step.GlobalStep >= h.Last {
		step.RequestStop()
	}
	return nil
}

// ErrNaNLoss is wrapped by NanGuardHook's error.
var ErrNaNLoss = errors.New("the loss is not a finite number")

// NanGuardHook ends training when Loss becomes NaN or infinite.
type NanGuardHook struct {
	NoHook
	Loss graph.Output
}

// BeforeRun fetches the loss.
func (h NanGuardHook) BeforeRun(context.Context, *StepContext) ([]graph.Output, error) {
	return []graph.Output{h.Loss}, nil
}

// AfterRun checks it.
func (h NanGuardHook) AfterRun(_ context.Context, step *StepContext, extra []*tensor.Tensor) error {
	if v := extra[0].Float64At(0); math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("train: local step %d: %w (%v): lower the learning rate", step.LocalStep, ErrNaNLoss, v)
	}
	return nil
}

// CheckpointHook saves a checkpoint when Schedule says so and at the end.
type CheckpointHook struct {
	NoHook
	Saver    *checkpoint.Saver
	Schedule *checkpoint.Schedule
	Logger   *slog.Logger
	// Saved, when set, is told of every checkpoint saved and how long the
	// save took (for metrics).
	Saved func(step int64, took time.Duration)
	last  int64
}

// AfterRun saves when due.
func (h *CheckpointHook) AfterRun(ctx context.Context, step *StepContext, _ []*tensor.Tensor) error {
	h.last = step.GlobalStep
	if h.Schedule == nil || !h.Schedule.Due(step.GlobalStep, time.Now()) {
		return nil
	}
	return h.save(ctx, step.Session, step.GlobalStep)
}

// End saves the final checkpoint.
func (h *CheckpointHook) End(ctx context.Context, ms *MonitoredSession) error {
	if h.last == 0 {
		return nil
	}
	return h.save(ctx, ms.Session(), h.last)
}

func (h *CheckpointHook) save(ctx context.Context, sess *session.Session, step int64) error {
	start := time.Now()
	prefix, err := h.Saver.Save(ctx, sess, step)
	if err != nil {
		return fmt.Errorf("train: saving a checkpoint at global step %d: %w", step, err)
	}
	if h.Saved != nil {
		h.Saved(step, time.Since(start))
	}
	if h.Schedule != nil {
		h.Schedule.Saved(step, time.Now())
	}
	if h.Logger != nil {
		h.Logger.Info("saved a checkpoint", "prefix", prefix, "global_step", step)
	}
	return nil
}
