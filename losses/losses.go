package losses

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Reduction says how a loss turns the weighted per-element losses into
// its result (tf.losses.Reduction).
type Reduction int

const (
	// SumByNonzeroWeights divides the weighted sum by the number of
	// non-zero weights (TensorFlow 1.x's default; without weights, the
	// mean over the elements).
	SumByNonzeroWeights Reduction = iota
	// Mean divides the weighted sum by the sum of the weights.
	Mean
	// SumOverBatchSize divides the weighted sum by the number of elements.
	SumOverBatchSize
	// Sum is the weighted sum.
	Sum
	// None keeps the weighted loss of each element (the result is not a
	// scalar: reduce it before using it as a training loss).
	None
)

func (r Reduction) String() string {
	switch r {
	case SumByNonzeroWeights:
		return "sum_by_nonzero_weights"
	case Mean:
		return "weighted_mean"
	case SumOverBatchSize:
		return "sum_over_batch_size"
	case Sum:
		return "weighted_sum"
	case None:
		return "none"
	}
	return fmt.Sprintf("Reduction(%d)", int(r))
}

// Option sets an optional argument of a loss.
type Option func(*config)

type config struct {
	weights   graph.Output
	reduction Reduction
	name      string
}

// Weights weighs each element's loss: a scalar, or a tensor of the
// losses' rank whose dimensions are each 1 or the losses' (a weight per
// example: [batch, 1]). Weights that would broadcast otherwise are
// refused.
func Weights(w graph.Output) Option { return func(c *config) { c.weights = w } }

// WithReduction sets the reduction (default SumByNonzeroWeights).
func WithReduction(r Reduction) Option { return func(c *config) { c.reduction = r } }

// Name names the loss's scope (default the loss's TensorFlow name,
// "mean_squared_error", ...).
func Name(name string) Option { return func(c *config) { c.name = name } }

// MeanSquaredError is the reduced (labels - predictions)², as
// tf.losses.mean_squared_error(labels, predictions, weights, reduction).
func MeanSquaredError(s *graph.Scope, labels, predictions graph.Output, opts ...Option) graph.Output {
	return elementwise(s, "mean_squared_error", labels, predictions, opts, func(s *graph.Scope, l, p graph.Output) graph.Output {
		return ops.SquaredDifference(s, p, l)
	})
}

// AbsoluteDifference is the reduced |labels - predictions|, as
// tf.losses.absolute_difference.
func AbsoluteDifference(s *graph.Scope, labels, predictions graph.Output, opts ...Option) graph.Output {
	return elementwise(s, "absolute_difference", labels, predictions, opts, func(s *graph.Scope, l, p graph.Output) graph.Output {
		return ops.Abs(s, ops.Sub(s, p, l))
	})
}

// Huber is the reduced Huber loss of the error e = predictions - labels:
// e²/2 where |e| <= delta, delta*(|e| - delta/2) beyond, as
// tf.losses.huber_loss(labels, predictions, weights, delta).
func Huber(s *graph.Scope, labels, predictions graph.Output, delta float64, opts ...Option) graph.Output {
	if delta <= 0 {
		s.SetErr(fmt.Errorf("losses: huber_loss: delta %v must be positive", delta))
		return graph.Output{}
	}
	return elementwise(s, "huber_loss", labels, predictions, opts, func(s *graph.Scope, l, p graph.Output) graph.Output {
		// quadratic = min(|e|, delta); linear = |e| - quadratic, as
		// TensorFlow computes it: no comparison on the gradient's path.
		abs := ops.Abs(s, ops.Sub(s, p, l))
		d := ops.Scalar(s, p.DType(), delta)
		quadratic := ops.Minimum(s, abs, d)
		linear := ops.Sub(s, abs, quadratic)
		return ops.Add(s, ops.Mul(s, ops.Scalar(s, p.DType(), 0.5), ops.Square(s, quadratic)), ops.Mul(s, d, linear))
	})
}

