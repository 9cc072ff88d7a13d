// Regression fits columns y1, y2 of CSV files from the others (8-32-16-2, ReLU, Adam, MSE):
//
//	go run ./examples/regression --local-cluster ps=1,worker=2 --export /tmp/regression
package main

import (
	"context"
	"flag"
	"log"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/models"
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
	if err != nil || err2 != nil {
		log.Fatal(err, err2)
	}
	d := models.Data{TrainX: x, TrainY: y, TestX: testX, TestY: testY} // training batches shuffled, sharded over the replicas, for ever
	// On the chief, one JSON line; the launcher, the ps and the other workers print nothing.
	f.Run(context.Background(), model, d.TrainInput("x", 32), d.TestInput("x", 32), "mse")
}

func model(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
	y := layers.Sequential{
		layers.Dense{Units: 32, Activation: ops.Relu}, layers.Dense{Units: 16, Activation: ops.Relu}, layers.Dense{Units: 2},
	}.Apply(s, f.Get(s, "x"), mode == estimator.Train)
	return estimator.RegressionHead{Key: "y", Optimizer: train.NewAdam(0.01, 0.9, 0.999, 1e-7)}.Spec(s, y, labels, mode)
}
