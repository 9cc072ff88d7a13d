package layers_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/grad/gradtest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// Non-zero initial values, so that every parameter's gradient matters.
var (
	smallUniform = ops.RandomUniformInit(-0.5, 0.5, 7)
	nearOne      = ops.RandomUniformInit(0.5, 1.5, 8)
)

func TestGradients(t *testing.T) {
	ids := tensor.MustFromSlice([]int32{0, 2, 2, 1, 3, 0}, 2, 3)
	for _, c := range []gradtest.Case{
		{Name: "Dense", Inputs: []*tensor.Tensor{gradtest.Random(1, 3, 4)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.Dense{Units: 2, Activation: ops.Tanh, BiasInit: smallUniform}.Apply(s, x[0], true)
			}},
		{Name: "DenseRank3", Inputs: []*tensor.Tensor{gradtest.Random(2, 2, 3, 4)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.Dense{Units: 3, NoBias: true}.Apply(s, x[0], true)
			}},
		// Convolutions are float32 only: the looser float32 tolerances.
		{Name: "Conv2DSame", Inputs: []*tensor.Tensor{gradtest.Random32(3, 1, 5, 5, 2)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.Conv2D{Filters: 2, KernelSize: [2]int{3, 3}, Padding: "SAME", Activation: ops.Sigmoid, BiasInit: smallUniform}.Apply(s, x[0], true)
			}},
		{Name: "Conv2DValidStrided", Inputs: []*tensor.Tensor{gradtest.Random32(4, 2, 5, 5, 1)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.Conv2D{Filters: 3, KernelSize: [2]int{2, 2}, Strides: [2]int{2, 2}}.Apply(s, x[0], true)
			}},
		{Name: "PoolsFlattenDense", Inputs: []*tensor.Tensor{gradtest.Random(5, 2, 4, 4, 2)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.Sequential{
					layers.MaxPool2D{PoolSize: [2]int{2, 2}},
					layers.AvgPool2D{PoolSize: [2]int{2, 2}, Strides: [2]int{1, 1}, Padding: "SAME"},
					layers.Flatten{},
					layers.Dense{Units: 2},
				}.Apply(s, x[0], true)
			}},
		{Name: "DenseNormalizedActivation", Inputs: []*tensor.Tensor{gradtest.Random(9, 4, 3)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.Sequential{layers.Dense{Units: 3, NoBias: true}, layers.BatchNormalization{}, layers.Activation(ops.Tanh), layers.Activation(nil)}.Apply(s, x[0], true)
			}},
		{Name: "Embedding", Inputs: []*tensor.Tensor{ids},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.Embedding{InputDim: 4, OutputDim: 3, DType: tensor.Float64}.Apply(s, x[0], true)
			}, Variables: true},
		{Name: "BatchNormalizationTraining", Inputs: []*tensor.Tensor{gradtest.Random(6, 5, 3)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.BatchNormalization{}.Apply(s, x[0], true)
			}},
		{Name: "BatchNormalizationImages", Inputs: []*tensor.Tensor{gradtest.Random(7, 2, 3, 2, 2)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.BatchNormalization{Epsilon: 1e-2}.Apply(s, x[0], true)
			}},
		{Name: "BatchNormalizationEval", Inputs: []*tensor.Tensor{gradtest.Random(8, 4, 3)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.BatchNormalization{}.Apply(s, x[0], false)
			}},
		{Name: "LayerNormalization", Inputs: []*tensor.Tensor{gradtest.Random(9, 3, 4)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return layers.LayerNormalization{}.Apply(s, x[0], true)
			}},
	} {
		if c.Name != "Embedding" {
			c.Variables = true
		}
		t.Run(c.Name, func(t *testing.T) { gradtest.Check(t, c) })
	}
}

