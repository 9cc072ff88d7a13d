package estimator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/summary"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// Stop says how long to train. MaxSteps wins; otherwise Epochs passes over
// ExamplesPerEpoch examples (the whole cluster's, counted in global steps
// of the strategy's batches). ExamplesPerEpoch, when set, also shows the
// epoch in progress lines.
type Stop struct {
	// MaxSteps is the global step at which training stops (a run resumed
	// from a checkpoint trains the rest).
	MaxSteps int64
	// Epochs and ExamplesPerEpoch give MaxSteps from the batch size.
	Epochs           float64
	ExamplesPerEpoch int
}

func (s Stop) validate() error {
	switch {
	case s.MaxSteps < 0:
		return fmt.Errorf("estimator: Stop.MaxSteps %d: must be positive", s.MaxSteps)
	case s.MaxSteps > 0:
		return nil
	case math.IsNaN(s.Epochs) || math.IsInf(s.Epochs, 0) || s.Epochs <= 0:
		return fmt.Errorf("estimator: Stop: give MaxSteps, or a positive number of Epochs (got %v)", s.Epochs)
	case s.ExamplesPerEpoch <= 0:
		return fmt.Errorf("estimator: Stop.Epochs %v needs ExamplesPerEpoch (got %d)", s.Epochs, s.ExamplesPerEpoch)
	}
	return nil
}

// steps is the global step to train to, with batches of batch examples of
// which each global step consumes perStep.
func (s Stop) steps(batch, perStep int) int64 {
	if s.MaxSteps > 0 {
		return s.MaxSteps
	}
	return int64(math.Ceil(s.Epochs * float64(s.ExamplesPerEpoch) / float64(batch*perStep)))
}

// loopStats is what a training loop did.
type loopStats struct {
	localSteps int
	loss       float64
	towers     int
	// timedSteps and seconds are the local steps after the warm-up and the
	// time they took: the throughput figures leave out the first steps,
	// which build the executors and connections and fault the buffers in.
	timedSteps int
	seconds    float64
	// ended: the chief ended training while this replica could not reach
	// the cluster (ended.go); it stops without reporting to the ps tasks.
	ended bool
	// firstGlobal and lastGlobal are the global steps seen at the end of
	// the warm-up and at the last local step: their difference is the whole
	// cluster's progress in the timed steps.
	firstGlobal, lastGlobal int
}

// warmupSteps is how many first steps of a run of target steps the
// throughput figures leave out (as bench/torch_train.py does for PyTorch):
// 20, or a tenth of a short run (none under 10 steps).
func warmupSteps(target int64) int { return int(min(20, target/10)) }

// examplesPerSecond is the throughput of this process's timed steps, of
// perStep examples each.
func (st loopStats) examplesPerSecond(perStep int) float64 {
	if st.seconds == 0 {
		return 0
	}
	return float64(st.timedSteps*perStep) / st.seconds
}

// clusterRate is the whole cluster's throughput seen from this process:
// global steps made while it trained, of perStep examples each.
func (st loopStats) clusterRate(perStep int) float64 {
	if st.seconds == 0 {
		return 0
	}
	return float64((st.lastGlobal-st.firstGlobal)*perStep) / st.seconds
}

// loop is the training loop of the ps strategies and of a single process.
type loop struct {
	r         *replica
	ms        *train.MonitoredSession
	towers    []*tower
	ins       []*openInput
	trainOp   *graph.Node
	loss      graph.Output // the towers' mean
	coord     coordinator
	perStep   int
	summaries graph.Output
	// claims, when set, claims the next batch with each step (claim.go).
	claims *claimer
	// stop, when set, is the cluster's signal that the chief's hooks ended
	// training, read with each step.
	stop *stopSignal
	// globalStep reads the global step variable.
	globalStep graph.Output
	// batch is the batch size, read from the first batch, and target the
	// global step to train to.
	batch  int
	target int64
}

// run trains until the global step reaches the stop's target: each step
// feeds one batch to each tower and runs the update.
func (l *loop) run(ctx context.Context) (loopStats, error) {
	r, cfg := l.r, l.r.cfg
	sess := l.ms.Session()
	l.batch = l.ins[0].first[0].Shape()[0]
	target := r.stop.steps(l.batch, l.perStep)
	l.target = target
	if gs, ok := l.atTarget(ctx, target); ok {
		// Restored at the last step, or the ps tasks hold the model there
		// (a chief restarted at the end): a step would train past it.
		r.log.Info("the global step is at the target already: nothing to train", "global_step", gs, "target", target)
		st := loopStats{towers: len(l.towers), firstGlobal: int(gs), lastGlobal: int(gs)}
		if l.coord != nil {
			if err := l.coord.done(ctx, sess); err != nil {
				return st, err
			}
		}
		return st, nil
	}
	prog, err := newProgress(r, l.towers[0].spec, l.summaries, l.batch, l.perStep, len(l.towers), target)
	if err != nil {
		return loopStats{}, err
	}
	st, err := l.steps(ctx, prog)
	if cerr := prog.close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		if step, ok := trainingEnded(cfg.CheckpointDir, target); ok && !r.chief() {
			r.log.Info("training ended while this replica could not reach the cluster; exiting",
				"task", cfg.Task.String(), "global_step", step, "err", err)
			st.ended, st.lastGlobal = true, int(step)
			return st, nil
		}
		return st, err
	}
	if l.coord != nil {
		if err := l.coord.done(ctx, sess); err != nil {
			return st, err
		}
	}
	return st, nil
}

