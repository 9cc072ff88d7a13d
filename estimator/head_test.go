package estimator_test

import (
	"context"
	"io"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

func placeholder(s *graph.Scope, name string, dt tensor.DType, dims ...int) graph.Output {
	return ops.Placeholder(s, name, dt, tensor.MakeShape(dims...))
}

func keys[V any](m map[string]V) string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return strings.Join(k, ",")
}

// Each mode's spec has what the mode needs: predictions always, the loss
// and the optimizer in Train and Eval, the metrics in Eval.
func TestHeadSpecInEachMode(t *testing.T) {
	opt := train.NewGradientDescent(0.1)
	for _, c := range []struct {
		name, predictions, metrics string
		mode                       estimator.Mode
		spec                       func(s *graph.Scope, mode estimator.Mode) (*estimator.Spec, error)
	}{
		{"classification", "class,probabilities", "accuracy", 0, func(s *graph.Scope, mode estimator.Mode) (*estimator.Spec, error) {
			return estimator.ClassificationHead{Optimizer: opt}.Spec(s, placeholder(s, "logits", tensor.Float32, -1, 3), placeholder(s, "labels", tensor.Int32, -1), mode)
		}},
		{"classification, ClassKey", "classes,probabilities", "accuracy", 0, func(s *graph.Scope, mode estimator.Mode) (*estimator.Spec, error) {
			return estimator.ClassificationHead{Optimizer: opt, ClassKey: "classes"}.Spec(s, placeholder(s, "logits", tensor.Float32, -1, 3), placeholder(s, "labels", tensor.Int64, -1, 1), mode)
		}},
		{"regression", "predictions", "mae,mse", 0, func(s *graph.Scope, mode estimator.Mode) (*estimator.Spec, error) {
			return estimator.RegressionHead{Optimizer: opt}.Spec(s, placeholder(s, "y", tensor.Float32, -1, 2), placeholder(s, "labels", tensor.Float32, -1, 2), mode)
		}},
		{"regression, Key", "y", "mae,mse", 0, func(s *graph.Scope, mode estimator.Mode) (*estimator.Spec, error) {
			return estimator.RegressionHead{Optimizer: opt, Key: "y"}.Spec(s, placeholder(s, "y", tensor.Float64, -1), placeholder(s, "labels", tensor.Int32, -1), mode)
		}},
		{"binary", "class,logit,probability", "accuracy,auc,logloss", 0, func(s *graph.Scope, mode estimator.Mode) (*estimator.Spec, error) {
			return estimator.BinaryClassificationHead{Optimizer: opt}.Spec(s, placeholder(s, "logits", tensor.Float32, -1, 1), placeholder(s, "labels", tensor.Float32, -1), mode)
		}},
		{"binary, int64 labels [batch, 1]", "class,logit,probability", "accuracy,auc,logloss", 0, func(s *graph.Scope, mode estimator.Mode) (*estimator.Spec, error) {
			return estimator.BinaryClassificationHead{Optimizer: opt}.Spec(s, placeholder(s, "logits", tensor.Float64, -1), placeholder(s, "labels", tensor.Int64, -1, 1), mode)
		}},
	} {
		for _, mode := range []estimator.Mode{estimator.Train, estimator.Eval, estimator.Predict} {
			s := graph.NewScope()
			spec, err := c.spec(s, mode)
			if err != nil {
				t.Fatalf("%s, %s: %v", c.name, mode, err)
			}
			if got := keys(spec.Predictions); got != c.predictions {
				t.Errorf("%s, %s: predictions %s, want %s", c.name, mode, got, c.predictions)
			}
			if spec.Loss.Valid() != (mode != estimator.Predict) {
				t.Errorf("%s, %s: loss %v", c.name, mode, spec.Loss)
			}
			if spec.Loss.Valid() && spec.Loss.Shape().Rank() != 0 {
				t.Errorf("%s, %s: loss of shape %v, want a scalar", c.name, mode, spec.Loss.Shape())
			}
			if spec.Optimizer != opt {
				t.Errorf("%s, %s: optimizer %v, want the head's", c.name, mode, spec.Optimizer)
			}
			want := ""
			if mode == estimator.Eval {
				want = c.metrics
			}
			if got := keys(spec.EvalMetrics); got != want {
				t.Errorf("%s, %s: metrics %q, want %q", c.name, mode, got, want)
			}
		}
	}
}

