package estimator_test

import (
	"context"
	"io"
	"math"
	"testing"

	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/estimator/strategytest"
	"github.com/distflow/distflow/tensor"
)

// linearModel is y = x·w + b with a squared loss, and linearInput its
// data: the strategies' conformance suite's.
var linearModel estimator.ModelFn = strategytest.LinearModel

func linearInput(n int, repeat bool) estimator.InputFn { return strategytest.LinearInput(n, repeat) }

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
