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
