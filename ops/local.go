package ops

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// Graph collections of the model-building layer (packages layers, losses
// and evalmetrics), by TensorFlow's GraphKeys. They hold node names.
const (
	// LocalVariablesCollection lists the variables made by
	// NewLocalVariable: per-process state (streaming metrics'
	// accumulators) that checkpoints leave out.
	LocalVariablesCollection = "local_variables"
	// LocalVariableInitializersCollection lists their initializers, in
	// the order of LocalVariablesCollection.
	LocalVariableInitializersCollection = "local_variable_initializers"
	// UpdateOpsCollection lists the nodes a training step must run besides
	// the gradient updates (the moving statistics of batch normalisation),
	// as tf.GraphKeys.UPDATE_OPS.
	UpdateOpsCollection = "update_ops"
	// RegularizationLossesCollection lists scalar penalty terms to add to a
	// loss (a kernel's L2), as tf.GraphKeys.REGULARIZATION_LOSSES.
	RegularizationLossesCollection = "regularization_losses"
)

// NewLocalVariable adds a variable as NewVariable does, but kept out of the
// global variables: checkpoints do not save it, a model restored from one
// does not expect it, and ops.GlobalVariablesInitializer does not
// initialise it (LocalVariablesInitializer does). It is never reused: each
// call adds a new variable (a unique name), even in a scope that reuses
// variables, as tf.metrics' accumulators. It is not trainable.
func NewLocalVariable(s *graph.Scope, name string, dt tensor.DType, shape []int, init Initializer) *Variable {
	s = s.OutsideFunctions()
	if s.Err() != nil {
		return nil
	}
	if init == nil {
		s.SetErr(fmt.Errorf("ops: local variable %q: no initializer", s.Prefix()+name))
		return nil
	}
	n, assign := variableNodes(s, "local variable", s.Prefix()+name, dt, shape, init)
	if n == nil {
		return nil
	}
	g := s.Graph()
	g.AddToCollection(LocalVariablesCollection, n)
	g.AddToCollection(LocalVariableInitializersCollection, assign)
	return &Variable{node: n, init: assign}
}

// LocalVariables returns the variables of g made by NewLocalVariable, in
// creation order.
func LocalVariables(g *graph.Graph) []*Variable {
	vars, inits := g.Collection(LocalVariablesCollection), g.Collection(LocalVariableInitializersCollection)
	out := make([]*Variable, 0, len(vars))
	for i, n := range vars {
		v := &Variable{node: n}
		if i < len(inits) && inits[i].NumInputs() > 0 && inits[i].Input(0).Node == n {
			v.init = inits[i]
		}
		out = append(out, v)
	}
	return out
}

// LocalVariablesInitializer returns a no-op named "local_init" that runs the
// initializer of every local variable of the scope's graph (none: a no-op
// that does nothing). Running it again resets them.
func LocalVariablesInitializer(s *graph.Scope) *graph.Node {
	vars := LocalVariables(s.Graph())
	deps := make([]*graph.Node, 0, len(vars))
	for _, v := range vars {
		if v.init == nil {
			s.SetErr(fmt.Errorf("ops: LocalVariablesInitializer: local variable %v has no initializer", v))
			return nil
		}
		deps = append(deps, v.init)
	}
	return Group(s, "local_init", deps...)
}
