package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/summary"
	"github.com/distflow/distflow/train"
)

// binary is the distflow command built once for the tests: they run it as a
// user would and read its output.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "distflow-cli")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "distflow")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		panic("building distflow: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run executes distflow and returns stdout, stderr and the exit error.
// Training runs are verbose (-v), for the tests that read the runtime's
// logs, unless they ask for --quiet.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	if len(args) > 0 && args[0] == "train" && !slices.Contains(args, "--quiet") {
		args = append([]string{"train", "-v"}, args[1:]...)
	}
	cmd := exec.Command(binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// lastJSON decodes the last line of stdout, which --json promises is the result.
func lastJSON(t *testing.T, stdout string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var res map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("last line of stdout is not JSON: %v\n%s", err, stdout)
	}
	for _, k := range []string{"model", "global_step", "loss", "examples_per_second", "wall_seconds"} {
		if _, ok := res[k]; !ok {
			t.Errorf("result lacks %q: %v", k, res)
		}
	}
	return res
}

func TestTrainLinearRegressionConverges(t *testing.T) {
	stdout, stderr, err := run(t, "train", "--model", "linreg", "--steps", "2000", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	res := lastJSON(t, stdout)
	w, b := res["W"].(float64), res["b"].(float64)
	if math.Abs(w-2) >= 0.05 || math.Abs(b-10) >= 0.1 {
		t.Errorf("W = %.4f, b = %.4f; want |W-2| < 0.05 and |b-10| < 0.1", w, b)
	}
	if res["global_step"].(float64) != 2000 {
		t.Errorf("global_step = %v, want 2000", res["global_step"])
	}
	if !strings.Contains(stderr, "step 100/2000") {
		t.Errorf("no progress lines on stderr:\n%s", stderr)
	}
}

func TestTrainMLPOnEmbeddedData(t *testing.T) {
	stdout, stderr, err := run(t, "train", "--model", "mlp", "--data", "embedded", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	res := lastJSON(t, stdout)
	if acc := res["test_accuracy"].(float64); acc < 0.78 {
		t.Errorf("test accuracy %.4f on the embedded subset, want >= 0.78", acc)
	}
	t.Logf("mlp on embedded data: accuracy %.4f, %.0f examples/s, %.1f s",
		res["test_accuracy"], res["examples_per_second"], res["wall_seconds"])
}

// TestTrainFullFashionMNIST checks the accuracy targets of docs/BENCHMARKS.md on the full
// data set. It takes about two minutes, so it runs only with DISTFLOW_LONG=1.
func TestTrainFullFashionMNIST(t *testing.T) {
	if os.Getenv("DISTFLOW_LONG") == "" {
		t.Skip("set DISTFLOW_LONG=1 to train on the full Fashion-MNIST")
	}
	if _, err := os.Stat(data.DefaultFashionMNISTDir); err != nil {
		t.Skipf("full data not installed (%v): apt-get install dataset-fashion-mnist", err)
	}
	for _, c := range []struct {
		model, epochs string
		want          float64
	}{{"mlp", "5", 0.85}, {"cnn", "1", 0.85}} {
		stdout, stderr, err := run(t, "train", "--model", c.model, "--epochs", c.epochs, "--data", data.DefaultFashionMNISTDir, "--json")
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.model, err, stderr)
		}
		res := lastJSON(t, stdout)
		if acc := res["test_accuracy"].(float64); acc < c.want {
			t.Errorf("%s after %s epochs: test accuracy %.4f, want >= %.2f", c.model, c.epochs, acc, c.want)
		}
		t.Logf("%s: %v", c.model, strings.TrimSpace(stdout))
	}
}

// TestOptimizerLearningRates trains the mlp with each adaptive optimizer
// and no --lr: each gets a rate of its own (at SGD's 0.5 they diverge).
func TestOptimizerLearningRates(t *testing.T) {
	for _, opt := range []string{"Adam", "rmsprop"} {
		stdout, stderr, err := run(t, "train", "--model", "mlp", "--data", "embedded", "--epochs", "5", "--optimizer", opt, "--json", "--quiet")
		if err != nil {
			t.Fatalf("--optimizer %s: %v\n%s", opt, err, stderr)
		}
		res := lastJSON(t, stdout)
		if lr, want := res["learning_rate"].(float64), defaultLRs["mlp"][strings.ToLower(opt)]; lr != want {
			t.Errorf("--optimizer %s: learning rate %v, want %v", opt, lr, want)
		}
		if acc := res["test_accuracy"].(float64); acc < 0.78 {
			t.Errorf("--optimizer %s: test accuracy %.4f after 5 epochs, want >= 0.78", opt, acc)
		}
	}
}

