package losses_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/distflow/distflow/grad/gradtest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/losses"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// distributions returns float64 rows [..., n] of positive values summing
// to 1, as the dense labels of a softmax cross-entropy must be.
func distributions(seed int64, shape ...int) *tensor.Tensor {
	t := probabilities(seed, shape...)
	d := t.Float64s()
	n := shape[len(shape)-1]
	for r := 0; r < len(d); r += n {
		sum := 0.0
		for _, v := range d[r : r+n] {
			sum += v
		}
		for i := r; i < r+n; i++ {
			d[i] /= sum
		}
	}
	return t
}

// probabilities returns a float64 tensor of values in (0.1, 0.9).
func probabilities(seed int64, shape ...int) *tensor.Tensor {
	t := gradtest.Random(seed, shape...)
	for i, v := range t.Float64s() {
		t.Float64s()[i] = 0.5 + 0.4*v
	}
	return t
}

func TestGradients(t *testing.T) {
	weights := tensor.MustFromSlice([]float64{1, 0, 2, 0.5}, 4, 1)
	w := func(s *graph.Scope) losses.Option { return losses.Weights(ops.Const(s, weights)) }
	classes := tensor.MustFromSlice([]int32{2, 0, 1, 2}, 4)
	for _, c := range []gradtest.Case{
		{Name: "MeanSquaredError", Inputs: []*tensor.Tensor{gradtest.Random(1, 4, 3), gradtest.Random(2, 4, 3)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output { return losses.MeanSquaredError(s, x[0], x[1]) }},
		{Name: "MeanSquaredErrorWeightedMean", Inputs: []*tensor.Tensor{gradtest.Random(1, 4, 3), gradtest.Random(2, 4, 3)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return losses.MeanSquaredError(s, x[0], x[1], w(s), losses.WithReduction(losses.Mean))
			}},
		{Name: "AbsoluteDifferenceSum", Inputs: []*tensor.Tensor{gradtest.Random(3, 4, 2), gradtest.Random(4, 4, 2)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return losses.AbsoluteDifference(s, x[0], x[1], w(s), losses.WithReduction(losses.Sum))
			}},
		{Name: "Huber", Inputs: []*tensor.Tensor{gradtest.Random(5, 4, 3), gradtest.Random(6, 4, 3)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return losses.Huber(s, x[0], ops.Mul(s, x[1], ops.Scalar(s, tensor.Float64, 3)), 0.7, w(s))
			}},
		{Name: "LogLoss", Inputs: []*tensor.Tensor{probabilities(7, 4, 2), probabilities(8, 4, 2)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return losses.LogLoss(s, x[0], x[1], 1e-7, losses.WithReduction(losses.SumOverBatchSize))
			}},
		{Name: "SigmoidCrossEntropy", Inputs: []*tensor.Tensor{probabilities(9, 4, 3), gradtest.Random(10, 4, 3)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return losses.SigmoidCrossEntropy(s, x[0], ops.Mul(s, x[1], ops.Scalar(s, tensor.Float64, 4)), w(s))
			}},
		{Name: "SoftmaxCrossEntropy", Inputs: []*tensor.Tensor{distributions(11, 4, 3), gradtest.Random(12, 4, 3)}, Wrt: []int{1},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return losses.SoftmaxCrossEntropy(s, x[0], x[1], losses.WithReduction(losses.None))
			}},
		{Name: "SoftmaxCrossEntropyRank3", Inputs: []*tensor.Tensor{distributions(13, 2, 2, 3), gradtest.Random(14, 2, 2, 3)}, Wrt: []int{1},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output { return losses.SoftmaxCrossEntropy(s, x[0], x[1]) }},
		{Name: "SparseSoftmaxCrossEntropy", Inputs: []*tensor.Tensor{classes, gradtest.Random(15, 4, 3)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return losses.SparseSoftmaxCrossEntropy(s, x[0], x[1], losses.Weights(ops.Const(s, []float64{1, 0, 2, 0.5})))
			}},
	} {
		t.Run(c.Name, func(t *testing.T) { gradtest.Check(t, c) })
	}
}