// steps trains until a step reaches the target (at least one step), or
// the hooks or the chief end training.
func (l *loop) steps(ctx context.Context, prog *progress) (loopStats, error) {
	r, cfg, target := l.r, l.r.cfg, prog.target
	r.log.Info("training", "strategy", cfg.Strategy.String(), "replica", r.index, "replicas", r.numReplicas(),
		"global_steps", target, "batch", l.batch, "compression", cfg.Compression.String(), "pull_compression", cfg.PullCompression.String())
	targets := []*graph.Node{l.trainOp}
	feeds := map[graph.Output]*tensor.Tensor{}
	loss := []graph.Output{l.loss}
	rejoins := 0 // in a row, since the last step that succeeded
	for {
		if err := l.feedBatches(feeds); err != nil {
			return prog.stats(), err
		}
		fs := l.withSignals(append(loss[:1:1], prog.fetches(prog.due())...))
		if err := l.beforeStep(ctx); err != nil {
			return prog.stats(), err
		}
		stepStart := time.Now()
		out, err := l.ms.Run(ctx, feeds, fs, targets)
		if l.coord != nil && l.coord.finished(err) {
			r.log.Info("the chief finished synchronous training", "local_step", prog.st.localSteps)
			break
		}
		if err != nil {
			if l.rejoinAfter(ctx, err, &rejoins) {
				continue
			}
			return prog.stats(), fmt.Errorf("estimator: %slocal step %d: %w", r.who(), prog.st.localSteps+1, err)
		}
		rejoins = 0
		out, stopped := l.takeSignals(out)
		if err := l.afterStep(ctx); err != nil {
			return prog.stats(), err
		}
		took := time.Since(stepStart)
		gstep := l.ms.GlobalStep()
		done, err := l.ends(ctx, gstep, target, stopped)
		if err != nil {
			return prog.stats(), err
		}
		prog.stepped(trained{global: gstep, loss: out[0].Float64At(0), examples: l.batch * len(l.towers), took: took,
			logged: out[1:], last: done})
		if done {
			break
		}
	}
	return prog.stats(), nil
}

// feedBatches reads each tower's next batch into feeds.
func (l *loop) feedBatches(feeds map[graph.Output]*tensor.Tensor) error {
	for i, t := range l.towers {
		b, err := l.ins[i].next()
		if err != nil {
			return fmt.Errorf("estimator: %sreading a batch: %w", l.r.who(), err)
		}
		if err := t.feeds(feeds, b); err != nil {
			return err
		}
	}
	return nil
}

// withSignals adds to a step's fetches the next batch's claim, which
// rides on the step, and the chief's stop flag; takeSignals takes their
// values off the step's results, and says whether the flag is up.
func (l *loop) withSignals(fs []graph.Output) []graph.Output {
	if l.claims != nil {
		fs = append(fs[:len(fs):len(fs)], l.claims.op)
	}
	if l.stop != nil {
		fs = append(fs[:len(fs):len(fs)], l.stop.v.Value())
	}
	return fs
}

func (l *loop) takeSignals(out []*tensor.Tensor) (rest []*tensor.Tensor, stopped bool) {
	if l.stop != nil {
		stopped = out[len(out)-1].Float64At(0) != 0
		out = out[:len(out)-1]
	}
	if l.claims != nil {
		l.claims.stepped(out[len(out)-1])
		out = out[:len(out)-1]
	}
	return out, stopped
}