func run(t *testing.T, s *graph.Scope, feeds map[graph.Output]*tensor.Tensor, fetches []graph.Output, targets ...*graph.Node) []*tensor.Tensor {
	t.Helper()
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{ops.GlobalVariablesInitializer(s)}); err != nil {
		t.Fatal(err)
	}
	if len(targets) > 0 {
		if _, err := sess.Run(ctx, feeds, nil, targets); err != nil {
			t.Fatal(err)
		}
	}
	out, err := sess.Run(ctx, feeds, fetches, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func variableNames(g *graph.Graph) []string {
	var names []string
	for _, v := range ops.GlobalVariables(g) {
		names = append(names, v.Name())
	}
	return names
}

func TestNamesAndReuse(t *testing.T) {
	build := func(s *graph.Scope, x graph.Output) graph.Output {
		h := layers.Dense{Units: 3, Activation: ops.Relu}.Apply(s, x, true)
		h = layers.Dense{Units: 3, Name: "hidden"}.Apply(s, h, true)
		return layers.Dense{Units: 1}.Apply(s, h, true)
	}
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 2))
	build(s, x)
	want := "dense/kernel dense/bias hidden/kernel hidden/bias dense_1/kernel dense_1/bias"
	if got := strings.Join(variableNames(s.Graph()), " "); got != want {
		t.Fatalf("variables %q, want %q", got, want)
	}
	// A second tower in a name scope that reuses the variables adds none.
	build(s.NameScope("tower_1").ReuseVariables(), x)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(variableNames(s.Graph()), " "); got != want {
		t.Fatalf("after reuse: variables %q, want %q", got, want)
	}
	// Reuse of a variable that does not exist is an error.
	layers.Dense{Units: 3, Name: "other"}.Apply(s.ReuseVariables(), x, true)
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "other/kernel") {
		t.Fatalf("reusing a missing layer: err %v", err)
	}
	// So is a named layer built twice without reuse: it would not share.
	s = graph.NewScope()
	x = ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 2))
	layers.Dense{Units: 3, Name: "hidden"}.Apply(s, x, true)
	layers.Dense{Units: 3, Name: "hidden"}.Apply(s, x, true)
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), `"hidden/kernel" already exists`) {
		t.Fatalf("a named layer built twice: err %v", err)
	}
}

// Kernels of the same shape get different initial values (their seeds come
// from their full names, not the names' lengths), the same in every build,
// and another graph-level seed changes them.
func TestSeeds(t *testing.T) {
	kernels := func(seed int64) []*tensor.Tensor {
		s := graph.NewScope().WithSeed(seed)
		x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 4))
		layers.Dense{Units: 4, Name: "encoder"}.Apply(s, x, true)
		layers.Dense{Units: 4, Name: "decoder"}.Apply(s, x, true)
		g := s.Graph()
		return run(t, s, nil, []graph.Output{ops.LookupVariable(g, "encoder/kernel").Value(), ops.LookupVariable(g, "decoder/kernel").Value()})
	}
	a, b, c := kernels(0), kernels(0), kernels(1)
	if tensor.Equal(a[0], a[1]) {
		t.Error("encoder and decoder kernels start equal")
	}
	if !tensor.Equal(a[0], b[0]) || !tensor.Equal(a[1], b[1]) {
		t.Error("two builds of the same model start differently")
	}
	if tensor.Equal(a[0], c[0]) {
		t.Error("another graph seed gives the same kernel")
	}
	limit := math.Sqrt(6.0 / 8)
	for _, v := range a[0].Float32s() {
		if math.Abs(float64(v)) > limit {
			t.Fatalf("kernel value %v beyond the Glorot limit %v", v, limit)
		}
	}
}

func TestShapes(t *testing.T) {
	s := graph.NewScope()
	images := ops.Placeholder(s, "images", tensor.Float32, tensor.MakeShape(-1, 28, 28, 1))
	cnn := layers.Sequential{
		layers.Conv2D{Filters: 32, KernelSize: [2]int{5, 5}, Padding: "SAME", Activation: ops.Relu},
		layers.MaxPool2D{PoolSize: [2]int{2, 2}},
		layers.Conv2D{Filters: 64, KernelSize: [2]int{5, 5}, Padding: "SAME", Activation: ops.Relu},
		layers.MaxPool2D{PoolSize: [2]int{2, 2}},
		layers.Flatten{},
		layers.Dense{Units: 1024, Activation: ops.Relu},
		layers.Dropout{Rate: 0.4},
		layers.Dense{Units: 10},
	}
	logits := cnn.Apply(s, images, true)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := logits.Shape(); !got.Equal(tensor.MakeShape(-1, 10)) {
		t.Errorf("logits shape %v, want [?,10]", got)
	}
	if v := ops.LookupVariable(s.Graph(), "dense/kernel"); v == nil || !v.Shape().Equal(tensor.MakeShape(3136, 1024)) {
		t.Errorf("dense/kernel is %v, want [3136,1024]", v)
	}
	ids := ops.Placeholder(s, "ids", tensor.Int64, tensor.MakeShape(-1, 5))
	if e := (layers.Embedding{InputDim: 100, OutputDim: 8}).Apply(s, ids, true); !e.Shape().Equal(tensor.MakeShape(-1, 5, 8)) {
		t.Errorf("embedding shape %v, want [?,5,8]", e.Shape())
	}
}

