package main

import (
	"context"
	"fmt"
	"math"

	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/models"
)

// The CTR workload of `distflow train --model widedeep` (issue 17): the
// wide-and-deep model on the synthetic click log (or --data, a directory
// of Criteo TSV files), reporting AUC, log loss and the planted model's
// AUC on the same evaluation examples.

// wideDeepDefaults train to within 0.01 of the planted AUC.
var wideDeepDefaults = trainFlags{steps: 4000, batch: 256, lr: 0.5, optimizer: "adagrad", logEvery: 500}

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