// beforeStep runs the coordinator's work before a step, which recovers
// from a lost task as the step does, and the injected delay of a slow
// worker; afterStep the coordinator's work after it.
func (l *loop) beforeStep(ctx context.Context) error {
	if l.coord != nil {
		sess := l.ms.Session()
		if err := l.ms.Do(ctx, func(ctx context.Context) error { return l.coord.beforeStep(ctx, sess) }); err != nil {
			return fmt.Errorf("estimator: %s%w", l.r.who(), err)
		}
	}
	if d := l.r.cfg.StepDelay; d > 0 { // fault injection: a slow worker
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (l *loop) afterStep(ctx context.Context) error {
	if l.coord == nil {
		return nil
	}
	sess := l.ms.Session()
	return l.ms.Do(ctx, func(ctx context.Context) error { return l.coord.afterStep(ctx, sess) })
}

// ends reports whether training ends after a step that left the global
// step at gstep: the target is reached, a hook asked to stop (the chief's
// hooks stop every replica: it raises the flag), or the flag is up.
func (l *loop) ends(ctx context.Context, gstep, target int64, stopped bool) (bool, error) {
	hooked := l.ms.ShouldStop()
	if hooked && l.stop != nil && l.r.chief() {
		if err := l.stop.signal(ctx, l.ms.Session()); err != nil {
			return false, err
		}
	}
	if stopped && !hooked {
		l.r.log.Info("the chief's hooks ended training", "global_step", gstep, "target", target)
	}
	if hooked || stopped {
		return true, nil
	}
	return gstep >= target && !l.shortOfTarget(ctx, target), nil
}

// stopSignal is a flag on the ps tasks that the chief raises when its
// hooks end training (an early-stopping hook), and that every replica
// reads with each step, as TensorFlow's early-stopping hooks share one
// variable: in asynchronous training the other replicas would otherwise
// train on to the target.
type stopSignal struct {
	v     *ops.Variable
	raise *graph.Node
}

func newStopSignal(s *graph.Scope) *stopSignal {
	v := ops.NewVariable(s.SubScope("training_stop"), "requested", tensor.Float32, nil, ops.ZerosInit(), ops.NotTrainable())
	return &stopSignal{v: v, raise: ops.Assign(s, v.Value(), ops.Scalar(s, tensor.Float32, 1)).Node}
}

// signal raises the flag.
func (st *stopSignal) signal(ctx context.Context, sess *session.Session) error {
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{st.raise}); err != nil {
		return fmt.Errorf("estimator: telling the replicas that a hook ended training: %w", err)
	}
	return nil
}

// atTarget reads the global step before the first step and reports
// whether it has reached target. A failed read says no: the first step
// then finds out what is wrong.
func (l *loop) atTarget(ctx context.Context, target int64) (int64, bool) {
	if !l.globalStep.Valid() {
		return 0, false
	}
	out, err := l.ms.Session().Run(ctx, nil, []graph.Output{l.globalStep}, nil)
	if err != nil {
		return 0, false
	}
	gs := int64(out[0].Float64At(0))
	return gs, gs >= target
}

// shortOfTarget reports, on the chief of a coordinated strategy, whether
// the global step is still below target although the last step's says
// otherwise. A step's global step is an estimate (read as the step
// starts, plus one), and a synchronous replica released without an
// update (a round abandoned after a loss, a replica let back in) did not
// move it: the chief, whose result and final checkpoint are the run's,
// ends training at the target itself (a chaos run ended at 799 of 800).
func (l *loop) shortOfTarget(ctx context.Context, target int64) bool {
	if !l.r.chief() || l.coord == nil || !l.globalStep.Valid() {
		return false
	}
	out, err := l.ms.Session().Run(ctx, nil, []graph.Output{l.globalStep}, nil)
	if err != nil {
		return false // the next step finds out
	}
	if gs := int64(out[0].Float64At(0)); gs < target {
		l.r.log.Info("the global step is short of the target: training on", "global_step", gs, "target", target)
		return true
	}
	return false
}

// maxRejoins bounds the rejoins in a row of a replica whose steps outlive
// the step deadline: past it the replica fails, and its supervisor acts.
const maxRejoins = 3

// rejoinAfter handles a step of a replica that failed by outliving the
// step deadline (the replica was stopped, or starved, or waited for a
// chief that was away, or for a round that a rejoining replica's stale
// gradient left short until the chief abandoned it): rather than exit and
// be restarted, the replica rejoins at the current global step as a
// restarted one would (coordinator.rejoin) and trains on. The chief does
// too: its own round runner goes on meanwhile, and a chief that exited
// for a round left short ended the run (CI saw it once, with 3 sync
// workers as a stopped one came back). It reports whether it did; a
// replica of a training that has ended does not.
func (l *loop) rejoinAfter(ctx context.Context, err error, rejoins *int) bool {
	r := l.r
	if l.coord == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) || *rejoins >= maxRejoins {
		return false
	}
	if _, ended := trainingEnded(r.cfg.CheckpointDir, l.target); ended {
		return false
	}
	*rejoins++
	r.log.Warn("this replica's step outlived the step deadline; rejoining at the current global step",
		"step_timeout", r.cfg.StepTimeout, "rejoin", *rejoins, "max_rejoins", maxRejoins, "err", err)
	if rerr := l.coord.rejoin(ctx, l.ms.Session()); rerr != nil {
		r.log.Warn("rejoining failed", "err", rerr)
		return false
	}
	return true
}

// eventSuffix names this process's event file.
func (c RunConfig) eventSuffix() string {
	if c.Cluster == nil {
		return "local"
	}
	return fmt.Sprintf("%s-%d", c.Task.Job, c.Task.Index)
}

// openEvents opens the event file of this process in dir ("" means no
// events: a nil writer).
func openEvents(dir, suffix string) (*summary.Writer, error) {
	if dir == "" {
		return nil, nil
	}
	w, err := summary.NewWriter(dir, summary.WriterOptions{Suffix: suffix})
	if err != nil {
		return nil, fmt.Errorf("estimator: event file in %s: %w", dir, err)
	}
	return w, nil
}
