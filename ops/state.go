package ops

import (
	"github.com/distflow/distflow/graph"
)

// Assign sets the variable ref (the output of a Variable node) to value,
// which must have its dtype and shape, and returns the new value.
func Assign(s *graph.Scope, ref, value graph.Output) graph.Output {
	return s.Out("Assign", "Assign", []graph.Output{ref, value}, nil)
}

// AssignAdd adds value to the variable ref and returns the new value.
func AssignAdd(s *graph.Scope, ref, value graph.Output) graph.Output {
	return s.Out("AssignAdd", "AssignAdd", []graph.Output{ref, value}, nil)
}

// AssignSub subtracts value from the variable ref and returns the new value.
func AssignSub(s *graph.Scope, ref, value graph.Output) graph.Output {
	return s.Out("AssignSub", "AssignSub", []graph.Output{ref, value}, nil)
}

// IsVariableInitialized returns a bool scalar: whether the variable ref
// holds a value.
func IsVariableInitialized(s *graph.Scope, ref graph.Output) graph.Output {
	return s.Out("IsVariableInitialized", "IsVariableInitialized", []graph.Output{ref}, nil)
}

// The Apply ops update a variable (and its slots, also variables) in place
// with TensorFlow's formulas. The scalar hyper-parameters and the gradient
// have the variable's dtype. They have no outputs: run the returned node as
// a target, or make later nodes depend on it.

// ApplyGradientDescent updates var -= alpha * delta.
func ApplyGradientDescent(s *graph.Scope, v, alpha, delta graph.Output) *graph.Node {
	return s.AddNode("ApplyGradientDescent", "ApplyGradientDescent", []graph.Output{v, alpha, delta}, nil)
}

// ApplyMomentum updates accum = accum*momentum + grad, then var -= lr*accum,
// or with Nesterov momentum var -= lr*grad + lr*momentum*accum.
func ApplyMomentum(s *graph.Scope, v, accum, lr, grad, momentum graph.Output, useNesterov bool) *graph.Node {
	return s.AddNode("ApplyMomentum", "ApplyMomentum", []graph.Output{v, accum, lr, grad, momentum},
		map[string]any{"use_nesterov": useNesterov})
}

// ApplyAdagrad updates accum += grad^2, then var -= lr*grad/sqrt(accum).
func ApplyAdagrad(s *graph.Scope, v, accum, lr, grad graph.Output) *graph.Node {
	return s.AddNode("ApplyAdagrad", "ApplyAdagrad", []graph.Output{v, accum, lr, grad}, nil)
}

// ApplyRMSProp updates ms = rho*ms + (1-rho)*grad^2,
// mom = momentum*mom + lr*grad/sqrt(ms+epsilon), then var -= mom.
func ApplyRMSProp(s *graph.Scope, v, ms, mom, lr, rho, momentum, epsilon, grad graph.Output) *graph.Node {
	return s.AddNode("ApplyRMSProp", "ApplyRMSProp", []graph.Output{v, ms, mom, lr, rho, momentum, epsilon, grad}, nil)
}

// ApplyAdam updates m and v (the moment estimates) and then
// var -= lr*sqrt(1-beta2Power)/(1-beta1Power) * m/(sqrt(v)+epsilon). The
// powers are the betas raised to the step number, kept by the caller.
func ApplyAdam(s *graph.Scope, v, m, vv, beta1Power, beta2Power, lr, beta1, beta2, epsilon, grad graph.Output) *graph.Node {
	return s.AddNode("ApplyAdam", "ApplyAdam",
		[]graph.Output{v, m, vv, beta1Power, beta2Power, lr, beta1, beta2, epsilon, grad}, nil)
}
