package train

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// GradVar pairs a variable with the gradient of the loss with respect to it.
type GradVar struct {
	Grad graph.Output
	Var  *ops.Variable
	// Sparse, when not nil, is Grad as indexed slices (the gradient of
	// embedding lookups: see grad.SparseOf): optimizers with a sparse
	// update use it, so that only the touched rows move and are updated,
	// and Grad, the dense form, is then never computed. Code that rewrites
	// Grad must clear Sparse.
	Sparse *grad.IndexedSlices
}

// Optimizer builds the nodes that train variables. Implementations are
// descriptions (hyper-parameters only) and may be used to build several
// graphs; the state they need (accumulators, moments) lives in slot
// variables added to the graph.
type Optimizer interface {
	// ComputeGradients adds the gradients of loss with respect to vars (the
	// trainable variables of the graph if vars is nil). Variables that do
	// not influence the loss are left out; it is an error if none does.
	ComputeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error)
	// ApplyGradients adds one update of every variable, each placed on its
	// variable's device, and returns a node to run as the training step's
	// target. If globalStep is not nil it is incremented after all updates.
	ApplyGradients(s *graph.Scope, gvs []GradVar, globalStep *ops.Variable) (*graph.Node, error)
	// Name is the name of the optimizer ("Adam"), used for scopes and slots.
	Name() string
}

// Minimize computes the gradients of loss with respect to the graph's
// trainable variables and applies them: one call builds a training step.
func Minimize(s *graph.Scope, opt Optimizer, loss graph.Output, globalStep *ops.Variable) (*graph.Node, error) {
	gvs, err := opt.ComputeGradients(s, loss, nil)
	if err != nil {
		return nil, err
	}
	return opt.ApplyGradients(s, gvs, globalStep)
}

// NewOptimizer returns the optimizer called name with learning rate lr and
// TensorFlow's default hyper-parameters: "sgd" (gradient descent),
// "momentum" (0.9), "adagrad" (initial accumulator 0.1), "rmsprop" (decay
// 0.9, no momentum, epsilon 1e-10), "adam" (0.9, 0.999, 1e-8), "ftrl"
// (learning-rate power -0.5, initial accumulator 0.1, no l1 or l2). Names
// are case-insensitive.
func NewOptimizer(name string, lr float32) (Optimizer, error) {
	mk, ok := optimizers[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return nil, fmt.Errorf("train: unknown optimizer %q: want one of %s", name, strings.Join(OptimizerNames(), ", "))
	}
	return mk(lr), nil
}

// OptimizerNames returns the names NewOptimizer takes, sorted.
func OptimizerNames() []string {
	names := make([]string, 0, len(optimizers))
	for n := range optimizers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var optimizers = map[string]func(lr float32) Optimizer{
	"sgd":      func(lr float32) Optimizer { return NewGradientDescent(lr) },
	"momentum": func(lr float32) Optimizer { return NewMomentum(lr, 0.9, false) },
	"adagrad":  func(lr float32) Optimizer { return NewAdagrad(lr, 0.1) },
	"rmsprop":  func(lr float32) Optimizer { return NewRMSProp(lr, 0.9, 0, 1e-10) },
	"adam":     func(lr float32) Optimizer { return NewAdam(lr, 0.9, 0.999, 1e-8) },
	"ftrl":     func(lr float32) Optimizer { return NewFtrl(lr, 0, 0) },
}

// computeGradients is the ComputeGradients shared by all optimizers.
func computeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if !loss.Valid() {
		return nil, fmt.Errorf("train: the loss is missing")
	}
	if vars == nil {
		vars = ops.TrainableVariables(s.Graph())
	}
	if len(vars) == 0 {
		return nil, fmt.Errorf("train: no variables to optimize for loss %s", loss)
	}
	xs := make([]graph.Output, len(vars))
	for i, v := range vars {
		xs[i] = v.Value()
	}
	grads, err := grad.Gradients(s, []graph.Output{loss}, xs, nil)
	if err != nil {
		return nil, fmt.Errorf("train: gradients of %s: %w", loss, err)
	}
	var gvs []GradVar
	for i, g := range grads {
		if g.Valid() {
			gvs = append(gvs, GradVar{Grad: g, Var: vars[i], Sparse: sparseGrad(s, g, vars[i])})
		}
	}
	if len(gvs) == 0 {
		return nil, fmt.Errorf("train: no variable has a gradient with respect to %s (variables %v)", loss, vars)
	}
	return gvs, nil
}

// updateFunc adds the update of one variable in scope s (placed on the
// variable's device) with learning rate lr (in the variable's type, on its
// device) and returns the nodes that perform it.
type updateFunc func(s *graph.Scope, gv GradVar, lr graph.Output) []*graph.Node

