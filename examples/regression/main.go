// Regression fits columns y1, y2 of CSV files from the others (8-32-16-2, ReLU, Adam, MSE):
//
//	go run ./examples/regression --local-cluster ps=1,worker=2 --export /tmp/regression
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/losses"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

func main() {
	f := estimator.Flags{Steps: 2000} // --strategy, --local-cluster, --steps, --export, ...
	f.Register(flag.CommandLine)
	dir := flag.String("data", "examples/regression/testdata", "directory of train.csv and test.csv")
	flag.Parse()
	opts := data.CSVOptions{Header: true, Labels: tensor.Float32, LabelNames: []string{"y1", "y2"}}
	x, y, err := data.ReadCSVFileWith(*dir+"/train.csv", opts)
	testX, testY, err2 := data.ReadCSVFileWith(*dir+"/test.csv", opts)
	test, err3 := data.FromTensors(testX, testY)
	if err != nil || err2 != nil || err3 != nil {
		log.Fatal(err, err2, err3)
	}
	trainInput := func(ic estimator.InputContext) (*estimator.Input, error) { // shuffled, sharded over the replicas, for ever
		ds, err := ic.Examples(32, x, y)
		return &estimator.Input{Dataset: ds, Features: []string{"x"}}, err
	}
	testInput := func(estimator.InputContext) (*estimator.Input, error) {
		return &estimator.Input{Dataset: test.Batch(32, false), Features: []string{"x"}}, nil
	}
	res, err := f.TrainAndEvaluate(context.Background(), model, trainInput, testInput)
	if err != nil {
		log.Fatal(err)
	}
	if res != nil && res.Chief { // the launcher, the ps and the other workers print nothing
		json.NewEncoder(os.Stdout).Encode(map[string]any{"strategy": res.Strategy, "mse": res.Metrics["loss"], "global_step": res.GlobalStep, "export": res.Export})
	}
}

func model(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
	y := layers.Sequential{
		layers.Dense{Units: 32, Activation: ops.Relu}, layers.Dense{Units: 16, Activation: ops.Relu}, layers.Dense{Units: 2},
	}.Apply(s, f.Get(s, "x"), mode == estimator.Train)
	spec := &estimator.Spec{Predictions: map[string]graph.Output{"y": y}}
	if mode != estimator.Predict { // labels are fed in Train and Eval
		spec.Loss, spec.Optimizer = losses.MeanSquaredError(s, labels, y), train.NewAdam(0.01, 0.9, 0.999, 1e-7)
	}
	return spec, nil
}
