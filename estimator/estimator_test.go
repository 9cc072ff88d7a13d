package estimator_test

import (
	"context"
	"io"
	"math"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// linearModel is y = x·w + b with a squared loss.
func linearModel(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
	w := ops.NewVariable(s, "w", tensor.Float32, []int{1, 1}, ops.ZerosInit())
	b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
	pred := ops.BiasAdd(s, ops.MatMul(s, f["x"], w.Value(), false, false), b.Value())
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

func linearInput(n int, repeat bool) estimator.InputFn {
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

func TestTrainEvaluatePredictInProcess(t *testing.T) {
	ctx := context.Background()
	est, err := estimator.New(linearModel, estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	res, err := est.Train(ctx, linearInput(1000, true), estimator.Stop{MaxSteps: 600})
	if err != nil {
		t.Fatal(err)
	}
	if res.GlobalStep != 600 || !res.Chief {
		t.Fatalf("result %+v; want global step 600 on the chief", res)
	}
	m, err := est.Evaluate(ctx, linearInput(200, false))
	if err != nil {
		t.Fatal(err)
	}
	if m["mae"] > 0.1 || m["global_step"] != 600 {
		t.Fatalf("metrics %v; want mae < 0.1 at step 600", m)
	}
	x := tensor.MustFromSlice([]float32{0, 1, -1}, 3, 1)
	out, err := est.Predict(ctx, map[string]*tensor.Tensor{"x": x})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{10, 12, 8} {
		if got := out["y"].Float64At(i); math.Abs(got-want) > 0.1 {
			t.Errorf("prediction %d: %v; want about %v", i, got, want)
		}
	}
	w, err := est.VariableValue("w")
	if err != nil || math.Abs(w.Float64At(0)-2) > 0.05 {
		t.Fatalf("w = %v, %v; want about 2", w, err)
	}
}

// TestSecondTrainContinues: as tf.estimator goes on from its model
// directory, a second Train in the same process goes on from the model the
// first trained, even without checkpoints.
func TestSecondTrainContinues(t *testing.T) {
	ctx := context.Background()
	est, err := estimator.New(linearModel, estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := est.Train(ctx, linearInput(1000, true), estimator.Stop{MaxSteps: 100}); err != nil {
		t.Fatal(err)
	}
	w1, _ := est.VariableValue("w")
	first := w1.Float64At(0)
	res, err := est.Train(ctx, linearInput(1000, true), estimator.Stop{MaxSteps: 600})
	if err != nil {
		t.Fatal(err)
	}
	if res.GlobalStep != 600 || res.LocalSteps != 500 {
		t.Errorf("the second Train ended at global step %d after %d steps; want 600 after 500", res.GlobalStep, res.LocalSteps)
	}
	w2, _ := est.VariableValue("w")
	if math.Abs(w2.Float64At(0)-2) > 0.05 || math.Abs(w2.Float64At(0)-2) > math.Abs(first-2) {
		t.Errorf("w went from %v to %v; want it nearer 2", first, w2.Float64At(0))
	}
}
