package train

import (
	"fmt"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
)

// ApplyHashAdagrad adds the Adagrad update of the rows a hash embedding
// lookup read, from their gradient of loss: each shard receives the
// gradient of only its distinct ids. The rows are resources, not
// variables, so optimizers do not see them; a training step runs this
// beside the optimizer's update.
func ApplyHashAdagrad(s *graph.Scope, lk ops.HashLookup, loss graph.Output, lr float32) ([]*graph.Node, error) {
	if lk.Table == nil || len(lk.ShardRows) == 0 {
		return nil, fmt.Errorf("train: ApplyHashAdagrad: the lookup is empty")
	}
	gs, err := grad.Gradients(s, []graph.Output{loss}, lk.ShardRows, nil)
	if err != nil {
		return nil, fmt.Errorf("train: gradients of hash embedding %q: %w", lk.Table.Name, err)
	}
	for i, g := range gs {
		if !g.Valid() {
			gs[i] = ops.ZerosLike(s, lk.ShardRows[i])
		}
	}
	up := lk.Table.ApplyAdagrad(s.SubScope(lk.Table.Name+"_Adagrad"), lk.ShardIDs, gs, lr)
	return up, s.Err()
}

// HashEmbeddingOptimizer is an Optimizer that also trains hash
// embeddings: ComputeGradients adds, for each lookup, the Adagrad update
// of the rows it read (ApplyHashAdagrad, learning rate LR) and makes every
// gradient it returns wait for those updates, so that whatever consumes
// the gradients (the step's update, sync replicas' accumulators, the
// average of in-graph towers) also runs them. The rows are updated once
// per ComputeGradients, as soon as the gradients are computed: with sync
// replicas they are not averaged with the other replicas' (as in Persia's
// hybrid training, sparse asynchronous, dense synchronous).
//
// Build it in the model function, which knows its lookups; the lookups
// must belong to the graph whose loss ComputeGradients is given.
type HashEmbeddingOptimizer struct {
	Optimizer
	Lookups []ops.HashLookup
	LR      float32
}

// ComputeGradients implements Optimizer.
func (o HashEmbeddingOptimizer) wrapped() Optimizer { return o.Optimizer }

func (o HashEmbeddingOptimizer) ComputeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error) {
	if o.Optimizer == nil {
		return nil, fmt.Errorf("train: HashEmbeddingOptimizer wraps no optimizer")
	}
	gvs, err := o.Optimizer.ComputeGradients(s, loss, vars)
	if err != nil {
		return nil, err
	}
	var ups []*graph.Node
	for _, lk := range o.Lookups {
		up, err := ApplyHashAdagrad(s, lk, loss, o.LR)
		if err != nil {
			return nil, err
		}
		ups = append(ups, up...)
	}
	after := s.WithControlDependencies(ups...)
	for i, gv := range gvs {
		if gv.Sparse != nil {
			sp := *gv.Sparse
			sp.Values = ops.Identity(after, sp.Values)
			gvs[i].Sparse = &sp
		} else {
			gvs[i].Grad = ops.Identity(after, gv.Grad)
		}
	}
	return gvs, s.Err()
}
