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
//
// # Control flow
//
// Cond and WhileLoop are tf.cond and tf.while_loop:
//
//	out := ops.Cond(s, isTraining,
//		func(s *graph.Scope) []graph.Output { return []graph.Output{ops.Dropout(s, h, 0.5, 1)} },
//		func(s *graph.Scope) []graph.Output { return []graph.Output{h} })
//	res := ops.WhileLoop(s,
//		func(s *graph.Scope, v []graph.Output) graph.Output { return ops.Less(s, v[0], n) },
//		func(s *graph.Scope, v []graph.Output) []graph.Output {
//			x := ops.Gather(s, seq, v[0], 0) // seq is captured
//			return []graph.Output{ops.Add(s, v[0], ops.Const(s, int32(1))), cell(s, v[1], x)}
//		},
//		[]graph.Output{ops.Const(s, int32(0)), h0}, ops.MaximumIterations(100))
//
// They are functional, in the manner of TensorFlow 2's If and While
// (cond_v2, while_v2), not TensorFlow 1's Switch, Merge, Enter and Exit:
// a branch or a loop body is a graph of its own (graph.Func) carried in an
// attribute of one node, which runs it whole on a nested executor. The
// executor has neither dead tensors nor frames, and need not: pruning,
// placement and partitioning see one ordinary node, whose inputs include
// the tensors of the enclosing graph its functions capture, so that a
// capture from another device is a Send/Recv edge like any other and the
// partitioner never cuts a loop. Functions serialise with the graph
// (distflowpb.FunctionDef). The gradients (package grad) are an If and a
// While that recompute the forward branch or iteration next to its
// gradient; the forward loop keeps each iteration's loop variables for
// them.
package ops
