package train

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
)

// GradientDescent updates var -= lr * grad.
type GradientDescent struct {
	scheduled
	LearningRate float32
}

// NewGradientDescent returns plain (stochastic) gradient descent.
func NewGradientDescent(lr float32) *GradientDescent { return &GradientDescent{LearningRate: lr} }

// Name returns "GradientDescent".
func (o *GradientDescent) Name() string { return "GradientDescent" }

// ComputeGradients implements Optimizer.
func (o *GradientDescent) ComputeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error) {
	return computeGradients(s, loss, vars)
}

// ApplyGradients implements Optimizer.
func (o *GradientDescent) ApplyGradients(s *graph.Scope, gvs []GradVar, globalStep *ops.Variable) (*graph.Node, error) {
	return applyGradients(s, o.Name(), gvs, globalStep, o.LearningRate, o.scheduled, func(s *graph.Scope, gv GradVar, lr graph.Output) []*graph.Node {
		v := gv.Var
		if sl := gv.Sparse; sl != nil {
			return []*graph.Node{ops.SparseApplyGradientDescent(s, v.Value(), lr, sl.Values, sl.Indices)}
		}
		return []*graph.Node{ops.ApplyGradientDescent(s, v.Value(), lr, gv.Grad)}
	})
}

// Momentum keeps an accumulator per variable:
// accum = momentum*accum + grad; var -= lr*accum (or the Nesterov variant).
type Momentum struct {
	scheduled
	LearningRate, Momentum float32
	Nesterov               bool
}

// NewMomentum returns gradient descent with momentum.
func NewMomentum(lr, momentum float32, nesterov bool) *Momentum {
	return &Momentum{LearningRate: lr, Momentum: momentum, Nesterov: nesterov}
}

// Name returns "Momentum".
func (o *Momentum) Name() string { return "Momentum" }

// ComputeGradients implements Optimizer.
func (o *Momentum) ComputeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error) {
	return computeGradients(s, loss, vars)
}

// ApplyGradients implements Optimizer. The slot is "<var>/Momentum".
func (o *Momentum) ApplyGradients(s *graph.Scope, gvs []GradVar, globalStep *ops.Variable) (*graph.Node, error) {
	return applyGradients(s, o.Name(), gvs, globalStep, o.LearningRate, o.scheduled, func(s *graph.Scope, gv GradVar, lr graph.Output) []*graph.Node {
		v := gv.Var
		accum := slot(s, v, "Momentum", nil, ops.ZerosInit())
		if accum == nil {
			return nil
		}
		if sl := gv.Sparse; sl != nil {
			return []*graph.Node{ops.SparseApplyMomentum(s, v.Value(), accum.Value(), lr,
				sl.Values, sl.Indices, scalar(s, v, o.Momentum), o.Nesterov)}
		}
		return []*graph.Node{ops.ApplyMomentum(s, v.Value(), accum.Value(), lr, gv.Grad,
			scalar(s, v, o.Momentum), o.Nesterov)}
	})
}

// Adagrad scales each coordinate by the root of its summed squared
// gradients: accum += grad^2; var -= lr*grad/sqrt(accum).
type Adagrad struct {
	scheduled
	LearningRate, InitialAccumulator float32
}

// NewAdagrad returns Adagrad; initialAccumulator (TensorFlow uses 0.1) must
// be positive.
func NewAdagrad(lr, initialAccumulator float32) *Adagrad {
	return &Adagrad{LearningRate: lr, InitialAccumulator: initialAccumulator}
}

// Name returns "Adagrad".
func (o *Adagrad) Name() string { return "Adagrad" }

// ComputeGradients implements Optimizer.
func (o *Adagrad) ComputeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error) {
	return computeGradients(s, loss, vars)
}

// ApplyGradients implements Optimizer. The slot is "<var>/Adagrad".
func (o *Adagrad) ApplyGradients(s *graph.Scope, gvs []GradVar, globalStep *ops.Variable) (*graph.Node, error) {
	if o.InitialAccumulator <= 0 {
		return nil, fmt.Errorf("train: Adagrad: the initial accumulator must be positive, got %g", o.InitialAccumulator)
	}
	return applyGradients(s, o.Name(), gvs, globalStep, o.LearningRate, o.scheduled, func(s *graph.Scope, gv GradVar, lr graph.Output) []*graph.Node {
		v := gv.Var
		accum := slot(s, v, "Adagrad", nil, ops.ConstantInit(float64(o.InitialAccumulator)))
		if accum == nil {
			return nil
		}
		if sl := gv.Sparse; sl != nil {
			return []*graph.Node{ops.SparseApplyAdagrad(s, v.Value(), accum.Value(), lr, sl.Values, sl.Indices)}
		}
		return []*graph.Node{ops.ApplyAdagrad(s, v.Value(), accum.Value(), lr, gv.Grad)}
	})
}

// RMSProp divides each gradient by a moving root mean square:
// ms = decay*ms + (1-decay)*grad^2; mom = momentum*mom + lr*grad/sqrt(ms+epsilon);
// var -= mom.
type RMSProp struct {
	scheduled
	LearningRate, Decay, Momentum, Epsilon float32
}

