package main

import (
	"context"
	"fmt"
	"math"

	"github.com/spf13/pflag"

	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/models"
)

// The CTR workload of `distflow train --model widedeep` (issue 17): the
// wide-and-deep model on the synthetic click log (or --data, a directory
// of Criteo TSV files), reporting AUC, log loss and the planted model's
// AUC on the same evaluation examples.

// wideDeepDefaults train to within 0.01 of the planted AUC: 3000
// updates of 512 examples (asynchronous), 1500 of 2x512 with --sync (see
// wideDeepSteps).
var wideDeepDefaults = trainFlags{steps: 3000, batch: 512, lr: 1, optimizer: "adagrad", logEvery: 500}

// wideDeepSteps sets the default number of steps of a synchronous
// wide-and-deep run: each of its updates averages every worker's batch.
func (f *trainFlags) wideDeepSteps() {
	if f.model == "widedeep" && f.sync {
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

// loadData loads the model's examples; the CTR model's ids follow --vocab.
func loadData(f trainFlags) (models.Data, error) {
	if f.model == "widedeep" {
		return models.LoadClicks(f.dataDir, int64(f.seed), f.wideDeep)
	}
	return models.LoadData(f.model, f.dataDir, int64(f.seed), f.steps, f.batch)
}

// clickResult evaluates the trained model on the click log's test
// examples and records the figures in r.
func clickResult(ctx context.Context, est *estimator.Estimator, ex models.Data, r *result) error {
	if ex.TestClicks == nil {
		return fmt.Errorf("widedeep: no evaluation examples")
	}
	m, err := models.EvaluateClicks(ctx, est, ex.TestClicks)
	if err != nil {
		return err
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
