package models

import (
	"fmt"
	"slices"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/losses"
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
	// Variables are the model's trainable variables, shared by all towers,
	// in the order they were created.
	Variables []*ops.Variable
}

// Config holds the choices shared by the builders.
type Config struct {
	// Seed makes initial weights and dropout reproducible (0: 1).
	Seed int
	// DType of the parameters and activations (default float32).
	DType tensor.DType
	// WideDeep shapes the "widedeep" model.
	WideDeep WideDeepConfig
	// MLPHidden is the width of the mlp's hidden layer (0: 100). Wider
	// makes a model whose gradients outweigh its compute, for measuring
	// communication.
	MLPHidden int
	// MaxShards and MinShardBytes split each weight matrix of the mlp and
	// the cnn by rows into up to MaxShards variables of at least
	// MinShardBytes each (layers.MinMaxPartitioner): a replica device
	// setter then spreads a large layer over the ps tasks, and each ps
	// link carries its share of it. MaxShards 0 or 1 (or MinShardBytes 0)
	// keeps every weight whole.
	MaxShards     int
	MinShardBytes int64
}

func (c Config) withDefaults() Config {
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.DType == tensor.Invalid {
		c.DType = tensor.Float32
	}
	if c.MLPHidden == 0 {
		c.MLPHidden = 100
	}
	return c
}

// Names lists the reference models by their CLI name.
var Names = []string{"linreg", "mlp", "cnn", "widedeep"}

// architecture is a model's forward pass, built with layers: the first
// build creates the variables, a build in a scope that reuses variables
// (another tower, the evaluation path) finds them.
type architecture struct {
	// forward computes the model's output (the regression, or logits)
	// from its input x, with dropout when training.
	forward func(s *graph.Scope, c Config, x graph.Output, training bool) graph.Output
	// feature names the input of width inputs, and classes the classes of
	// a classifier (0: a regression).
	feature         string
	inputs, classes int
	// dropout says the training and evaluation paths differ.
	dropout bool
}

var architectures = map[string]architecture{
	"linreg": {linreg, "x", 1, 0, false},
	"mlp":    {mlp, "images", 784, 10, false},
	"cnn":    {cnn, "images", 784, 10, true},
}

// Build builds the model called name: its variables and one tower.
func Build(s *graph.Scope, name string, c Config) (*Model, error) {
	towers, err := BuildTowers(s, name, c, []string{""})
	if err != nil {
		return nil, err
	}
	return towers[0], nil
}

// BuildTowers builds the variables of the model called name once and one
// tower per device (in-graph replication, see layers.Towers: device ""
// means the scope's own placement, which also places the variables). Each
// tower has its own placeholders and losses; all share the variables.
func BuildTowers(s *graph.Scope, name string, c Config, devices []string) ([]*Model, error) {
	a, ok := architectures[name]
	if !ok && name == "widedeep" {
		return nil, fmt.Errorf("models: widedeep is built as an estimator model function (ModelFn), not as towers")
	}
	if !ok {
		return nil, fmt.Errorf("models: unknown model %q (want one of %v)", name, Names)
	}
	c = c.withDefaults()
	before := len(ops.TrainableVariables(s.Graph()))
	towers := make([]*Model, len(devices))
	layers.Towers(s, devices, func(ts *graph.Scope, i int) { towers[i] = a.tower(ts, c, name) })
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("models: building %s: %w", name, err)
	}
	vars := ops.TrainableVariables(s.Graph())[before:]
	for _, t := range towers {
		t.Variables = slices.Clone(vars)
	}
	return towers, nil
}