// penalty is L2(0.1) of the dense layer's kernel: 0.1 sum(w²) / 2.
func penalty(s *graph.Scope) graph.Output {
	kernel := ops.LookupVariable(s.Graph(), "dense/kernel").Value()
	return ops.Mul(s, ops.L2Loss(s, kernel), ops.Scalar(s, tensor.Float32, 0.1))
}

// The head's loss is the one a model function builds by hand: the mean
// cross-entropy plus the layers' penalties, or the mean squared error.
func TestHeadLossAsBuiltByHand(t *testing.T) {
	x := tensor.MustFromSlice([]float32{1, -2, 0.5, 3, 0, 1, -1, 2}, 4, 2)
	classes := tensor.MustFromSlice([]int32{0, 2, 1, 2}, 4)
	targets := tensor.MustFromSlice([]float32{0.5, 1, -1, 2, 0, 0, 3, -2, 1, 1, 1, 1}, 4, 3)
	for _, c := range []struct {
		name string
		reg  layers.Regularizer
		head func(s *graph.Scope, out, labels graph.Output) (*estimator.Spec, error)
		hand func(s *graph.Scope, out, labels graph.Output) graph.Output
		y    *tensor.Tensor
	}{
		{"classification", nil, func(s *graph.Scope, out, labels graph.Output) (*estimator.Spec, error) {
			return estimator.ClassificationHead{}.Spec(s, out, labels, estimator.Train)
		}, func(s *graph.Scope, out, labels graph.Output) graph.Output {
			xent, _ := ops.SparseSoftmaxCrossEntropyWithLogits(s, out, labels)
			return ops.Mean(s, xent, nil, false)
		}, classes},
		{"classification, L2", layers.L2(0.1), func(s *graph.Scope, out, labels graph.Output) (*estimator.Spec, error) {
			return estimator.ClassificationHead{}.Spec(s, out, labels, estimator.Eval)
		}, func(s *graph.Scope, out, labels graph.Output) graph.Output {
			xent, _ := ops.SparseSoftmaxCrossEntropyWithLogits(s, out, labels)
			return ops.Add(s, ops.Mean(s, xent, nil, false), penalty(s))
		}, classes},
		{"regression", nil, func(s *graph.Scope, out, labels graph.Output) (*estimator.Spec, error) {
			return estimator.RegressionHead{}.Spec(s, out, labels, estimator.Train)
		}, func(s *graph.Scope, out, labels graph.Output) graph.Output {
			return ops.Mean(s, ops.SquaredDifference(s, out, labels), nil, false)
		}, targets},
		{"regression, L2", layers.L2(0.1), func(s *graph.Scope, out, labels graph.Output) (*estimator.Spec, error) {
			return estimator.RegressionHead{}.Spec(s, out, labels, estimator.Eval)
		}, func(s *graph.Scope, out, labels graph.Output) graph.Output {
			return ops.Add(s, ops.Mean(s, ops.SquaredDifference(s, out, labels), nil, false), penalty(s))
		}, targets},
	} {
		s := graph.NewScope()
		out := layers.Dense{Units: 3, KernelRegularizer: c.reg}.Apply(s, ops.Const(s, x), false)
		labels := ops.Const(s, c.y)
		spec, err := c.head(s, out, labels)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		hand := c.hand(s, out, labels)
		init := ops.GlobalVariablesInitializer(s)
		if err := s.Err(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		sess, err := session.New(s.Graph())
		if err != nil {
			t.Fatal(err)
		}
		_, err = sess.Run(context.Background(), nil, nil, []*graph.Node{init})
		var got []*tensor.Tensor
		if err == nil {
			got, err = sess.Run(context.Background(), nil, []graph.Output{spec.Loss, hand}, nil)
		}
		sess.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if h, b := got[0].Float64At(0), got[1].Float64At(0); h != b || h == 0 {
			t.Errorf("%s: the head's loss %v; by hand %v", c.name, h, b)
		}
	}
}

// Shapes the heads cannot use are refused as the model is built, with the
// tensors and their shapes named.
func TestHeadShapeErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(s *graph.Scope) (*estimator.Spec, error)
		want  []string
	}{
		{"logits of rank 1", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.ClassificationHead{}.Spec(s, placeholder(s, "logits", tensor.Float32, -1), placeholder(s, "labels", tensor.Int32, -1), estimator.Predict)
		}, []string{"classification head (predict)", "logits", "[?]", "want [batch, classes]"}},
		{"logits of rank 3", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.ClassificationHead{}.Spec(s, placeholder(s, "logits", tensor.Float32, -1, 5, 3), placeholder(s, "labels", tensor.Int32, -1), estimator.Train)
		}, []string{"classification head (train)", "[?,5,3]", "want [batch, classes]"}},
		{"a label per class", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.ClassificationHead{}.Spec(s, placeholder(s, "logits", tensor.Float32, -1, 3), placeholder(s, "labels", tensor.Int32, -1, 3), estimator.Train)
		}, []string{"classification head (train)", "sparse_softmax_cross_entropy", "[?,3]", "want labels of shape [?]"}},
		{"float labels", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.ClassificationHead{}.Spec(s, placeholder(s, "logits", tensor.Float32, -1, 3), placeholder(s, "labels", tensor.Float32, -1), estimator.Eval)
		}, []string{"classification head (eval)", "float32", "want class indices"}},
		{"one output for two targets", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.RegressionHead{}.Spec(s, placeholder(s, "y", tensor.Float32, -1, 1), placeholder(s, "labels", tensor.Float32, -1, 2), estimator.Train)
		}, []string{"regression head (train)", "[?,2]", "[?,1]", "refusing to broadcast"}},
		{"labels without the output axis", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.RegressionHead{}.Spec(s, placeholder(s, "y", tensor.Float32, -1, 1), placeholder(s, "labels", tensor.Float32, -1), estimator.Eval)
		}, []string{"regression head (eval)", "[?]", "[?,1]"}},
		{"no predictions", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.RegressionHead{}.Spec(s, graph.Output{}, graph.Output{}, estimator.Predict)
		}, []string{"regression head (predict)", "no predictions"}},
		{"two logits per example", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.BinaryClassificationHead{}.Spec(s, placeholder(s, "logits", tensor.Float32, -1, 2), placeholder(s, "labels", tensor.Float32, -1), estimator.Train)
		}, []string{"binary classification head (train)", "logits", "[?,2]", "want float [batch] or [batch, 1]"}},
		{"a scalar logit", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.BinaryClassificationHead{}.Spec(s, placeholder(s, "logits", tensor.Float32), graph.Output{}, estimator.Predict)
		}, []string{"binary classification head (predict)", "shape []"}},
		{"integer logits", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.BinaryClassificationHead{}.Spec(s, placeholder(s, "logits", tensor.Int32, -1), graph.Output{}, estimator.Predict)
		}, []string{"binary classification head (predict)", "int32", "want float"}},
		{"two labels per logit", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.BinaryClassificationHead{}.Spec(s, placeholder(s, "logits", tensor.Float32, -1), placeholder(s, "labels", tensor.Float32, -1, 2), estimator.Eval)
		}, []string{"binary classification head (eval)", "sigmoid_cross_entropy", "[?,2]", "[?]", "refusing to broadcast"}},
		{"a batch of labels for one logit", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.BinaryClassificationHead{}.Spec(s, placeholder(s, "logits", tensor.Float32, 1), placeholder(s, "labels", tensor.Float32, 4), estimator.Train)
		}, []string{"binary classification head (train)", "[4]", "[1]", "refusing to broadcast"}},
		{"no class labels in training", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.ClassificationHead{}.Spec(s, placeholder(s, "logits", tensor.Float32, -1, 3), graph.Output{}, estimator.Train)
		}, []string{"classification head (train)", "missing"}},
		{"no labels in training", func(s *graph.Scope) (*estimator.Spec, error) {
			return estimator.BinaryClassificationHead{}.Spec(s, placeholder(s, "logits", tensor.Float32, -1), graph.Output{}, estimator.Train)
		}, []string{"binary classification head (train)", "missing"}},
	} {
		spec, err := c.build(graph.NewScope())
		if err == nil {
			t.Errorf("%s: no error; spec %+v", c.name, spec)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %q", c.name, err, w)
			}
		}
	}
}

