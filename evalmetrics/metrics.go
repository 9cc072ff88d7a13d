package evalmetrics

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Every metric returns its value and its update op, as tf.metrics does.
// The update adds a batch to accumulators, float64 local variables
// (ops.NewLocalVariable) under the metric's scope; the value reads them.
// Run ops.LocalVariablesInitializer once before the first batch (running
// it again starts over), the update with every batch, and fetch the value
// after the last: the result is the metric over all the batches together,
// however the data was split. Fetching the value in the same run as the
// update is unordered: it may see the accumulators before or after it.
//
// Inputs are refused at build time when their shapes could differ (a
// known dimension or the rank), and, when the static shapes leave it open,
// the update fails at run time unless they are equal.

// Mean is the mean of all the elements of values, as tf.metrics.mean.
func Mean(s *graph.Scope, values graph.Output) (value graph.Output, update *graph.Node) {
	ms := s.SubScope("mean")
	if !present(ms, "mean", "values", values) {
		return graph.Output{}, nil
	}
	return meanOf(ms, toFloat64(ms, values))
}

// Accuracy is the fraction of predictions equal to labels (of the same
// dtype and shape: class indices, or booleans), as tf.metrics.accuracy.
func Accuracy(s *graph.Scope, labels, predictions graph.Output) (value graph.Output, update *graph.Node) {
	ms := s.SubScope("accuracy")
	if !pair(ms, "accuracy", labels, predictions) {
		return graph.Output{}, nil
	}
	if labels.DType() != predictions.DType() {
		ms.SetErr(fmt.Errorf("evalmetrics: accuracy: labels %s are %v and predictions %s %v; want the same dtype", labels, labels.DType(), predictions, predictions.DType()))
		return graph.Output{}, nil
	}
	labels = checked(ms, labels, predictions)
	return meanOf(ms, ops.Cast(ms, ops.Equal(ms, labels, predictions), tensor.Float64))
}

// MeanAbsoluteError is the mean of |labels - predictions|, as
// tf.metrics.mean_absolute_error.
func MeanAbsoluteError(s *graph.Scope, labels, predictions graph.Output) (value graph.Output, update *graph.Node) {
	ms := s.SubScope("mean_absolute_error")
	l, p, ok := floats(ms, "mean_absolute_error", labels, predictions)
	if !ok {
		return graph.Output{}, nil
	}
	return meanOf(ms, ops.Abs(ms, ops.Sub(ms, p, l)))
}

// RootMeanSquaredError is the square root of the mean of
// (labels - predictions)² over all batches (not the mean of per-batch
// roots), as tf.metrics.root_mean_squared_error.
func RootMeanSquaredError(s *graph.Scope, labels, predictions graph.Output) (value graph.Output, update *graph.Node) {
	ms := s.SubScope("root_mean_squared_error")
	l, p, ok := floats(ms, "root_mean_squared_error", labels, predictions)
	if !ok {
		return graph.Output{}, nil
	}
	mse, update := meanOf(ms, ops.SquaredDifference(ms, p, l))
	return ops.Sqrt(ms, mse), update
}

// Precision is true positives / (true positives + false positives) of
// binary predictions (bool, or numbers: non-zero is positive) against
// binary labels, as tf.metrics.precision; 0 when nothing is predicted
// positive.
func Precision(s *graph.Scope, labels, predictions graph.Output) (value graph.Output, update *graph.Node) {
	return confusionRatio(s, "precision", labels, predictions)
}

// Recall is true positives / (true positives + false negatives) of binary
// predictions against binary labels, as tf.metrics.recall; 0 when there
// are no positive labels.
func Recall(s *graph.Scope, labels, predictions graph.Output) (value graph.Output, update *graph.Node) {
	return confusionRatio(s, "recall", labels, predictions)
}

func confusionRatio(s *graph.Scope, name string, labels, predictions graph.Output) (graph.Output, *graph.Node) {
	ms := s.SubScope(name)
	if !pair(ms, name, labels, predictions) {
		return graph.Output{}, nil
	}
	labels = checked(ms, labels, predictions)
	l, p := toBool(ms, labels), toBool(ms, predictions)
	count := func(a, b graph.Output) graph.Output {
		return ops.Sum(ms, ops.Cast(ms, ops.LogicalAnd(ms, a, b), tensor.Float64), nil, false)
	}
	tpAcc := accumulator(ms, "true_positives", nil)
	otherAcc := accumulator(ms, map[string]string{"precision": "false_positives", "recall": "false_negatives"}[name], nil)
	if ms.Err() != nil {
		return graph.Output{}, nil
	}
	tp := count(l, p)
	var batchOther graph.Output
	if name == "precision" {
		batchOther = count(ops.LogicalNot(ms, l), p)
	} else {
		batchOther = count(l, ops.LogicalNot(ms, p))
	}
	update := ops.Group(ms, "update",
		ops.AssignAdd(ms, tpAcc.Value(), tp).Node, ops.AssignAdd(ms, otherAcc.Value(), batchOther).Node)
	t := tpAcc.Value()
	return safeDiv(ms, t, ops.Add(ms, t, otherAcc.Value())), update
}

