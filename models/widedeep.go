package models

import (
	"fmt"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// The wide-and-deep CTR model (Cheng et al. 2016). It reads the
// features "cat" (int64 [batch, 26], rows of one table: see data.ClickLog)
// and "dense" (float32 [batch, 13]) and float32 0/1 labels. The wide part
// is a linear model: a weight per id (an embedding table of width 1) and
// per dense feature; the deep part embeds every id, concatenates the
// embeddings with the dense features and runs an MLP; the logit of their
// sum goes to estimator.BinaryClassificationHead. Both tables are
// layers.Embedding partitioned by rows (WideDeepConfig.Shards) so that a
// replica device setter spreads them over the parameter servers, and a
// step moves and updates only the rows of the batch's ids. With
// WideDeepConfig.HashEmbedding both tables are hash embeddings instead,
// with a shard on each ps task.

// WideDeepConfig shapes the wide-and-deep model. Zero fields take defaults.
type WideDeepConfig struct {
	// Vocab is the number of ids of each categorical feature (default
	// 100): the tables have 26*Vocab rows, and every id of "cat" must be
	// below that (see data.ClickLog).
	Vocab int
	// Dim is the deep embeddings' width (default 8).
	Dim int
	// Hidden lists the MLP's layer widths (default 64, 32).
	Hidden []int
	// Shards is the number of row partitions of each table (default 2).
	Shards int
	// Strategy maps ids to shards: "mod" (default) or "div".
	Strategy string

	// HashEmbedding replaces both tables by hash embeddings (no fixed
	// vocabulary: a row per id seen, made on first use) with one shard
	// on each of HashDevices, trained by Adagrad at HashLR beside the
	// optimizer (train.HashEmbeddingOptimizer). Vocab then only shapes
	// the data. Evaluate such a model with ClickEvalHook: its rows live
	// in the tasks that hold the shards, not in variables.
	HashEmbedding bool
	// HashDevices places the hash embeddings' shards, one each (the ps
	// tasks); none: one shard on the scope's device.
	HashDevices []string
	// HashMaxRows bounds the rows of each hash table, split evenly over
	// its shards (0: no bound); the least frequently looked-up rows are
	// evicted beyond it.
	HashMaxRows int
	// HashEvictAfter evicts rows not updated for this many updates of
	// their shard (0: never).
	HashEvictAfter int
	// HashLR is the hash embeddings' Adagrad learning rate (default 1).
	HashLR float32
}

func (c WideDeepConfig) withDefaults() WideDeepConfig {
	if c.Vocab == 0 {
		c.Vocab = 100
	}
	if c.Dim == 0 {
		c.Dim = 8
	}
	if c.Hidden == nil {
		c.Hidden = []int{64, 32}
	}
	if c.Shards == 0 {
		c.Shards = 2
	}
	if c.Strategy == "" {
		c.Strategy = "mod"
	}
	if c.HashLR == 0 {
		c.HashLR = 1
	}
	return c
}

// hashTable describes one of the model's hash embeddings.
func (c WideDeepConfig) hashTable(name string, dim int, initScale float32, seed int) *ops.HashEmbedding {
	shards := max(1, len(c.HashDevices))
	return &ops.HashEmbedding{Name: name, Dim: dim, MaxRows: (c.HashMaxRows + shards - 1) / shards, EvictAfter: c.HashEvictAfter,
		InitScale: initScale, Seed: seed, Devices: c.HashDevices}
}

// WideDeepFeatures are the names of the wide-and-deep model's features.
var WideDeepFeatures = []string{"cat", "dense"}

// wideDeepModelFn is ModelFn("widedeep").
func wideDeepModelFn(c Config, opt train.Optimizer) (estimator.ModelFn, error) {
	w := c.WideDeep.withDefaults()
	if w.HashMaxRows < 0 || w.HashEvictAfter < 0 || !(w.HashLR > 0) {
		return nil, fmt.Errorf("models: widedeep: hash embedding max rows %d, evict after %d, learning rate %v: want no negative limit and a positive rate",
			w.HashMaxRows, w.HashEvictAfter, w.HashLR)
	}
	nc := data.CategoricalFeatures
	return func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		cat, dense := f.Get(s, "cat"), f.Get(s, "dense")
		head := estimator.BinaryClassificationHead{Optimizer: opt}
		var wideRows, deepRows graph.Output
		if w.HashEmbedding {
			if c.DType != tensor.Float32 {
				return nil, fmt.Errorf("models: widedeep: hash embeddings hold float32 rows, the model is %v", c.DType)
			}
			create := mode == estimator.Train // evaluation reads unseen ids as zeros and keeps no row
			ids := ops.ReshapeTo(s, cat, -1)
			wideLk := w.hashTable("wide/hash_emb", 1, 0, c.Seed).Lookup(s, ids, create)
			deepLk := w.hashTable("deep/hash_emb", w.Dim, 0.05, c.Seed+1000).Lookup(s, ids, create)
			wideRows, deepRows = wideLk.Rows, deepLk.Rows
			head.Optimizer = train.HashEmbeddingOptimizer{Optimizer: opt, Lookups: []ops.HashLookup{wideLk, deepLk}, LR: w.HashLR}
		} else {
			table := func(name string, dim int, init func(shard int) ops.Initializer) graph.Output {
				e := layers.Embedding{Name: name, TableName: "emb", InputDim: nc * w.Vocab, OutputDim: dim,
					DType: c.DType, Shards: w.Shards, PartitionStrategy: w.Strategy, ShardInit: init}
				return e.Apply(s, cat, false)
			}
			wideRows = table("wide", 1, func(int) ops.Initializer { return ops.ZerosInit() })
			deepRows = table("deep", w.Dim, func(i int) ops.Initializer {
				return ops.RandomUniformInit(-0.05, 0.05, c.Seed+1000*(i+1))
			})
		}
		// The wide part, linear: a weight per id and per dense feature.
		linear := layers.Dense{Units: 1, KernelInit: ops.ZerosInit(), Name: "wide", KernelName: "dense_W", BiasName: "b"}
		idWeights := ops.Sum(s, ops.ReshapeTo(s, wideRows, -1, nc), []int{1}, true)
		wide := ops.Add(s, idWeights, linear.Apply(s, dense, false))
		h := ops.Concat(s, 1, ops.ReshapeTo(s, deepRows, -1, nc*w.Dim), dense)
		for i, units := range append(append([]int{}, w.Hidden...), 1) {
			l := layers.Dense{Units: units, KernelInit: ops.GlorotUniformInit(c.Seed + 1 + i), Name: fmt.Sprintf("deep/layer%d", i)}
			if i < len(w.Hidden) {
				l.Activation = ops.Relu
			}
			h = l.Apply(s, h, false)
		}
		return head.Spec(s, ops.Add(s, wide, h), labels, mode)
	}, nil
}
