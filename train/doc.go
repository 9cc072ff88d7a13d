// Package train builds training steps: optimizers that add gradient and
// update nodes to a graph, and the global step.
//
//	s := graph.NewScope()
//	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 1))
//	y := ops.Placeholder(s, "y", tensor.Float32, tensor.MakeShape(-1, 1))
//	w := ops.NewVariable(s, "W", tensor.Float32, []int{1, 1}, ops.ZerosInit())
//	b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
//	pred := ops.Add(s, ops.MatMul(s, x, w.Value(), false, false), b.Value())
//	loss := ops.Mean(s, ops.SquaredDifference(s, pred, y), nil, false)
//	step := train.CreateGlobalStep(s)
//	opt, err := train.NewOptimizer("sgd", 0.01)
//	trainOp, err := train.Minimize(s, opt, loss, step)
//	init := ops.GlobalVariablesInitializer(s)
//
//	sess, err := session.New(s.Graph())
//	_, err = sess.Run(ctx, nil, nil, []*graph.Node{init})
//	for ... {
//		_, err = sess.Run(ctx, feeds, nil, []*graph.Node{trainOp})
//	}
//
// An optimizer is a description (its hyper-parameters); ApplyGradients adds,
// for each variable, the fused update op (ApplyAdam, ...) on the variable's
// device, so that a parameter server updates its variables in place and only
// gradients travel. The optimizer's state lives in slot variables named
// "<variable>/<slot>" ("dense/W/Adam_m"), not trainable, placed with their
// variable and initialised by the global variables initializer. Build the
// training step before calling ops.GlobalVariablesInitializer so that the
// slots are included.
//
// The global step counts applied updates: ApplyGradients increments it after
// all the updates of a step. Checkpoints save it, and hooks stop training at
// a given value.
package train
