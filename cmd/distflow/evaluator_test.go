package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestEvaluatorTask runs an evaluator process beside a local cluster, with
// TF_CONFIG as Kubeflow's TFJob operator writes it for an Evaluator
// replica: the evaluator follows the chief's checkpoints and ends with the
// final one, whose test accuracy is the chief's, and writes its events to
// LOGDIR/eval. Its cluster's addresses are never dialled.
func TestEvaluatorTask(t *testing.T) {
	ckpt, logdir := t.TempDir(), t.TempDir()
	common := []string{"train", "--model", "mlp", "--data", "embedded", "--steps", "400", "--sync",
		"--checkpoint-dir", ckpt, "--json", "--quiet"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eval := exec.CommandContext(ctx, binary, append(common, "--logdir", logdir)...)
	eval.Env = append(os.Environ(), `TF_CONFIG={"cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"],
		"evaluator": ["127.0.0.1:4"]}, "task": {"type": "evaluator", "index": 0}, "environment": "cloud"}`)
	var evalOut, evalErr bytes.Buffer
	eval.Stdout, eval.Stderr = &evalOut, &evalErr
	if err := eval.Start(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, append(common, "--local-cluster", "ps=1,worker=2", "--save-checkpoint-steps", "100")...)
	if err != nil {
		t.Fatalf("the cluster: %v\n%s", err, stderr)
	}
	chief := lastJSON(t, stdout)
	if err := eval.Wait(); err != nil {
		t.Fatalf("the evaluator: %v\n%s", err, evalErr.String())
	}
	got := lastJSON(t, evalOut.String())
	if got["task"] != "/job:evaluator/task:0" || got["global_step"] != 400.0 || got["evaluations"].(float64) < 1 {
		t.Errorf("the evaluator's result: %v", got)
	}
	if got["test_accuracy"] != chief["test_accuracy"] {
		t.Errorf("the evaluator's final test accuracy %v, the chief's %v: want the same", got["test_accuracy"], chief["test_accuracy"])
	}
	if !strings.Contains(evalOut.String(), "evaluated") {
		t.Errorf("no evaluator line in its output:\n%s", evalOut.String())
	}
	if files, _ := filepath.Glob(filepath.Join(logdir, "eval", "events.out.tfevents.*evaluator-0")); len(files) != 1 {
		t.Errorf("evaluator event files: %v", files)
	}
	t.Logf("evaluator: %s", strings.TrimSpace(strings.SplitN(evalOut.String(), "\n", 2)[0]))

	// Without a checkpoint directory it says what it needs.
	cmd := exec.Command(binary, "train", "--model", "mlp", "--steps", "10", "--ps_hosts", "127.0.0.1:1", "--worker_hosts", "127.0.0.1:2", "--job_name", "evaluator")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--checkpoint-dir") {
		t.Errorf("an evaluator without --checkpoint-dir: %v\n%s", err, out)
	}
}

// TestLocalClusterEvaluator: --local-cluster ...,evaluator=1 runs an
// evaluator beside the cluster, whose evaluations show in the run's log;
// the chief's result stays the last line of stdout. With --export-best
// the evaluator exports the models whose loss fell, and the chief none.
func TestLocalClusterEvaluator(t *testing.T) {
	export := filepath.Join(t.TempDir(), "export")
	stdout, stderr, err := run(t, "train", "--model", "mlp", "--data", "embedded", "--steps", "300", "--sync",
		"--local-cluster", "ps=1,worker=2,evaluator=1", "--checkpoint-dir", t.TempDir(), "--save-checkpoint-steps", "100", "--json",
		"--export", export, "--export-best")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	chief := lastJSON(t, stdout)
	if _, ok := chief["export"]; ok {
		t.Errorf("the chief exported with --export-best: %v", chief)
	}
	exported := strings.Count(stderr, "(the lowest loss so far)")
	if versions, _ := filepath.Glob(filepath.Join(export, "*", "model.json")); exported == 0 || len(versions) != exported {
		t.Errorf("%d exports in the log, versions %v", exported, versions)
	}
	want := regexp.MustCompile(fmt.Sprintf(`\[evaluator 0\] /job:evaluator/task:0 mlp: evaluated (1 checkpoint,|\d+ checkpoints, the last) at global step 300: test accuracy %.4f,`, chief["test_accuracy"]))
	if !want.MatchString(stderr) || !strings.Contains(stderr, "[evaluator 0] /job:evaluator/task:0: evaluated global_step 300") {
		t.Errorf("no evaluation of the final checkpoint at the chief's accuracy (%q) in the log:\n%s", want, stderr)
	}
	if _, _, err := run(t, "train", "--model", "mlp", "--steps", "10", "--local-cluster", "ps=1,worker=1,evaluator=1"); err == nil {
		t.Error("an evaluator without a checkpoint directory started")
	}
	if _, stderr, err := run(t, "train", "--model", "mlp", "--steps", "10", "--local-cluster", "ps=1,worker=1", "--export", export, "--export-best"); err == nil || !strings.Contains(stderr, "evaluator=1") {
		t.Errorf("--export-best without an evaluator: %v\n%s", err, stderr)
	}
}

// TestEvaluatorCountsTheTrainersTowers: with --gpus 2 a global step
// consumes two batches, so --epochs ends training at half the steps; the
// evaluator, which opens no GPUs, must count the towers too, or it waits
// for a step that never comes (for an hour: EvalSpec.WaitTimeout).
func TestEvaluatorCountsTheTrainersTowers(t *testing.T) {
	ckpt := t.TempDir()
	common := []string{"train", "--model", "mlp", "--data", "embedded", "--epochs", "1", "--gpus", "2", "--gpu-platform", "sim",
		"--checkpoint-dir", ckpt, "--json", "--quiet"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eval := exec.CommandContext(ctx, binary, common...)
	eval.Env = append(os.Environ(), `TF_CONFIG={"cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"],
		"evaluator": ["127.0.0.1:4"]}, "task": {"type": "evaluator", "index": 0}}`)
	var evalOut, evalErr bytes.Buffer
	eval.Stdout, eval.Stderr = &evalOut, &evalErr
	if err := eval.Start(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, append(common, "--local-cluster", "ps=1,worker=1", "--save-checkpoint-steps", "20")...)
	if err != nil {
		t.Fatalf("the cluster: %v\n%s", err, stderr)
	}
	chief := lastJSON(t, stdout)
	ended := time.Now()
	if err := eval.Wait(); err != nil {
		t.Fatalf("the evaluator: %v\n%s", err, evalErr.String())
	}
	if d := time.Since(ended); d > 20*time.Second {
		t.Errorf("the evaluator ended %v after the chief; want at once", d)
	}
	got := lastJSON(t, evalOut.String())
	if got["global_step"] != chief["global_step"] || chief["epochs"] != 1.0 {
		t.Errorf("the evaluator ended at step %v, the chief at %v after %v epochs; want the chief's last step, 1 epoch", got["global_step"], chief["global_step"], chief["epochs"])
	}
}
