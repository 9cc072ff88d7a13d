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
// [0, InputDim) fail the step.
//
// With Shards, the table is TensorFlow 1.x's partitioned variable read by
// tf.nn.embedding_lookup(partition_strategy): the shards
// "<name>/embeddings/part_<i>" (ops.NewEmbeddingTable), which a replica
// device setter spreads over the parameter servers, and a lookup
// (ops.EmbeddingLookup) that sends each ps only the distinct ids it holds
// and updates only their rows there.
type Embedding struct {
	// InputDim is the number of rows (the vocabulary size); OutputDim the
	// width of a row. Both are required.
	InputDim, OutputDim int
	// DType is the table's (zero: float32).
	DType tensor.DType
	// Init initialises the table (nil: uniform on [-0.05, 0.05), as Keras,
	// seeded from the scope's seed and the variable's full name, each
	// shard's its own). With Shards it initialises every shard alike,
	// which suits constants; a seeded random Init would repeat its values
	// in every shard of the same size: leave it nil or use ShardInit.
	Init ops.Initializer
	// Shards splits the table by rows into this many variables, at most
	// InputDim (0 or 1: one variable).
	Shards int
	// PartitionStrategy maps ids to shards: "mod" (the default, as
	// TensorFlow's: id i is row i / Shards of shard i % Shards) or "div"
	// (contiguous blocks of rows, the first InputDim % Shards shards one
	// row longer).
	PartitionStrategy string
	// ShardInit, when set, initialises shard i with ShardInit(i) instead
	// of Init (one table: ShardInit(0)). Each shard is initialised where
	// it lives: no task holds the whole table's initial value.
	ShardInit func(shard int) ops.Initializer
	// Regularizer adds a penalty of the table (nil: none).
	Regularizer Regularizer
	// Name names the layer's scope (default "embedding", made unique).
	Name string
	// TableName names the table's variable within the scope (default
	// "embeddings"): a model whose checkpoints already name it otherwise
	// ("emb") keeps its names.
	TableName string
}

// Apply implements Layer; ids are int32 or int64.
func (e Embedding) Apply(s *graph.Scope, ids graph.Output, _ bool) graph.Output {
	if s.Err() != nil {
		return graph.Output{}
	}
	strategy := or(e.PartitionStrategy, "mod")
	switch {
	case !ids.Valid():
		s.SetErr(fmt.Errorf("layers: Embedding: the ids are missing"))
	case ids.DType() != tensor.Int32 && ids.DType() != tensor.Int64:
		s.SetErr(fmt.Errorf("layers: Embedding: ids %s are %v; want int32 or int64", ids, ids.DType()))
	case e.InputDim <= 0 || e.OutputDim <= 0:
		s.SetErr(fmt.Errorf("layers: Embedding: InputDim %d and OutputDim %d must be positive", e.InputDim, e.OutputDim))
	case e.Shards < 0 || e.Shards > e.InputDim:
		s.SetErr(fmt.Errorf("layers: Embedding: Shards %d and InputDim %d: want 0 <= Shards <= InputDim (at most one shard per row)", e.Shards, e.InputDim))
	case strategy != "mod" && strategy != "div":
		s.SetErr(fmt.Errorf("layers: Embedding: PartitionStrategy %q: want mod or div", e.PartitionStrategy))
	}
	if s.Err() != nil {
		return graph.Output{}
	}
	dt := e.DType
	if dt == tensor.Invalid {
		dt = tensor.Float32
	}
	ls := layerScope(s, e.Name, "embedding")
	name := or(e.TableName, "embeddings")
	full := ls.VariablePrefix() + name
	if e.Shards <= 1 {
		init := e.Init
		if e.ShardInit != nil {
			init = e.ShardInit(0)
		}
		if init == nil {
			init = ops.RandomUniformInit(-0.05, 0.05, seedFor(ls, full))
		}
		table := variable(ls, name, dt, []int{e.InputDim, e.OutputDim}, init, e.Regularizer)
		return ops.Gather(ls, table.Value(), ids, 0)
	}
	if !unique(ls, full, full+"/part_0") {
		return graph.Output{}
	}
	init := e.ShardInit
	if init == nil {
		init = func(i int) ops.Initializer {
			if e.Init != nil {
				return e.Init
			}
			return ops.RandomUniformInit(-0.05, 0.05, seedFor(ls, fmt.Sprintf("%s/part_%d", full, i)))
		}
	}
	table, err := ops.NewEmbeddingTable(ls, name, dt, e.InputDim, e.OutputDim, init, e.Shards)
	if err != nil || !regularize(ls, name, table.Value(), e.Regularizer) {
		return graph.Output{}
	}
	return ops.EmbeddingLookup(ls, table, ids, strategy)
}