// TestDenseOverSequences: Dense over [batch, time, features] keeps the
// dimensions it knows, so that another Dense can follow it (a per-step
// MLP over an LSTM's sequences); its output was [?,?,?], which the next
// layer refused for an unknown last dimension.
func TestDenseOverSequences(t *testing.T) {
	s := graph.NewScope()
	for _, c := range []struct{ in, want tensor.Shape }{
		{tensor.MakeShape(-1, 5, 3), tensor.MakeShape(-1, 5, 2)},
		{tensor.MakeShape(-1, -1, 3), tensor.MakeShape(-1, -1, 2)},
		{tensor.MakeShape(4, 5, 6, 3), tensor.MakeShape(4, 5, 6, 2)},
	} {
		x := ops.Placeholder(s, "x", tensor.Float32, c.in)
		y := layers.Sequential{layers.Dense{Units: 8, Activation: ops.Relu}, layers.Dense{Units: 2}}.Apply(s, x, true)
		if err := s.Err(); err != nil {
			t.Fatalf("Dense, Dense over %v: %v", c.in, err)
		}
		if !y.Shape().Equal(c.want) {
			t.Errorf("Dense, Dense over %v: shape %v, want %v", c.in, y.Shape(), c.want)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	for _, c := range []struct {
		name, want string
		build      func(s *graph.Scope)
	}{
		{"unknown input size", "last dimension must be known", func(s *graph.Scope) {
			layers.Dense{Units: 2}.Apply(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, -1)), true)
		}},
		{"no units", "Units 0", func(s *graph.Scope) {
			layers.Dense{}.Apply(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 3)), true)
		}},
		{"conv of a matrix", "want rank 4", func(s *graph.Scope) {
			layers.Conv2D{Filters: 2, KernelSize: [2]int{3, 3}}.Apply(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 3)), true)
		}},
		{"bad padding", "padding \"same\"", func(s *graph.Scope) {
			layers.MaxPool2D{PoolSize: [2]int{2, 2}, Padding: "same"}.Apply(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 4, 4, 1)), true)
		}},
		{"dropout rate", "Rate 1", func(s *graph.Scope) {
			layers.Dropout{Rate: 1}.Apply(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 4)), true)
		}},
		{"float ids", "want int32 or int64", func(s *graph.Scope) {
			layers.Embedding{InputDim: 3, OutputDim: 2}.Apply(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1)), true)
		}},
	} {
		s := graph.NewScope()
		c.build(s)
		if err := s.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestDropout(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 1000))
	d := layers.Dropout{Rate: 0.5}
	if y := d.Apply(s, x, false); y != x {
		t.Errorf("Dropout in evaluation is %v, want its input", y)
	}
	y := d.Apply(s, x, true)
	ones := tensor.New(tensor.Float32, 1, 1000)
	for i := range ones.Float32s() {
		ones.Float32s()[i] = 1
	}
	out := run(t, s, map[graph.Output]*tensor.Tensor{x: ones}, []graph.Output{y})
	kept := 0
	for _, v := range out[0].Float32s() {
		switch v {
		case 2:
			kept++
		case 0:
		default:
			t.Fatalf("dropout output %v, want 0 or 2", v)
		}
	}
	if kept < 400 || kept > 600 {
		t.Errorf("dropout kept %d of 1000 at rate 0.5", kept)
	}
}

