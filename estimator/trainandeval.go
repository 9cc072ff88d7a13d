package estimator

import (
	"context"
	"errors"
	"fmt"
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
}

// TrainAndEvaluate does what this process's task asks (as
// tf.estimator.train_and_evaluate): a ps serves and returns when the chief
// ends training; a worker trains; the chief (or the only process) trains,
// stops the cluster, evaluates and exports. The result is this process's,
// with the metrics and the export on the chief's.
func TrainAndEvaluate(ctx context.Context, est *Estimator, ts TrainSpec, es EvalSpec) (*Result, error) {
	if est == nil {
		return nil, errors.New("estimator: TrainAndEvaluate: the estimator is nil")
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
