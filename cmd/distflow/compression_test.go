package main

import (
	"math"
	"strings"
	"testing"
)

// TestCompressedAllReduceConverges trains the MLP on a local cluster of two
// workers (real processes, loopback) with each gradient compression and
// without: after the same epochs, each is within half a point of the
// float32 run's test accuracy, and the workers say which compression
// they used.
func TestCompressedAllReduceConverges(t *testing.T) {
	base := []string{"train", "--model", "mlp", "--data", "embedded", "--epochs", "5", "--seed", "7",
		"--local-cluster", "worker=2", "--allreduce", "--json"}
	accuracy := map[string]float64{}
	for _, c := range []string{"none", "fp16", "bf16", "topk"} {
		stdout, stderr, err := run(t, append(base, "--compression", c)...)
		if err != nil {
			t.Fatalf("--compression %s: %v\n%s", c, err, tail(stderr, 20))
		}
		if !strings.Contains(stderr, "compression="+c) {
			t.Errorf("--compression %s: the log does not name it:\n%s", c, tail(stderr, 20))
		}
		res := lastJSON(t, stdout)
		accuracy[c] = res["test_accuracy"].(float64)
		t.Logf("--compression %s: test accuracy %.4f, %.0f examples/s", c, accuracy[c], res["cluster_examples_per_second"])
	}
	for c, acc := range accuracy {
		if math.Abs(acc-accuracy["none"]) > 0.005 {
			t.Errorf("--compression %s: test accuracy %.4f, more than half a point from float32's %.4f", c, acc, accuracy["none"])
		}
	}
}

func TestCompressionFlagIsChecked(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--compression fp8 --allreduce", `--compression "fp8": want none, fp16, bf16, topk or topk:RATIO`},
		{"--compression topk:0 --allreduce", "want 0 < ratio <= 1"},
		{"--compression fp16", "--compression fp16 goes with --allreduce"},
	} {
		_, stderr, err := run(t, append([]string{"train", "--model", "mlp"}, strings.Fields(tc.args)...)...)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: %v, %q; want an error containing %q", tc.args, err, stderr, tc.want)
		}
	}
}