// TestEveryOptimizerHasARate: a model without a rate for an optimizer
// would train at 0.
func TestEveryOptimizerHasARate(t *testing.T) {
	for model, d := range modelDefaults {
		for _, opt := range train.OptimizerNames() {
			if lr := defaultLRs[model][opt]; !(lr > 0) {
				t.Errorf("%s with %s: no default learning rate", model, opt)
			}
		}
		if _, ok := defaultLRs[model][d.optimizer]; !ok {
			t.Errorf("%s: its optimizer %q has no rate", model, d.optimizer)
		}
	}
}

// TestClipGlobalNorm: a learning rate at which linear regression diverges
// trains with the gradients clipped.
func TestClipGlobalNorm(t *testing.T) {
	_, stderr, err := run(t, "train", "--model", "linreg", "--lr", "1", "--quiet")
	if err == nil || !strings.Contains(stderr, "not a finite number") {
		t.Fatalf("without clipping: %v\n%s (want the loss to diverge)", err, stderr)
	}
	stdout, stderr, err := run(t, "train", "--model", "linreg", "--lr", "1", "--clip-global-norm", "0.1", "--json", "--quiet")
	if err != nil {
		t.Fatalf("with --clip-global-norm 0.1: %v\n%s", err, stderr)
	}
	if b := lastJSON(t, stdout)["b"].(float64); math.Abs(b-10) > 0.5 {
		t.Errorf("b = %v, want about 10", b)
	}
	if _, stderr, err := run(t, "train", "--model", "linreg", "--clip-global-norm", "-1"); err == nil || !strings.Contains(stderr, "--clip-global-norm -1") {
		t.Errorf("a negative norm: %v\n%s", err, stderr)
	}
}

func TestTrainRejectsBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"train", "--model", "resnet"}, `--model "resnet"`},
		{[]string{"train", "--batch", "-3"}, "--batch -3"},
		{[]string{"train", "--lr", "-1"}, "--lr -1"},
		{[]string{"train", "--optimizer", "lbfgs"}, "lbfgs"},
		{[]string{"train", "--data", "/nonexistent/fmnist"}, "/nonexistent/fmnist"},
		{[]string{"train", "--no-such-flag"}, "no-such-flag"},
		{[]string{"train", "--lr-scaling", "cubic"}, "--lr-scaling"},
	}
	for _, c := range cases {
		_, stderr, err := run(t, c.args...)
		if err == nil {
			t.Errorf("%v: succeeded", c.args)
			continue
		}
		if !strings.Contains(stderr, c.want) || strings.Contains(stderr, "panic") {
			t.Errorf("%v: stderr %q does not name %q", c.args, stderr, c.want)
		}
	}
}

func TestUnderscoreFlagsAccepted(t *testing.T) {
	_, stderr, err := run(t, "train", "--model", "linreg", "--steps", "10", "--log_every", "5")
	if err != nil {
		t.Fatalf("--log_every: %v\n%s", err, stderr)
	}
}

func TestTrainWritesEventFiles(t *testing.T) {
	dir := t.TempDir()
	_, stderr, err := run(t, "train", "--model", "linreg", "--steps", "300", "--logdir", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("event files: %v", files)
	}
	events, err := summary.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if events[0].GetFileVersion() != "brain.Event:2" {
		t.Errorf("first event %v, want the file version", events[0])
	}
	steps := map[int64]bool{}
	for _, e := range events {
		for _, v := range e.GetSummary().GetValue() {
			if v.GetTag() == "loss" {
				steps[e.GetStep()] = true
			}
		}
	}
	if !steps[100] || !steps[200] || !steps[300] {
		t.Errorf("loss scalars at steps %v, want 100, 200 and 300", steps)
	}
}

func TestTrainWritesProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	if _, stderr, err := run(t, "train", "--model", "linreg", "--steps", "200", "--cpuprofile", cpu, "--memprofile", mem); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, path := range []string{cpu, mem} {
		// pprof profiles are gzipped protocol buffers.
		if b, err := os.ReadFile(path); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: no pprof profile written (%d bytes, %v)", filepath.Base(path), len(b), err)
		}
	}
}
