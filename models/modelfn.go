package models

import (
	"fmt"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// ModelFn returns the reference model called name as an estimator model
// function trained with opt. The regression reads feature "x" and predicts
// "y" (and logs W and b); the classifiers read "images" (flattened 28x28)
// and int32 class labels, predict "classes" and "probabilities", and
// report "accuracy" (estimator.ClassificationHead); the regression reports
// "mse" and "mae" (estimator.RegressionHead).
func ModelFn(name string, c Config, opt train.Optimizer) (estimator.ModelFn, error) {
	if name == "widedeep" {
		if opt == nil {
			return nil, fmt.Errorf("models: %s: no optimizer", name)
		}
		return wideDeepModelFn(c.withDefaults(), opt)
	}
	a, ok := architectures[name]
	if !ok {
		return nil, fmt.Errorf("models: unknown model %q (want one of %v)", name, Names)
	}
	if opt == nil {
		return nil, fmt.Errorf("models: %s: no optimizer", name)
	}
	c = c.withDefaults()
	return func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		x, ok := f[a.feature]
		if !ok {
			return nil, fmt.Errorf("models: %s reads feature %q; the input has %v", name, a.feature, featureNames(f))
		}
		out := a.forward(s, c, x, mode == estimator.Train)
		if a.classes > 0 {
			return estimator.ClassificationHead{Optimizer: opt, ClassKey: "classes"}.Spec(s, out, labels, mode)
		}
		spec, err := estimator.RegressionHead{Optimizer: opt, Key: "y"}.Spec(s, out, labels, mode)
		if err == nil {
			spec.Log = map[string]graph.Output{"W": variable(s, "linear/W"), "b": variable(s, "linear/b")}
		}
		return spec, err
	}, nil
}

func featureNames(f estimator.Features) []string {
	var names []string
	for n := range f {
		names = append(names, n)
	}
	return names
}

// Data is a reference workload's examples: a training set and, for the
// classifiers, a test set.
type Data struct {
	TrainX, TrainY *tensor.Tensor
	TestX, TestY   *tensor.Tensor
	// Source says where the examples came from.
	Source string
	// Features, when set, names every input feature: TrainX and TestX are
	// the first, TrainExtra and TestExtra the others in order (the
	// wide-and-deep model's "cat" and "dense").
	Features              []string
	TrainExtra, TestExtra []*tensor.Tensor
	// Clicks and TestClicks are the click logs of the CTR model.
	Clicks, TestClicks *data.ClickLog
}

// LoadData loads the examples of the model called name: for the
// regression, about steps×batch synthetic examples of y = 2x + 10 +
// noise(0.33) (between 1,000 and 100,000); for the classifiers,
// Fashion-MNIST from dir (see data.Load).
func LoadData(name, dir string, seed int64, steps, batch int) (Data, error) {
	if name == "widedeep" {
		return loadClicks(dir, seed, WideDeepConfig{}.withDefaults().Vocab)
	}
	a, ok := architectures[name]
	if !ok {
		return Data{}, fmt.Errorf("models: unknown model %q (want one of %v)", name, Names)
	}
	if a.classes == 0 {
		x, y := data.Linear(min(max(steps*batch, 1000), 100_000), seed, 2, 10, 0.33)
		return Data{TrainX: x, TrainY: y, Source: "synthetic y=2x+10+N(0,0.33)"}, nil
	}
	tr, te, source, err := data.Load(dir)
	if err != nil {
		return Data{}, err
	}
	return Data{TrainX: tr.Images, TrainY: tr.Labels, TestX: te.Images, TestY: te.Labels, Source: source}, nil
}

// Examples is the number of training examples.
func (d Data) Examples() int { return d.TrainX.Shape()[0] }

// Feature is the name of the model's input feature.
func Feature(name string) string {
	if name == "widedeep" {
		return WideDeepFeatures[0]
	}
	return architectures[name].feature
}

// TrainInput is the endless training input of batches of batch examples,
// for the replica an estimator names: InputContext.Examples, which with
// parameter servers shards every epoch dynamically (replicas claim the
// next batch, so a replica that is away or restarted neither skips nor
// repeats examples). Otherwise, every epoch, all replicas' shards
// are cut from one permutation of the whole training set, the same on
// every replica (the seed does not depend on the replica), as PyTorch's
// DistributedSampler does: together the replicas see each example once per
// epoch, and the union of the replicas' k-th batches is the k-th batch of
// replicas×batch examples of a single process with the same seed. A
// synchronous step over the shards is then exactly the single-process step
// on that batch. (Fixed shards shuffled separately see the same examples
// but in batches no single process would draw.)
func (d Data) TrainInput(feature string, batch int) estimator.InputFn {
	return func(ic estimator.InputContext) (*estimator.Input, error) {
		ds, err := ic.Examples(batch, d.tensors(d.TrainX, d.TrainExtra, d.TrainY)...)
		if err != nil {
			return nil, err
		}
		return &estimator.Input{Dataset: ds, Features: d.featureNames(feature)}, nil
	}
}

// TestInput is the test set in batches of batch examples, once; nil when
// there is no test set.
func (d Data) TestInput(feature string, batch int) estimator.InputFn {
	if d.TestX == nil {
		return nil
	}
	return func(estimator.InputContext) (*estimator.Input, error) {
		ds, err := data.FromTensors(d.tensors(d.TestX, d.TestExtra, d.TestY)...)
		if err != nil {
			return nil, err
		}
		return &estimator.Input{Dataset: ds.Batch(batch, false), Features: d.featureNames(feature)}, nil
	}
}

func (d Data) tensors(x *tensor.Tensor, extra []*tensor.Tensor, y *tensor.Tensor) []*tensor.Tensor {
	return append(append([]*tensor.Tensor{x}, extra...), y)
}

func (d Data) featureNames(feature string) []string {
	if len(d.Features) > 0 {
		return d.Features
	}
	return []string{feature}
}