// TestGradientsUnknownBatch checks the losses' gradients when the batch
// dimension is known only at run time, as with a model's placeholders:
// the labels' shape checks and the reshapes of rank-3 logits then work
// from run-time shapes.
func TestGradientsUnknownBatch(t *testing.T) {
	rows := func(shape ...int) tensor.Shape { return tensor.MakeShape(append([]int{-1}, shape...)...) }
	perExample := func(s *graph.Scope) losses.Option {
		return losses.Weights(ops.Const(s, tensor.MustFromSlice([]float64{1, 0, 2, 0.5}, 4, 1)))
	}
	classes := tensor.MustFromSlice([]int64{2, 0, 1, 1, 0, 2}, 2, 3)
	for _, c := range []gradtest.Case{
		{Name: "MeanSquaredErrorNonzeroWeights", Inputs: []*tensor.Tensor{gradtest.Random(21, 4, 3), gradtest.Random(22, 4, 3)},
			Shapes: []tensor.Shape{rows(3), rows(3)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return losses.MeanSquaredError(s, x[0], x[1], perExample(s))
			}},
		{Name: "SigmoidCrossEntropyMean", Inputs: []*tensor.Tensor{probabilities(23, 4, 2), gradtest.Random(24, 4, 2)},
			Shapes: []tensor.Shape{rows(2), rows(2)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return losses.SigmoidCrossEntropy(s, x[0], x[1], perExample(s), losses.WithReduction(losses.Mean))
			}},
		{Name: "SoftmaxCrossEntropyRank3", Inputs: []*tensor.Tensor{distributions(25, 2, 3, 4), gradtest.Random(26, 2, 3, 4)}, Wrt: []int{1},
			Shapes: []tensor.Shape{rows(3, 4), rows(3, 4)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return losses.SoftmaxCrossEntropy(s, x[0], x[1], losses.WithReduction(losses.SumOverBatchSize))
			}},
		{Name: "SparseSoftmaxCrossEntropyRank3", Inputs: []*tensor.Tensor{classes, gradtest.Random(27, 2, 3, 3)},
			Shapes: []tensor.Shape{rows(3), rows(3, 3)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				return losses.SparseSoftmaxCrossEntropy(s, x[0], x[1])
			}},
	} {
		t.Run(c.Name, func(t *testing.T) { gradtest.Check(t, c) })
	}
}

func eval(t *testing.T, s *graph.Scope, feeds map[graph.Output]*tensor.Tensor, fetches ...graph.Output) ([]*tensor.Tensor, error) {
	t.Helper()
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	return sess.Run(context.Background(), feeds, fetches, nil)
}

func TestValues(t *testing.T) {
	labels := []float64{0, 1, 1, 0}
	preds := []float64{0.2, 0.6, 3, -1}
	weights := []float64{1, 2, 0, 1}
	var sq, abs, huber, wsq float64
	for i := range labels {
		e := preds[i] - labels[i]
		sq += e * e
		wsq += weights[i] * e * e
		abs += math.Abs(e)
		if math.Abs(e) <= 1 {
			huber += e * e / 2
		} else {
			huber += math.Abs(e) - 0.5
		}
	}
	s := graph.NewScope()
	l, p := ops.Const(s, labels), ops.Const(s, preds)
	wt := losses.Weights(ops.Const(s, weights))
	for _, c := range []struct {
		name string
		loss graph.Output
		want float64
	}{
		{"mse", losses.MeanSquaredError(s, l, p), sq / 4},
		{"mse sum", losses.MeanSquaredError(s, l, p, losses.WithReduction(losses.Sum)), sq},
		{"mse weighted nonzero", losses.MeanSquaredError(s, l, p, wt), wsq / 3},
		{"mse weighted mean", losses.MeanSquaredError(s, l, p, wt, losses.WithReduction(losses.Mean)), wsq / 4},
		{"mse weighted over batch", losses.MeanSquaredError(s, l, p, wt, losses.WithReduction(losses.SumOverBatchSize)), wsq / 4},
		{"mse zero weights", losses.MeanSquaredError(s, l, p, losses.Weights(ops.Scalar(s, tensor.Float64, 0))), 0},
		{"absolute", losses.AbsoluteDifference(s, l, p), abs / 4},
		{"huber", losses.Huber(s, l, p, 1), huber / 4},
		{"sigmoid", losses.SigmoidCrossEntropy(s, ops.Const(s, []float64{1}), ops.Const(s, []float64{0})), math.Log(2)},
		{"log", losses.LogLoss(s, ops.Const(s, []float64{1, 0}), ops.Const(s, []float64{0.8, 0.25}), 0), -(math.Log(0.8) + math.Log(0.75)) / 2},
		{"softmax", losses.SoftmaxCrossEntropy(s, ops.Const(s, tensor.MustFromSlice([]float64{0, 1}, 1, 2)), ops.Const(s, tensor.MustFromSlice([]float64{0, 0}, 1, 2))), math.Log(2)},
	} {
		out, err := eval(t, s, nil, c.loss)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := out[0].Float64At(0); math.Abs(got-c.want) > 1e-9 || out[0].Rank() != 0 {
			t.Errorf("%s: %v (shape %v), want the scalar %v", c.name, got, out[0].Shape(), c.want)
		}
	}
	none := losses.MeanSquaredError(s, l, p, losses.WithReduction(losses.None))
	if !none.Shape().Equal(tensor.MakeShape(4)) {
		t.Errorf("reduction None: shape %v, want [4]", none.Shape())
	}
}

