package layers

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Normalization standardises each feature (the last axis) with fixed
// statistics, (x - Mean) / sqrt(Variance), as
// tf.keras.layers.Normalization(mean, variance). The statistics, those of
// the training set (NormalizationOf), are constants of the graph, so an
// exported model standardises its own input. It has no variables.
type Normalization struct {
	// Mean and Variance of each feature; every variance must be positive.
	Mean, Variance []float32
	// Name names the layer's scope (default "normalization", made unique).
	Name string
}

// NormalizationOf returns the Normalization of the examples x (float32
// [examples, features]): each feature's mean and (biased) variance.
func NormalizationOf(x *tensor.Tensor) (Normalization, error) {
	if x == nil {
		return Normalization{}, fmt.Errorf("layers: NormalizationOf: no examples (a nil tensor)")
	}
	if x.DType() != tensor.Float32 || len(x.Shape()) != 2 || x.Shape()[0] == 0 {
		return Normalization{}, fmt.Errorf("layers: NormalizationOf: examples %v%v; want float32 [examples, features], at least one example", x.DType(), x.Shape())
	}
	n, d := float32(x.Shape()[0]), x.Shape()[1]
	mean, meanSq := make([]float32, d), make([]float32, d)
	for i, v := range x.Float32s() {
		mean[i%d], meanSq[i%d] = mean[i%d]+v/n, meanSq[i%d]+v*v/n
	}
	for i, m := range mean {
		meanSq[i] -= float32(m * m)
	}
	return Normalization{Mean: mean, Variance: meanSq}, nil
}

// Apply implements Layer.
func (l Normalization) Apply(s *graph.Scope, x graph.Output, _ bool) graph.Output {
	dt, d, ok := inputCheck(s, "Normalization", x, 1)
	if !ok {
		return graph.Output{}
	}
	if len(l.Mean) != d || len(l.Variance) != d {
		s.SetErr(fmt.Errorf("layers: Normalization: %d means and %d variances for input %s of shape %v", len(l.Mean), len(l.Variance), x, x.Shape()))
		return graph.Output{}
	}
	ls := layerScope(s, l.Name, "normalization")
	mean, variance := ops.Const(ls, l.Mean), ops.Const(ls, l.Variance)
	if dt != tensor.Float32 {
		mean, variance = ops.Cast(ls, mean, dt), ops.Cast(ls, variance, dt)
	}
	return ops.Mul(ls, ops.Sub(ls, x, mean), ops.Rsqrt(ls, variance))
}
