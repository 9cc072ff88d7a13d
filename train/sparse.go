package train

import (
	"fmt"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
)

// Sparse updates. A variable read only through Gather (an
// embedding table) gets its gradient as indexed slices (GradVar.Sparse),
// and the optimizers below update only the rows they name, with their
// slots: the parameter server receives the touched rows, not the table.

// sparseGrad returns g as indexed slices when it is the gradient of
// lookups into v (see grad.SparseOf), aggregated on v's device; else nil.
func sparseGrad(s *graph.Scope, g graph.Output, v *ops.Variable) *grad.IndexedSlices {
	if v.Shape().Rank() < 1 {
		return nil
	}
	ss := s.SubScope(v.Name() + "_sparse_grad").WithDevice(v.Node().Device())
	sl, ok := grad.SparseOf(ss, g)
	if !ok {
		return nil
	}
	return &sl
}

// Ftrl is FTRL-Proximal (McMahan et al., "Ad click prediction: a view from
// the trenches", 2013) with TensorFlow's ApplyFtrl formulas: per-coordinate
// learning rates from the summed squared gradients, and L1 (which makes
// weights exactly zero) and L2 regularisation. The classic optimizer of the
// wide (linear) part of CTR models.
type Ftrl struct {
	scheduled
	LearningRate float32
	// LearningRatePower is -0.5 in nearly every use (must be <= 0).
	LearningRatePower float32
	// InitialAccumulator is the starting value of the squared-gradient sum
	// (TensorFlow: 0.1); it must be positive.
	InitialAccumulator float32
	// L1 and L2 are the regularisation strengths (non-negative).
	L1, L2 float32
}

// NewFtrl returns FTRL with learning-rate power -0.5 and initial
// accumulator 0.1.
func NewFtrl(lr, l1, l2 float32) *Ftrl {
	return &Ftrl{LearningRate: lr, LearningRatePower: -0.5, InitialAccumulator: 0.1, L1: l1, L2: l2}
}

// Name returns "Ftrl".
func (o *Ftrl) Name() string { return "Ftrl" }

// ComputeGradients implements Optimizer.
func (o *Ftrl) ComputeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error) {
	return computeGradients(s, loss, vars)
}

// ApplyGradients implements Optimizer. The slots are "<var>/Ftrl_accum"
// and "<var>/Ftrl_linear".
func (o *Ftrl) ApplyGradients(s *graph.Scope, gvs []GradVar, globalStep *ops.Variable) (*graph.Node, error) {
	switch {
	case o.InitialAccumulator <= 0:
		return nil, fmt.Errorf("train: Ftrl: the initial accumulator must be positive, got %g", o.InitialAccumulator)
	case o.LearningRatePower > 0:
		return nil, fmt.Errorf("train: Ftrl: the learning-rate power must be <= 0, got %g", o.LearningRatePower)
	case o.L1 < 0 || o.L2 < 0:
		return nil, fmt.Errorf("train: Ftrl: l1 and l2 must be non-negative, got %g and %g", o.L1, o.L2)
	case o.LearningRate <= 0:
		return nil, fmt.Errorf("train: Ftrl: the learning rate must be positive, got %g", o.LearningRate)
	}
	return applyGradients(s, o.Name(), gvs, globalStep, o.LearningRate, o.scheduled, func(s *graph.Scope, gv GradVar, lr graph.Output) []*graph.Node {
		v := gv.Var
		accum := slot(s, v, "Ftrl_accum", nil, ops.ConstantInit(float64(o.InitialAccumulator)))
		linear := slot(s, v, "Ftrl_linear", nil, ops.ZerosInit())
		if accum == nil || linear == nil {
			return nil
		}
		l1, l2, p := scalar(s, v, o.L1), scalar(s, v, o.L2), scalar(s, v, o.LearningRatePower)
		if sl := gv.Sparse; sl != nil {
			return []*graph.Node{ops.SparseApplyFtrl(s, v.Value(), accum.Value(), linear.Value(), sl.Values, sl.Indices, lr, l1, l2, p)}
		}
		return []*graph.Node{ops.ApplyFtrl(s, v.Value(), accum.Value(), linear.Value(), gv.Grad, lr, l1, l2, p)}
	})
}

// PerVariable applies each variable's gradients with the optimizer its
// name selects: the first entry of Rules whose Match returns true, else
// Default. Wide-and-deep models train their linear part with FTRL and
// their embeddings and network with Adagrad or Adam this way. Each
// optimizer adds its updates under its own name scope; the global step is
// incremented once, after all of them.
type PerVariable struct {
	Rules   []VariableRule
	Default Optimizer
}

// VariableRule selects an optimizer by variable.
type VariableRule struct {
	Match     func(v *ops.Variable) bool
	Optimizer Optimizer
}

// Name returns "PerVariable".
func (o *PerVariable) Name() string { return "PerVariable" }

// ComputeGradients implements Optimizer.
func (o *PerVariable) ComputeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error) {
	return computeGradients(s, loss, vars)
}

// ApplyGradients implements Optimizer.
func (o *PerVariable) ApplyGradients(s *graph.Scope, gvs []GradVar, globalStep *ops.Variable) (*graph.Node, error) {
	if o.Default == nil {
		return nil, fmt.Errorf("train: PerVariable: no default optimizer")
	}
	groups := map[Optimizer][]GradVar{}
	var order []Optimizer
	for _, gv := range gvs {
		opt := o.Default
		for _, r := range o.Rules {
			if r.Match != nil && r.Optimizer != nil && r.Match(gv.Var) {
				opt = r.Optimizer
				break
			}
		}
		if _, seen := groups[opt]; !seen {
			order = append(order, opt)
		}
		groups[opt] = append(groups[opt], gv)
	}
	var updates []*graph.Node
	for _, opt := range order {
		u, err := opt.ApplyGradients(s, groups[opt], nil)
		if err != nil {
			return nil, err
		}
		updates = append(updates, u)
	}
	if globalStep != nil {
		gs := s.WithDevice(globalStep.Node().Device()).WithControlDependencies(updates...)
		inc := ops.AssignAdd(gs, globalStep.Value(), ops.Scalar(gs, globalStep.DType(), 1))
		if inc.Valid() {
			updates = []*graph.Node{inc.Node}
		}
	}
	step := ops.Group(s.SubScope(o.Name()), "update", updates...)
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("train: %s: %w", o.Name(), err)
	}
	return step, nil
}
