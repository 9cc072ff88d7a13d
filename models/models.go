package models

import (
	"fmt"
	"sort"

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
	// Variables are the model's trainable variables, shared by all towers.
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
	// MinShardBytes each (ops.PartitionedVariable), as TensorFlow's
	// min_max_variable_partitioner: a replica device setter then spreads a
	// large layer over the ps tasks, and each ps link carries its share of
	// it. MaxShards 0 or 1 (or MinShardBytes 0) keeps every weight whole.
	MaxShards     int
	MinShardBytes int64
}

// shards returns how many shards a weight of shape takes under c.
func (c Config) shards(shape []int) int {
	if c.MaxShards < 2 || c.MinShardBytes <= 0 || len(shape) == 0 {
		return 1
	}
	bytes := int64(c.DType.Size())
	for _, d := range shape {
		bytes *= int64(d)
	}
	return int(max(1, min(int64(c.MaxShards), int64(shape[0]), bytes/c.MinShardBytes)))
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

// architecture is a model as two parts: its variables, created once, and a
// tower that computes the training loss and the evaluation outputs from
// them. Data-parallel training builds one tower per replica over one set of
// variables.
type architecture struct {
	// variables creates the parameters (a replica device setter in the scope
	// puts them on parameter servers).
	variables func(s *graph.Scope, c Config) params
	// tower builds placeholders, the forward pass and the losses.
	tower func(s *graph.Scope, c Config, p params) *Model
	// forward computes the model's output (the regression, or logits)
	// from its input x, with dropout when training.
	forward func(s *graph.Scope, c Config, p params, x graph.Output, training bool) graph.Output
	// feature names the input, and classes the classes of a classifier
	// (0: a regression).
	feature string
	classes int
}

// params are a model's parameters by name ("hidden/W").
type params map[string]param

// param is a model parameter: a variable, or one split into shards
// (*ops.PartitionedVariable, see Config.MaxShards).
type param interface{ Value() graph.Output }

// weight adds a weight matrix called name, partitioned as c says.
func weight(s *graph.Scope, c Config, name string, shape []int, init ops.Initializer) param {
	if n := c.shards(shape); n > 1 {
		if v, err := ops.NewPartitionedVariable(s, name, c.DType, shape, init, n); err == nil {
			return v
		} // the error is in s, which Build reports
	}
	return ops.NewVariable(s, name, c.DType, shape, init)
}

func (p params) value(name string) graph.Output { return p[name].Value() }

var architectures = map[string]architecture{
	"linreg": {linregVariables, linregTower, linregForward, "x", 0},
	"mlp":    {mlpVariables, mlpTower, mlpForward, "images", 10},
	"cnn":    {cnnVariables, cnnTower, cnnForward, "images", 10},
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
// tower per device (in-graph replication: device "" means the scope's own
// placement). Each tower has its own placeholders and losses; all share the
// variables.
func BuildTowers(s *graph.Scope, name string, c Config, devices []string) ([]*Model, error) {
	a, ok := architectures[name]
	if !ok && name == "widedeep" {
		return nil, fmt.Errorf("models: widedeep is built as an estimator model function (ModelFn), not as towers")
	}
	if !ok {
		return nil, fmt.Errorf("models: unknown model %q (want one of %v)", name, Names)
	}
	if len(devices) == 0 {
		return nil, fmt.Errorf("models: %s: no devices to build towers on", name)
	}
	c = c.withDefaults()
	p := a.variables(s, c)
	towers := make([]*Model, len(devices))
	for i, d := range devices {
		ts := s
		if len(devices) > 1 {
			ts = s.SubScope(fmt.Sprintf("tower_%d", i))
		}
		if d != "" {
			ts = ts.WithDevice(d)
		}
		towers[i] = a.tower(ts, c, p)
		towers[i].Variables = p.list()
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("models: building %s: %w", name, err)
	}
	return towers, nil
}

// list returns the variables in name order (a partitioned one's shards in
// theirs), for deterministic gradients.
func (p params) list() []*ops.Variable {
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	sort.Strings(names)
	vars := make([]*ops.Variable, 0, len(names))
	for _, n := range names {
		switch v := p[n].(type) {
		case *ops.Variable:
			vars = append(vars, v)
		case *ops.PartitionedVariable:
			vars = append(vars, v.Shards()...)
		}
	}
	return vars
}

// The linear regression y = W*x + b with a squared-error loss, fed x and y
// as [batch, 1] float tensors.
func linregVariables(s *graph.Scope, c Config) params {
	ls := s.SubScope("linear")
	return params{
		"W": ops.NewVariable(ls, "W", c.DType, []int{1, 1}, ops.ZerosInit()),
		"b": ops.NewVariable(ls, "b", c.DType, []int{1}, ops.ZerosInit()),
	}
}

func linregForward(s *graph.Scope, _ Config, p params, x graph.Output, _ bool) graph.Output {
	return ops.BiasAdd(s, ops.MatMul(s, x, p.value("W"), false, false), p.value("b"))
}

func linregTower(s *graph.Scope, c Config, p params) *Model {
	x := ops.Placeholder(s, "x", c.DType, tensor.MakeShape(-1, 1))
	y := ops.Placeholder(s, "y", c.DType, tensor.MakeShape(-1, 1))
	pred := linregForward(s, c, p, x, false)
	loss := ops.Mean(s, ops.SquaredDifference(s, pred, y), nil, false)
	return &Model{
		Name: "linreg", Input: x, Label: y, Loss: loss, EvalLoss: loss,
		Params: map[string]graph.Output{"W": p.value("W"), "b": p.value("b")},
	}
}

// The 784-100-10 perceptron (Config.MLPHidden wide): a sigmoid hidden layer and a softmax output
// with cross-entropy, fed flattened images [batch, 784] and int32 labels.
func mlpVariables(s *graph.Scope, c Config) params {
	p := params{}
	denseVariables(s.SubScope("hidden"), p, "hidden", c, 784, c.MLPHidden, c.Seed)
	denseVariables(s.SubScope("softmax"), p, "softmax", c, c.MLPHidden, 10, c.Seed+1)
	return p
}

func mlpForward(s *graph.Scope, _ Config, p params, x graph.Output, _ bool) graph.Output {
	return dense(s, p, "softmax", ops.Sigmoid(s, dense(s, p, "hidden", x)))
}

func mlpTower(s *graph.Scope, c Config, p params) *Model {
	x := ops.Placeholder(s, "images", c.DType, tensor.MakeShape(-1, 784))
	y := ops.Placeholder(s, "labels", tensor.Int32, tensor.MakeShape(-1))
	logits := mlpForward(s, c, p, x, false)
	return classifier(s, "mlp", x, y, logits, logits)
}

// The classic two-convolution network: conv 5x5x32 SAME, relu, 2x2
// max-pool, conv 5x5x64 SAME, relu, max-pool, dense 3136->1024 relu,
// dropout 0.5 (training only), dense 1024->10, softmax cross-entropy.
func cnnVariables(s *graph.Scope, c Config) params {
	p := params{}
	for i, l := range []struct {
		name  string
		shape []int
	}{
		{"conv1", []int{5, 5, 1, 32}}, {"conv2", []int{5, 5, 32, 64}},
		{"fc1", []int{7 * 7 * 64, 1024}}, {"fc2", []int{1024, 10}},
	} {
		ls := s.SubScope(l.name)
		p[l.name+"/W"] = weight(ls, c, "W", l.shape, ops.TruncatedNormalInit(0, 0.1, c.Seed+i))
		p[l.name+"/b"] = ops.NewVariable(ls, "b", c.DType, l.shape[len(l.shape)-1:], ops.ConstantInit(0.1))
	}
	return p
}

// cnnForward is the CNN's logits of flattened images x, with dropout when
// training.
func cnnForward(s *graph.Scope, c Config, p params, x graph.Output, training bool) graph.Output {
	conv := func(h graph.Output, layer string) graph.Output {
		h = ops.Conv2D(s, h, p.value(layer+"/W"), [2]int{1, 1}, "SAME")
		h = ops.Relu(s, ops.BiasAdd(s, h, p.value(layer+"/b")))
		return ops.MaxPool(s, h, [2]int{2, 2}, [2]int{2, 2}, "SAME")
	}
	h := conv(conv(ops.ReshapeTo(s, x, -1, 28, 28, 1), "conv1"), "conv2")
	h = ops.Relu(s, dense(s, p, "fc1", ops.ReshapeTo(s, h, -1, 7*7*64)))
	if training {
		h = ops.Dropout(s, h, 0.5, c.Seed+4)
	}
	return dense(s, p, "fc2", h)
}

func cnnTower(s *graph.Scope, c Config, p params) *Model {
	x := ops.Placeholder(s, "images", c.DType, tensor.MakeShape(-1, 784))
	y := ops.Placeholder(s, "labels", tensor.Int32, tensor.MakeShape(-1))
	// The forward pass is built twice over the same variables: with dropout
	// for training, without for evaluation, so neither path feeds a rate.
	return classifier(s, "cnn", x, y, cnnForward(s.SubScope("train"), c, p, x, true), cnnForward(s.SubScope("eval"), c, p, x, false))
}

// denseVariables adds the Glorot-uniform weights and zero bias of a fully
// connected layer as p[layer+"/W"] and p[layer+"/b"].
func denseVariables(s *graph.Scope, p params, layer string, c Config, in, out, seed int) {
	p[layer+"/W"] = weight(s, c, "W", []int{in, out}, ops.GlorotUniformInit(seed))
	p[layer+"/b"] = ops.NewVariable(s, "b", c.DType, []int{out}, ops.ZerosInit())
}

// dense applies the fully connected layer of p named layer to x.
func dense(s *graph.Scope, p params, layer string, x graph.Output) graph.Output {
	return ops.BiasAdd(s, ops.MatMul(s, x, p.value(layer+"/W"), false, false), p.value(layer+"/b"))
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
