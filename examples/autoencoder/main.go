// Autoencoder trains a dense 784-64-784 autoencoder of Fashion-MNIST images
// (the subset embedded in distflow) in one process or as a local cluster,
// prints the test reconstruction loss (mean squared error per pixel) as JSON
// and exports the model. For instance:
//
//	go run ./examples/autoencoder --local-cluster worker=2 --strategy allreduce --export /tmp/autoencoder
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
	flag.Parse()
	trainSet, testSet, err := data.Embedded()
	if err != nil {
		log.Fatal(err)
	}
	res, err := f.TrainAndEvaluate(context.Background(), model, input(trainSet.Images, true), input(testSet.Images, false))
	if err != nil {
		log.Fatal(err)
	}
	if res != nil && res.Chief { // the launcher, the ps and the other workers print nothing
		json.NewEncoder(os.Stdout).Encode(map[string]any{"strategy": res.Strategy, "loss": res.Metrics["loss"], "global_step": res.GlobalStep, "export": res.Export})
	}
}

// model encodes an image into 64 numbers and decodes it back; the loss is
// the mean squared error per pixel.
func model(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
	code := layers.Dense{Units: 64, Activation: ops.Relu, Name: "encoder"}.Apply(s, f.Get(s, "images"), mode == estimator.Train)
	reconstruction := layers.Dense{Units: data.ImageSize, Activation: ops.Sigmoid, Name: "decoder"}.Apply(s, code, mode == estimator.Train)
	spec := &estimator.Spec{Predictions: map[string]graph.Output{"code": code, "reconstruction": reconstruction}}
	if mode != estimator.Predict { // the labels (the images themselves) are fed in Train and Eval
		spec.Loss = losses.MeanSquaredError(s, labels, reconstruction)
		spec.Optimizer = train.NewAdam(0.001, 0.9, 0.999, 1e-7)
	}
	return spec, nil
}

// input feeds batches of 64 images, which are also the labels: in training,
// each replica its own shard, reshuffled every epoch, for ever; in
// evaluation, every image once.
func input(images *tensor.Tensor, training bool) estimator.InputFn {
	return func(ic estimator.InputContext) (*estimator.Input, error) {
		ds, err := data.FromTensors(images, images)
		if err != nil {
			return nil, err
		}
		if training {
			ds = ds.Shard(ic.NumReplicas, ic.ReplicaIndex).Shuffle(images.Shape()[0], ic.Seed).Repeat(-1)
		}
		return &estimator.Input{Dataset: ds.Batch(64, training), Features: []string{"images"}}, nil
	}
}
