// Package grad is automatic differentiation: a registry of gradient
// functions by op name, and Gradients, which adds to a graph the nodes that
// compute the gradients of some tensors with respect to others.
//
//	dw, err := grad.Gradients(s, []graph.Output{loss}, []graph.Output{w.Value()}, nil)
//
// Gradient functions are composed from ops builders. An op without a
// gradient is declared with RegisterNone and a reason; every differentiable
// op is checked against finite differences by package grad/gradtest.
package grad
