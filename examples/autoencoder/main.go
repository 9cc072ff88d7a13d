// Autoencoder trains a dense 784-64-784 autoencoder of Fashion-MNIST images
// (the subset embedded in distflow) with the estimator, alone or as a local
// cluster, prints the test reconstruction loss (mean squared error per pixel)
// as JSON and exports the model. See examples/README.md; for instance
//
//	go run ./examples/autoencoder --local-cluster worker=2 --strategy allreduce --export /tmp/autoencoder
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os"
	"slices"
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
	strategy := flag.String("strategy", "async", "async, sync, staleness, ingraph, allreduce or averaging")
	cluster := flag.String("local-cluster", "", "run as a local cluster: ps=1,worker=2 (worker=2 for allreduce, averaging)")
	steps := flag.Int64("steps", 1000, "global steps to train")
	export := flag.String("export", "", "export the model as a new numbered version under this directory")
	printN := flag.Int("print-predictions", 0, "also print the reconstructions of the first N test images")
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
	trainSet, testSet, err := data.Embedded()
	must(0, err)
	est := must(estimator.New(model, must(estimator.FromEnvironment(strategies[*strategy]))))
	res := must(estimator.TrainAndEvaluate(ctx, est, estimator.TrainSpec{Input: input(trainSet.Images, true), Stop: estimator.Stop{MaxSteps: *steps}},
		estimator.EvalSpec{Input: input(testSet.Images, false), ExportDir: *export}))
	if !res.Chief {
		return // a ps or another worker prints nothing
	}
	out := map[string]any{"strategy": res.Strategy, "loss": res.Metrics["loss"], "global_step": res.GlobalStep, "export": res.Export}
	if n := *printN; n > 0 {
		first := map[string]*tensor.Tensor{"images": tensor.MustFromSlice(testSet.Images.Float32s()[:n*data.ImageSize], n, data.ImageSize)}
		out["reconstructions"] = must(est.Predict(ctx, first))["reconstruction"].Float32s()
	}
	must(0, json.NewEncoder(os.Stdout).Encode(out))
}

// model encodes an image into 64 numbers and decodes it back; the loss is
// the mean squared error per pixel.
func model(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
	dense := func(name string, x graph.Output, in, out int) graph.Output {
		w := ops.NewVariable(s, name+"/w", tensor.Float32, []int{in, out}, ops.GlorotUniformInit(len(name)))
		b := ops.NewVariable(s, name+"/b", tensor.Float32, []int{out}, ops.ZerosInit())
		return ops.BiasAdd(s, ops.MatMul(s, x, w.Value(), false, false), b.Value())
	}
	code := ops.Relu(s, dense("encoder", f["images"], data.ImageSize, 64))
	reconstruction := ops.Sigmoid(s, dense("decoder", code, 64, data.ImageSize))
	spec := &estimator.Spec{Predictions: map[string]graph.Output{"code": code, "reconstruction": reconstruction}}
	if mode != estimator.Predict {
		spec.Loss = ops.Mean(s, ops.SquaredDifference(s, reconstruction, labels), nil, false)
		spec.Optimizer = train.NewAdam(0.001, 0.9, 0.999, 1e-7)
	}
	return spec, nil
}

// input feeds batches of 64 images, which are also the labels: in training,
// each replica its own shard, reshuffled every epoch, for ever; in
// evaluation, every image once.
func input(images *tensor.Tensor, training bool) estimator.InputFn {
	return func(ic estimator.InputContext) (*estimator.Input, error) {
		ds := must(data.FromTensors(images, images))
		if training {
			ds = ds.Shard(ic.NumReplicas, ic.ReplicaIndex).Shuffle(images.Shape()[0], ic.Seed).Repeat(-1)
		}
		return &estimator.Input{Dataset: ds.Batch(64, training), Features: []string{"images"}}, nil
	}
}

// must returns v, or ends the program if err is not nil.
func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}
