package models_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// TestWideDeepLearnsClicks trains the wide-and-deep model in one process
// on a small synthetic click log and checks that its AUC approaches the
// planted model's. (WIDEDEEP_STEPS, _VOCAB, _EXAMPLES, _LR, _BATCH scale it
// up by hand.)
func TestWideDeepLearnsClicks(t *testing.T) {
	vocab := envInt("WIDEDEEP_VOCAB", 100)
	steps := envInt("WIDEDEEP_STEPS", 800)
	batch := envInt("WIDEDEEP_BATCH", 256)
	n := envInt("WIDEDEEP_EXAMPLES", 100000)
	lr := float32(envInt("WIDEDEEP_LR_MILLI", 500)) / 1000
	all, err := data.SyntheticClickLog(data.ClickLogConfig{Examples: n + 10000, Vocab: vocab, Seed: 3, ModelSeed: 17,
		Interaction: float64(envInt("WIDEDEEP_INTER_PCT", 0)) / 100})
	if err != nil {
		t.Fatal(err)
	}
	tr, te, err := all.Split(n)
	if err != nil {
		t.Fatal(err)
	}
	d := models.Data{TrainX: tr.Cat, TrainY: tr.Labels, TestX: te.Cat, TestY: te.Labels,
		Features: models.WideDeepFeatures, TrainExtra: []*tensor.Tensor{tr.Dense}, TestExtra: []*tensor.Tensor{te.Dense}}
	opt, err := train.NewOptimizer(os.Getenv("WIDEDEEP_OPT")+map[bool]string{true: "adagrad"}[os.Getenv("WIDEDEEP_OPT") == ""], lr)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := models.ModelFn("widedeep", models.Config{Seed: 1, WideDeep: models.WideDeepConfig{Vocab: vocab}}, opt)
	if err != nil {
		t.Fatal(err)
	}
	est, err := estimator.New(fn, estimator.RunConfig{Seed: 1, Progress: io.Discard, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := est.Train(ctx, d.TrainInput("cat", batch), estimator.Stop{MaxSteps: int64(steps)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := models.EvaluateClicks(ctx, est, te)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d steps of %d: AUC %.4f (planted %.4f), log loss %.4f, %.0f examples/s", steps, batch, m.AUC, m.PlantedAUC, m.LogLoss, res.ExamplesPerSecond)
	if m.AUC < m.PlantedAUC-0.035 {
		t.Errorf("AUC %.4f after %d steps: more than 0.035 below the planted %.4f", m.AUC, steps, m.PlantedAUC)
	}
}

// TestLoadClicksFromCriteoDir reads a directory of Criteo TSV lines and
// keeps the last tenth for evaluation.
func TestLoadClicksFromCriteoDir(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 20 {
		fields := []string{strconv.Itoa(i % 2)}
		for j := range 13 {
			fields = append(fields, strconv.Itoa(i*j))
		}
		for j := range 26 {
			fields = append(fields, fmt.Sprintf("%08x", i*31+j))
		}
		b.WriteString(strings.Join(fields, "\t") + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "day_0.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := models.LoadClicks(dir, 1, models.WideDeepConfig{Vocab: 50})
	if err != nil {
		t.Fatal(err)
	}
	if d.Clicks.Len() != 18 || d.TestClicks.Len() != 2 || d.TestClicks.Planted != nil || !strings.Contains(d.Source, "Criteo") {
		t.Fatalf("train %d, test %d examples, source %q", d.Clicks.Len(), d.TestClicks.Len(), d.Source)
	}
	if _, err := models.LoadClicks(t.TempDir(), 1, models.WideDeepConfig{}); err == nil {
		t.Error("an empty directory loaded")
	}
}
