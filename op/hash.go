package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// Hash embeddings: tables keyed by int64 ids of any value, with
// no fixed vocabulary. A table is a resource of the task that runs its ops
// (a parameter server), named by the attribute "table"; rows are created
// on first use, may be evicted when not seen for evict_after updates, and
// their number is bounded by max_rows (the least frequently looked-up go
// first).
// Every op of one table must agree on dim.

func init() {
	hashAttrs := func(extra ...Attr) []Attr {
		return append([]Attr{{Name: "table", Type: AttrString}, {Name: "dim", Type: AttrInt},
			{Name: "max_rows", Type: AttrInt, Default: 0}, {Name: "evict_after", Type: AttrInt, Default: 0},
			{Name: "init_scale", Type: AttrFloat, Default: float32(0)}, {Name: "seed", Type: AttrInt, Default: 0},
			{Name: "initial_accumulator", Type: AttrFloat, Default: float32(0.1)}}, extra...)
	}
	ids := func(c *InferContext, i int) error {
		if c.InputDType(i) != tensor.Int64 {
			return fmt.Errorf("ids must be int64, got %v", c.InputDType(i))
		}
		return sparseRank1(c, i, "ids")
	}
	Register(Def{
		Name: "HashEmbeddingLookup", Remote: true, Stateful: true,
		Inputs: []Arg{{Name: "ids"}},
		Attrs:  hashAttrs(Attr{Name: "create", Type: AttrBool, Default: true}),
		Summary: "The rows of a hash embedding table at ids (int64, any values): [len(ids), dim] float32. " +
			"With create, a missing id gets a new row (uniform in [-init_scale, init_scale]); else zeros.",
		Infer: func(c *InferContext) error {
			if err := ids(c, 0); err != nil {
				return err
			}
			if c.Int("dim") < 1 {
				return fmt.Errorf("dim must be at least 1, got %d", c.Int("dim"))
			}
			c.SetOutput(0, tensor.Float32, tensor.MakeShape(c.InputShape(0).Dim(0), c.Int("dim")))
			return nil
		},
	})
	Register(Def{
		Name: "HashEmbeddingApplyAdagrad", Remote: true, Stateful: true,
		Inputs: []Arg{{Name: "ids"}, {Name: "grad"}, {Name: "lr"}},
		Attrs:  hashAttrs(),
		Summary: "Adagrad on the rows of a hash embedding table at ids (repeats add up), then one tick of its clock: " +
			"rows not seen for evict_after ticks are evicted, and the least frequently used beyond max_rows.",
		Infer: func(c *InferContext) error {
			if err := ids(c, 0); err != nil {
				return err
			}
			if c.InputDType(1) != tensor.Float32 || c.InputDType(2) != tensor.Float32 {
				return fmt.Errorf("grad and lr must be float32, got %v and %v", c.InputDType(1), c.InputDType(2))
			}
			return nil
		},
	})
	Register(Def{
		Name: "HashEmbeddingExport", Remote: true, Stateful: true,
		Attrs:   hashAttrs(),
		Summary: "The rows of a hash embedding table: keys (int64 [k], sorted), values and Adagrad accumulators (float32 [k, dim]).",
		Infer: func(c *InferContext) error {
			c.SetOutput(0, tensor.Int64, tensor.MakeShape(-1))
			c.SetOutput(1, tensor.Float32, tensor.MakeShape(-1, c.Int("dim")))
			c.SetOutput(2, tensor.Float32, tensor.MakeShape(-1, c.Int("dim")))
			return nil
		},
	})
	Register(Def{
		Name: "HashEmbeddingImport", Remote: true, Stateful: true,
		Inputs: []Arg{{Name: "keys"}, {Name: "values"}, {Name: "accumulators"}},
		Attrs:  hashAttrs(Attr{Name: "shard", Type: AttrInt, Default: 0}, Attr{Name: "num_shards", Type: AttrInt, Default: 1}),
		Summary: "Replaces a hash embedding table's rows by the exported rows whose HashPartition over num_shards is shard " +
			"(restoring, and resharding a table saved with another number of shards).",
		Infer: func(c *InferContext) error {
			if err := ids(c, 0); err != nil {
				return err
			}
			if s, n := c.Int("shard"), c.Int("num_shards"); n < 1 || s < 0 || s >= n {
				return fmt.Errorf("shard %d of %d shards", s, n)
			}
			return nil
		},
	})
	Register(Def{
		Name: "HashEmbeddingSave", Remote: true, Stateful: true,
		Inputs: []Arg{{Name: "step"}},
		Attrs: hashAttrs(Attr{Name: "dir", Type: AttrString}, Attr{Name: "basename", Type: AttrString, Default: "model.ckpt"},
			Attr{Name: "shard", Type: AttrInt, Default: 0}, Attr{Name: "num_shards", Type: AttrInt, Default: 1}),
		Summary: "Writes data file `shard` of `num_shards` of checkpoint <dir>/<basename>-<step> with a hash embedding table's rows " +
			"(keys, values, Adagrad accumulators, lookup counts, as hash_embedding/<table>/...); outputs the file's description (JSON bytes) for the index.",
		Infer: func(c *InferContext) error {
			if err := checkpointScalarStep(c); err != nil {
				return err
			}
			if c.String("dir") == "" {
				return fmt.Errorf("attribute dir is empty")
			}
			if n, k := c.Int("num_shards"), c.Int("shard"); n <= 0 || k < 0 || k >= n {
				return fmt.Errorf("shard %d of %d is out of range", k, n)
			}
			c.SetOutput(0, tensor.Uint8, tensor.UnknownRankShape(1))
			return nil
		},
	})
	Register(Def{
		Name: "HashEmbeddingRestore", Remote: true, Stateful: true,
		Inputs: []Arg{{Name: "step"}},
		Attrs: hashAttrs(Attr{Name: "dir", Type: AttrString}, Attr{Name: "basename", Type: AttrString, Default: "model.ckpt"},
			Attr{Name: "name", Type: AttrString}, Attr{Name: "table_shard", Type: AttrInt, Default: 0}, Attr{Name: "table_shards", Type: AttrInt, Default: 1}),
		Summary: "Replaces a hash embedding table's rows by those of every saved shard of table `name` in checkpoint <dir>/<basename>-<step> " +
			"whose HashPartition over table_shards is table_shard (the checkpoint may hold any number of shards); outputs the number of rows restored.",
		Infer: func(c *InferContext) error {
			if err := checkpointScalarStep(c); err != nil {
				return err
			}
			if c.String("dir") == "" || c.String("name") == "" {
				return fmt.Errorf("attributes dir %q and name %q must not be empty", c.String("dir"), c.String("name"))
			}
			if s, n := c.Int("table_shard"), c.Int("table_shards"); n < 1 || s < 0 || s >= n {
				return fmt.Errorf("table shard %d of %d shards", s, n)
			}
			c.SetOutput(0, tensor.Int64, tensor.ScalarShape())
			return nil
		},
	})
	Register(Def{
		Name: "HashEmbeddingSize", Remote: true, Stateful: true,
		Attrs:   hashAttrs(),
		Summary: "The number of rows of a hash embedding table (int64 scalar).",
		Infer: func(c *InferContext) error {
			c.SetOutput(0, tensor.Int64, tensor.ScalarShape())
			return nil
		},
	})
	Register(Def{
		Name: "HashPartition", Remote: true,
		Inputs:  []Arg{{Name: "ids"}},
		Attrs:   []Attr{{Name: "num_shards", Type: AttrInt}},
		Summary: "The shard (int32 in [0, num_shards)) of each int64 id: a mixing hash of the id modulo num_shards.",
		Infer: func(c *InferContext) error {
			if err := ids(c, 0); err != nil {
				return err
			}
			if c.Int("num_shards") < 1 {
				return fmt.Errorf("num_shards must be at least 1, got %d", c.Int("num_shards"))
			}
			c.SetOutput(0, tensor.Int32, tensor.MakeShape(c.InputShape(0).Dim(0)))
			return nil
		},
	})
}

// HashShard is HashPartition's shard of id: a splitmix64 finaliser of id
// modulo shards, so that consecutive or strided ids spread evenly.
func HashShard(id int64, shards int) int {
	z := uint64(id) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return int(z % uint64(shards))
}
