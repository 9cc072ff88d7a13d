package estimator

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// TrainSpec is the training half of TrainAndEvaluate.
type TrainSpec struct {
	Input InputFn
	Stop  Stop
	Hooks []Hook
}

// EvalSpec is the evaluation half of TrainAndEvaluate, which the process
// that ends with the trained model (the chief, or the only process) runs
// after training.
type EvalSpec struct {
	// Input is the evaluation input (it must end); nil skips evaluation.
	Input InputFn
	// ExportDir, if set, receives an export of the trained model as a new
	// numbered version (see Estimator.Export).
	ExportDir string
	// WaitTimeout is how long an evaluator task waits for a checkpoint
	// newer than the last it evaluated before it gives up (default
	// DefaultEvalWait). The chief saves them as RunConfig's
	// SaveCheckpointsSteps and SaveCheckpointsSecs say.
	WaitTimeout time.Duration
	// PollInterval is how often an evaluator looks for a newer checkpoint
	// (default DefaultEvalPoll).
	PollInterval time.Duration
	// ExportBest makes an evaluator export to ExportDir each checkpoint
	// whose evaluation has a lower "loss" than every one before
	// (TensorFlow's BestExporter), instead of the final one: a server
	// polling ExportDir serves the best model as training goes.
	ExportBest bool
}

// TrainAndEvaluate does what this process's task asks (as
// tf.estimator.train_and_evaluate): a ps serves and returns when the chief
// ends training; a worker trains; the chief (or the only process) trains,
// stops the cluster, evaluates and exports; an evaluator (a task outside
// the cluster, cluster.EvaluatorJob) evaluates each checkpoint the chief
// saves as it appears, and returns after the one at the last step, which
// it exports. The result is this process's, with the metrics and the
// export on the chief's and the evaluator's.
//
// The process that evaluates (the chief, or the only process, and an
// evaluator task) first opens the evaluation input and checks its
// features and labels against the training input's, by name, dtype and
// shape: a mismatch (ErrInputMismatch) fails before any training, not
// after it.
func TrainAndEvaluate(ctx context.Context, est *Estimator, ts TrainSpec, es EvalSpec) (*Result, error) {
	if est == nil {
		return nil, errors.New("estimator: TrainAndEvaluate: the estimator is nil")
	}
	if est.cfg.IsEvaluator() {
		return est.evaluateCheckpoints(ctx, ts, es)
	}
	if es.Input != nil && ts.Input != nil && est.cfg.IsChief() {
		ic := InputContext{NumReplicas: 1, Seed: est.cfg.Seed}
		if c := est.cfg.Cluster; c != nil {
			ic.NumReplicas = len(replicas(c))
		}
		if err := est.checkEvalInput(ctx, ts.Input, es.Input, ic); err != nil {
			return nil, err
		}
	}
	res, err := est.Train(ctx, ts.Input, ts.Stop, ts.Hooks...)
	if err != nil || !res.Chief {
		return res, err
	}
	if es.Input != nil {
		if res.Metrics, err = est.Evaluate(ctx, es.Input); err != nil {
			return nil, err
		}
	}
	if es.ExportDir != "" {
		if res.Export, err = est.Export(ctx, es.ExportDir); err != nil {
			return nil, fmt.Errorf("estimator: exporting to %s: %w", es.ExportDir, err)
		}
	}
	return res, nil
}
