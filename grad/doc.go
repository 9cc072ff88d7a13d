// Package grad is automatic differentiation: a registry of gradient
// functions by op name, and Gradients, which adds to a graph the nodes that
// compute the gradients of some tensors with respect to others.
//
//	dw, err := grad.Gradients(s, []graph.Output{loss}, []graph.Output{w.Value()}, nil)
//
// Gradient functions are composed from ops builders. An op without a
// gradient is declared with RegisterNone and a reason; every differentiable
// op is checked against finite differences by package grad/gradtest.
//
// The gradients of control flow (ops.Cond, ops.WhileLoop) are control flow
// themselves: an If over the branches' gradients, a While that runs the
// loop's iterations backwards. Each recomputes the forward branch or
// iteration from its inputs (the forward loop keeps every iteration's loop
// variables, stacked, when such a gradient consumes them), since a node
// cannot be given extra outputs once built: one more forward pass of the
// body for memory proportional to the loop variables, not to the body's
// intermediates. Gradients of these gradients (second order through a
// loop) are refused.
package grad
