package estimator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/summary"
)

// Defaults of the evaluator task (TrainAndEvaluate with an "evaluator"
// task, as tf.estimator.train_and_evaluate runs one).
const (
	// DefaultEvalPoll is how often the evaluator looks for a newer
	// checkpoint.
	DefaultEvalPoll = time.Second
	// DefaultEvalWait is how long the evaluator waits for a newer
	// checkpoint before it gives up (EvalSpec.WaitTimeout).
	DefaultEvalWait = time.Hour
)

// IsEvaluator reports whether the configured task is an evaluator: a task
// outside the training cluster that evaluates the chief's checkpoints.
func (c RunConfig) IsEvaluator() bool {
	return c.Cluster != nil && c.Task.Job == cluster.EvaluatorJob
}

// evaluateCheckpoints is TrainAndEvaluate on an evaluator task: it
// evaluates each checkpoint of the chief's as it appears in the checkpoint
// directory (a newer one appearing meanwhile is the one evaluated), prints
// and records the metrics (a progress line, TensorBoard events under
// ModelDir/eval, the task's Prometheus metrics), and returns after the
// final checkpoint, which the chief's end-of-training marker for the last
// step of ts.Stop tells, with that evaluation's metrics. It exports the
// final checkpoint when es.ExportDir is set. It gives up, naming the
// directory and the steps, when no newer checkpoint appears for
// es.WaitTimeout.
func (e *Estimator) evaluateCheckpoints(ctx context.Context, ts TrainSpec, es EvalSpec) (*Result, error) {
	cfg := e.cfg
	target, err := e.evaluatorTarget(ctx, ts, es)
	if err != nil {
		return nil, err
	}
	wait, poll := es.waits()
	if err := e.serveMetrics(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("task", cfg.Task.String())
	events, err := openEvents(evalDir(cfg.ModelDir), cfg.eventSuffix())
	if err != nil {
		return nil, err
	}
	if events != nil {
		defer events.Close()
	}
	w := &evalWatch{
		e: e, es: es, log: log, events: events, target: target,
		res:     &Result{Task: cfg.Task.String(), Strategy: cfg.Strategy.String()},
		started: time.Now(), since: time.Now(), evaluated: -1, best: math.Inf(1),
	}
	log.Info("evaluator: waiting for checkpoints", "dir", cfg.CheckpointDir, "last_step", target)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		// The chief marks the end (ended.go) after its final checkpoint:
		// with the marker read first, the newest checkpoint found next is
		// the last there will be.
		_, ended := trainingEnded(cfg.CheckpointDir, target)
		_, step, err := checkpoint.FindLatest(cfg.CheckpointDir, "", log)
		switch {
		case err == nil && step > w.evaluated:
			done, err := w.evaluate(ctx, step)
			if err != nil {
				return nil, err
			}
			if done {
				continue // at once: a newer one may be there already
			}
		case err != nil && !errors.Is(err, checkpoint.ErrNoCheckpoint):
			return nil, fmt.Errorf("estimator: evaluator: %w", err)
		}
		// (A checkpoint at the last step does not end it: asynchronous
		// replicas may step past it before the chief saves its final one.)
		if ended && err == nil && step == w.evaluated {
			return w.finish(ctx)
		}
		if err := w.overdue(wait); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("estimator: evaluator: waiting for a checkpoint past step %d in %s: %w", w.evaluated, cfg.CheckpointDir, ctx.Err())
		case <-tick.C:
		}
	}
}

// evaluatorTarget checks what an evaluator task needs (an evaluation
// input, the chief's checkpoint directory, a valid stop, an evaluation
// input that fits the training one) and returns the global step at which
// the chief stops training.
func (e *Estimator) evaluatorTarget(ctx context.Context, ts TrainSpec, es EvalSpec) (int64, error) {
	cfg := e.cfg
	switch {
	case es.Input == nil:
		return 0, errors.New("estimator: an evaluator task evaluates: EvalSpec.Input is nil")
	case cfg.CheckpointDir == "":
		return 0, errors.New("estimator: an evaluator task reads the chief's checkpoints: set RunConfig.CheckpointDir (or ModelDir) to the directory the chief saves them in")
	}
	if err := ts.Stop.validate(); err != nil {
		return 0, err
	}
	target, err := e.lastStep(ctx, ts)
	if err != nil {
		return 0, err
	}
	if ts.Input != nil {
		if err := e.checkEvalInput(ctx, ts.Input, es.Input, InputContext{NumReplicas: len(replicas(cfg.Cluster)), Seed: cfg.Seed}); err != nil {
			return 0, err
		}
	}
	return target, nil
}

// waits are es.WaitTimeout and es.PollInterval, or their defaults.
func (es EvalSpec) waits() (wait, poll time.Duration) {
	wait, poll = es.WaitTimeout, es.PollInterval
	if wait == 0 {
		wait = DefaultEvalWait
	}
	if poll == 0 {
		poll = DefaultEvalPoll
	}
	return wait, poll
}

// evalWatch is the state of an evaluator task between looks at the
// checkpoint directory.
type evalWatch struct {
	e      *Estimator
	es     EvalSpec
	log    *slog.Logger
	events *summary.Writer // nil: no event files
	target int64           // the step at which the chief stops training
	res    *Result

	started   time.Time
	evaluated int64     // the step of the last checkpoint evaluated; -1 before the first
	since     time.Time // of the last new checkpoint, or of the start
	failed    error     // the last evaluation's, when it failed
	best      float64   // the lowest loss exported (ExportBest)
}