// Curve is the curve whose area AUC computes.
type Curve int

const (
	// ROC is the receiver operating characteristic: true positive rate
	// against false positive rate.
	ROC Curve = iota
	// PR is precision against recall.
	PR
)

// AUC is the area under the ROC or PR curve of probabilities (predictions
// in [0, 1]) against binary labels, approximated over numThresholds
// thresholds evenly spaced on [0, 1] by the trapezoidal rule, as
// tf.metrics.auc(labels, predictions, num_thresholds, curve) (200
// thresholds there). Its accumulators are the true and false positives
// and negatives at each threshold.
func AUC(s *graph.Scope, labels, predictions graph.Output, numThresholds int, curve Curve) (value graph.Output, update *graph.Node) {
	ms := s.SubScope("auc")
	if numThresholds < 2 {
		ms.SetErr(fmt.Errorf("evalmetrics: auc: %d thresholds: want 2 or more", numThresholds))
		return graph.Output{}, nil
	}
	if curve != ROC && curve != PR {
		ms.SetErr(fmt.Errorf("evalmetrics: auc: unknown curve %d", curve))
		return graph.Output{}, nil
	}
	if !pair(ms, "auc", labels, predictions) {
		return graph.Output{}, nil
	}
	if !predictions.DType().IsFloat() {
		ms.SetErr(fmt.Errorf("evalmetrics: auc: predictions %s are %v; want probabilities, float32 or float64", predictions, predictions.DType()))
		return graph.Output{}, nil
	}
	labels = checked(ms, labels, predictions)
	// TensorFlow's thresholds: just below 0, (i+1)/(n-1), just above 1,
	// so that the curve runs from (1, 1) to (0, 0).
	const kEpsilon = 1e-7
	thresholds := make([]float64, numThresholds)
	thresholds[0], thresholds[numThresholds-1] = -kEpsilon, 1+kEpsilon
	for i := 1; i < numThresholds-1; i++ {
		thresholds[i] = float64(i) / float64(numThresholds-1)
	}
	p := ops.ReshapeTo(ms, ops.Cast(ms, predictions, tensor.Float64), -1, 1)
	l := ops.ReshapeTo(ms, toBool(ms, labels), -1, 1)
	above := ops.Greater(ms, p, ops.Const(ms, tensor.MustFromSlice(thresholds, 1, numThresholds))) // [N, T]
	pos := ops.LogicalAnd(ms, l, ops.OnesLike(ms, above))
	counts := func(a, b graph.Output) graph.Output {
		return ops.Sum(ms, ops.Cast(ms, ops.LogicalAnd(ms, a, b), tensor.Float64), []int{0}, false)
	}
	names := []string{"true_positives", "false_negatives", "true_negatives", "false_positives"}
	batch := []graph.Output{
		counts(pos, above), counts(pos, ops.LogicalNot(ms, above)),
		counts(ops.LogicalNot(ms, pos), ops.LogicalNot(ms, above)), counts(ops.LogicalNot(ms, pos), above),
	}
	acc := make([]graph.Output, 4)
	updates := make([]*graph.Node, 4)
	for i, n := range names {
		v := accumulator(ms, n, []int{numThresholds})
		if ms.Err() != nil {
			return graph.Output{}, nil
		}
		acc[i] = v.Value()
		updates[i] = ops.AssignAdd(ms, v.Value(), batch[i]).Node
	}
	tp, fn, tn, fp := acc[0], acc[1], acc[2], acc[3]
	const epsilon = 1e-6 // as TensorFlow, which keeps the empty ends finite
	eps := ops.Scalar(ms, tensor.Float64, epsilon)
	rate := func(num, den graph.Output) graph.Output {
		return ops.Div(ms, ops.Add(ms, num, eps), ops.Add(ms, ops.Add(ms, num, den), eps))
	}
	var x, y graph.Output
	recall := rate(tp, fn)
	if curve == ROC {
		x, y = ops.Div(ms, fp, ops.Add(ms, ops.Add(ms, fp, tn), eps)), recall
	} else {
		x, y = recall, rate(tp, fp)
	}
	head := func(v graph.Output) graph.Output { return ops.Slice(ms, v, []int{0}, []int{numThresholds - 1}) }
	tail := func(v graph.Output) graph.Output { return ops.Slice(ms, v, []int{1}, []int{numThresholds - 1}) }
	widths := ops.Sub(ms, head(x), tail(x))
	heights := ops.Mul(ms, ops.Add(ms, head(y), tail(y)), ops.Scalar(ms, tensor.Float64, 0.5))
	return ops.Sum(ms, ops.Mul(ms, widths, heights), nil, false), ops.Group(ms, "update", updates...)
}