// tower builds the placeholders, the forward pass and the losses.
func (a architecture) tower(s *graph.Scope, c Config, name string) *Model {
	x := ops.Placeholder(s, a.feature, c.DType, tensor.MakeShape(-1, a.inputs))
	if a.classes == 0 {
		y := ops.Placeholder(s, "y", c.DType, tensor.MakeShape(-1, 1))
		loss := losses.MeanSquaredError(s, y, a.forward(s, c, x, false))
		return &Model{Name: name, Input: x, Label: y, Loss: loss, EvalLoss: loss,
			Params: map[string]graph.Output{"W": variable(s, "linear/W"), "b": variable(s, "linear/b")}}
	}
	y := ops.Placeholder(s, "labels", tensor.Int32, tensor.MakeShape(-1))
	logits := a.forward(s, c, x, true)
	evalLogits := logits
	if a.dropout { // the same variables without dropout, so neither path feeds a rate
		evalLogits = a.forward(s.NameScope("eval").ReuseVariables(), c, x, false)
	}
	es := s.SubScope("eval_metrics")
	pred := ops.Cast(es, ops.ArgMax(es, evalLogits, 1), tensor.Int32)
	return &Model{Name: name, Input: x, Label: y,
		Loss:     losses.SparseSoftmaxCrossEntropy(s, y, logits),
		EvalLoss: losses.SparseSoftmaxCrossEntropy(es, y, evalLogits),
		Correct:  ops.Sum(es, ops.Cast(es, ops.Equal(es, pred, y), tensor.Float32), nil, false),
	}
}

// variable is the value of the variable called name in s.
func variable(s *graph.Scope, name string) graph.Output {
	return ops.LookupVariable(s.Graph(), s.VariablePrefix()+name).Value()
}

// linreg is the linear regression y = W*x + b of x [batch, 1].
func linreg(s *graph.Scope, _ Config, x graph.Output, _ bool) graph.Output {
	return layers.Dense{Units: 1, KernelInit: ops.ZerosInit(), Name: "linear", KernelName: "W", BiasName: "b"}.Apply(s, x, false)
}

// mlp is the 784-100-10 perceptron (Config.MLPHidden wide): a sigmoid
// hidden layer and the logits of a softmax, of flattened images [batch, 784].
func mlp(s *graph.Scope, c Config, x graph.Output, training bool) graph.Output {
	return layers.Sequential{
		dense(c, "hidden", c.MLPHidden, ops.Sigmoid, ops.GlorotUniformInit(c.Seed), nil),
		dense(c, "softmax", 10, nil, ops.GlorotUniformInit(c.Seed+1), nil),
	}.Apply(s, x, training)
}

// cnn is the classic two-convolution network's logits of flattened images
// x: conv 5x5x32 SAME, relu, 2x2 max-pool, conv 5x5x64 SAME, relu,
// max-pool, dense 3136->1024 relu, dropout 0.5 (training only), dense
// 1024->10.
func cnn(s *graph.Scope, c Config, x graph.Output, training bool) graph.Output {
	conv := func(name string, filters, i int) layers.Conv2D {
		return layers.Conv2D{Filters: filters, KernelSize: [2]int{5, 5}, Padding: "SAME", Activation: ops.Relu, Name: name, KernelName: "W", BiasName: "b",
			KernelInit: ops.TruncatedNormalInit(0, 0.1, c.Seed+i), BiasInit: ops.ConstantInit(0.1), Partitioner: c.partitioner()}
	}
	pool := layers.MaxPool2D{PoolSize: [2]int{2, 2}, Padding: "SAME"}
	return layers.Sequential{
		conv("conv1", 32, 0), pool, conv("conv2", 64, 1), pool, layers.Flatten{},
		dense(c, "fc1", 1024, ops.Relu, ops.TruncatedNormalInit(0, 0.1, c.Seed+2), ops.ConstantInit(0.1)),
		layers.Dropout{Rate: 0.5, Seed: c.Seed + 4},
		dense(c, "fc2", 10, nil, ops.TruncatedNormalInit(0, 0.1, c.Seed+3), ops.ConstantInit(0.1)),
	}.Apply(s, ops.ReshapeTo(s, x, -1, 28, 28, 1), training)
}

// dense is a fully connected layer with the reference models' variable
// names ("<name>/W", "<name>/b"), its weight partitioned as c says.
func dense(c Config, name string, units int, act layers.Activation, init, biasInit ops.Initializer) layers.Dense {
	return layers.Dense{Units: units, Activation: act, KernelInit: init, BiasInit: biasInit, Name: name, KernelName: "W", BiasName: "b", Partitioner: c.partitioner()}
}

func (c Config) partitioner() layers.Partitioner {
	return layers.MinMaxPartitioner(c.MaxShards, c.MinShardBytes)
}
