package estimator_test

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/evalmetrics"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/losses"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// normalizedLinear is linearModel built with layers: batch normalisation
// then a dense unit, with streaming metrics built in evaluation only. The
// dense layer scales and shifts: a beta as well would only duplicate its
// bias, multiplied by its kernel, and that product of two parameters,
// driven by the large first errors (the targets are about 10), makes
// gradient descent at this rate unstable once gradients are a step or two
// stale: asynchronous training diverged to an infinite loss in some runs
// (most with a staleness bound of 2; 2 in 5 under the race detector, whose
// slower steps leave more gradients stale).
func normalizedLinear(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
	pred := layers.Sequential{
		layers.BatchNormalization{NoScale: true, NoCenter: true},
		layers.Dense{Units: 1},
	}.Apply(s, f["x"], mode == estimator.Train)
	spec := &estimator.Spec{Predictions: map[string]graph.Output{"y": pred}}
	if mode == estimator.Predict {
		return spec, nil
	}
	spec.Loss = losses.MeanSquaredError(s, labels, pred)
	spec.Optimizer = train.NewGradientDescent(0.1)
	if mode == estimator.Eval {
		spec.EvalMetrics = map[string]estimator.Metric{
			"mae":           estimator.MeanMetric(s, ops.Abs(s, ops.Sub(s, pred, labels))),
			"mae_streaming": estimator.StreamingMetric(evalmetrics.MeanAbsoluteError(s, labels, pred)),
			"rmse":          estimator.StreamingMetric(evalmetrics.RootMeanSquaredError(s, labels, pred)),
		}
	}
	return spec, nil
}

// The estimator runs the update ops with every training step, and reads
// the streaming metrics over the whole evaluation set.
func TestLayersUpdateOpsAndStreamingMetrics(t *testing.T) {
	ctx := context.Background()
	est, err := estimator.New(normalizedLinear, estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := est.Train(ctx, linearInput(1000, true), estimator.Stop{MaxSteps: 600}); err != nil {
		t.Fatal(err)
	}
	// x is uniform on [-1, 1): the moving variance of batches of 10 tends
	// to 0.9 * 1/3 from its initial 1.
	mv, err := est.VariableValue("batch_normalization/moving_variance")
	if err != nil {
		t.Fatal(err)
	}
	if v := mv.Float64At(0); v < 0.2 || v > 0.45 {
		t.Errorf("moving variance %v after training; want about 0.3 (the update ops did not run?)", v)
	}
	m, err := est.Evaluate(ctx, linearInput(205, false)) // 21 batches, the last of 5
	if err != nil {
		t.Fatal(err)
	}
	// Batches of 10 normalise by a noisy mean (its variance 1/30): the
	// model cannot fit y = 2x + 10 within 4/30, but it learns (y's own
	// variance is 4/3).
	if m["loss"] > 0.5 {
		t.Errorf("metrics %v; want a loss below 0.5", m)
	}
	if math.Abs(m["rmse"]-math.Sqrt(m["loss"])) > 1e-5 {
		t.Errorf("rmse %v, but the mean loss is %v (its root %v)", m["rmse"], m["loss"], math.Sqrt(m["loss"]))
	}
	if math.Abs(m["mae_streaming"]-m["mae"]) > 1e-6 {
		t.Errorf("streaming mae %v, ratio mae %v", m["mae_streaming"], m["mae"])
	}
	// A second evaluation starts its accumulators over.
	m2, err := est.Evaluate(ctx, linearInput(205, false))
	if err != nil {
		t.Fatal(err)
	}
	if m2["rmse"] != m["rmse"] {
		t.Errorf("a second evaluation's rmse %v, the first's %v", m2["rmse"], m["rmse"])
	}
}

// A loss left unreduced is refused with the shape, not trained on.
func TestNonScalarLossRefused(t *testing.T) {
	model := func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		pred := layers.Dense{Units: 1}.Apply(s, f["x"], mode == estimator.Train)
		spec := &estimator.Spec{Predictions: map[string]graph.Output{"y": pred}}
		if mode != estimator.Predict {
			spec.Loss = losses.MeanSquaredError(s, labels, pred, losses.WithReduction(losses.None))
			spec.Optimizer = train.NewGradientDescent(0.05)
		}
		return spec, nil
	}
	est, err := estimator.New(model, estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	_, err = est.Train(context.Background(), linearInput(100, true), estimator.Stop{MaxSteps: 10})
	if err == nil || !strings.Contains(err.Error(), "want a scalar") || !strings.Contains(err.Error(), "shape [?,") {
		t.Fatalf("training on a loss per example: err %v; want a refusal naming its shape", err)
	}
}

// An evaluation metric whose value (or weight) is not a scalar is refused
// naming it and its shape; it was summed by its first element, a wrong
// number without a word.
func TestNonScalarMetricRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		metric func(s *graph.Scope, pred graph.Output) estimator.Metric
		want   string
	}{
		{"value", func(s *graph.Scope, pred graph.Output) estimator.Metric {
			return estimator.Metric{Value: ops.Sum(s, pred, []int{1}, false), Weight: ops.Scalar(s, tensor.Float32, 1)}
		}, "Value"},
		{"weight", func(s *graph.Scope, pred graph.Output) estimator.Metric {
			return estimator.Metric{Value: ops.Sum(s, pred, nil, false), Weight: ops.OnesLike(s, pred)}
		}, "Weight"},
		{"streaming", func(s *graph.Scope, pred graph.Output) estimator.Metric {
			v, update := evalmetrics.Mean(s, pred)
			return estimator.Metric{Value: ops.Concat(s, 0, ops.ExpandDims(s, v, 0), ops.ExpandDims(s, v, 0)), Update: update}
		}, "Value"},
	} {
		model := func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
			pred := layers.Dense{Units: 1}.Apply(s, f["x"], mode == estimator.Train)
			spec, err := estimator.RegressionHead{Optimizer: train.NewGradientDescent(0.05), Key: "y"}.Spec(s, pred, labels, mode)
			if err == nil && mode == estimator.Eval {
				spec.EvalMetrics["bad"] = tc.metric(s, pred)
			}
			return spec, err
		}
		est, err := estimator.New(model, estimator.RunConfig{Seed: 1, Progress: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := est.Train(context.Background(), linearInput(100, true), estimator.Stop{MaxSteps: 2}); err != nil {
			t.Fatal(err)
		}
		_, err = est.Evaluate(context.Background(), linearInput(100, false))
		if err == nil || !strings.Contains(err.Error(), `"bad"`) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "want a scalar") {
			t.Errorf("%s: evaluating a metric that is not a scalar: err %v; want a refusal naming the metric, its %s and shape", tc.name, err, tc.want)
		}
	}
}

