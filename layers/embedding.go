package layers

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Embedding maps integer ids [...] to rows of a table, giving [..., OutputDim],
// as tf.keras.layers.Embedding(input_dim, output_dim,
// embeddings_initializer, embeddings_regularizer) (TensorFlow 1.x:
// tf.nn.embedding_lookup over a variable). Its variable is
// "<name>/embeddings" [InputDim, OutputDim]; its gradient is indexed
// slices, so sparse optimizers update only the rows looked up. Ids out of
// [0, InputDim) fail the step. For tables partitioned over parameter
// servers see ops.NewEmbeddingTable.
type Embedding struct {
	// InputDim is the number of rows (the vocabulary size); OutputDim the
	// width of a row. Both are required.
	InputDim, OutputDim int
	// DType is the table's (zero: float32).
	DType tensor.DType
	// Init initialises the table (nil: uniform on [-0.05, 0.05), as Keras,
	// seeded from the scope's seed and the table's full name).
	Init ops.Initializer
	// Regularizer adds a penalty of the table (nil: none).
	Regularizer Regularizer
	// Name names the layer's scope (default "embedding", made unique).
	Name string
}

// Apply implements Layer; ids are int32 or int64.
func (e Embedding) Apply(s *graph.Scope, ids graph.Output, _ bool) graph.Output {
	if s.Err() != nil {
		return graph.Output{}
	}
	switch {
	case !ids.Valid():
		s.SetErr(fmt.Errorf("layers: Embedding: the ids are missing"))
	case ids.DType() != tensor.Int32 && ids.DType() != tensor.Int64:
		s.SetErr(fmt.Errorf("layers: Embedding: ids %s are %v; want int32 or int64", ids, ids.DType()))
	case e.InputDim <= 0 || e.OutputDim <= 0:
		s.SetErr(fmt.Errorf("layers: Embedding: InputDim %d and OutputDim %d must be positive", e.InputDim, e.OutputDim))
	}
	if s.Err() != nil {
		return graph.Output{}
	}
	dt := e.DType
	if dt == tensor.Invalid {
		dt = tensor.Float32
	}
	ls := layerScope(s, e.Name, "embedding")
	init := e.Init
	if init == nil {
		init = ops.RandomUniformInit(-0.05, 0.05, seedFor(ls, ls.VariablePrefix()+"embeddings"))
	}
	table := variable(ls, "embeddings", dt, []int{e.InputDim, e.OutputDim}, init, e.Regularizer)
	return ops.Gather(ls, table.Value(), ids, 0)
}
