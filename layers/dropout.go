package layers

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
)

// Dropout zeroes each element with probability Rate and scales the others
// by 1/(1-Rate) when training, and is the identity otherwise, as
// tf.layers.dropout(x, rate, seed=..., training=training).
type Dropout struct {
	// Rate is the probability of dropping an element, in [0, 1).
	Rate float32
	// Seed makes the masks reproducible (0: derived from the scope's seed
	// and the layer's name).
	Seed int
	// Name names the layer's scope (default "dropout", made unique).
	Name string
}

// Apply implements Layer: the mask is drawn only when training.
func (d Dropout) Apply(s *graph.Scope, x graph.Output, training bool) graph.Output {
	if s.Err() != nil {
		return graph.Output{}
	}
	if d.Rate < 0 || d.Rate >= 1 {
		s.SetErr(fmt.Errorf("layers: Dropout: Rate %v must be in [0, 1)", d.Rate))
		return graph.Output{}
	}
	if !training || d.Rate == 0 {
		return x
	}
	ls := layerScope(s, d.Name, "dropout")
	seed := d.Seed
	if seed == 0 {
		seed = seedFor(ls, ls.Prefix())
	}
	return ops.Dropout(ls, x, d.Rate, seed)
}