// Every strategy runs the update ops of batch normalisation with its
// training steps: the moving statistics move on the ps tasks, or on each
// ring member, and the evaluation reads them.
func TestBatchNormalizationOnEveryStrategy(t *testing.T) {
	ps := map[string]int{"ps": 1, "worker": 2}
	ring := map[string]int{"worker": 2}
	for _, tc := range []struct {
		strategy estimator.Strategy
		jobs     map[string]int
	}{
		{estimator.Async{}, ps},
		{estimator.Sync{}, ps},
		{estimator.InGraph{}, ps},
		{estimator.AllReduce{}, ring},
	} {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			est, _ := runClusterModel(t, normalizedLinear, tc.jobs, tc.strategy, 400)
			mv, err := est.VariableValue("batch_normalization/moving_variance")
			if err != nil {
				t.Fatal(err)
			}
			if v := mv.Float64At(0); v < 0.2 || v > 0.45 {
				t.Errorf("moving variance %v after training; want about 0.3", v)
			}
			m, err := est.Evaluate(context.Background(), linearInput(200, false))
			if err != nil {
				t.Fatal(err)
			}
			// Untrained, the loss is about 100; stale gradients and noisy
			// batch statistics leave it above the in-process one.
			if m["loss"] > 1 || math.Abs(m["rmse"]-math.Sqrt(m["loss"])) > 1e-5 {
				t.Errorf("metrics %v; want a loss below 1 and its root as the rmse", m)
			}
		})
	}
}

// A loss of shape [1] is taken as the scalar it holds, as tf.estimator does.
func TestLossOfOneElement(t *testing.T) {
	model := func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		pred := layers.Dense{Units: 1}.Apply(s, f["x"], mode == estimator.Train)
		spec := &estimator.Spec{Predictions: map[string]graph.Output{"y": pred}}
		if mode != estimator.Predict {
			spec.Loss = ops.ReshapeTo(s, losses.MeanSquaredError(s, labels, pred), 1)
			spec.Optimizer = train.NewGradientDescent(0.05)
		}
		return spec, nil
	}
	est, err := estimator.New(model, estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := est.Train(ctx, linearInput(100, true), estimator.Stop{MaxSteps: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := est.Evaluate(ctx, linearInput(100, false)); err != nil {
		t.Fatal(err)
	}
}

// The export and a model restored from its checkpoints normalise by the
// moving statistics, and evaluating from a checkpoint builds the metrics'
// accumulators afresh (checkpoints do not hold them).
func TestBatchNormalizationExport(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := estimator.RunConfig{Seed: 1, Progress: io.Discard, ModelDir: filepath.Join(dir, "model")}
	est, err := estimator.New(normalizedLinear, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := est.Train(ctx, linearInput(1000, true), estimator.Stop{MaxSteps: 200}); err != nil {
		t.Fatal(err)
	}
	value := func(name string) float64 {
		v, err := est.VariableValue(name)
		if err != nil {
			t.Fatal(err)
		}
		return v.Float64At(0)
	}
	mean, variance := value("batch_normalization/moving_mean"), value("batch_normalization/moving_variance")
	kernel, bias := value("dense/kernel"), value("dense/bias")
	x := tensor.MustFromSlice([]float32{0.5}, 1, 1)
	want := kernel*(0.5-mean)/math.Sqrt(variance+1e-3) + bias

	path, err := est.Export(ctx, filepath.Join(dir, "export"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := savedmodel.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got, err := p.Predict(ctx, map[string]*tensor.Tensor{"x": x})
	if err != nil {
		t.Fatal(err)
	}
	if g := got["y"].Float64At(0); math.Abs(g-want) > 1e-4 {
		t.Errorf("export predicts %v; the moving statistics give %v", g, want)
	}

	fresh, err := estimator.New(normalizedLinear, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := fresh.Evaluate(ctx, linearInput(100, false))
	if err != nil {
		t.Fatal(err)
	}
	if m["global_step"] != 200 || math.Abs(m["rmse"]-math.Sqrt(m["loss"])) > 1e-5 {
		t.Errorf("evaluating the checkpoint: %v", m)
	}
}