// LogLoss is the reduced -labels*log(predictions+epsilon) -
// (1-labels)*log(1-predictions+epsilon) of probabilities, as
// tf.losses.log_loss (epsilon 1e-7 there).
func LogLoss(s *graph.Scope, labels, predictions graph.Output, epsilon float64, opts ...Option) graph.Output {
	return elementwise(s, "log_loss", labels, predictions, opts, func(s *graph.Scope, l, p graph.Output) graph.Output {
		dt := p.DType()
		eps, one := ops.Scalar(s, dt, epsilon), ops.Scalar(s, dt, 1)
		pos := ops.Mul(s, l, ops.Log(s, ops.Add(s, p, eps)))
		neg := ops.Mul(s, ops.Sub(s, one, l), ops.Log(s, ops.Add(s, ops.Sub(s, one, p), eps)))
		return ops.Neg(s, ops.Add(s, pos, neg))
	})
}

// SigmoidCrossEntropy is the reduced cross-entropy of independent binary
// labels (in [0, 1]) and logits, computed stably as
// max(x, 0) - x*z + log(1 + exp(-|x|)), as
// tf.losses.sigmoid_cross_entropy(multi_class_labels, logits).
func SigmoidCrossEntropy(s *graph.Scope, labels, logits graph.Output, opts ...Option) graph.Output {
	return elementwise(s, "sigmoid_cross_entropy", labels, logits, opts, func(s *graph.Scope, z, x graph.Output) graph.Output {
		relu := ops.Maximum(s, x, ops.ZerosLike(s, x))
		return ops.Add(s, ops.Sub(s, relu, ops.Mul(s, x, z)), ops.Softplus(s, ops.Neg(s, ops.Abs(s, x))))
	})
}

// SoftmaxCrossEntropy is the reduced cross-entropy of the softmax of
// logits [..., classes] against dense labels of the same shape (one-hot or
// probabilities: each row sums to 1, which the fused gradient assumes), one
// loss per example, as tf.losses.softmax_cross_entropy(onehot_labels,
// logits).
func SoftmaxCrossEntropy(s *graph.Scope, labels, logits graph.Output, opts ...Option) graph.Output {
	c := configure(opts, "softmax_cross_entropy")
	ls := s.SubScope(c.name)
	if !checkInputs(ls, c.name, "labels", "logits", labels, logits, false) || !sameShape(ls, c.name, labels, logits) {
		return graph.Output{}
	}
	if r := logits.Shape().Rank(); r < 1 {
		ls.SetErr(fmt.Errorf("losses: %s: logits %s have shape %v; want [..., classes]", c.name, logits, logits.Shape()))
		return graph.Output{}
	}
	labels = checked(ls, labels, logits)
	// The fused op takes a batch of rows: fold any leading dimensions.
	rank := logits.Shape().Rank()
	shape2 := func(x graph.Output) graph.Output {
		if rank == 2 {
			return x
		}
		return ops.Reshape(ls, x, ops.Concat(ls, 0, ops.Const(ls, []int32{-1}), ops.Slice(ls, ops.Shape(ls, x), []int{rank - 1}, []int{1})))
	}
	loss, _ := ops.SoftmaxCrossEntropyWithLogits(ls, shape2(logits), shape2(ops.Cast(ls, labels, logits.DType())))
	if rank != 2 {
		loss = ops.Reshape(ls, loss, ops.Slice(ls, ops.Shape(ls, logits), []int{0}, []int{rank - 1}))
	}
	return reduce(ls, c, loss)
}