// evaluate evaluates the newest checkpoint, found at step, and records and
// prints its metrics. It reports whether the evaluation succeeded: a failed
// one is kept in w.failed to be tried again at the next look, unless ctx
// has ended, which is returned as an error, as is a failed export.
func (w *evalWatch) evaluate(ctx context.Context, step int64) (bool, error) {
	cfg := w.e.cfg
	m, err := w.e.Evaluate(ctx, w.es.Input)
	if err != nil {
		if ctx.Err() != nil {
			return false, fmt.Errorf("estimator: evaluator: checkpoint at step %d in %s: %w", step, cfg.CheckpointDir, err)
		}
		// The chief may have replaced it meanwhile: try again at the
		// next look, until the wait runs out.
		w.failed = fmt.Errorf("evaluating the checkpoint at step %d: %w", step, err)
		w.log.Warn("evaluator: evaluation failed; trying again", "dir", cfg.CheckpointDir, "global_step", step, "err", err)
		return false, nil
	}
	w.failed = nil
	// The checkpoint evaluated may be newer than the one found.
	w.evaluated, w.since = int64(m["global_step"]), time.Now()
	w.res.GlobalStep, w.res.Metrics = w.evaluated, m
	w.res.Evaluations++
	w.e.recordEval(w.events, w.evaluated, m)
	exported, err := w.exportIfBest(ctx, m)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(cfg.Progress, "%s: evaluated global_step %d%s%s\n", cfg.Task, w.evaluated, metricText(m), exported)
	return true, nil
}

// exportIfBest exports the checkpoint just evaluated, with metrics m, when
// es.ExportBest is set and its loss is lower than every one exported
// before; it returns the progress line's note of the export, if any.
func (w *evalWatch) exportIfBest(ctx context.Context, m map[string]float64) (string, error) {
	loss, ok := m["loss"]
	if !w.es.ExportBest || w.es.ExportDir == "" || !ok || loss >= w.best {
		return "", nil
	}
	var err error
	if w.res.Export, err = w.e.exportAt(ctx, w.es.ExportDir, w.evaluated); err != nil {
		return "", fmt.Errorf("estimator: evaluator: exporting the best model to %s: %w", w.es.ExportDir, err)
	}
	w.best = loss
	return "  exported to " + w.res.Export + " (the lowest loss so far)", nil
}

// finish ends the evaluation after the final checkpoint: it exports that
// checkpoint when es.ExportDir is set (and not es.ExportBest, whose
// exports are made as the checkpoints come) and returns the result.
func (w *evalWatch) finish(ctx context.Context) (*Result, error) {
	if w.es.ExportDir != "" && !w.es.ExportBest {
		var err error
		if w.res.Export, err = w.e.exportAt(ctx, w.es.ExportDir, w.evaluated); err != nil {
			return nil, fmt.Errorf("estimator: exporting to %s: %w", w.es.ExportDir, err)
		}
	}
	w.res.WallSeconds = time.Since(w.started).Seconds()
	return w.res, nil
}

// overdue is the error of an evaluator that has waited longer than wait
// for a new checkpoint (or for one it could evaluate), else nil.
func (w *evalWatch) overdue(wait time.Duration) error {
	if time.Since(w.since) <= wait {
		return nil
	}
	dir := w.e.cfg.CheckpointDir
	last := "none yet"
	if w.evaluated >= 0 {
		last = fmt.Sprintf("the last at step %d", w.evaluated)
	}
	if w.failed != nil {
		return fmt.Errorf("estimator: evaluator: no checkpoint in %s evaluated for %v (%s): %w", dir, wait.Round(time.Second), last, w.failed)
	}
	return fmt.Errorf("estimator: evaluator: no new checkpoint in %s for %v (%s; training ends at step %d): is the chief training and saving there? (EvalSpec.WaitTimeout)",
		dir, wait.Round(time.Second), last, w.target)
}

// lastStep is the global step at which the chief stops training: ts.Stop
// with the batch size of the training input, the cluster's strategy and
// the trainers' towers (RunConfig.Towers).
func (e *Estimator) lastStep(ctx context.Context, ts TrainSpec) (int64, error) {
	if ts.Stop.MaxSteps > 0 {
		return ts.Stop.MaxSteps, nil
	}
	if ts.Input == nil {
		return 0, errors.New("estimator: an evaluator needs the training input (TrainSpec.Input) to tell the last step from Stop.Epochs")
	}
	n := len(replicas(e.cfg.Cluster))
	in, err := openTrainInput(ctx, ts.Input, InputContext{NumReplicas: n, Seed: e.cfg.Seed})
	if err != nil {
		return 0, err
	}
	defer in.close()
	return ts.Stop.steps(in.first[0].Shape()[0], e.cfg.Strategy.Update(n).Batches*e.cfg.towers()), nil
}

// evalDir is where an evaluator writes its event files: TensorFlow's
// model_dir/eval, which TensorBoard shows as a run beside training's.
func evalDir(modelDir string) string {
	if modelDir == "" {
		return ""
	}
	return filepath.Join(modelDir, "eval")
}

// recordEval writes one evaluation's metrics to the event file, and its
// step to the task's Prometheus metrics (Evaluate records the metrics).
func (e *Estimator) recordEval(events *summary.Writer, step int64, m map[string]float64) {
	if events != nil {
		for _, name := range sortedNames(m) {
			if name != "global_step" {
				_ = events.AddScalar(name, step, m[name])
			}
		}
		_ = events.Flush()
	}
	if t := e.Metrics(); t != nil {
		t.SetGlobalStep(step)
	}
}

// metricText lists m's metrics for a progress line: "  accuracy 0.8412  loss 0.4597".
func metricText(m map[string]float64) string {
	var b strings.Builder
	for _, name := range sortedNames(m) {
		if name != "global_step" {
			fmt.Fprintf(&b, "  %s %.4f", name, m[name])
		}
	}
	return b.String()
}
