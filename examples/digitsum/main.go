// Digitsum trains an LSTM to tell whether a sequence of ten digits sums
// above 45 (their mean), on sequences the program draws from fixed seeds,
// in one process or as a local cluster; it prints the test accuracy as
// JSON and exports the model. For instance:
//
//	go run ./examples/digitsum --local-cluster ps=1,worker=2 --strategy sync --export /tmp/digitsum
//
// The model must carry a running sum through time: each digit, one-hot,
// goes through a 16-unit LSTM, whose last output a dense layer classifies.
// With --dynamic the LSTM runs its time steps in a loop of the graph
// (layers.LSTM's Dynamic) instead of unrolling them.
package main

import (
	"context"
	"flag"
	"math/rand"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// The task: Length digits, class 1 when they sum above Threshold.
const (
	Length    = 10
	Threshold = 45
)

// dynamic is the --dynamic flag: the LSTM in a graph loop (same model, same
// results) rather than unrolled.
var dynamic bool

func main() {
	f := estimator.Flags{Steps: 1000} // --strategy, --local-cluster, --steps, --export, ...
	f.Register(flag.CommandLine)
	flag.BoolVar(&dynamic, "dynamic", false, "run the LSTM's time steps in a graph loop (ops.WhileLoop) instead of unrolling them")
	flag.Parse()
	x, y := Sequences(1, 8000)
	testX, testY := Sequences(2, 2000)
	// On the chief, one JSON line; the launcher, the ps and the other workers print nothing.
	f.Run(context.Background(), model, input(x, y, true), input(testX, testY, false), "accuracy")
}

// Sequences draws n sequences of Length digits (int32 [n, Length]) from
// seed and labels each (int32 [n]) 1 if its digits sum above Threshold,
// else 0. The same seed gives the same sequences on every machine.
func Sequences(seed int64, n int) (digits, labels *tensor.Tensor) {
	r := rand.New(rand.NewSource(seed))
	digits, labels = tensor.New(tensor.Int32, n, Length), tensor.New(tensor.Int32, n)
	d, l := digits.Int32s(), labels.Int32s()
	for i := 0; i < n; i++ {
		sum := 0
		for t := 0; t < Length; t++ {
			v := r.Intn(10)
			d[i*Length+t] = int32(v)
			sum += v
		}
		if sum > Threshold {
			l[i] = 1
		}
	}
	return digits, labels
}

// model reads the digits [batch, Length] one-hot through an LSTM and
// classifies its last output: it predicts the "class" and its
// "probabilities".
func model(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
	training := mode == estimator.Train
	onehot := ops.OneHot(s, f.Get(s, "digits"), 10, 1, 0, tensor.Float32) // [batch, Length, 10]
	h := layers.LSTM{Units: 16, Name: "lstm", Dynamic: dynamic}.Apply(s, onehot, training)
	logits := layers.Dense{Units: 2, Name: "logits"}.Apply(s, h, training)
	// A rate that decays to nothing by the last step ends on an average
	// of the last steps' models, not on one step's jump.
	opt := train.NewAdam(0.01, 0.9, 0.999, 1e-7)
	opt.Schedule = train.LinearDecay{}
	return estimator.ClassificationHead{Optimizer: opt}.Spec(s, logits, labels, mode)
}

// input feeds batches of 64: in training, each replica its own shard,
// reshuffled every epoch, for ever; in evaluation, every sequence once.
func input(x, y *tensor.Tensor, training bool) estimator.InputFn {
	return func(ic estimator.InputContext) (*estimator.Input, error) {
		ds, err := data.FromTensors(x, y)
		if err != nil {
			return nil, err
		}
		if training {
			ds = ds.Shard(ic.NumReplicas, ic.ReplicaIndex).Shuffle(x.Shape()[0], ic.Seed).Repeat(-1)
		}
		return &estimator.Input{Dataset: ds.Batch(64, training), Features: []string{"digits"}}, nil
	}
}
