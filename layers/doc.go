// Package layers builds the layers of a model over the graph API, as
// TensorFlow's tf.layers: each creates its variables under its own scope
// ("dense/kernel", "dense/bias"), initialises them (Glorot uniform by
// default, seeded from the scope's seed and the variable's full name) and
// honours a scope that reuses variables, so that a model function builds
// the same variables for training, evaluation and prediction.
//
//	training := mode == estimator.Train
//	logits := layers.Sequential{
//		layers.Conv2D{Filters: 32, KernelSize: [2]int{5, 5}, Padding: "SAME", Activation: ops.Relu},
//		layers.MaxPool2D{PoolSize: [2]int{2, 2}},
//		layers.Flatten{},
//		layers.Dense{Units: 1024, Activation: ops.Relu, KernelRegularizer: layers.L2(1e-4)},
//		layers.Dropout{Rate: 0.4},
//		layers.Dense{Units: 10},
//	}.Apply(s, images, training)
//
// A layer is a value describing it (its fields are tf.layers' arguments);
// Apply adds it to a scope, over an input, for training or not. Default
// names are made unique ("dense", "dense_1"); a Name names the variables
// exactly ("hidden/kernel"), so that a layer built again in a scope that
// reuses variables (graph.Scope.ReuseVariables) shares them.
//
// For training on parameter servers, a Partitioner splits a large kernel
// by rows into shards that a replica device setter spreads over the ps
// tasks (Dense{Partitioner: MinMaxPartitioner(psTasks, 64<<10)}), an
// Embedding with Shards is a table of rows split the same way whose
// lookups move only the batch's rows (Embedding{InputDim: vocab,
// OutputDim: 8, Shards: psTasks}), and Towers builds a model once per
// device over one set of variables (in-graph replication):
//
//	layers.Towers(s, []string{"/job:worker/task:0", "/job:worker/task:1"}, func(ts *graph.Scope, i int) {
//		logits[i] = model.Apply(ts, images[i], true)
//	})
//
// Two collections of the graph carry what a training step needs besides
// the loss's gradients: the regularization losses (ops.
// RegularizationLossesCollection; losses.RegularizationLoss sums them, to
// be added to the loss) and the update ops (UpdateOps: BatchNormalization's
// moving statistics), which the estimator runs with every training step
// and a step built by hand must depend on:
//
//	step, err := train.Minimize(s.WithControlDependencies(layers.UpdateOps(s.Graph())...), opt, loss, globalStep)
//
// The recurrent layers LSTM and GRU run over [batch, time, features] and
// return the last output or, with ReturnSequences, every step's. By
// default they unroll the time steps into the graph (Unroll, TensorFlow's
// static_rnn), so the number of steps must be known at build time; with
// Dynamic they run them in a loop of the graph (DynamicUnroll over
// ops.WhileLoop, TensorFlow's dynamic_rnn), for any number known only at
// run time. Their step is a Cell, which either applies one time step at a
// time:
//
//	h := layers.LSTM{Units: 32}.Apply(s, sequences, training) // [batch, 32]
//	logits := layers.Dense{Units: 2}.Apply(s, h, training)
package layers
