package evalmetrics_test

import (
	"context"
	"math"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/distflow/distflow/evalmetrics"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

type metricFn func(s *graph.Scope, labels, predictions graph.Output) (graph.Output, *graph.Node)

// data is an evaluation set: binary labels, scores in [0, 1], and the
// predictions (score > 0.5) as floats.
func data(n int) (labels, scores, predicted []float32) {
	r := rand.New(rand.NewSource(3))
	for i := 0; i < n; i++ {
		l := float32(r.Intn(2))
		// Positives score higher on average: an AUC well between 0.5 and 1.
		sc := float32(math.Min(1, math.Max(0, 0.35+0.3*float64(l)+0.25*r.NormFloat64())))
		p := float32(0)
		if sc > 0.5 {
			p = 1
		}
		labels, scores, predicted = append(labels, l), append(scores, sc), append(predicted, p)
	}
	return labels, scores, predicted
}

// stream runs the metric over batches of the given sizes and returns its
// value after the last.
func stream(t *testing.T, fn metricFn, labels, predictions []float32, sizes []int) float64 {
	t.Helper()
	s := graph.NewScope()
	l := ops.Placeholder(s, "labels", tensor.Float32, tensor.MakeShape(-1))
	p := ops.Placeholder(s, "predictions", tensor.Float32, tensor.MakeShape(-1))
	value, update := fn(s, l, p)
	init := ops.LocalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ops.GlobalVariables(s.Graph())) != 0 {
		t.Fatalf("the metric made global variables %v: checkpoints would save them", ops.GlobalVariables(s.Graph()))
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	at := 0
	for _, n := range sizes {
		feeds := map[graph.Output]*tensor.Tensor{
			l: tensor.MustFromSlice(labels[at:at+n], n), p: tensor.MustFromSlice(predictions[at:at+n], n),
		}
		if _, err := sess.Run(ctx, feeds, nil, []*graph.Node{update}); err != nil {
			t.Fatal(err)
		}
		at += n
	}
	out, err := sess.Run(ctx, nil, []graph.Output{value}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out[0].Float64At(0)
}

func TestSplitOverBatches(t *testing.T) {
	labels, scores, predicted := data(1000)
	var tp, fp, fn, correct, se, ae, sum float64
	for i := range labels {
		l, p, sc := float64(labels[i]), float64(predicted[i]), float64(scores[i])
		switch {
		case l == 1 && p == 1:
			tp++
		case l == 0 && p == 1:
			fp++
		case l == 1 && p == 0:
			fn++
		}
		if l == p {
			correct++
		}
		se += (sc - l) * (sc - l)
		ae += math.Abs(sc - l)
		sum += sc
	}
	n := float64(len(labels))
	for _, c := range []struct {
		name      string
		fn        metricFn
		preds     []float32
		want, tol float64
	}{
		{"accuracy", evalmetrics.Accuracy, predicted, correct / n, 1e-12},
		{"precision", evalmetrics.Precision, predicted, tp / (tp + fp), 1e-12},
		{"recall", evalmetrics.Recall, predicted, tp / (tp + fn), 1e-12},
		{"rmse", evalmetrics.RootMeanSquaredError, scores, math.Sqrt(se / n), 1e-6},
		{"mae", evalmetrics.MeanAbsoluteError, scores, ae / n, 1e-6},
		{"mean", func(s *graph.Scope, _, p graph.Output) (graph.Output, *graph.Node) { return evalmetrics.Mean(s, p) }, scores, sum / n, 1e-6},
		{"auc", func(s *graph.Scope, l, p graph.Output) (graph.Output, *graph.Node) {
			return evalmetrics.AUC(s, l, p, 200, evalmetrics.ROC)
		}, scores, exactAUC(labels, scores), 5e-3},
		{"auc pr", func(s *graph.Scope, l, p graph.Output) (graph.Output, *graph.Node) {
			return evalmetrics.AUC(s, l, p, 200, evalmetrics.PR)
		}, scores, math.NaN(), 0},
	} {
		whole := stream(t, c.fn, labels, c.preds, []int{1000})
		split := stream(t, c.fn, labels, c.preds, []int{1, 333, 0, 400, 266})
		if math.Abs(whole-split) > 1e-9 {
			t.Errorf("%s: %v in one batch, %v over five", c.name, whole, split)
		}
		if !math.IsNaN(c.want) && math.Abs(whole-c.want) > c.tol {
			t.Errorf("%s: %v, want %v", c.name, whole, c.want)
		}
		if whole <= 0 || whole > 1.0001 {
			t.Errorf("%s: %v out of (0, 1]", c.name, whole)
		}
	}
}

// exactAUC is the probability that a positive scores above a negative.
func exactAUC(labels, scores []float32) float64 {
	var pos, neg []float64
	for i, l := range labels {
		if l == 1 {
			pos = append(pos, float64(scores[i]))
		} else {
			neg = append(neg, float64(scores[i]))
		}
	}
	sort.Float64s(neg)
	var wins float64
	for _, p := range pos {
		below := sort.SearchFloat64s(neg, p)
		ties := sort.SearchFloat64s(neg, math.Nextafter(p, 2)) - below
		wins += float64(below) + float64(ties)/2
	}
	return wins / float64(len(pos)*len(neg))
}

func TestEmptyIsZero(t *testing.T) {
	for name, fn := range map[string]metricFn{"accuracy": evalmetrics.Accuracy, "precision": evalmetrics.Precision, "rmse": evalmetrics.RootMeanSquaredError} {
		if v := stream(t, fn, nil, nil, nil); v != 0 {
			t.Errorf("%s of nothing: %v", name, v)
		}
	}
}

func TestResetStartsOver(t *testing.T) {
	s := graph.NewScope()
	l := ops.Const(s, []int32{1, 2, 3, 4})
	p := ops.Const(s, []int32{1, 2, 0, 0})
	acc, update := evalmetrics.Accuracy(s, l, p)
	init := ops.LocalVariablesInitializer(s)
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	for round := 0; round < 2; round++ {
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i <= round; i++ {
			if _, err := sess.Run(ctx, nil, nil, []*graph.Node{update}); err != nil {
				t.Fatal(err)
			}
		}
		out, err := sess.Run(ctx, nil, []graph.Output{acc}, nil)
		if err != nil || out[0].Float64At(0) != 0.5 {
			t.Fatalf("round %d: accuracy %v, %v; want 0.5", round, out, err)
		}
	}
}

func TestShapesRefused(t *testing.T) {
	s := graph.NewScope()
	l := ops.Placeholder(s, "labels", tensor.Float32, tensor.MakeShape(-1, 2))
	p := ops.Placeholder(s, "predictions", tensor.Float32, tensor.MakeShape(-1, 1))
	evalmetrics.RootMeanSquaredError(s, l, p)
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "[?,2]") || !strings.Contains(err.Error(), "[?,1]") {
		t.Errorf("labels [?,2] against predictions [?,1]: err %v", err)
	}

	// Unknown dimensions are checked when the update runs.
	s = graph.NewScope()
	l = ops.Placeholder(s, "labels", tensor.Int32, tensor.MakeShape(-1, -1))
	p = ops.Placeholder(s, "predictions", tensor.Int32, tensor.MakeShape(-1, -1))
	_, update := evalmetrics.Accuracy(s, l, p)
	init := ops.LocalVariablesInitializer(s)
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	feeds := map[graph.Output]*tensor.Tensor{l: tensor.New(tensor.Int32, 4, 2), p: tensor.New(tensor.Int32, 4, 1)}
	if _, err := sess.Run(ctx, feeds, nil, []*graph.Node{update}); err == nil {
		t.Error("labels [4,2] against predictions [4,1]: the update ran")
	}
}