// SparseSoftmaxCrossEntropy is the reduced cross-entropy of the softmax of
// logits [..., classes] against class indices [...] (int32 or int64), one
// loss per example, as tf.losses.sparse_softmax_cross_entropy(labels,
// logits). An index out of [0, classes) fails the step.
func SparseSoftmaxCrossEntropy(s *graph.Scope, labels, logits graph.Output, opts ...Option) graph.Output {
	c := configure(opts, "sparse_softmax_cross_entropy")
	ls := s.SubScope(c.name)
	if !checkInputs(ls, c.name, "labels", "logits", labels, logits, true) {
		return graph.Output{}
	}
	ln, lg := labels.Shape(), logits.Shape()
	want := tensor.UnknownShape()
	if lg.KnownRank() && lg.Rank() >= 1 {
		want = tensor.MakeShape(lg.Dims()[:lg.Rank()-1]...)
	}
	if (lg.KnownRank() && lg.Rank() < 1) || !ln.IsCompatibleWith(want) {
		ls.SetErr(fmt.Errorf("losses: %s: labels %s of shape %v do not index logits %s of shape %v: want labels of shape %v (one class index per row of logits), refusing to broadcast", c.name, labels, ln, logits, lg, want))
		return graph.Output{}
	}
	if (!ln.FullyDefined() || !want.FullyDefined()) && lg.Rank() != 2 {
		// Run-time check: labels must have logits' shape without its last
		// axis. (Of rank 2, the op itself refuses labels that are not one
		// per row: no host-side shape ops in a device's step.)
		rows := ops.Slice(ls, ops.Shape(ls, logits), []int{0}, []int{lg.Rank() - 1})
		labels = checkedTo(ls, labels, rows)
	}
	rank := lg.Rank()
	flatLogits, flatLabels := logits, labels
	if rank != 2 {
		flatLogits = ops.Reshape(ls, logits, ops.Concat(ls, 0, ops.Const(ls, []int32{-1}), ops.Slice(ls, ops.Shape(ls, logits), []int{rank - 1}, []int{1})))
		flatLabels = ops.ReshapeTo(ls, labels, -1)
	}
	loss, _ := ops.SparseSoftmaxCrossEntropyWithLogits(ls, flatLogits, flatLabels)
	if rank != 2 {
		loss = ops.Reshape(ls, loss, ops.Shape(ls, labels))
	}
	return reduce(ls, c, loss)
}

// RegularizationLoss returns the sum of the graph's regularization losses
// (ops.RegularizationLossesCollection: the layers' kernel penalties), as
// tf.losses.get_regularization_loss, or a float32 zero when there are
// none. Add it to the training loss.
func RegularizationLoss(s *graph.Scope) graph.Output {
	nodes := s.Graph().Collection(ops.RegularizationLossesCollection)
	if len(nodes) == 0 {
		return ops.Scalar(s, tensor.Float32, 0)
	}
	terms := make([]graph.Output, len(nodes))
	for i, n := range nodes {
		terms[i] = n.Output(0)
	}
	if len(terms) == 1 {
		return ops.Identity(s, terms[0])
	}
	return ops.AddN(s, terms...)
}

