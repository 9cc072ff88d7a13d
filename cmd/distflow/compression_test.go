package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestCompressedAllReduceConverges trains the MLP on a local cluster of two
// workers (real processes, loopback) with each gradient compression and
// without: after the same epochs, none is more than half a point below the
// float32 run's test accuracy (top-k may end above it: its residuals
// delay small updates, a regularisation), and the workers say which
// compression they used.
func TestCompressedAllReduceConverges(t *testing.T) {
	base := []string{"train", "--model", "mlp", "--data", "embedded", "--epochs", "5", "--seed", "7",
		"--local-cluster", "worker=2", "--allreduce", "--json"}
	accuracy := map[string]float64{}
	for _, c := range []string{"none", "fp16", "bf16", "topk", "topk:0.1,warmup=50"} {
		stdout, stderr, err := run(t, append(base, "--compression", c)...)
		if err != nil {
			t.Fatalf("--compression %s: %v\n%s", c, err, tail(stderr, 20))
		}
		if !strings.Contains(stderr, "compression="+c) && !strings.Contains(stderr, "compression="+strconv.Quote(c)) { // slog quotes a value with "="
			t.Errorf("--compression %s: the log does not name it:\n%s", c, tail(stderr, 20))
		}
		res := lastJSON(t, stdout)
		accuracy[c] = res["test_accuracy"].(float64)
		t.Logf("--compression %s: test accuracy %.4f, %.0f examples/s", c, accuracy[c], res["cluster_examples_per_second"])
	}
	for c, acc := range accuracy {
		if acc < accuracy["none"]-0.005 {
			t.Errorf("--compression %s: test accuracy %.4f, more than half a point below float32's %.4f", c, acc, accuracy["none"])
		}
	}
}

// TestCompressedSyncPSConverges: the same with a ps and synchronous
// updates, the push in fp16 (cast on the workers, back on the ps) and in
// top-k (each worker's largest entries, the dense gradient rebuilt on the
// ps), and the pull of the parameters in fp16 and bf16 (cast on the ps,
// back on the workers) with an fp16 push; the workers name the pull
// compression in their log.
func TestCompressedSyncPSConverges(t *testing.T) {
	base := []string{"train", "--model", "mlp", "--data", "embedded", "--epochs", "5", "--seed", "7",
		"--local-cluster", "ps=1,worker=2", "--sync", "--json"}
	accuracy := map[string]float64{}
	runs := []string{"none", "fp16", "topk", "fp16 --pull-compression fp16", "fp16 --pull-compression bf16"}
	for _, c := range runs {
		args := append(append(base[:len(base):len(base)], "--compression"), strings.Fields(c)...)
		stdout, stderr, err := run(t, args...)
		if err != nil {
			t.Fatalf("--compression %s: %v\n%s", c, err, tail(stderr, 20))
		}
		if _, pull, ok := strings.Cut(c, "--pull-compression "); ok && !strings.Contains(stderr, "pull_compression="+pull) {
			t.Errorf("--compression %s: the log does not name the pull compression:\n%s", c, tail(stderr, 20))
		}
		accuracy[c] = lastJSON(t, stdout)["test_accuracy"].(float64)
		t.Logf("--compression %s: test accuracy %.4f", c, accuracy[c])
	}
	for _, c := range runs[1:] {
		if accuracy[c] < accuracy["none"]-0.005 {
			t.Errorf("--compression %s: test accuracy %.4f, more than half a point below float32's %.4f", c, accuracy[c], accuracy["none"])
		}
	}
}

func TestCompressionFlagIsChecked(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--compression fp8 --allreduce", `--compression "fp8": want none, fp16, bf16, topk, topk:RATIO or topk:RATIO,warmup=STEPS`},
		{"--compression topk:0.1,warmup=x --allreduce", "want warmup=STEPS"},
		{"--compression topk:0 --allreduce", "want 0 < ratio <= 1"},
		{"--compression topk --in-graph --local-cluster ps=1,worker=2", "the in-graph strategy does not compress gradients"},
		{"--compression fp16 --strategy averaging:3 --local-cluster worker=2", "the averaging(3) strategy does not compress gradients"},
		{"--pull-compression topk --local-cluster ps=1,worker=2", `--pull-compression "topk": want none, fp16 or bf16`},
		{"--pull-compression fp16 --allreduce --local-cluster worker=2", "--pull-compression fp16: under the allreduce strategy the workers hold the variables and pull nothing"},
	} {
		_, stderr, err := run(t, append([]string{"train", "--model", "mlp"}, strings.Fields(tc.args)...)...)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: %v, %q; want an error containing %q", tc.args, err, stderr, tc.want)
		}
	}
}
