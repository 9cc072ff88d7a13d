package estimator

import (
	"fmt"

	"github.com/distflow/distflow/evalmetrics"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/losses"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// ClassificationHead is the head of a classifier of one class per example
// among several (tf.estimator's multi_class_head). A head is what every
// model function of a kind repeats: from the network's output, the labels
// and the mode, the Spec, with its predictions, loss, optimizer and
// evaluation metrics. A model function builds its network and returns the
// head's spec:
//
//	logits := layers.Dense{Units: 10}.Apply(s, f.Get(s, "images"), mode == estimator.Train)
//	return estimator.ClassificationHead{Optimizer: train.NewGradientDescent(0.5)}.Spec(s, logits, labels, mode)
//
// A model that needs more (another prediction, a logged tensor) adds it to
// the spec the head returns.
type ClassificationHead struct {
	// Optimizer turns the loss into updates; required in Train.
	Optimizer train.Optimizer
	// ClassKey names the predicted class in the predictions ("class" when
	// empty).
	ClassKey string
}

// Spec returns the spec of mode for logits [batch, classes] and, in Train
// and Eval, labels: class indices, int32 or int64, of shape [batch] (or
// [batch, 1]). The spec has
//
//   - Predictions: ClassKey, the most likely class (int32 [batch]), and
//     "probabilities", the softmax of the logits;
//   - Loss: the mean softmax cross-entropy (losses.SparseSoftmaxCrossEntropy),
//     plus the graph's regularization losses (losses.RegularizationLoss)
//     when its layers collected any;
//   - Optimizer: h.Optimizer;
//   - EvalMetrics (Eval): "accuracy" (Accuracy).
//
// Logits that are not of rank 2, or labels that do not index them, are
// refused with an error that names them and their shapes.
func (h ClassificationHead) Spec(s *graph.Scope, logits, labels graph.Output, mode Mode) (*Spec, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if !logits.Valid() {
		return nil, fmt.Errorf("estimator: the classification head (%s): no logits", mode)
	}
	if sh := logits.Shape(); !sh.KnownRank() || sh.Rank() != 2 {
		return nil, fmt.Errorf("estimator: the classification head (%s): logits %s of shape %v; want [batch, classes]", mode, logits, sh)
	}
	key := h.ClassKey
	if key == "" {
		key = "class"
	}
	class := ops.Cast(s, ops.ArgMax(s, logits, 1), tensor.Int32)
	spec := &Spec{Optimizer: h.Optimizer, Predictions: map[string]graph.Output{key: class, "probabilities": ops.Softmax(s, logits)}}
	if mode == Predict { // the labels are fed in Train and Eval only
		return done(s, "classification", mode, spec)
	}
	labels = column(s, labels)
	spec.Loss = withRegularization(s, losses.SparseSoftmaxCrossEntropy(s, labels, logits))
	if mode != Eval || s.Err() != nil {
		return done(s, "classification", mode, spec)
	}
	predicted := class
	if labels.DType() != class.DType() { // int64 labels
		predicted = ops.Cast(s, class, labels.DType())
	}
	spec.EvalMetrics = map[string]Metric{"accuracy": Accuracy(s, labels, predicted)}
	return done(s, "classification", mode, spec)
}

// RegressionHead is the head of a model that predicts real values
// (tf.estimator's regression_head).
type RegressionHead struct {
	// Optimizer turns the loss into updates; required in Train.
	Optimizer train.Optimizer
	// Key names the predictions in the spec ("predictions" when empty).
	Key string
}

// Spec returns the spec of mode for predictions (float, [batch, ...]) and,
// in Train and Eval, labels of the same shape (of any numeric dtype). The
// spec has
//
//   - Predictions: Key, the predictions;
//   - Loss: their mean squared error (losses.MeanSquaredError), plus the
//     graph's regularization losses (losses.RegularizationLoss) when its
//     layers collected any;
//   - Optimizer: h.Optimizer;
//   - EvalMetrics (Eval): "mse" and "mae", the mean squared and absolute
//     error per element (without the regularization losses).
//
// Labels whose shape differs from the predictions' are refused (never
// broadcast) with an error that names both and their shapes.
func (h RegressionHead) Spec(s *graph.Scope, predictions, labels graph.Output, mode Mode) (*Spec, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if !predictions.Valid() {
		return nil, fmt.Errorf("estimator: the regression head (%s): no predictions", mode)
	}
	key := h.Key
	if key == "" {
		key = "predictions"
	}
	spec := &Spec{Optimizer: h.Optimizer, Predictions: map[string]graph.Output{key: predictions}}
	if mode == Predict { // the labels are fed in Train and Eval only
		return spec, nil
	}
	spec.Loss = withRegularization(s, losses.MeanSquaredError(s, labels, predictions))
	if mode != Eval || s.Err() != nil {
		return done(s, "regression", mode, spec)
	}
	diff := ops.Sub(s, predictions, ops.Cast(s, labels, predictions.DType()))
	spec.EvalMetrics = map[string]Metric{
		"mse": MeanMetric(s, ops.Square(s, diff)),
		"mae": MeanMetric(s, ops.Abs(s, diff)),
	}
	return done(s, "regression", mode, spec)
}

// BinaryClassificationHead is the head of a binary classifier of one logit
// per example, as a click-through-rate model's (tf.estimator's
// binary_classification_head: logistic regression on the network's
// output).
type BinaryClassificationHead struct {
	// Optimizer turns the loss into updates; required in Train.
	Optimizer train.Optimizer
}

// Spec returns the spec of mode for logits (float, [batch] or [batch, 1])
// and, in Train and Eval, labels of the same shape: 0 or 1, of any numeric
// dtype. The spec has
//
//   - Predictions: "logit", the logits as [batch]; "probability", their
//     sigmoid; "class", 1 where the probability is above 1/2, else 0
//     (int32);
//   - Loss: the mean sigmoid cross-entropy (losses.SigmoidCrossEntropy),
//     plus the graph's regularization losses (losses.RegularizationLoss)
//     when its layers collected any;
//   - Optimizer: h.Optimizer;
//   - EvalMetrics (Eval): "logloss", the mean cross-entropy per example
//     (without the regularization losses); "accuracy"; "auc", the area
//     under the ROC curve over 200 thresholds (evalmetrics.AUC, over the
//     whole evaluation set).
//
// Logits of another shape, or labels whose shape differs from theirs, are
// refused (never broadcast) with an error that names them and their
// shapes.
func (h BinaryClassificationHead) Spec(s *graph.Scope, logits, labels graph.Output, mode Mode) (*Spec, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if !logits.Valid() {
		return nil, fmt.Errorf("estimator: the binary classification head (%s): no logits", mode)
	}
	sh := logits.Shape()
	if !logits.DType().IsFloat() || !sh.KnownRank() || sh.Rank() < 1 || sh.Rank() > 2 || (sh.Rank() == 2 && sh.Dim(1) != 1) {
		return nil, fmt.Errorf("estimator: the binary classification head (%s): logits %s of shape %v and dtype %v; want float [batch] or [batch, 1]",
			mode, logits, sh, logits.DType())
	}
	logits = column(s, logits)
	prob := ops.Sigmoid(s, logits)
	class := ops.Cast(s, ops.Greater(s, logits, ops.ZerosLike(s, logits)), tensor.Int32)
	spec := &Spec{Optimizer: h.Optimizer, Predictions: map[string]graph.Output{"logit": logits, "probability": prob, "class": class}}
	if mode == Predict { // the labels are fed in Train and Eval only
		return done(s, "binary classification", mode, spec)
	}
	labels = column(s, labels)
	xent := losses.SigmoidCrossEntropy(s, labels, logits, losses.WithReduction(losses.None))
	spec.Loss = withRegularization(s, ops.Mean(s, xent, nil, false))
	if mode != Eval || s.Err() != nil {
		return done(s, "binary classification", mode, spec)
	}
	y := ops.Cast(s, labels, logits.DType())
	spec.EvalMetrics = map[string]Metric{
		"logloss":  MeanMetric(s, xent),
		"accuracy": Accuracy(s, y, ops.Cast(s, class, y.DType())),
		"auc":      StreamingMetric(evalmetrics.AUC(s, y, prob, 200, evalmetrics.ROC)),
	}
	return done(s, "binary classification", mode, spec)
}

// column is x of shape [batch, 1] as [batch], or x itself.
func column(s *graph.Scope, x graph.Output) graph.Output {
	if !x.Valid() {
		return x
	}
	if sh := x.Shape(); sh.KnownRank() && sh.Rank() == 2 && sh.Dim(1) == 1 {
		return ops.ReshapeTo(s, x, -1)
	}
	return x
}

// done returns spec, or else the error the head left in s, named after the
// head and the mode.
func done(s *graph.Scope, head string, mode Mode, spec *Spec) (*Spec, error) {
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("estimator: the %s head (%s): %w", head, mode, err)
	}
	return spec, nil
}

// withRegularization is loss plus the graph's regularization losses, or
// loss itself when there are none (the same graph as a model without
// penalties builds by hand).
func withRegularization(s *graph.Scope, loss graph.Output) graph.Output {
	if !loss.Valid() || len(s.Graph().Collection(ops.RegularizationLossesCollection)) == 0 {
		return loss
	}
	return ops.Add(s, loss, losses.RegularizationLoss(s))
}
