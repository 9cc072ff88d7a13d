package train

import (
	"errors"
	"fmt"
	"math"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// ClipByGlobalNorm is an Optimizer that rescales each step's gradients so
// that their global norm, the L2 norm of all of them together, is at most
// MaxNorm, then applies them with the wrapped Optimizer: TensorFlow's
// tf.clip_by_global_norm (Keras' global_clipnorm) and PyTorch's
// torch.nn.utils.clip_grad_norm_. Under a distributed strategy each
// replica clips the gradients it computed, before they are pushed or
// averaged.
type ClipByGlobalNorm struct {
	Optimizer
	MaxNorm float32
}

func (c ClipByGlobalNorm) wrapped() Optimizer { return c.Optimizer }

// ComputeGradients computes the wrapped Optimizer's gradients and clips
// them (ClipGradients).
func (c ClipByGlobalNorm) ComputeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error) {
	if c.Optimizer == nil {
		return nil, errors.New("train: ClipByGlobalNorm: the optimizer is nil")
	}
	gvs, err := c.Optimizer.ComputeGradients(s, loss, vars)
	if err != nil {
		return nil, err
	}
	return ClipGradients(s.SubScope("clip_by_global_norm"), gvs, c.MaxNorm)
}

// ClipGradients scales every gradient of gvs by maxNorm / max(norm,
// maxNorm), norm being their global L2 norm, so that the result's norm is
// at most maxNorm and its direction unchanged. A sparse gradient
// (embedding rows) counts by its values, as TensorFlow's global_norm counts
// an IndexedSlices, and stays sparse. Clipping does not repair non-finite
// gradients: they come from a non-finite loss, which the training loop
// reports.
func ClipGradients(s *graph.Scope, gvs []GradVar, maxNorm float32) ([]GradVar, error) {
	if !(maxNorm > 0) || math.IsInf(float64(maxNorm), 0) {
		return nil, fmt.Errorf("train: clipping gradients: the maximum norm must be a positive number, got %v", maxNorm)
	}
	if len(gvs) == 0 {
		return gvs, nil
	}
	squares := make([]graph.Output, 0, len(gvs))
	for _, gv := range gvs {
		g := gv.Grad
		if gv.Sparse != nil {
			g = gv.Sparse.Values
		}
		dt := g.DType()
		if dt != tensor.Float32 && dt != tensor.Float64 {
			return nil, fmt.Errorf("train: clipping gradients: the gradient of %s is %v; only float32 and float64 gradients are clipped", gv.Var.Name(), dt)
		}
		// Half the sum of squares in one pass (accumulated in float64).
		squares = append(squares, ops.Cast(s, ops.L2Loss(s, g), tensor.Float64))
	}
	norm := ops.Sqrt(s, ops.Mul(s, ops.Scalar(s, tensor.Float64, 2), ops.AddN(s, squares...)))
	limit := ops.Scalar(s, tensor.Float64, float64(maxNorm))
	scale := ops.Div(s, limit, ops.Maximum(s, norm, limit))
	scales := map[tensor.DType]graph.Output{tensor.Float64: scale}
	out := make([]GradVar, len(gvs))
	for i, gv := range gvs {
		dt := gv.Grad.DType()
		k, ok := scales[dt]
		if !ok {
			k = ops.Cast(s, scale, dt)
			scales[dt] = k
		}
		out[i] = GradVar{Grad: ops.Mul(s, gv.Grad, k), Var: gv.Var}
		if sp := gv.Sparse; sp != nil {
			out[i].Sparse = &grad.IndexedSlices{Indices: sp.Indices, Values: ops.Mul(s, sp.Values, k), DenseShape: sp.DenseShape}
		}
	}
	return out, s.Err()
}
