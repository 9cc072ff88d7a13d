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
	if err != nil || err2 != nil {
		log.Fatal(err, err2)
	}
	res, err := f.TrainAndEvaluate(context.Background(), model(x, 2), input(x, y, true), input(testX, testY, false))
	if err != nil {
		log.Fatal(err)
	}
	if res != nil && res.Chief { // the launcher, the ps and the other workers print nothing
		json.NewEncoder(os.Stdout).Encode(map[string]any{"strategy": res.Strategy, "accuracy": res.Metrics["accuracy"], "global_step": res.GlobalStep, "export": res.Export})
	}
}

// model is softmax regression on standardised features; a little L2 gives one optimum.
func model(trainX *tensor.Tensor, classes int) estimator.ModelFn {
	n, d := float32(trainX.Shape()[0]), trainX.Shape()[1]
	mean, meanSq := make([]float32, d), make([]float32, d)
	for i, v := range trainX.Float32s() {
		mean[i%d], meanSq[i%d] = mean[i%d]+v/n, meanSq[i%d]+v*v/n
	}
	return func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		m := ops.Const(s, mean)
		x := ops.Mul(s, ops.Sub(s, f.Get(s, "x"), m), ops.Rsqrt(s, ops.Sub(s, ops.Const(s, meanSq), ops.Square(s, m))))
		logits := layers.Dense{Units: classes, KernelInit: ops.ZerosInit(), KernelRegularizer: layers.L2(2e-3)}.Apply(s, x, false)
		class := ops.Cast(s, ops.ArgMax(s, logits, 1), tensor.Int32)
		spec := &estimator.Spec{Predictions: map[string]graph.Output{"class": class, "probabilities": ops.Softmax(s, logits)}}
		if mode != estimator.Predict { // labels are fed in Train and Eval
			spec.Loss = ops.Add(s, losses.SparseSoftmaxCrossEntropy(s, labels, logits), losses.RegularizationLoss(s))
			spec.Optimizer = train.NewGradientDescent(0.5)
			spec.EvalMetrics = map[string]estimator.Metric{"accuracy": estimator.Accuracy(s, labels, class)}
		}
		return spec, nil
	}
}

// input feeds batches: in training, a shard per replica for ever; else every example once.
func input(x, y *tensor.Tensor, training bool) estimator.InputFn {
	return func(ic estimator.InputContext) (*estimator.Input, error) {
		ds, err := data.FromTensors(x, y)
		if err != nil {
			return nil, err
		}
		if training {
			ds = ds.Shard(ic.NumReplicas, ic.ReplicaIndex).Shuffle(x.Shape()[0], ic.Seed).Repeat(-1)
		}
		return &estimator.Input{Dataset: ds.Batch(128, training), Features: []string{"x"}}, nil
	}
}
