// Logistic trains a softmax regression on CSV files (a header line, then the
// features and a class index per row) in one process or as a local cluster,
// prints the test accuracy as JSON and exports the model. For instance:
//
//	go run ./examples/logistic --local-cluster ps=1,worker=2 --strategy sync --export /tmp/logistic
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
	res, err := f.TrainAndEvaluate(context.Background(), model(norm), d.TrainInput("x", 128), d.TestInput("x", 128))
	if err != nil {
		log.Fatal(err)
	}
	if res != nil && res.Chief { // the launcher, the ps and the other workers print nothing
		json.NewEncoder(os.Stdout).Encode(map[string]any{"strategy": res.Strategy, "accuracy": res.Metrics["accuracy"], "global_step": res.GlobalStep, "export": res.Export})
	}
}

// model is softmax regression of two classes; a little L2 gives one optimum.
func model(norm layers.Normalization) estimator.ModelFn {
	return func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		logits := layers.Sequential{norm, layers.Dense{Units: 2, KernelInit: ops.ZerosInit(), KernelRegularizer: layers.L2(2e-3)}}.Apply(s, f.Get(s, "x"), false)
		class := ops.Cast(s, ops.ArgMax(s, logits, 1), tensor.Int32)
		spec := &estimator.Spec{Predictions: map[string]graph.Output{"class": class, "probabilities": ops.Softmax(s, logits)}}
		if mode != estimator.Predict { // labels are fed in Train and Eval
			spec.Loss, spec.Optimizer = ops.Add(s, losses.SparseSoftmaxCrossEntropy(s, labels, logits), losses.RegularizationLoss(s)), train.NewGradientDescent(0.5)
			spec.EvalMetrics = map[string]estimator.Metric{"accuracy": estimator.Accuracy(s, labels, class)}
		}
		return spec, nil
	}
}
