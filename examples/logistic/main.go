// Logistic trains a softmax regression with the estimator, alone or as a local
// cluster, on a CSV file (a header, then per row the features and a class index
// 0, 1, ...; every fifth row is for testing), prints the test metrics as JSON
// and exports the model. See examples/README.md; for instance
//
//	go run ./examples/logistic --local-cluster ps=1,worker=2 --strategy sync --export /tmp/logistic
package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/localcluster"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

var strategies = map[string]estimator.Strategy{"async": estimator.Async{}, "sync": estimator.Sync{}, "staleness": estimator.Staleness{Bound: 2},
	"ingraph": estimator.InGraph{}, "allreduce": estimator.AllReduce{}, "averaging": estimator.Averaging{Every: 10}}

func main() {
	path := flag.String("csv", "examples/logistic/testdata/breast_cancer.csv", "the examples")
	strategy := flag.String("strategy", "async", "async, sync, staleness, ingraph, allreduce or averaging")
	cluster := flag.String("local-cluster", "", "run as a local cluster: ps=1,worker=2 (worker=2 for allreduce, averaging)")
	steps := flag.Int64("steps", 1000, "global steps to train")
	export := flag.String("export", "", "export the model as a new numbered version under this directory")
	printN := flag.Int("print-predictions", 0, "also print the probabilities of the first N test rows")
	flag.Parse()
	ctx := context.Background()
	if *cluster != "" { // run this program once per task, with the same flags but --local-cluster
		var args []string
		flag.Visit(func(f *flag.Flag) { args = append(args, "--"+f.Name+"="+f.Value.String()) })
		args = slices.DeleteFunc(args, func(a string) bool { return strings.HasPrefix(a, "--local-cluster=") })
		var opts []localcluster.ParseOption
		if *strategy == "allreduce" || *strategy == "averaging" {
			opts = append(opts, localcluster.WithoutPS()) // the workers hold the model
		}
		must(0, localcluster.Run(ctx, localcluster.Config{Jobs: must(localcluster.Parse(*cluster, opts...)), Args: args}))
		return
	}
	x, y := load(*path, false)
	testX, testY := load(*path, true)
	est := must(estimator.New(model(x, int(slices.Max(y.Int32s()))+1), must(estimator.FromEnvironment(strategies[*strategy]))))
	res := must(estimator.TrainAndEvaluate(ctx, est, estimator.TrainSpec{Input: input(x, y, true), Stop: estimator.Stop{MaxSteps: *steps}},
		estimator.EvalSpec{Input: input(testX, testY, false), ExportDir: *export}))
	if !res.Chief {
		return // a ps or another worker prints nothing
	}
	out := map[string]any{"strategy": res.Strategy, "accuracy": res.Metrics["accuracy"], "global_step": res.GlobalStep, "export": res.Export}
	if n, d := *printN, x.Shape()[1]; n > 0 {
		first := map[string]*tensor.Tensor{"x": tensor.MustFromSlice(testX.Float32s()[:n*d], n, d)}
		out["probabilities"] = must(est.Predict(ctx, first))["probabilities"].Float32s()
	}
	must(0, json.NewEncoder(os.Stdout).Encode(out))
}

// model is softmax regression on the features standardised with the training
// set's mean and variance; a little L2 regularisation gives it one optimum.
func model(trainX *tensor.Tensor, classes int) estimator.ModelFn {
	n, d := float32(trainX.Shape()[0]), trainX.Shape()[1]
	mean, meanSq := make([]float32, d), make([]float32, d)
	for i, v := range trainX.Float32s() {
		mean[i%d], meanSq[i%d] = mean[i%d]+v/n, meanSq[i%d]+v*v/n
	}
	return func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		w := ops.NewVariable(s, "w", tensor.Float32, []int{d, classes}, ops.ZerosInit())
		b := ops.NewVariable(s, "b", tensor.Float32, []int{classes}, ops.ZerosInit())
		m := ops.Const(s, mean)
		x := ops.Mul(s, ops.Sub(s, f["x"], m), ops.Rsqrt(s, ops.Sub(s, ops.Const(s, meanSq), ops.Square(s, m))))
		logits := ops.BiasAdd(s, ops.MatMul(s, x, w.Value(), false, false), b.Value())
		class := ops.Cast(s, ops.ArgMax(s, logits, 1), tensor.Int32)
		spec := &estimator.Spec{Predictions: map[string]graph.Output{"class": class, "probabilities": ops.Softmax(s, logits)}}
		if mode != estimator.Predict {
			xent, _ := ops.SparseSoftmaxCrossEntropyWithLogits(s, logits, labels)
			l2 := ops.Mul(s, ops.Scalar(s, tensor.Float32, 1e-3), ops.Sum(s, ops.Square(s, w.Value()), nil, false))
			spec.Loss, spec.Optimizer = ops.Add(s, ops.Mean(s, xent, nil, false), l2), train.NewGradientDescent(0.5)
			spec.EvalMetrics = map[string]estimator.Metric{"accuracy": estimator.Accuracy(s, labels, class)}
		}
		return spec, nil
	}
}

// input feeds batches of 128: in training, each replica its own shard,
// reshuffled every epoch, for ever; in evaluation, every example once.
func input(x, y *tensor.Tensor, training bool) estimator.InputFn {
	return func(ic estimator.InputContext) (*estimator.Input, error) {
		ds := must(data.FromTensors(x, y))
		if training {
			ds = ds.Shard(ic.NumReplicas, ic.ReplicaIndex).Shuffle(x.Shape()[0], ic.Seed).Repeat(-1)
		}
		return &estimator.Input{Dataset: ds.Batch(128, training), Features: []string{"x"}}, nil
	}
}

// load reads the features and labels of the training rows, or of the test rows
// (every fifth), of the CSV file at path.
func load(path string, test bool) (x, y *tensor.Tensor) {
	recs := must(csv.NewReader(strings.NewReader(string(must(os.ReadFile(path))))).ReadAll())[1:]
	var xs []float32
	var ys []int32
	for i, rec := range recs {
		if i%5 == 4 != test {
			continue
		}
		for _, v := range rec[:len(rec)-1] {
			xs = append(xs, float32(must(strconv.ParseFloat(v, 32))))
		}
		ys = append(ys, int32(must(strconv.Atoi(rec[len(rec)-1]))))
	}
	return tensor.MustFromSlice(xs, len(ys), len(recs[0])-1), tensor.MustFromSlice(ys, len(ys))
}

// must returns v, or ends the program if err is not nil.
func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}
