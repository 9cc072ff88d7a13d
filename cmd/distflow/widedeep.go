package main

import (
	"context"
	"fmt"
	"math"

	"github.com/spf13/pflag"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/models"
)

// The CTR workload of `distflow train --model widedeep`: the
// wide-and-deep model on the synthetic click log (or --data, a directory
// of Criteo TSV files), reporting AUC, log loss and the planted model's
// AUC on the same evaluation examples.

// wideDeepDefaults train to within 0.01 of the planted AUC: 3000
// updates of 512 examples (asynchronous), 1500 of 2x512 with --sync (see
// wideDeepSteps).
var wideDeepDefaults = trainFlags{steps: 3000, batch: 512, optimizer: "adagrad", logEvery: 500}

// wideDeepSteps sets the default number of steps of a wide-and-deep run
// whose updates average several workers' batches.
func (f *trainFlags) wideDeepSteps() {
	if f.model == "widedeep" && f.strategy().Update(2).Averaged > 1 {
		f.steps = wideDeepDefaults.steps / 2
	}
}

// addWideDeepFlags adds the hidden flags that scale the CTR model (the
// sparse benchmark, scripts/sparse_scale.sh, uses 10M rows x 16).
func addWideDeepFlags(fl *pflag.FlagSet, f *trainFlags) {
	fl.IntVar(&f.wideDeep.Vocab, "vocab", 0, "widedeep: ids per categorical feature (default 100; the tables have 26x as many rows)")
	fl.IntVar(&f.wideDeep.Dim, "embedding-dim", 0, "widedeep: width of the deep embeddings (default 8)")
	fl.IntVar(&f.wideDeep.Shards, "embedding-shards", 0, "widedeep: row partitions of each embedding table (default 2)")
	for _, n := range []string{"vocab", "embedding-dim", "embedding-shards"} {
		_ = fl.MarkHidden(n)
	}
}

// addHashFlags adds the flags of the hash embeddings (documented in the
// README's widedeep section).
func addHashFlags(fl *pflag.FlagSet, f *trainFlags) {
	fl.BoolVar(&f.wideDeep.HashEmbedding, "hash-embedding", false,
		"widedeep: hash embeddings on the ps tasks (a row per id seen, made on first use) instead of fixed-vocabulary partitioned tables")
	fl.IntVar(&f.wideDeep.HashMaxRows, "hash-max-rows", 0, "with --hash-embedding: at most this many rows per table, least frequently used evicted first (0: no limit)")
	fl.IntVar(&f.wideDeep.HashEvictAfter, "hash-evict-after", 0, "with --hash-embedding: evict rows not updated for this many updates of their shard (0: never)")
}

// checkHashFlags validates the hash embedding flags.
func (f *trainFlags) checkHashFlags(set func(string) bool) []error {
	var errs []error
	bad := func(cond bool, format string, args ...any) {
		if cond {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	h := f.wideDeep.HashEmbedding
	bad(h && f.model != "widedeep", "--hash-embedding is for --model widedeep")
	bad((set("hash-max-rows") || set("hash-evict-after")) && !h, "--hash-max-rows and --hash-evict-after go with --hash-embedding")
	bad(f.wideDeep.HashMaxRows < 0, "--hash-max-rows %d: must not be negative (0: no limit)", f.wideDeep.HashMaxRows)
	bad(f.wideDeep.HashEvictAfter < 0, "--hash-evict-after %d: must not be negative (0: never)", f.wideDeep.HashEvictAfter)
	bad(h && !f.strategy().Update(1).PullsFromPS, "--hash-embedding keeps the tables on the ps tasks; the %s strategy keeps the model on the workers", f.strategy())
	bad(h && f.export != "", "--export writes the model's variables, not its hash tables: drop --export with --hash-embedding")
	return errs
}

// hashSetup readies a --hash-embedding run of a cluster spec: a shard of
// each table on every ps task, rows trained at --lr.
func (f *trainFlags) hashSetup(spec *cluster.Spec) {
	if !f.wideDeep.HashEmbedding {
		return
	}
	f.wideDeep.HashDevices = nil
	if spec != nil {
		for i := range spec.NumTasks("ps") {
			f.wideDeep.HashDevices = append(f.wideDeep.HashDevices, fmt.Sprintf("/job:ps/task:%d", i))
		}
	}
	f.wideDeep.HashLR = float32(f.lr)
}

// clickEvalHook is the chief's evaluation of a hash embedding model, in
// the training session (nil for other models: the estimator's Predict
// evaluates them).
func (f trainFlags) clickEvalHook(fn estimator.ModelFn, ex models.Data) *models.ClickEvalHook {
	if !f.wideDeep.HashEmbedding || ex.TestClicks == nil {
		return nil
	}
	return &models.ClickEvalHook{Model: fn, Log: ex.TestClicks}
}

// loadData loads the model's examples; the CTR model's ids follow --vocab.
func loadData(f trainFlags) (models.Data, error) {
	if f.model == "widedeep" {
		dir := f.dataDir
		if dir == data.EmbeddedName {
			dir = "" // the built-in data: for this model, the synthetic click log
		}
		return models.LoadClicks(dir, int64(f.seed), f.wideDeep)
	}
	return models.LoadData(f.model, f.dataDir, int64(f.seed), f.steps, f.batch)
}

// clickResult evaluates the trained model on the click log's test
// examples and records the figures in r: those the hook measured when
// there is one.
func clickResult(ctx context.Context, est *estimator.Estimator, ex models.Data, hook *models.ClickEvalHook, r *result) error {
	if ex.TestClicks == nil {
		return fmt.Errorf("widedeep: no evaluation examples")
	}
	var m models.ClickMetrics
	switch {
	case hook != nil && !hook.Done:
		return fmt.Errorf("widedeep: the hash embedding model was not evaluated at the end of training")
	case hook != nil:
		m = hook.Metrics
	default:
		var err error
		if m, err = models.EvaluateClicks(ctx, est, ex.TestClicks); err != nil {
			return err
		}
	}
	r.AUC, r.LogLoss = &m.AUC, &m.LogLoss
	if !math.IsNaN(m.PlantedAUC) {
		r.PlantedAUC = &m.PlantedAUC
	}
	r.TestExamples = ex.TestClicks.Len()
	return nil
}

// clickLine is the text report's line for the CTR figures.
func clickLine(r result) string {
	s := fmt.Sprintf("auc %.4f, log loss %.4f on %d examples", *r.AUC, *r.LogLoss, r.TestExamples)
	if r.PlantedAUC != nil {
		s += fmt.Sprintf(" (planted model's auc %.4f)", *r.PlantedAUC)
	}
	return s
}