// A model function that returns the classification head's spec trains,
// evaluates and predicts through the estimator; int64 labels of shape
// [batch, 1] included.
func TestClassificationHeadTrains(t *testing.T) {
	model := func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		logits := layers.Dense{Units: 2}.Apply(s, f.Get(s, "x"), mode == estimator.Train)
		return estimator.ClassificationHead{Optimizer: train.NewGradientDescent(1)}.Spec(s, logits, labels, mode)
	}
	est, m := trainDiagonal(t, model, tensor.New(tensor.Int64, 400, 1))
	ctx := context.Background()
	if m["accuracy"] < 0.95 || math.IsNaN(m["loss"]) {
		t.Errorf("metrics %v; want an accuracy of 0.95 or more", m)
	}
	out, err := est.Predict(ctx, map[string]*tensor.Tensor{"x": tensor.MustFromSlice([]float32{-1, -1, 1, 1}, 2, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if c := out["class"].Int32s(); c[0] != 0 || c[1] != 1 {
		t.Errorf("classes %v of (-1,-1) and (1,1); want [0 1]", c)
	}
	if p := out["probabilities"]; p.Rank() != 2 || p.NumElements() != 4 {
		t.Errorf("probabilities of shape %v; want [2,2]", p.Shape())
	}
}

// The regression head's metrics are the mean squared and absolute errors;
// without penalties its "mse" is the evaluation's loss.
func TestRegressionHeadMetrics(t *testing.T) {
	model := func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		y := layers.Dense{Units: 1}.Apply(s, f.Get(s, "x"), mode == estimator.Train)
		return estimator.RegressionHead{Optimizer: train.NewGradientDescent(0.1), Key: "y"}.Spec(s, y, labels, mode)
	}
	ctx := context.Background()
	est, err := estimator.New(model, estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := est.Train(ctx, linearInput(1000, true), estimator.Stop{MaxSteps: 300}); err != nil {
		t.Fatal(err)
	}
	m, err := est.Evaluate(ctx, linearInput(205, false))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(m["mse"]-m["loss"]) > 1e-6*m["loss"] || m["mae"] <= 0 || m["mae"]*m["mae"] > m["mse"]*(1+1e-6) || m["mse"] > 0.1 {
		t.Errorf("metrics %v; want mse = loss < 0.1, and 0 < mae² <= mse", m)
	}
}

// The binary head's outputs against hand computation: logits [batch, 1]
// from a layer with an L2 penalty, int32 labels. In Predict it needs no
// labels.
func TestBinaryClassificationHeadValues(t *testing.T) {
	z := []float64{2, -1, 0.5, -3}
	y := []int32{1, 1, 0, 0}
	s := graph.NewScope()
	x := ops.Const(s, tensor.MustFromSlice([]float32{2, -1, 0.5, -3}, 4, 1))
	// The identity: logits = x, and a penalty of 0.1 * 1² / 2.
	logits := layers.Dense{Units: 1, NoBias: true, KernelInit: ops.OnesInit(), KernelRegularizer: layers.L2(0.1)}.Apply(s, x, false)
	head := estimator.BinaryClassificationHead{}
	eval, err := head.Spec(s, logits, ops.Const(s, tensor.MustFromSlice(y, 4)), estimator.Eval)
	if err != nil {
		t.Fatal(err)
	}
	predict, err := head.Spec(s.NameScope("predict"), logits, graph.Output{}, estimator.Predict)
	if err != nil {
		t.Fatal(err)
	}
	if predict.Loss.Valid() || predict.EvalMetrics != nil || keys(predict.Predictions) != "class,logit,probability" {
		t.Fatalf("predict spec %+v", predict)
	}
	m := eval.EvalMetrics
	init := []*graph.Node{ops.GlobalVariablesInitializer(s), ops.LocalVariablesInitializer(s)}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, append(init, m["auc"].Update)); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{
		predict.Predictions["logit"], predict.Predictions["probability"], predict.Predictions["class"], eval.Loss,
		m["logloss"].Value, m["logloss"].Weight, m["accuracy"].Value, m["accuracy"].Weight, m["auc"].Value,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	xent := 0.0
	for i, zi := range z {
		p := 1 / (1 + math.Exp(-zi))
		if got := out[0].Float64At(i); got != zi {
			t.Errorf("logit %d: %v, want %v", i, got, zi)
		}
		if got := out[1].Float64At(i); math.Abs(got-p) > 1e-6 {
			t.Errorf("probability %d: %v, want %v", i, got, p)
		}
		if got, want := out[2].Int32s()[i], map[bool]int32{true: 1}[zi > 0]; got != want {
			t.Errorf("class %d: %v, want %v", i, got, want)
		}
		xent -= float64(y[i])*math.Log(p) + float64(1-y[i])*math.Log(1-p)
	}
	xent /= 4
	if got := out[3].Float64At(0); math.Abs(got-(xent+0.05)) > 1e-6 {
		t.Errorf("loss %v, want the mean cross-entropy %v plus the penalty 0.05", got, xent)
	}
	if got := out[4].Float64At(0) / out[5].Float64At(0); math.Abs(got-xent) > 1e-6 {
		t.Errorf("logloss %v, want %v", got, xent)
	}
	// Classes 1 0 1 0 against 1 1 0 0; of the positive-negative pairs,
	// 3 of 4 are ranked right.
	if got := out[6].Float64At(0) / out[7].Float64At(0); got != 0.5 {
		t.Errorf("accuracy %v, want 0.5", got)
	}
	if got := out[8].Float64At(0); math.Abs(got-0.75) > 1e-3 {
		t.Errorf("auc %v, want 0.75", got)
	}
}

// A model function that returns the binary head's spec trains, evaluates
// (the AUC streamed over the whole set) and predicts through the
// estimator, with float32 labels of shape [batch].
func TestBinaryClassificationHeadTrains(t *testing.T) {
	model := func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		logit := layers.Dense{Units: 1}.Apply(s, f.Get(s, "x"), mode == estimator.Train)
		return estimator.BinaryClassificationHead{Optimizer: train.NewGradientDescent(1)}.Spec(s, logit, labels, mode)
	}
	est, m := trainDiagonal(t, model, tensor.New(tensor.Float32, 400))
	ctx := context.Background()
	if m["accuracy"] < 0.95 || m["auc"] < 0.98 || m["auc"] > 1 || math.Abs(m["logloss"]-m["loss"]) > 1e-6 || m["logloss"] > 0.3 {
		t.Errorf("metrics %v; want an accuracy of 0.95 or more, an auc of 0.98 or more, logloss = loss < 0.3", m)
	}
	out, err := est.Predict(ctx, map[string]*tensor.Tensor{"x": tensor.MustFromSlice([]float32{-1, -1, 1, 1}, 2, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if c, p := out["class"].Int32s(), out["probability"].Float32s(); c[0] != 0 || c[1] != 1 || p[0] > 0.1 || p[1] < 0.9 {
		t.Errorf("classes %v, probabilities %v of (-1,-1) and (1,1); want [0 1], below 0.1 and above 0.9", c, p)
	}
}

// trainDiagonal trains model for 200 steps on the points of a 20x20 grid
// over [-1, 1)², labelled in y (n rows of the labels' type and shape) 1
// above the diagonal x+y = 0, and returns the estimator and its metrics
// on the grid.
func trainDiagonal(t *testing.T, model estimator.ModelFn, y *tensor.Tensor) (*estimator.Estimator, map[string]float64) {
	t.Helper()
	n := y.Shape()[0]
	x := tensor.New(tensor.Float32, n, 2)
	for i := range n {
		a, b := float32(i%20)/10-1, float32(i/20)/10-1
		x.Float32s()[2*i], x.Float32s()[2*i+1] = a, b
		if a+b > 0 {
			y.SetFloat64At(i, 1)
		}
	}
	input := func(repeat bool) estimator.InputFn {
		return func(estimator.InputContext) (*estimator.Input, error) {
			ds, err := data.FromTensors(x, y)
			if err != nil {
				return nil, err
			}
			if repeat {
				ds = ds.Shuffle(n, 1).Repeat(-1)
			}
			return &estimator.Input{Dataset: ds.Batch(50, repeat), Features: []string{"x"}}, nil
		}
	}
	ctx := context.Background()
	est, err := estimator.New(model, estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := est.Train(ctx, input(true), estimator.Stop{MaxSteps: 200}); err != nil {
		t.Fatal(err)
	}
	m, err := est.Evaluate(ctx, input(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("metrics %v", m)
	return est, m
}
