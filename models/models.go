package models

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Model is a built reference model: what a training loop feeds and fetches.
type Model struct {
	Name string
	// Input and Label are the placeholders a batch is fed into.
	Input, Label graph.Output
	// Loss is the scalar mean loss of a batch on the training path.
	Loss graph.Output
	// EvalLoss and Correct are computed without dropout: the batch mean loss
	// and the number of correctly classified examples (float32 scalar;
	// invalid for regression).
	EvalLoss, Correct graph.Output
	// Params are named parameters to report (W and b of the regression).
	Params map[string]graph.Output
}

// Config holds the choices shared by the builders.
type Config struct {
	// Seed makes initial weights and dropout reproducible (0: 1).
	Seed int
	// DType of the parameters and activations (default float32).
	DType tensor.DType
}

func (c Config) withDefaults() Config {
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.DType == tensor.Invalid {
		c.DType = tensor.Float32
	}
	return c
}

// Names lists the reference models by their CLI name.
var Names = []string{"linreg", "mlp", "cnn"}

// Build builds the model called name.
func Build(s *graph.Scope, name string, c Config) (*Model, error) {
	var m *Model
	switch name {
	case "linreg":
		m = LinearRegression(s, c)
	case "mlp":
		m = MLP(s, c)
	case "cnn":
		m = CNN(s, c)
	default:
		return nil, fmt.Errorf("models: unknown model %q (want one of %v)", name, Names)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("models: building %s: %w", name, err)
	}
	return m, nil
}

// LinearRegression is y = W*x + b with a squared-error loss, fed x and y as
// [batch, 1] float tensors.
func LinearRegression(s *graph.Scope, c Config) *Model {
	c = c.withDefaults()
	x := ops.Placeholder(s, "x", c.DType, tensor.MakeShape(-1, 1))
	y := ops.Placeholder(s, "y", c.DType, tensor.MakeShape(-1, 1))
	ls := s.SubScope("linear")
	w := ops.NewVariable(ls, "W", c.DType, []int{1, 1}, ops.ZerosInit())
	b := ops.NewVariable(ls, "b", c.DType, []int{1}, ops.ZerosInit())
	pred := ops.BiasAdd(ls, ops.MatMul(ls, x, w.Value(), false, false), b.Value())
	loss := ops.Mean(s, ops.SquaredDifference(s, pred, y), nil, false)
	return &Model{
		Name: "linreg", Input: x, Label: y, Loss: loss, EvalLoss: loss,
		Params: map[string]graph.Output{"W": w.Value(), "b": b.Value()},
	}
}

// MLP is the 784-100-10 perceptron: a sigmoid hidden layer and a softmax
// output with cross-entropy, fed flattened images [batch, 784] and int32
// labels [batch].
func MLP(s *graph.Scope, c Config) *Model {
	c = c.withDefaults()
	x := ops.Placeholder(s, "images", c.DType, tensor.MakeShape(-1, 784))
	y := ops.Placeholder(s, "labels", tensor.Int32, tensor.MakeShape(-1))
	h1 := dense(s.SubScope("hidden"), x, 784, 100, c.Seed)
	h := ops.Sigmoid(s, h1)
	logits := dense(s.SubScope("softmax"), h, 100, 10, c.Seed+1)
	m := classifier(s, "mlp", x, y, logits, logits)
	return m
}

