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
// embeddings with the dense features and runs an MLP. Both tables are
// partitioned by rows (WideDeepConfig.Shards) so that a replica device
// setter spreads them over the parameter servers, and are read with
// ops.EmbeddingLookup, so a step moves and updates only the rows of the
// batch's ids. With WideDeepConfig.HashEmbedding both tables are hash
// embeddings instead, with a shard on each ps task.

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
	rows := data.CategoricalFeatures * w.Vocab
	if rows < w.Shards || w.Dim < 1 || w.Shards < 1 {
		return nil, fmt.Errorf("models: widedeep: %d rows, width %d, %d shards: want width >= 1 and at least one row per shard", rows, w.Dim, w.Shards)
	}
	if w.HashMaxRows < 0 || w.HashEvictAfter < 0 || !(w.HashLR > 0) {
		return nil, fmt.Errorf("models: widedeep: hash embedding max rows %d, evict after %d, learning rate %v: want no negative limit and a positive rate",
			w.HashMaxRows, w.HashEvictAfter, w.HashLR)
	}
	nc, nd := data.CategoricalFeatures, data.DenseFeatures
	return func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		cat, ok1 := f["cat"]
		dense, ok2 := f["dense"]
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("models: widedeep reads features %v; the input has %v", WideDeepFeatures, featureNames(f))
		}
		dt := c.DType
		ws, ds := s.SubScope("wide"), s.SubScope("deep")
		var wideRows, deepRows graph.Output
		var lookups []ops.HashLookup
		if w.HashEmbedding {
			if dt != tensor.Float32 {
				return nil, fmt.Errorf("models: widedeep: hash embeddings hold float32 rows, the model is %v", dt)
			}
			create := mode == estimator.Train // evaluation reads unseen ids as zeros and keeps no row
			wideLk := w.hashTable("wide/hash_emb", 1, 0, c.Seed).Lookup(ws, ops.ReshapeTo(ws, cat, -1), create)
			deepLk := w.hashTable("deep/hash_emb", w.Dim, 0.05, c.Seed+1000).Lookup(ds, ops.ReshapeTo(ds, cat, -1), create)
			wideRows, deepRows, lookups = wideLk.Rows, deepLk.Rows, []ops.HashLookup{wideLk, deepLk}
		} else {
			wideT, err := ops.NewEmbeddingTable(ws, "emb", dt, rows, 1, func(int) ops.Initializer { return ops.ZerosInit() }, w.Shards)
			if err != nil {
				return nil, err
			}
			deepT, err := ops.NewEmbeddingTable(ds, "emb", dt, rows, w.Dim, func(i int) ops.Initializer {
				return ops.RandomUniformInit(-0.05, 0.05, c.Seed+1000*(i+1))
			}, w.Shards)
			if err != nil {
				return nil, err
			}
			wideRows, deepRows = ops.EmbeddingLookup(ws, wideT, cat, w.Strategy), ops.EmbeddingLookup(ds, deepT, cat, w.Strategy)
		}
		denseW := ops.NewVariable(ws, "dense_W", dt, []int{nd, 1}, ops.ZerosInit())
		bias := ops.NewVariable(ws, "b", dt, []int{1}, ops.ZerosInit())
		wideIDs := ops.ReshapeTo(ws, wideRows, -1, nc)
		wide := ops.Add(ws, ops.Sum(ws, wideIDs, []int{1}, true), ops.MatMul(ws, dense, denseW.Value(), false, false))
		h := ops.Concat(ds, 1, ops.ReshapeTo(ds, deepRows, -1, nc*w.Dim), dense)
		for i, units := range append(append([]int{}, w.Hidden...), 1) {
			l := layers.Dense{Units: units, KernelInit: ops.GlorotUniformInit(c.Seed + 1 + i), Name: fmt.Sprintf("layer%d", i)}
			if i < len(w.Hidden) {
				l.Activation = ops.Relu
			}
			h = l.Apply(ds, h, false)
		}
		logit := ops.ReshapeTo(s, ops.BiasAdd(s, ops.Add(s, wide, h), bias.Value()), -1)
		spec := &estimator.Spec{Optimizer: opt}
		if lookups != nil {
			spec.Optimizer = train.HashEmbeddingOptimizer{Optimizer: opt, Lookups: lookups, LR: w.HashLR}
		}
		spec.Predictions = map[string]graph.Output{"probability": ops.Sigmoid(s, logit), "logit": logit}
		if mode != estimator.Predict {
			ls := s.SubScope("loss")
			y := labels
			if y.DType() != dt {
				y = ops.Cast(ls, y, dt)
			}
			// Binary cross-entropy from logits: softplus(z) - y*z.
			perExample := ops.Sub(ls, ops.Softplus(ls, logit), ops.Mul(ls, y, logit))
			spec.Loss = ops.Mean(ls, perExample, nil, false)
			spec.EvalMetrics = map[string]estimator.Metric{"logloss": estimator.MeanMetric(ls, perExample)}
		}
		return spec, nil
	}, nil
}
