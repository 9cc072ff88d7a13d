// Package ops holds the typed graph builders: one function per op
// (ops.MatMul, ops.Conv2D, ...), variables with their initializers, and the
// composed helpers (Dropout, losses, summaries).
//
//	s := graph.NewScope()
//	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 784))
//	w := ops.NewVariable(s, "W", tensor.Float32, []int{784, 10}, ops.GlorotUniformInit(1))
//	logits := ops.MatMul(s, x, w.Value(), false, false)
//	init := ops.GlobalVariablesInitializer(s)
//
// Builders record errors in the scope (see graph.Scope) and return the zero
// Output after one.
package ops
