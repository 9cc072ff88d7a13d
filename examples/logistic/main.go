// Logistic trains a softmax regression on CSV files (a header line, then the
// features and a class index per row) in one process or as a local cluster,
// prints the test accuracy as JSON and exports the model. For instance:
//
//	go run ./examples/logistic --local-cluster ps=1,worker=2 --strategy sync --export /tmp/logistic
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
	f := estimator.Flags{Steps: 1000} // --strategy, --local-cluster, --steps, --export, ...
	f.Register(flag.CommandLine)
	dir := flag.String("data", "examples/logistic/testdata", "directory of train.csv and test.csv")
	flag.Parse()
	x, y, err := data.ReadCSVFile(*dir+"/train.csv", true, tensor.Int32)
	testX, testY, err2 := data.ReadCSVFile(*dir+"/test.csv", true, tensor.Int32)
	norm, err3 := layers.NormalizationOf(x) // the training set's statistics standardise the features
	if err != nil || err2 != nil || err3 != nil {
		log.Fatal(err, err2, err3)
	}
	d := models.Data{TrainX: x, TrainY: y, TestX: testX, TestY: testY}
	// On the chief, one JSON line; the launcher, the ps and the other workers print nothing.
	f.Run(context.Background(), model(norm), d.TrainInput("x", 128), d.TestInput("x", 128), "accuracy")
}

// model is softmax regression of two classes; a little L2 gives one optimum.
func model(norm layers.Normalization) estimator.ModelFn {
	return func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		logits := layers.Sequential{norm, layers.Dense{Units: 2, KernelInit: ops.ZerosInit(), KernelRegularizer: layers.L2(2e-3)}}.Apply(s, f.Get(s, "x"), false)
		// Predicts "class" and "probabilities"; the loss is the cross-entropy plus the L2 penalty.
		return estimator.ClassificationHead{Optimizer: train.NewGradientDescent(0.5)}.Spec(s, logits, labels, mode)
	}
}
