package layers

import (
	"fmt"
	"hash/fnv"
	"math"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Layer is one stage of a model: Apply adds it to s over x and returns its
// output. training says whether the graph is built for training (dropout
// active, batch statistics used and moving statistics updated) or for
// evaluation and prediction; layers that do not care ignore it. Errors are
// recorded in s (the zero Output is returned), as builders do.
type Layer interface {
	Apply(s *graph.Scope, x graph.Output, training bool) graph.Output
}

// Activation is applied to a layer's output: ops.Relu, ops.Sigmoid,
// ops.Tanh, ops.Softmax fit; nil is the identity. It is a layer too
// (tf.keras.layers.Activation), for a stack that normalises between a
// linear layer and its nonlinearity:
//
//	layers.Sequential{layers.Conv2D{Filters: 8, KernelSize: [2]int{3, 3}},
//		layers.BatchNormalization{}, layers.Activation(ops.Relu), ...}
type Activation func(s *graph.Scope, x graph.Output) graph.Output

// Apply implements Layer.
func (a Activation) Apply(s *graph.Scope, x graph.Output, _ bool) graph.Output {
	switch {
	case s.Err() != nil:
		return graph.Output{}
	case a == nil:
		return x
	}
	return a(s, x)
}

// Regularizer returns a scalar penalty of a weight, added to the graph's
// regularization losses (ops.RegularizationLossesCollection) when the
// weight is created; losses.RegularizationLoss sums them.
type Regularizer func(s *graph.Scope, w graph.Output) graph.Output

// L2 is the penalty scale * sum(w²) / 2, as
// tf.contrib.layers.l2_regularizer(scale).
func L2(scale float64) Regularizer {
	return func(s *graph.Scope, w graph.Output) graph.Output {
		return ops.Mul(s, ops.L2Loss(s, w), ops.Scalar(s, w.DType(), scale))
	}
}

// Sequential is a plain stack of layers, each applied to the output of the
// one before (tf.keras.Sequential). Its layers are built in the scope given
// to Apply.
type Sequential []Layer

// Apply applies the layers in order.
func (q Sequential) Apply(s *graph.Scope, x graph.Output, training bool) graph.Output {
	for _, l := range q {
		if s.Err() != nil {
			return graph.Output{}
		}
		x = l.Apply(s, x, training)
	}
	return x
}

// UpdateOps returns the nodes of g's update-ops collection (the moving
// statistics of BatchNormalization layers built for training). A training
// step built by hand must run them: build it in
// s.WithControlDependencies(layers.UpdateOps(g)...), as with TensorFlow's
// tf.GraphKeys.UPDATE_OPS; the estimator does it by itself.
func UpdateOps(g *graph.Graph) []*graph.Node { return g.Collection(ops.UpdateOpsCollection) }

// layerScope is the scope of one layer's nodes and variables: default
// names are made unique ("dense", "dense_1"), as tf.layers does; a name the
// user gives names the variables exactly, so that a scope that reuses
// variables finds them again.
func layerScope(s *graph.Scope, name, def string) *graph.Scope {
	if name == "" {
		return s.SubScope(def)
	}
	return s.VariableScope(name)
}

// inputCheck checks x is a floating-point tensor of known rank at least
// minRank whose last dimension is known, and returns its dtype and the
// last dimension.
func inputCheck(s *graph.Scope, layer string, x graph.Output, minRank int) (tensor.DType, int, bool) {
	if s.Err() != nil {
		return tensor.Invalid, 0, false
	}
	if !x.Valid() {
		s.SetErr(fmt.Errorf("layers: %s: the input is missing", layer))
		return tensor.Invalid, 0, false
	}
	sh := x.Shape()
	switch {
	case !x.DType().IsFloat():
		s.SetErr(fmt.Errorf("layers: %s: input %s is %v; want float32 or float64", layer, x, x.DType()))
	case !sh.KnownRank() || sh.Rank() < minRank:
		s.SetErr(fmt.Errorf("layers: %s: input %s has shape %v; want rank %d or more", layer, x, sh, minRank))
	case sh.Dim(sh.Rank()-1) < 0:
		s.SetErr(fmt.Errorf("layers: %s: input %s has shape %v; its last dimension must be known to size the layer", layer, x, sh))
	default:
		return x.DType(), sh.Dim(sh.Rank() - 1), true
	}
	return tensor.Invalid, 0, false
}

// seedFor derives an op seed from the scope's graph-level seed and the full
// name of what it initialises: every variable gets its own stream, the
// same in every build of the model.
func seedFor(s *graph.Scope, fullName string) int {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", s.Seed(), fullName)
	seed := int(h.Sum64() % math.MaxInt32)
	if seed == 0 {
		seed = 1 // 0 asks for a fresh seed at every build
	}
	return seed
}

// variable adds (or, in a reusing scope, finds) the layer variable name of
// ls. A nil init is Glorot uniform seeded by seedFor. The regularizer's
// penalty is added once, when the variable is created.
func variable(ls *graph.Scope, name string, dt tensor.DType, shape []int, init ops.Initializer, reg Regularizer, opts ...ops.VariableOption) *ops.Variable {
	full := ls.VariablePrefix() + name
	if !unique(ls, full, full) {
		return nil
	}
	v := ops.NewVariable(ls, name, dt, shape, orGlorot(ls, full, init), opts...)
	if v == nil || !regularize(ls, name, v.Value(), reg) {
		return nil
	}
	return v
}

// weight is variable for a layer's kernel, split into shards by part
// (nil: whole): an ops.PartitionedVariable "<name>/part_<i>" whose value is
// the shards' concatenation, initialised as the whole variable would be.
func weight(ls *graph.Scope, name string, dt tensor.DType, shape []int, init ops.Initializer, reg Regularizer, part Partitioner) graph.Output {
	n := 1
	if part != nil {
		n = part(shape, dt)
	}
	if n <= 1 {
		return variable(ls, name, dt, shape, init, reg).Value()
	}
	full := ls.VariablePrefix() + name
	if !unique(ls, full, full+"/part_0") {
		return graph.Output{}
	}
	pv, err := ops.NewPartitionedVariable(ls, name, dt, shape, orGlorot(ls, full, init), n)
	if err != nil || !regularize(ls, name, pv.Value(), reg) {
		return graph.Output{}
	}
	return pv.Value()
}

// unique checks, unless ls reuses variables, that the variable node first
// (of the variable full) does not exist yet: the graph would rename the new
// one ("_1") and the layer would silently not share it, as
// tf.get_variable refuses too.
func unique(ls *graph.Scope, full, first string) bool {
	if ls.Err() != nil || ls.Reusing() || ops.LookupVariable(ls.Graph(), first) == nil {
		return ls.Err() == nil
	}
	ls.SetErr(fmt.Errorf("layers: variable %q already exists: a layer of that name is built twice; build it again in a scope that reuses variables (graph.Scope.ReuseVariables) to share it, or give it another name", full))
	return false
}

// orGlorot is init, or Glorot uniform seeded for the variable full when nil.
func orGlorot(ls *graph.Scope, full string, init ops.Initializer) ops.Initializer {
	if init == nil {
		return ops.GlorotUniformInit(seedFor(ls, full))
	}
	return init
}

// regularize adds reg's penalty of w, the variable name of ls, to the
// regularization losses, unless ls reuses the variable (the first build
// added it). It reports whether the build may go on.
func regularize(ls *graph.Scope, name string, w graph.Output, reg Regularizer) bool {
	if reg == nil || ls.Reusing() {
		return ls.Err() == nil
	}
	penalty := reg(ls.SubScope(name+"_regularizer"), w)
	if penalty.Valid() {
		if !penalty.Shape().Equal(tensor.ScalarShape()) {
			ls.SetErr(fmt.Errorf("layers: the regularizer of %s returned shape %v; want a scalar", ls.VariablePrefix()+name, penalty.Shape()))
			return false
		}
		ls.Graph().AddToCollection(ops.RegularizationLossesCollection, penalty.Node)
	}
	return ls.Err() == nil
}

// activate applies a (nil: the identity).
func activate(s *graph.Scope, a Activation, x graph.Output) graph.Output {
	if a == nil || !x.Valid() {
		return x
	}
	return a(s, x)
}