// NewRMSProp returns RMSProp (TensorFlow's defaults: decay 0.9, momentum 0,
// epsilon 1e-10).
func NewRMSProp(lr, decay, momentum, epsilon float32) *RMSProp {
	return &RMSProp{LearningRate: lr, Decay: decay, Momentum: momentum, Epsilon: epsilon}
}

// Name returns "RMSProp".
func (o *RMSProp) Name() string { return "RMSProp" }

// ComputeGradients implements Optimizer.
func (o *RMSProp) ComputeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error) {
	return computeGradients(s, loss, vars)
}

// ApplyGradients implements Optimizer. The slots are "<var>/RMSProp_ms"
// (initialised to ones, as TensorFlow does, so early steps are not huge) and
// "<var>/RMSProp_mom".
func (o *RMSProp) ApplyGradients(s *graph.Scope, gvs []GradVar, globalStep *ops.Variable) (*graph.Node, error) {
	return applyGradients(s, o.Name(), gvs, globalStep, o.LearningRate, o.scheduled, func(s *graph.Scope, gv GradVar, lr graph.Output) []*graph.Node {
		v := gv.Var
		ms := slot(s, v, "RMSProp_ms", nil, ops.OnesInit())
		mom := slot(s, v, "RMSProp_mom", nil, ops.ZerosInit())
		if ms == nil || mom == nil {
			return nil
		}
		return []*graph.Node{ops.ApplyRMSProp(s, v.Value(), ms.Value(), mom.Value(), lr,
			scalar(s, v, o.Decay), scalar(s, v, o.Momentum), scalar(s, v, o.Epsilon), gv.Grad)}
	})
}

// Adam keeps bias-corrected moving averages of the gradient and its square
// (Kingma & Ba 2015), with TensorFlow's formulas.
type Adam struct {
	scheduled
	LearningRate, Beta1, Beta2, Epsilon float32
}

// NewAdam returns Adam (the usual values: beta1 0.9, beta2 0.999, epsilon
// 1e-8).
func NewAdam(lr, beta1, beta2, epsilon float32) *Adam {
	return &Adam{LearningRate: lr, Beta1: beta1, Beta2: beta2, Epsilon: epsilon}
}

// Name returns "Adam".
func (o *Adam) Name() string { return "Adam" }

// ComputeGradients implements Optimizer.
func (o *Adam) ComputeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error) {
	return computeGradients(s, loss, vars)
}

// ApplyGradients implements Optimizer. The slots are "<var>/Adam_m",
// "<var>/Adam_v" and the scalars "<var>/Adam_beta1_power" and
// "<var>/Adam_beta2_power" (beta^t for the bias correction). Keeping the
// powers per variable, next to it, lets every parameter server update its
// variables without reading shared state.
func (o *Adam) ApplyGradients(s *graph.Scope, gvs []GradVar, globalStep *ops.Variable) (*graph.Node, error) {
	if o.Beta1 < 0 || o.Beta1 >= 1 || o.Beta2 < 0 || o.Beta2 >= 1 {
		return nil, fmt.Errorf("train: Adam: beta1 and beta2 must be in [0, 1), got %g and %g", o.Beta1, o.Beta2)
	}
	return applyGradients(s, o.Name(), gvs, globalStep, o.LearningRate, o.scheduled, func(s *graph.Scope, gv GradVar, lr graph.Output) []*graph.Node {
		v := gv.Var
		m := slot(s, v, "Adam_m", nil, ops.ZerosInit())
		vv := slot(s, v, "Adam_v", nil, ops.ZerosInit())
		b1p := slot(s, v, "Adam_beta1_power", []int{}, ops.ConstantInit(float64(o.Beta1)))
		b2p := slot(s, v, "Adam_beta2_power", []int{}, ops.ConstantInit(float64(o.Beta2)))
		if m == nil || vv == nil || b1p == nil || b2p == nil {
			return nil
		}
		beta1, beta2 := scalar(s, v, o.Beta1), scalar(s, v, o.Beta2)
		var apply *graph.Node
		if sl := gv.Sparse; sl != nil {
			// Lazy Adam: the moments of untouched rows do not decay.
			apply = ops.SparseApplyAdam(s, v.Value(), m.Value(), vv.Value(), b1p.Value(), b2p.Value(),
				lr, beta1, beta2, scalar(s, v, o.Epsilon), sl.Values, sl.Indices)
		} else {
			apply = ops.ApplyAdam(s, v.Value(), m.Value(), vv.Value(), b1p.Value(), b2p.Value(),
				lr, beta1, beta2, scalar(s, v, o.Epsilon), gv.Grad)
		}
		if apply == nil {
			return nil
		}
		// The powers advance after the update, which read their old values.
		after := s.WithControlDependencies(apply)
		p1 := ops.Assign(after, b1p.Value(), ops.Mul(after, b1p.Value(), beta1))
		p2 := ops.Assign(after, b2p.Value(), ops.Mul(after, b2p.Value(), beta2))
		if !p1.Valid() || !p2.Valid() {
			return nil
		}
		return []*graph.Node{apply, p1.Node, p2.Node}
	})
}