func configure(opts []Option, name string) config {
	c := config{name: name}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// elementwise builds a loss computed element by element from labels and
// predictions of the same shape, then weighted and reduced.
func elementwise(s *graph.Scope, name string, labels, predictions graph.Output, opts []Option, f func(s *graph.Scope, labels, predictions graph.Output) graph.Output) graph.Output {
	c := configure(opts, name)
	ls := s.SubScope(c.name)
	if !checkInputs(ls, c.name, "labels", "predictions", labels, predictions, false) || !sameShape(ls, c.name, labels, predictions) {
		return graph.Output{}
	}
	labels = checked(ls, ops.Cast(ls, labels, predictions.DType()), predictions)
	return reduce(ls, c, f(ls, labels, predictions))
}

// checkInputs checks both inputs are there and the second floating point
// (the first an integer when intLabels).
func checkInputs(s *graph.Scope, name, an, bn string, a, b graph.Output, intLabels bool) bool {
	if s.Err() != nil {
		return false
	}
	switch {
	case !a.Valid() || !b.Valid():
		s.SetErr(fmt.Errorf("losses: %s: the %s or the %s are missing", name, an, bn))
	case !b.DType().IsFloat():
		s.SetErr(fmt.Errorf("losses: %s: %s %s are %v; want float32 or float64", name, bn, b, b.DType()))
	case intLabels && a.DType() != tensor.Int32 && a.DType() != tensor.Int64:
		s.SetErr(fmt.Errorf("losses: %s: %s %s are %v; want class indices, int32 or int64", name, an, a, a.DType()))
	case !b.Shape().KnownRank():
		s.SetErr(fmt.Errorf("losses: %s: %s %s have unknown rank", name, bn, b))
	}
	return s.Err() == nil
}

// sameShape refuses, at build time, labels and predictions whose shapes
// could differ: a different rank, or a known dimension that differs. A
// loss never broadcasts them into each other (a model with one output for
// two targets would silently fit their mean).
func sameShape(s *graph.Scope, name string, labels, predictions graph.Output) bool {
	ln, pn := labels.Shape(), predictions.Shape()
	if !ln.IsCompatibleWith(pn) || (ln.KnownRank() && ln.Rank() != pn.Rank()) {
		s.SetErr(fmt.Errorf("losses: %s: labels %s of shape %v and predictions %s of shape %v: the shapes must be equal, refusing to broadcast them",
			name, labels, labels.Shape(), predictions, predictions.Shape()))
		return false
	}
	return true
}

// checked returns labels, made to fail the step at run time unless it has
// the shape of like when their static shapes leave it open.
func checked(s *graph.Scope, labels, like graph.Output) graph.Output {
	if labels.Shape().FullyDefined() && like.Shape().FullyDefined() {
		return labels // sameShape decided
	}
	return checkedTo(s, labels, ops.Shape(s, like))
}

// checkedTo returns labels reshaped to shape (1-D int32), failing the step
// unless labels has exactly that shape: the op set has no Assert, so
// BroadcastTo (each dimension equal or 1) and Reshape (the same element
// count) check it together.
func checkedTo(s *graph.Scope, labels, shape graph.Output) graph.Output {
	cs := s.SubScope("labels_must_have_predictions_shape")
	b := ops.BroadcastTo(cs, labels, shape)
	if !b.Valid() {
		return b
	}
	return ops.Reshape(cs.WithControlDependencies(b.Node), labels, shape)
}

// reduce weights the losses and reduces them as c says.
func reduce(s *graph.Scope, c config, losses graph.Output) graph.Output {
	if s.Err() != nil {
		return graph.Output{}
	}
	dt := losses.DType()
	weighted := losses
	var weights graph.Output
	if c.weights.Valid() {
		weights = ops.Cast(s, c.weights, dt)
		ws, lsh := weights.Shape(), losses.Shape()
		ok := ws.KnownRank() && (ws.Rank() == 0 || ws.Rank() == lsh.Rank())
		for i := 0; ok && ws.Rank() > 0 && i < ws.Rank(); i++ {
			w, l := ws.Dim(i), lsh.Dim(i)
			ok = w == 1 || w < 0 || l < 0 || w == l
		}
		if !ok {
			s.SetErr(fmt.Errorf("losses: %s: weights %s of shape %v do not fit losses of shape %v: want a scalar or the losses' rank with each dimension 1 or theirs",
				c.name, c.weights, ws, lsh))
			return graph.Output{}
		}
		weighted = ops.Mul(s, losses, weights)
	}
	total := func() graph.Output { return ops.Sum(s, weighted, nil, false) }
	count := func() graph.Output { return ops.Cast(s, ops.Size(s, weighted), dt) }
	switch c.reduction {
	case None:
		return weighted
	case Sum:
		return total()
	case SumOverBatchSize:
		return ops.Div(s, total(), count())
	case Mean:
		if !weights.Valid() {
			return ops.Div(s, total(), count())
		}
		w := ops.Sum(s, ops.Mul(s, weights, ops.OnesLike(s, losses)), nil, false)
		return safeDiv(s, total(), w)
	case SumByNonzeroWeights:
		if !weights.Valid() {
			return ops.Div(s, total(), count())
		}
		full := ops.Mul(s, weights, ops.OnesLike(s, losses))
		nonzero := ops.Sum(s, ops.Cast(s, ops.NotEqual(s, full, ops.ZerosLike(s, full)), dt), nil, false)
		return safeDiv(s, total(), nonzero)
	}
	s.SetErr(fmt.Errorf("losses: %s: unknown reduction %v", c.name, c.reduction))
	return graph.Output{}
}

// safeDiv is num/den, or 0 where den is 0 (all weights zero), as
// TensorFlow's losses.
func safeDiv(s *graph.Scope, num, den graph.Output) graph.Output {
	zero := ops.ZerosLike(s, den)
	isZero := ops.Equal(s, den, zero)
	one := ops.OnesLike(s, den)
	return ops.Select(s, isZero, zero, ops.Div(s, num, ops.Select(s, isZero, one, den)))
}