// applyGradients is the ApplyGradients shared by all optimizers: it adds the
// updates under the scope "<name>", then the global step increment after
// all of them, and returns the no-op "<name>/update" depending on everything.
func applyGradients(s *graph.Scope, name string, gvs []GradVar, globalStep *ops.Variable, lr float32, h scheduled, update updateFunc) (*graph.Node, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(gvs) == 0 {
		return nil, fmt.Errorf("train: %s: no gradients to apply", name)
	}
	scope := s.SubScope(name)
	rate, err := learningRate(scope, name, lr, h.Schedule)
	if err != nil {
		return nil, err
	}
	if h.WeightDecay < 0 || math.IsNaN(float64(h.WeightDecay)) || math.IsInf(float64(h.WeightDecay), 0) {
		return nil, fmt.Errorf("train: %s: weight decay %v: want 0 (none) or a positive number", name, h.WeightDecay)
	}
	var updates []*graph.Node
	for _, gv := range gvs {
		if gv.Var == nil || !gv.Grad.Valid() {
			return nil, fmt.Errorf("train: %s: a gradient or its variable is missing (%v)", name, gv.Var)
		}
		v := gv.Var
		if !v.DType().IsFloat() || gv.Grad.DType() != v.DType() {
			return nil, fmt.Errorf("train: %s: variable %v cannot take gradient %s of %v%v",
				name, v, gv.Grad, gv.Grad.DType(), gv.Grad.Shape())
		}
		vs := scope.WithDevice(v.Node().Device())
		r := rate(vs, v)
		if h.WeightDecay > 0 {
			if gv.Sparse != nil {
				return nil, fmt.Errorf("train: %s: weight decay on the sparse update of %s (embedding rows) is not supported: train it with an optimizer without weight decay", name, v.Name())
			}
			// The update applies to the decayed variable.
			decay := ops.AssignSub(vs, v.Value(), ops.Mul(vs, ops.Mul(vs, r, scalar(vs, v, h.WeightDecay)), v.Value()))
			vs = vs.WithControlDependencies(decay.Node)
		}
		updates = append(updates, update(vs, gv, r)...)
	}
	if globalStep != nil {
		gs := scope.WithDevice(globalStep.Node().Device()).WithControlDependencies(updates...)
		inc := ops.AssignAdd(gs, globalStep.Value(), ops.Scalar(gs, globalStep.DType(), 1))
		if inc.Valid() {
			updates = []*graph.Node{inc.Node}
		}
	}
	step := ops.Group(scope, "update", updates...)
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("train: %s: %w", name, err)
	}
	return step, nil
}

// slot adds the non-trainable variable "<var>/<slotName>" of v's dtype and
// the given shape (v's if nil), on v's device. Slots are built at the root
// of the graph, outside the caller's name scope and control dependencies, so
// that their names follow their variable's and their initializers run alone.
func slot(s *graph.Scope, v *ops.Variable, slotName string, shape []int, init ops.Initializer) *ops.Variable {
	if s.Err() != nil {
		return nil
	}
	if shape == nil {
		shape = v.Shape().Dims()
	}
	root := graph.NewScopeWithGraph(s.Graph()).WithDevice(v.Node().Device())
	sv := ops.NewVariable(root, v.Name()+"/"+slotName, v.DType(), shape, init, ops.NotTrainable())
	s.SetErr(root.Err())
	return sv
}

// scalar adds a constant of v's dtype.
func scalar(s *graph.Scope, v *ops.Variable, x float32) graph.Output {
	return ops.Scalar(s, v.DType(), float64(x))
}

// CreateGlobalStep adds the global step: the int64 scalar variable
// "global_step", not trainable, starting at zero, on the scope's device. It
// records it in the graph collection "global_step" for GlobalStep.
func CreateGlobalStep(s *graph.Scope) *ops.Variable {
	if s.Err() != nil {
		return nil
	}
	if gs := GlobalStep(s.Graph()); gs != nil {
		s.SetErr(fmt.Errorf("train: the graph already has a global step %q", gs.Name()))
		return nil
	}
	root := graph.NewScopeWithGraph(s.Graph()).WithDevice(s.Device()).WithDeviceFunc(s.DeviceFunc())
	v := ops.NewVariable(root, "global_step", tensor.Int64, nil, ops.ZerosInit(), ops.NotTrainable())
	s.SetErr(root.Err())
	if v != nil {
		s.Graph().AddToCollection(GlobalStepCollection, v.Node())
	}
	return v
}

// GlobalStepCollection is the graph collection that holds the global step.
const GlobalStepCollection = "global_step"

// GlobalStep returns the graph's global step, or nil if it has none.
func GlobalStep(g *graph.Graph) *ops.Variable {
	nodes := g.Collection(GlobalStepCollection)
	if len(nodes) == 0 {
		return nil
	}
	return ops.LookupVariable(g, nodes[0].Name())
}
