package estimator_test

import (
	"context"
	"fmt"
	"io"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// A model function builds the model for a mode; an input function gives
// each replica its batches. The same program trains in one process, as
// here, or as any task of a cluster (RunConfig.Cluster, or TF_CONFIG).
func Example() {
	model := func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		w := ops.NewVariable(s, "w", tensor.Float32, []int{1, 1}, ops.ZerosInit())
		b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
		y := ops.BiasAdd(s, ops.MatMul(s, f.Get(s, "x"), w.Value(), false, false), b.Value())
		spec := &estimator.Spec{Predictions: map[string]graph.Output{"y": y}}
		if mode != estimator.Predict {
			spec.Loss = ops.Mean(s, ops.SquaredDifference(s, y, labels), nil, false)
			spec.Optimizer = train.NewGradientDescent(0.05)
		}
		return spec, nil
	}
	input := func(ic estimator.InputContext) (*estimator.Input, error) {
		x, y := data.Linear(1000, ic.Seed, 2, 10, 0.01) // y = 2x + 10
		ds, err := data.FromTensors(x, y)
		if err != nil {
			return nil, err
		}
		ds = ds.Shard(ic.NumReplicas, ic.ReplicaIndex).Shuffle(1000, ic.Seed).Repeat(-1).Batch(10, true)
		return &estimator.Input{Dataset: ds, Features: []string{"x"}}, nil
	}
	est, err := estimator.New(model, estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if _, err := est.Train(ctx, input, estimator.Stop{MaxSteps: 1000}); err != nil {
		fmt.Println(err)
		return
	}
	out, err := est.Predict(ctx, map[string]*tensor.Tensor{"x": tensor.MustFromSlice([]float32{1, 3}, 2, 1)})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("y(1) = %.1f, y(3) = %.1f\n", out["y"].Float64At(0), out["y"].Float64At(1))
	// Output: y(1) = 12.0, y(3) = 16.0
}

// Strategies are values of the configuration; a misconfiguration is
// reported by New, before anything starts.
func ExampleNew() {
	_, err := estimator.New(linearModel, estimator.RunConfig{Strategy: estimator.Sync{}})
	fmt.Println(err)
	// Output: estimator: strategy sync coordinates the workers of a cluster: configure one (RunConfig.Cluster, TF_CONFIG or a local cluster)
}