// BatchNormalization normalises by the batch in training, and moves its
// averages by the update ops; in evaluation it reads the averages only.
func TestBatchNormalizationStatistics(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float64, tensor.MakeShape(-1, 2))
	bn := layers.BatchNormalization{Momentum: 0.9, Epsilon: 1e-3, Name: "bn"}
	train := bn.Apply(s, x, true)
	eval := bn.Apply(s.NameScope("eval").ReuseVariables(), x, false)
	updates := layers.UpdateOps(s.Graph())
	if len(updates) != 2 {
		t.Fatalf("%d update ops, want 2 (the training build's mean and variance)", len(updates))
	}
	g := s.Graph()
	mean, variance := ops.LookupVariable(g, "bn/moving_mean"), ops.LookupVariable(g, "bn/moving_variance")
	for _, v := range ops.TrainableVariables(g) {
		if v.Name() == mean.Name() || v.Name() == variance.Name() {
			t.Errorf("%s is trainable", v.Name())
		}
	}
	batch := tensor.MustFromSlice([]float64{1, 10, 3, 20, 5, 60}, 3, 2)
	feeds := map[graph.Output]*tensor.Tensor{x: batch}
	out := run(t, s, feeds, []graph.Output{train, eval, mean.Value(), variance.Value()}, ops.Group(s, "update", updates...))
	// Batch statistics: mean (3, 30), biased variance (8/3, 1400/3).
	bm, bv := []float64{3, 30}, []float64{8.0 / 3, 1400.0 / 3}
	for k := 0; k < 6; k++ {
		c := k % 2
		want := (batch.Float64s()[k] - bm[c]) / math.Sqrt(bv[c]+1e-3)
		if got := out[0].Float64s()[k]; math.Abs(got-want) > 1e-9 {
			t.Errorf("training output [%d] = %v, want %v (batch statistics)", k, got, want)
		}
	}
	for c := 0; c < 2; c++ {
		// One update from (0, 1): moving = moving*0.9 + batch*0.1.
		wantMean, wantVar := 0.1*bm[c], 0.9+0.1*bv[c]
		if got := out[2].Float64s()[c]; math.Abs(got-wantMean) > 1e-9 {
			t.Errorf("moving mean [%d] = %v, want %v", c, got, wantMean)
		}
		if got := out[3].Float64s()[c]; math.Abs(got-wantVar) > 1e-9 {
			t.Errorf("moving variance [%d] = %v, want %v", c, got, wantVar)
		}
	}
	for k := 0; k < 6; k++ {
		c := k % 2
		mm, mv := out[2].Float64s()[c], out[3].Float64s()[c]
		want := (batch.Float64s()[k] - mm) / math.Sqrt(mv+1e-3)
		if got := out[1].Float64s()[k]; math.Abs(got-want) > 1e-9 {
			t.Errorf("evaluation output [%d] = %v, want %v (moving statistics)", k, got, want)
		}
	}
}

func TestRegularizer(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 3))
	d := layers.Dense{Units: 2, KernelInit: ops.ConstantInit(2), KernelRegularizer: layers.L2(0.5), Name: "d"}
	d.Apply(s, x, true)
	d.Apply(s.NameScope("tower_1").ReuseVariables(), x, true) // no second penalty
	terms := s.Graph().Collection(ops.RegularizationLossesCollection)
	if len(terms) != 1 {
		t.Fatalf("%d regularization terms, want 1", len(terms))
	}
	out := run(t, s, nil, []graph.Output{terms[0].Output(0)})
	if got := out[0].Float64At(0); got != 0.5*6*4/2 { // 0.5 * sum(2²) / 2 over 6 weights
		t.Errorf("penalty %v, want 6", got)
	}
}

// TestActivationLayer: an Activation is a layer of a stack; nil passes
// its input through.
func TestActivationLayer(t *testing.T) {
	s := graph.NewScope()
	x := ops.Const(s, tensor.MustFromSlice([]float32{-2, -0.5, 0, 1.5}, 2, 2))
	out := run(t, s, nil, []graph.Output{
		layers.Sequential{layers.Activation(ops.Relu)}.Apply(s, x, false),
		layers.Activation(nil).Apply(s, x, true),
	})
	for i, want := range [][]float32{{0, 0, 0, 1.5}, {-2, -0.5, 0, 1.5}} {
		if got := out[i].Float32s(); !slices.Equal(got, want) {
			t.Errorf("output %d: %v; want %v", i, got, want)
		}
	}
}