// meanOf accumulates the sum and count of x's elements (float64).
func meanOf(ms *graph.Scope, x graph.Output) (graph.Output, *graph.Node) {
	total := accumulator(ms, "total", nil)
	count := accumulator(ms, "count", nil)
	if ms.Err() != nil || !x.Valid() {
		return graph.Output{}, nil
	}
	update := ops.Group(ms, "update",
		ops.AssignAdd(ms, total.Value(), ops.Sum(ms, x, nil, false)).Node,
		ops.AssignAdd(ms, count.Value(), ops.Cast(ms, ops.Size(ms, x), tensor.Float64)).Node)
	return safeDiv(ms, total.Value(), count.Value()), update
}

// accumulator adds a float64 local variable of zeros (a scalar for nil
// shape).
func accumulator(ms *graph.Scope, name string, shape []int) *ops.Variable {
	if shape == nil {
		shape = []int{}
	}
	return ops.NewLocalVariable(ms, name, tensor.Float64, shape, ops.ZerosInit())
}

// safeDiv is num/den, or 0 where den is 0.
func safeDiv(s *graph.Scope, num, den graph.Output) graph.Output {
	zero := ops.ZerosLike(s, den)
	isZero := ops.Equal(s, den, zero)
	return ops.Select(s, isZero, zero, ops.Div(s, num, ops.Select(s, isZero, ops.OnesLike(s, den), den)))
}

func toFloat64(s *graph.Scope, x graph.Output) graph.Output {
	if x.DType() == tensor.Float64 {
		return x
	}
	return ops.Cast(s, x, tensor.Float64)
}

// toBool is x as booleans: itself, or x != 0.
func toBool(s *graph.Scope, x graph.Output) graph.Output {
	if x.DType() == tensor.Bool {
		return x
	}
	return ops.NotEqual(s, x, ops.ZerosLike(s, x))
}

// floats checks labels and predictions for an error metric and returns
// them as float64.
func floats(ms *graph.Scope, name string, labels, predictions graph.Output) (graph.Output, graph.Output, bool) {
	if !pair(ms, name, labels, predictions) {
		return graph.Output{}, graph.Output{}, false
	}
	if !predictions.DType().IsFloat() {
		ms.SetErr(fmt.Errorf("evalmetrics: %s: predictions %s are %v; want float32 or float64", name, predictions, predictions.DType()))
		return graph.Output{}, graph.Output{}, false
	}
	labels = checked(ms, toFloat64(ms, labels), predictions)
	return labels, toFloat64(ms, predictions), ms.Err() == nil
}

// present checks x is there.
func present(ms *graph.Scope, name, what string, x graph.Output) bool {
	if ms.Err() != nil {
		return false
	}
	if !x.Valid() {
		ms.SetErr(fmt.Errorf("evalmetrics: %s: the %s are missing", name, what))
		return false
	}
	return true
}

// pair checks labels and predictions are there and of shapes that may be
// equal; a metric never broadcasts one into the other.
func pair(ms *graph.Scope, name string, labels, predictions graph.Output) bool {
	if ms.Err() != nil {
		return false
	}
	if !labels.Valid() || !predictions.Valid() {
		ms.SetErr(fmt.Errorf("evalmetrics: %s: the labels or the predictions are missing", name))
		return false
	}
	ln, pn := labels.Shape(), predictions.Shape()
	if !ln.IsCompatibleWith(pn) {
		ms.SetErr(fmt.Errorf("evalmetrics: %s: labels %s of shape %v and predictions %s of shape %v: the shapes must be equal, refusing to broadcast them",
			name, labels, ln, predictions, pn))
		return false
	}
	return true
}

// checked returns labels, made to fail the run at run time unless it has
// the shape of like, when the static shapes leave it open (see package
// losses: BroadcastTo and Reshape together).
func checked(s *graph.Scope, labels, like graph.Output) graph.Output {
	if labels.Shape().FullyDefined() && like.Shape().FullyDefined() {
		return labels
	}
	cs := s.SubScope("labels_must_have_predictions_shape")
	shape := ops.Shape(cs, like)
	b := ops.BroadcastTo(cs, labels, shape)
	if !b.Valid() {
		return b
	}
	return ops.Reshape(cs.WithControlDependencies(b.Node), labels, shape)
}
