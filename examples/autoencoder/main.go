// Autoencoder trains a dense 784-64-784 autoencoder of the Fashion-MNIST
// images embedded in distflow, in one process or as a local cluster, prints
// the test reconstruction loss (mean squared error per pixel) as JSON and
// exports the model. For instance:
//
//	go run ./examples/autoencoder --local-cluster worker=2 --strategy allreduce --export /tmp/autoencoder
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
	"github.com/distflow/distflow/train"
)

func main() {
	f := estimator.Flags{Steps: 1000} // --strategy, --local-cluster, --steps, --export, ...
	f.Register(flag.CommandLine)
	flag.Parse()
	tr, te, err := data.Embedded()
	if err != nil {
		log.Fatal(err)
	}
	d := models.Data{TrainX: tr.Images, TrainY: tr.Images, TestX: te.Images, TestY: te.Images} // the images are their own labels
	// On the chief, one JSON line; the launcher, the ps and the other workers print nothing.
	f.Run(context.Background(), model, d.TrainInput("images", 64), d.TestInput("images", 64), "loss")
}

// model encodes an image into 64 numbers and decodes it back.
func model(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
	code := layers.Dense{Units: 64, Activation: ops.Relu, Name: "encoder"}.Apply(s, f.Get(s, "images"), false)
	reconstruction := layers.Dense{Units: data.ImageSize, Activation: ops.Sigmoid, Name: "decoder"}.Apply(s, code, false)
	// The loss is the mean squared error per pixel.
	spec, err := estimator.RegressionHead{Key: "reconstruction", Optimizer: train.NewAdam(0.001, 0.9, 0.999, 1e-7)}.Spec(s, reconstruction, labels, mode)
	if err == nil {
		spec.Predictions["code"] = code // served beside the reconstruction
	}
	return spec, err
}
