package layers

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// BatchNormalization normalises each channel (the last axis) by the
// statistics of the batch when training, and by moving averages of them
// otherwise, then scales by gamma and shifts by beta, as
// tf.layers.batch_normalization(x, axis=-1, momentum, epsilon, center,
// scale, training=training, name) (not fused).
//
// Its variables are "<name>/gamma" and "<name>/beta" (trainable) and
// "<name>/moving_mean" and "<name>/moving_variance" (not trainable, saved
// in checkpoints), all [channels]. Built for training, it adds to the
// graph's update ops (UpdateOps) the nodes that move the averages
// towards the batch's mean and (biased) variance:
// moving = moving*Momentum + batch*(1-Momentum). The estimator runs them
// with every training step; a step built by hand must depend on them.
// Built for evaluation or prediction, it reads only the moving averages.
type BatchNormalization struct {
	// Momentum of the moving averages (zero: 0.99).
	Momentum float64
	// Epsilon is added to the variance (zero: 1e-3).
	Epsilon float64
	// NoCenter leaves beta out (center=False); NoScale leaves gamma out
	// (scale=False: the next layer scales, as a linear or ReLU layer).
	NoCenter, NoScale bool
	// Name names the layer's scope (default "batch_normalization", made unique).
	Name string
}

// Apply implements Layer.
func (b BatchNormalization) Apply(s *graph.Scope, x graph.Output, training bool) graph.Output {
	dt, c, ok := inputCheck(s, "BatchNormalization", x, 2)
	if !ok {
		return graph.Output{}
	}
	momentum, eps := or(b.Momentum, 0.99), or(b.Epsilon, 1e-3)
	if momentum < 0 || momentum >= 1 || eps <= 0 {
		s.SetErr(fmt.Errorf("layers: BatchNormalization: Momentum %v must be in [0, 1) and Epsilon %v positive", momentum, eps))
		return graph.Output{}
	}
	ls := layerScope(s, b.Name, "batch_normalization")
	gamma, beta := affineVariables(ls, dt, c, b.NoScale, b.NoCenter)
	movingMean := variable(ls, "moving_mean", dt, []int{c}, ops.ZerosInit(), nil, ops.NotTrainable())
	movingVar := variable(ls, "moving_variance", dt, []int{c}, ops.OnesInit(), nil, ops.NotTrainable())
	if ls.Err() != nil {
		return graph.Output{}
	}
	if !training {
		return normalize(ls, x, movingMean.Value(), movingVar.Value(), gamma, beta, eps)
	}
	axes := make([]int, x.Shape().Rank()-1)
	for i := range axes {
		axes[i] = i
	}
	mean := ops.Mean(ls, x, axes, false)
	variance := ops.Mean(ls, ops.SquaredDifference(ls, x, ops.StopGradient(ls, mean)), axes, false)

	// moving -= (moving - batch) * (1 - momentum), outside the gradient.
	us := ls.SubScope("update")
	decay := ops.Scalar(us, dt, 1-momentum)
	update := func(v *ops.Variable, batch graph.Output) *graph.Node {
		delta := ops.Mul(us, ops.Sub(us, v.Value(), ops.StopGradient(us, batch)), decay)
		return ops.AssignSub(us, v.Value(), delta).Node
	}
	m, v := update(movingMean, mean), update(movingVar, variance)
	if us.Err() != nil {
		return graph.Output{}
	}
	ls.Graph().AddToCollection(ops.UpdateOpsCollection, m, v)
	return normalize(ls, x, mean, variance, gamma, beta, eps)
}

// LayerNormalization normalises each example over its last axis by its own
// mean and variance, then scales by gamma and shifts by beta, as
// tf.contrib.layers.layer_norm(x, begin_norm_axis=-1, begin_params_axis=-1)
// and tf.keras.layers.LayerNormalization(axis=-1). Its variables are
// "<name>/gamma" and "<name>/beta" [channels]. It behaves the same in
// training and evaluation.
type LayerNormalization struct {
	// Epsilon is added to the variance (zero: 1e-3).
	Epsilon float64
	// NoCenter leaves beta out; NoScale leaves gamma out.
	NoCenter, NoScale bool
	// Name names the layer's scope (default "layer_normalization", made unique).
	Name string
}

// Apply implements Layer.
func (l LayerNormalization) Apply(s *graph.Scope, x graph.Output, _ bool) graph.Output {
	dt, c, ok := inputCheck(s, "LayerNormalization", x, 1)
	if !ok {
		return graph.Output{}
	}
	eps := or(l.Epsilon, 1e-3)
	if eps <= 0 {
		s.SetErr(fmt.Errorf("layers: LayerNormalization: Epsilon %v must be positive", eps))
		return graph.Output{}
	}
	ls := layerScope(s, l.Name, "layer_normalization")
	gamma, beta := affineVariables(ls, dt, c, l.NoScale, l.NoCenter)
	last := []int{x.Shape().Rank() - 1}
	mean := ops.Mean(ls, x, last, true)
	variance := ops.Mean(ls, ops.SquaredDifference(ls, x, ops.StopGradient(ls, mean)), last, true)
	return normalize(ls, x, mean, variance, gamma, beta, eps)
}

// affineVariables adds gamma (ones) and beta (zeros) of c channels, unless
// left out (nil).
func affineVariables(ls *graph.Scope, dt tensor.DType, c int, noScale, noCenter bool) (gamma, beta *ops.Variable) {
	if !noScale {
		gamma = variable(ls, "gamma", dt, []int{c}, ops.OnesInit(), nil)
	}
	if !noCenter {
		beta = variable(ls, "beta", dt, []int{c}, ops.ZerosInit(), nil)
	}
	return gamma, beta
}

// normalize returns (x - mean) * rsqrt(variance + eps) * gamma + beta, the
// statistics broadcasting along x's last axis (or kept dimensions).
func normalize(s *graph.Scope, x, mean, variance graph.Output, gamma, beta *ops.Variable, eps float64) graph.Output {
	inv := ops.Rsqrt(s, ops.Add(s, variance, ops.Scalar(s, x.DType(), eps)))
	if gamma != nil {
		inv = ops.Mul(s, inv, gamma.Value())
	}
	y := ops.Mul(s, ops.Sub(s, x, mean), inv)
	if beta != nil {
		y = ops.Add(s, y, beta.Value())
	}
	return y
}

// or is v, or def when v is zero.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
