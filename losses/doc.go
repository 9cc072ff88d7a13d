// Package losses builds the training losses users expect, as TensorFlow's
// tf.losses: each takes labels and predictions (or logits), optional
// weights and a reduction, and returns a scalar (unless the reduction is
// None).
//
//	pred := layers.Dense{Units: 1}.Apply(s, x, training)
//	loss := losses.MeanSquaredError(s, labels, pred)               // mean over the batch
//	loss = losses.Huber(s, labels, pred, 1.0, losses.Weights(w))   // weighted per example
//	loss = ops.Add(s, loss, losses.RegularizationLoss(s))          // the layers' L2 penalties
//
// A loss never broadcasts its labels and predictions into each other:
// shapes that could differ (another rank, or a known dimension that
// differs) are refused when the graph is built, with an error in the scope
// naming both shapes. A model with one output for two targets ([?,1]
// against [?,2]) would otherwise fit their mean in silence. Dimensions the
// graph leaves unknown are checked when the step runs: the op set has no
// Assert, so the labels go through a BroadcastTo and a Reshape to the
// predictions' shape, which together fail the step unless the shapes are
// equal (dimensions of size 1 may be added or dropped only in front).
//
// The default reduction is TensorFlow 1.x's SumByNonzeroWeights, which
// without weights is the mean over the elements.
package losses