// CNN is the classic two-convolution network: conv 5x5x32 SAME, relu, 2x2
// max-pool, conv 5x5x64 SAME, relu, max-pool, dense 3136->1024 relu,
// dropout 0.5 (training only), dense 1024->10, softmax cross-entropy.
func CNN(s *graph.Scope, c Config) *Model {
	c = c.withDefaults()
	x := ops.Placeholder(s, "images", c.DType, tensor.MakeShape(-1, 784))
	y := ops.Placeholder(s, "labels", tensor.Int32, tensor.MakeShape(-1))
	img := ops.ReshapeTo(s, x, -1, 28, 28, 1)

	c1 := s.SubScope("conv1")
	w1 := ops.NewVariable(c1, "W", c.DType, []int{5, 5, 1, 32}, ops.TruncatedNormalInit(0, 0.1, c.Seed))
	b1 := ops.NewVariable(c1, "b", c.DType, []int{32}, ops.ConstantInit(0.1))
	c2 := s.SubScope("conv2")
	w2 := ops.NewVariable(c2, "W", c.DType, []int{5, 5, 32, 64}, ops.TruncatedNormalInit(0, 0.1, c.Seed+1))
	b2 := ops.NewVariable(c2, "b", c.DType, []int{64}, ops.ConstantInit(0.1))
	f1 := s.SubScope("fc1")
	w3 := ops.NewVariable(f1, "W", c.DType, []int{7 * 7 * 64, 1024}, ops.TruncatedNormalInit(0, 0.1, c.Seed+2))
	b3 := ops.NewVariable(f1, "b", c.DType, []int{1024}, ops.ConstantInit(0.1))
	f2 := s.SubScope("fc2")
	w4 := ops.NewVariable(f2, "W", c.DType, []int{1024, 10}, ops.TruncatedNormalInit(0, 0.1, c.Seed+3))
	b4 := ops.NewVariable(f2, "b", c.DType, []int{10}, ops.ConstantInit(0.1))

	// The tower is built twice over the same variables: with dropout for
	// training, without for evaluation, so neither path feeds a rate.
	tower := func(s *graph.Scope, dropout bool) graph.Output {
		h := ops.Relu(s, ops.BiasAdd(s, ops.Conv2D(s, img, w1.Value(), [2]int{1, 1}, "SAME"), b1.Value()))
		h = ops.MaxPool(s, h, [2]int{2, 2}, [2]int{2, 2}, "SAME")
		h = ops.Relu(s, ops.BiasAdd(s, ops.Conv2D(s, h, w2.Value(), [2]int{1, 1}, "SAME"), b2.Value()))
		h = ops.MaxPool(s, h, [2]int{2, 2}, [2]int{2, 2}, "SAME")
		h = ops.ReshapeTo(s, h, -1, 7*7*64)
		h = ops.Relu(s, ops.BiasAdd(s, ops.MatMul(s, h, w3.Value(), false, false), b3.Value()))
		if dropout {
			h = ops.Dropout(s, h, 0.5, c.Seed+4)
		}
		return ops.BiasAdd(s, ops.MatMul(s, h, w4.Value(), false, false), b4.Value())
	}
	return classifier(s, "cnn", x, y, tower(s.SubScope("train"), true), tower(s.SubScope("eval"), false))
}

// dense is a fully connected layer with Glorot-uniform weights and zero bias.
func dense(s *graph.Scope, x graph.Output, in, out, seed int) graph.Output {
	w := ops.NewVariable(s, "W", x.DType(), []int{in, out}, ops.GlorotUniformInit(seed))
	b := ops.NewVariable(s, "b", x.DType(), []int{out}, ops.ZerosInit())
	return ops.BiasAdd(s, ops.MatMul(s, x, w.Value(), false, false), b.Value())
}

// classifier adds the softmax cross-entropy loss and the accuracy count.
func classifier(s *graph.Scope, name string, x, y, trainLogits, evalLogits graph.Output) *Model {
	ls := s.SubScope("loss")
	loss, _ := ops.SparseSoftmaxCrossEntropyWithLogits(ls, trainLogits, y)
	es := s.SubScope("eval_metrics")
	evalLoss, _ := ops.SparseSoftmaxCrossEntropyWithLogits(es, evalLogits, y)
	pred := ops.Cast(es, ops.ArgMax(es, evalLogits, 1), tensor.Int32)
	correct := ops.Sum(es, ops.Cast(es, ops.Equal(es, pred, y), tensor.Float32), nil, false)
	return &Model{
		Name: name, Input: x, Label: y,
		Loss:     ops.Mean(ls, loss, nil, false),
		EvalLoss: ops.Mean(es, evalLoss, nil, false),
		Correct:  correct,
	}
}
