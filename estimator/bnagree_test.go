package estimator_test

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"testing"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/estimator/strategytest"
	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/tensor"
)

// TestBatchNormalizationEvaluatesAlikeEverywhere trains batch
// normalisation under every strategy and evaluates the trained model three
// ways: the chief's estimator in process, a new estimator on the model
// directory (the latest checkpoint), and the export's predictions. All
// three normalise by the same moving statistics, so their losses agree to
// float32 rounding; a strategy that left the moving statistics of one
// replica out of the checkpoint or the export would show here.
func TestBatchNormalizationEvaluatesAlikeEverywhere(t *testing.T) {
	ps := map[string]int{"ps": 1, "worker": 2}
	ring := map[string]int{"worker": 2}
	x, y := data.Linear(200, 7, 2, 10, 0.01)
	evalInput := func(estimator.InputContext) (*estimator.Input, error) {
		ds, err := data.FromTensors(x, y)
		if err != nil {
			return nil, err
		}
		return &estimator.Input{Dataset: ds.Batch(10, false), Features: []string{"x"}}, nil
	}
	for _, tc := range []struct {
		strategy estimator.Strategy
		jobs     map[string]int
	}{
		{estimator.Async{}, ps},
		{estimator.Sync{}, ps},
		{estimator.Staleness{Bound: 2}, ps},
		{estimator.InGraph{}, ps},
		{estimator.AllReduce{}, ring},
		{estimator.Averaging{Every: 4}, ring},
	} {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			modelDir := filepath.Join(dir, "model")
			est, _ := strategytest.Cluster{Model: normalizedLinear, Input: linearInput(1000, true), Jobs: tc.jobs, Strategy: tc.strategy, Steps: 400,
				Task: func(_ cluster.TaskID, cfg *estimator.RunConfig) []estimator.Hook {
					cfg.ModelDir = modelDir
					return nil
				}}.Run(t)
			inProcess, err := est.Evaluate(ctx, evalInput)
			if err != nil {
				t.Fatal(err)
			}
			// Untrained, the loss is about 100.
			if inProcess["loss"] > 1 {
				t.Errorf("in-process evaluation %v; want a loss below 1", inProcess)
			}

			fresh, err := estimator.New(normalizedLinear, estimator.RunConfig{Seed: 1, Progress: io.Discard, ModelDir: modelDir})
			if err != nil {
				t.Fatal(err)
			}
			fromCheckpoint, err := fresh.Evaluate(ctx, evalInput)
			if err != nil {
				t.Fatal(err)
			}
			if fromCheckpoint["global_step"] != inProcess["global_step"] || !lossesAgree(fromCheckpoint["loss"], inProcess["loss"]) {
				t.Errorf("evaluation from the latest checkpoint %v; in process %v: want the same step and loss", fromCheckpoint, inProcess)
			}

			path, err := est.Export(ctx, filepath.Join(dir, "export"))
			if err != nil {
				t.Fatal(err)
			}
			p, err := savedmodel.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			pred, err := p.Predict(ctx, map[string]*tensor.Tensor{"x": x})
			if err != nil {
				t.Fatal(err)
			}
			var sum float64
			for i, v := range pred["y"].Float32s() {
				d := float64(v) - float64(y.Float32s()[i])
				sum += d * d
			}
			if exported := sum / float64(len(y.Float32s())); !lossesAgree(exported, inProcess["loss"]) {
				t.Errorf("the export's loss %v; in process %v: want the same", exported, inProcess["loss"])
			}
		})
	}
}

// lossesAgree says whether two losses agree to float32 rounding (the batches'
// losses are summed in another order).
func lossesAgree(a, b float64) bool { return math.Abs(a-b) <= 1e-5*math.Max(math.Abs(a), math.Abs(b)) }