// A model with one output for two targets is refused at build time, with
// both shapes named, rather than broadcast into a [batch, 2] loss.
func TestShapesRefused(t *testing.T) {
	f32 := func(s *graph.Scope, name string, dims ...int) graph.Output {
		return ops.Placeholder(s, name, tensor.Float32, tensor.MakeShape(dims...))
	}
	for _, c := range []struct {
		name  string
		build func(s *graph.Scope) graph.Output
		want  []string
	}{
		{"one output for two targets", func(s *graph.Scope) graph.Output {
			x := f32(s, "x", -1, 3)
			pred := layers.Dense{Units: 1}.Apply(s, x, true)
			return losses.MeanSquaredError(s, f32(s, "y", -1, 2), pred)
		}, []string{"mean_squared_error", "[?,2]", "[?,1]", "refusing to broadcast"}},
		{"rank", func(s *graph.Scope) graph.Output {
			return losses.AbsoluteDifference(s, f32(s, "y", -1), f32(s, "p", -1, 1))
		}, []string{"absolute_difference", "[?]", "[?,1]"}},
		{"huber", func(s *graph.Scope) graph.Output {
			return losses.Huber(s, f32(s, "y", 4, 3), f32(s, "p", 3, 4), 1)
		}, []string{"huber_loss", "[4,3]", "[3,4]"}},
		{"dense softmax labels", func(s *graph.Scope) graph.Output {
			return losses.SoftmaxCrossEntropy(s, f32(s, "y", -1, 10), f32(s, "logits", -1, 9))
		}, []string{"softmax_cross_entropy", "[?,10]", "[?,9]"}},
		{"sparse labels with a class axis", func(s *graph.Scope) graph.Output {
			return losses.SparseSoftmaxCrossEntropy(s, ops.Placeholder(s, "y", tensor.Int32, tensor.MakeShape(-1, 1)), f32(s, "logits", -1, 10))
		}, []string{"sparse_softmax_cross_entropy", "[?,1]", "[?,10]", "want labels of shape [?]"}},
		{"weights", func(s *graph.Scope) graph.Output {
			return losses.MeanSquaredError(s, f32(s, "y", -1, 2), f32(s, "p", -1, 2), losses.Weights(f32(s, "w", 3)))
		}, []string{"weights", "[3]", "[?,2]"}},
		{"integer predictions", func(s *graph.Scope) graph.Output {
			return losses.LogLoss(s, f32(s, "y", -1), ops.Placeholder(s, "p", tensor.Int32, tensor.MakeShape(-1)), 1e-7)
		}, []string{"log_loss", "int32"}},
	} {
		s := graph.NewScope()
		if out := c.build(s); out.Valid() {
			t.Errorf("%s: built %v", c.name, out)
		}
		err := s.Err()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %q", c.name, err, w)
			}
		}
	}
}

// Shapes the graph leaves open are checked when the step runs.
func TestShapesCheckedAtRunTime(t *testing.T) {
	s := graph.NewScope()
	y := ops.Placeholder(s, "y", tensor.Float32, tensor.MakeShape(-1, -1))
	p := ops.Placeholder(s, "p", tensor.Float32, tensor.MakeShape(-1, -1))
	loss := losses.MeanSquaredError(s, y, p)
	ids := ops.Placeholder(s, "ids", tensor.Int32, tensor.MakeShape(-1))
	logits := ops.Placeholder(s, "logits", tensor.Float32, tensor.MakeShape(-1, 3))
	xent := losses.SparseSoftmaxCrossEntropy(s, ids, logits)
	for _, c := range []struct {
		name   string
		yShape []int
		pShape []int
		ok     bool
	}{
		{"equal", []int{2, 3}, []int{2, 3}, true},
		{"one output for two targets", []int{4, 2}, []int{4, 1}, false},
		{"transposed", []int{2, 3}, []int{3, 2}, false},
		{"one target for two outputs", []int{4, 1}, []int{4, 2}, false},
	} {
		_, err := eval(t, s, map[graph.Output]*tensor.Tensor{
			y: tensor.New(tensor.Float32, c.yShape...), p: tensor.New(tensor.Float32, c.pShape...),
		}, loss)
		if (err == nil) != c.ok {
			t.Errorf("%s: labels %v, predictions %v: err %v", c.name, c.yShape, c.pShape, err)
		}
	}
	_, err := eval(t, s, map[graph.Output]*tensor.Tensor{ids: tensor.New(tensor.Int32, 3), logits: tensor.New(tensor.Float32, 2, 3)}, xent)
	if err == nil {
		t.Error("3 labels for 2 rows of logits: no error")
	}
	if _, err := eval(t, s, map[graph.Output]*tensor.Tensor{ids: tensor.New(tensor.Int32, 2), logits: tensor.New(tensor.Float32, 2, 3)}, xent); err != nil {
		t.Error(err)
	}
}

func TestRegularizationLoss(t *testing.T) {
	s := graph.NewScope()
	if out, err := eval(t, s, nil, losses.RegularizationLoss(s)); err != nil || out[0].Float64At(0) != 0 {
		t.Fatalf("no regularizers: %v, %v", out, err)
	}
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 2))
	h := layers.Dense{Units: 2, KernelInit: ops.OnesInit(), KernelRegularizer: layers.L2(1)}.Apply(s, x, true)
	layers.Dense{Units: 3, KernelInit: ops.OnesInit(), KernelRegularizer: layers.L2(0.1)}.Apply(s, h, true)
	reg := losses.RegularizationLoss(s)
	init := ops.GlobalVariablesInitializer(s)
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{reg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out[0].Float64At(0), 1*4.0/2+0.1*6/2; math.Abs(got-want) > 1e-6 {
		t.Errorf("regularization loss %v, want %v", got, want)
	}
}
