// Warmstart defines a training strategy of its own and trains a softmax
// regression of the Fashion-MNIST images embedded in distflow with it, through the estimator's
// one training loop (hooks, summaries, checkpoints, recovery, the stop
// condition), in one process or as a local cluster. For instance:
//
//	go run ./examples/warmstart --local-cluster ps=1,worker=2 --strategy warmstart:100
//
// The strategy, Warmstart, is asynchronous training on parameter servers
// in which the chief trains alone for the first steps before the other
// workers join: DistBelief's remedy for the instability of asynchronous
// SGD early in training ("warmstarting model training with only a single
// model replica before unleashing the other replicas", Dean et al. 2012).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/train"
)

// Warmstart is asynchronous training in which the workers other than the
// chief wait until the global step reaches Steps.
type Warmstart struct {
	Steps int64
}

func (w Warmstart) String() string { return fmt.Sprintf("warmstart(%d)", w.Steps) }

// Validate: what asynchronous training needs, and a bound that is not
// negative.
func (w Warmstart) Validate(c *cluster.Spec) error {
	if w.Steps < 0 {
		return fmt.Errorf("warmstart: %d steps: must not be negative", w.Steps)
	}
	return estimator.Async{}.Validate(c)
}

// Update and Recovery are asynchronous training's: each replica applies
// its own gradients, and a lost ps is restored from the latest checkpoint.
func (Warmstart) Update(n int) estimator.Update { return estimator.Async{}.Update(n) }
func (Warmstart) Recovery() estimator.Recovery  { return estimator.Async{}.Recovery() }

// Replica trains on the parameter servers through the shared loop; the
// coordinator holds back the other workers.
func (w Warmstart) Replica(info estimator.ReplicaInfo) (estimator.Replica, error) {
	c := &warmstart{steps: w.Steps, chief: info.Chief, log: info.Logger}
	return &estimator.PSReplica{Build: c.build, Coordinator: c, Recoverable: true}, nil
}

// warmstart is a replica's coordinator: a worker other than the chief
// begins once the global step has reached steps.
type warmstart struct {
	steps      int64
	chief      bool
	log        *slog.Logger
	globalStep graph.Output
}

// build keeps the global step, to read it in Begin.
func (c *warmstart) build(s *graph.Scope) { c.globalStep = train.GlobalStep(s.Graph()).Value() }

func (c *warmstart) Begin(ctx context.Context, sess *session.Session) (func(context.Context), error) {
	if c.chief {
		return nil, nil
	}
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		out, err := sess.Run(ctx, nil, []graph.Output{c.globalStep}, nil)
		if err != nil {
			return nil, fmt.Errorf("warmstart: reading the global step: %w", err)
		}
		if gs := int64(out[0].Float64At(0)); gs >= c.steps {
			c.log.Info("the chief's warm start is over: this worker joins", "global_step", gs)
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("warmstart: waiting for the chief's first %d steps: %w", c.steps, ctx.Err())
		case <-time.After(wait):
		}
	}
}

func (c *warmstart) BeforeStep(context.Context, *session.Session) error { return nil }
func (c *warmstart) AfterStep(context.Context, *session.Session) error  { return nil }
func (c *warmstart) Done(context.Context, *session.Session) error       { return nil }

func main() {
	f := estimator.Flags{Strategy: "warmstart", Steps: 600,
		Strategies: map[string]estimator.Strategy{"warmstart": Warmstart{Steps: 100}}}
	f.Register(flag.CommandLine)
	flag.Parse()
	trainSet, testSet, err := data.Embedded()
	if err != nil {
		log.Fatal(err)
	}
	// On the chief, one JSON line; the launcher, the ps and the other workers print nothing.
	f.Run(context.Background(), model, input(trainSet, true), input(testSet, false), "accuracy")
}

// model is softmax regression of the 784 pixels into 10 classes.
func model(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
	logits := layers.Dense{Units: 10, Name: "softmax"}.Apply(s, f.Get(s, "images"), mode == estimator.Train)
	return estimator.ClassificationHead{Optimizer: train.NewGradientDescent(0.5)}.Spec(s, logits, labels, mode)
}

// input feeds batches of 100 images and labels: in training, each replica
// its own shard, reshuffled every epoch, for ever; in evaluation, every
// image once.
func input(set data.Split, training bool) estimator.InputFn {
	return func(ic estimator.InputContext) (*estimator.Input, error) {
		ds, err := data.FromTensors(set.Images, set.Labels)
		if err != nil {
			return nil, err
		}
		if training {
			ds = ds.Shard(ic.NumReplicas, ic.ReplicaIndex).Shuffle(set.Images.Shape()[0], ic.Seed).Repeat(-1)
		}
		return &estimator.Input{Dataset: ds.Batch(100, training), Features: []string{"images"}}, nil
	}
}
