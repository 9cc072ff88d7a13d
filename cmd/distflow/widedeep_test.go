package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainWideDeepReportsAUC: a short wide-and-deep run on the synthetic
// click log reports auc, logloss and the planted model's auc, and learns
// (its auc is well above chance, below the planted ceiling plus noise).
// "--data embedded", the built-in data of every model, is that log here.
func TestTrainWideDeepReportsAUC(t *testing.T) {
	stdout, stderr, err := run(t, "train", "--model", "widedeep", "--data", "embedded", "--steps", "300", "--json", "--quiet")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	res := lastJSON(t, stdout)
	auc, _ := res["auc"].(float64)
	planted, _ := res["planted_auc"].(float64)
	if _, ok := res["logloss"].(float64); !ok || auc < 0.75 || planted < 0.8 || auc > planted+0.01 {
		t.Fatalf("auc %v, planted %v, result %v", auc, planted, res)
	}
	if !strings.Contains(stdout, "planted model's auc") {
		t.Errorf("the text report has no auc line:\n%s", stdout)
	}
}

// TestWideDeepSyncDefaults: a strategy whose updates average several
// workers' batches (--strategy sync) halves the default steps; other
// models and async runs keep theirs.
func TestWideDeepSyncDefaults(t *testing.T) {
	for _, c := range []struct {
		model, strategy string
		want            int
	}{{"widedeep", "async", 3000}, {"widedeep", "sync", 1500}, {"mlp", "sync", 3000}} {
		f := trainFlags{model: c.model, strategyName: c.strategy, staleness: -1, averageEvery: -1, steps: 3000}
		f.wideDeepSteps()
		if f.steps != c.want {
			t.Errorf("%s, %s: %d steps, want %d", c.model, c.strategy, f.steps, c.want)
		}
	}
	if wideDeepDefaults.steps != 3000 {
		t.Errorf("the default is %d steps: update docs/BENCHMARKS.md's figures", wideDeepDefaults.steps)
	}
}

// TestTrainWideDeepHashEmbedding: --hash-embedding trains the model with
// hash tables under a row limit 10x below the ids (2,600) and reports its
// auc; the hash flags are checked by name.
func TestTrainWideDeepHashEmbedding(t *testing.T) {
	stdout, stderr, err := run(t, "train", "--model", "widedeep", "--hash-embedding", "--hash-max-rows", "260", "--steps", "300", "--json", "--quiet")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	res := lastJSON(t, stdout)
	auc, _ := res["auc"].(float64)
	planted, _ := res["planted_auc"].(float64)
	if auc < 0.6 || auc > planted+0.01 {
		t.Fatalf("auc %v, planted %v under a limit of 260 rows: %v", auc, planted, res)
	}
	for _, c := range []struct{ args, want string }{
		{"--model mlp --hash-embedding", "--hash-embedding is for --model widedeep"},
		{"--model widedeep --hash-max-rows 10", "go with --hash-embedding"},
		{"--model widedeep --hash-embedding --hash-evict-after -1", "--hash-evict-after -1"},
		{"--model widedeep --hash-embedding --export /tmp/x", "drop --export"},
	} {
		_, stderr, err := run(t, append([]string{"train"}, strings.Fields(c.args)...)...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: %v, stderr %q; want an error naming %q", c.args, err, stderr, c.want)
		}
	}
}

// TestTrainWideDeepOnCriteoFixture: --data reads a directory of Criteo TSV
// files (the committed fixture, data/testdata/criteo: generated in the
// real format, since the real logs cannot be downloaded here), trains and
// reports auc and logloss, and no planted_auc (real data has none).
func TestTrainWideDeepOnCriteoFixture(t *testing.T) {
	stdout, stderr, err := run(t, "train", "--model", "widedeep", "--data", filepath.Join("..", "..", "data", "testdata", "criteo"),
		"--steps", "60", "--batch", "64", "--json", "--quiet")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	res := lastJSON(t, stdout)
	auc, ok1 := res["auc"].(float64)
	_, ok2 := res["logloss"].(float64)
	if !ok1 || !ok2 || auc < 0.55 || res["planted_auc"] != nil || res["test_examples"] != float64(60) {
		t.Fatalf("result %v: want auc above chance, a logloss, 60 test examples and no planted_auc", res)
	}
	if d, _ := res["data"].(string); !strings.Contains(d, "Criteo TSV") {
		t.Errorf("data %q", d)
	}
}
