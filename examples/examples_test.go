package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/tensor"
)

// bin holds the example programs, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "distflow-examples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	code := 1
	if out, err := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./logistic", "./autoencoder", "./digitsum", "./warmstart", "./regression").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the examples: %v\n%s", err, out)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is the JSON line an example prints.
type result struct {
	Strategy   string   `json:"strategy"`
	Accuracy   *float64 `json:"accuracy"`
	Loss       *float64 `json:"loss"`
	MSE        *float64 `json:"mse"`
	GlobalStep int64    `json:"global_step"`
	Export     string   `json:"export"`
}

// run runs an example program with args and returns the one line it prints
// on stdout, decoded; it fails the test if the program fails or prints
// anything else (the ps and the other workers of a cluster print nothing).
func run(t *testing.T, program string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, program), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", program, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var r result
	if len(lines) != 1 {
		t.Fatalf("%s %s printed %d lines on stdout, want one:\n%s", program, strings.Join(args, " "), len(lines), stdout.String())
	}
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
		t.Fatalf("%s: %v: %s", program, err, lines[0])
	}
	metric := r.Loss
	if r.MSE != nil {
		metric = r.MSE
	}
	if r.Accuracy != nil {
		metric = r.Accuracy
	}
	if metric != nil {
		t.Logf("%s %s: %.4f at global step %d, %.1f s", program, r.Strategy, *metric, r.GlobalStep, time.Since(start).Seconds())
	}
	return r
}

// clusters are the local clusters and strategies each example is run with.
var clusters = []struct{ jobs, strategy string }{
	{"ps=1,worker=2", "async"}, {"ps=1,worker=2", "sync"}, {"ps=1,worker=2", "staleness:2"},
	{"ps=1,worker=2", "ingraph"}, {"worker=2", "allreduce"}, {"worker=2", "averaging:10"},
}

// loadExport loads the export of r, checks its global step, and returns
// its predictions for features.
func loadExport(t *testing.T, r result, feature string, features *tensor.Tensor) map[string]*tensor.Tensor {
	t.Helper()
	if r.Export == "" {
		t.Fatalf("no export in %+v", r)
	}
	p, err := estimator.Load(r.Export)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.GlobalStep() != r.GlobalStep {
		t.Errorf("the export is of global step %d; the program trained %d", p.GlobalStep(), r.GlobalStep)
	}
	out, err := p.Predict(context.Background(), map[string]*tensor.Tensor{feature: features})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLogistic(t *testing.T) {
	testX, testY, err := data.ReadCSVFile(filepath.Join("logistic", "testdata", "test.csv"), true, tensor.Int32)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join("logistic", "testdata")
	check := func(t *testing.T, r result) {
		if r.Accuracy == nil || r.GlobalStep < 1000 {
			t.Fatalf("result %+v; want an accuracy after at least 1000 steps", r)
		}
		// The export's classes of the test set give the reported accuracy.
		classes := loadExport(t, r, "x", testX)["class"].Int32s()
		right := 0
		for i, c := range classes {
			if c == testY.Int32s()[i] {
				right++
			}
		}
		if acc := float64(right) / float64(len(classes)); math.Abs(acc-*r.Accuracy) > 1e-9 {
			t.Errorf("the export's test accuracy %.4f; the program reported %.4f", acc, *r.Accuracy)
		}
	}
	common := []string{"--data", dataDir, "--steps", "1000"}
	ref := run(t, "logistic", append(common, "--export", t.TempDir())...)
	check(t, ref)
	if *ref.Accuracy < 0.95 {
		t.Fatalf("in-process test accuracy %.4f; want at least 0.95", *ref.Accuracy)
	}
	for _, c := range clusters {
		t.Run(c.strategy, func(t *testing.T) {
			r := run(t, "logistic", append(common, "--export", t.TempDir(), "--local-cluster", c.jobs, "--strategy", c.strategy)...)
			check(t, r)
			// Every strategy approaches the same L2-regularised optimum.
			if math.Abs(*r.Accuracy-*ref.Accuracy) > 0.01 {
				t.Errorf("test accuracy %.4f; in process %.4f: want them within 1 point", *r.Accuracy, *ref.Accuracy)
			}
		})
	}
}

func TestAutoencoder(t *testing.T) {
	_, test, err := data.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, r result) {
		if r.Loss == nil || r.GlobalStep < 300 {
			t.Fatalf("result %+v; want a loss after at least 300 steps", r)
		}
		// The export's reconstructions of the test set give the reported loss.
		got := loadExport(t, r, "images", test.Images)["reconstruction"].Float32s()
		var sum float64
		for i, v := range test.Images.Float32s() {
			d := float64(got[i]) - float64(v)
			sum += d * d
		}
		if loss := sum / float64(len(got)); math.Abs(loss-*r.Loss) > 1e-4**r.Loss {
			t.Errorf("the export's test loss %.6f; the program reported %.6f", loss, *r.Loss)
		}
	}
	common := []string{"--steps", "300"}
	ref := run(t, "autoencoder", append(common, "--export", t.TempDir())...)
	check(t, ref)
	for _, c := range clusters {
		t.Run(c.strategy, func(t *testing.T) {
			r := run(t, "autoencoder", append(common, "--export", t.TempDir(), "--local-cluster", c.jobs, "--strategy", c.strategy)...)
			check(t, r)
			tol := lossTolerance
			if c.strategy == "async" || strings.HasPrefix(c.strategy, "staleness") {
				tol = asyncLossTolerance
			}
			if rel := *r.Loss / *ref.Loss; rel < 1-tol || rel > 1+tol {
				t.Errorf("test loss %.5f; in process %.5f: want them within %.0f%%", *r.Loss, *ref.Loss, 100*tol)
			}
		})
	}
}

const lossTolerance = 0.15

// asyncLossTolerance is wider, for async and bounded staleness: 300
// steps of stale gradients end where the replicas' interleaving takes
// them (CI saw 19% above the in-process loss once, with a faster remote
// step).
const asyncLossTolerance = 0.25
