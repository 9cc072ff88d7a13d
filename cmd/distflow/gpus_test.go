package main

import (
	"math"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/distflow/distflow/kernel/linalg"
)

// The device path through the binary, on the simulated accelerator: the
// same training, on a GPU, in towers and in a cluster.

// gpuPeak returns the peak bytes of the result's first device, failing
// the test if the result names none.
func gpuPeak(t *testing.T, res map[string]any) float64 {
	t.Helper()
	devs, _ := res["devices"].([]any)
	if len(devs) == 0 {
		t.Fatalf("the result names no device: %v", res)
	}
	d := devs[0].(map[string]any)
	if d["platform"] != "sim" || d["peak_bytes"].(float64) <= 0 {
		t.Errorf("device %v: want the simulator, with memory used", d)
	}
	return d["peak_bytes"].(float64)
}

func TestTrainOnSimulatedGPU(t *testing.T) {
	base := []string{"train", "--model", "mlp", "--data", "embedded", "--steps", "300", "--json", "--quiet"}
	stdout, stderr, err := run(t, base...)
	if err != nil {
		t.Fatalf("on the CPU: %v\n%s", err, stderr)
	}
	cpu := lastJSON(t, stdout)
	stdout, stderr, err = run(t, append(base, "--gpus", "1", "--gpu-platform", "sim")...)
	if err != nil {
		t.Fatalf("on a GPU: %v\n%s", err, stderr)
	}
	gpu := lastJSON(t, stdout)
	gpuPeak(t, gpu)
	// The simulator computes with the CPU kernels: the same run to the bit.
	if gpu["loss"] != cpu["loss"] || gpu["test_accuracy"] != cpu["test_accuracy"] {
		t.Errorf("on a GPU: loss %v, accuracy %v; on the CPU: %v, %v", gpu["loss"], gpu["test_accuracy"], cpu["loss"], cpu["test_accuracy"])
	}

	// Two towers on two logical GPUs of one card, gradients averaged.
	stdout, stderr, err = run(t, append(base, "--gpus", "2", "--logical-gpus", "2", "--gpu-platform", "sim")...)
	if err != nil {
		t.Fatalf("two towers: %v\n%s", err, stderr)
	}
	towers := lastJSON(t, stdout)
	gpuPeak(t, towers)
	if devs := towers["devices"].([]any); len(devs) != 2 {
		t.Errorf("two towers on %d devices", len(devs))
	}
	if acc := towers["test_accuracy"].(float64); acc < cpu["test_accuracy"].(float64)-0.01 {
		t.Errorf("two towers: test accuracy %.4f, the CPU's %.4f", acc, cpu["test_accuracy"])
	}
	// Two towers of 50 are a step over a batch of 100: the same training
	// as the CPU's, and the same loss reported (the towers' mean, not the
	// first's), to float32 rounding.
	stdout, stderr, err = run(t, append(base, "--gpus", "2", "--gpu-platform", "sim", "--batch", "50")...)
	if err != nil {
		t.Fatalf("two towers of 50: %v\n%s", err, stderr)
	}
	halves := lastJSON(t, stdout)
	if l, c := halves["loss"].(float64), cpu["loss"].(float64); math.Abs(l-c) > 1e-5*c || halves["test_accuracy"] != cpu["test_accuracy"] {
		t.Errorf("two towers of 50: loss %v, accuracy %v; the CPU's at batch 100: %v, %v", l, halves["test_accuracy"], c, cpu["test_accuracy"])
	}
}

// TestLocalClusterOnSimulatedGPUs: 1 ps on the CPU and 2 workers on GPUs,
// synchronous, trains to the CPU cluster's accuracy; in-graph, 2 towers a
// worker.
func TestLocalClusterOnSimulatedGPUs(t *testing.T) {
	base := []string{"train", "--model", "mlp", "--data", "embedded", "--steps", "300", "--json", "--quiet",
		"--local-cluster", "ps=1,worker=2"}
	stdout, stderr, err := run(t, append(base, "--sync")...)
	if err != nil {
		t.Fatalf("on CPUs: %v\n%s", err, stderr)
	}
	cpu := lastJSON(t, stdout)["test_accuracy"].(float64)
	stdout, stderr, err = run(t, append(base, "--sync", "--gpus", "1", "--gpu-platform", "sim")...)
	if err != nil {
		t.Fatalf("on GPUs: %v\n%s", err, stderr)
	}
	res := lastJSON(t, stdout)
	gpuPeak(t, res)
	if acc := res["test_accuracy"].(float64); math.Abs(acc-cpu) > 0.01 {
		t.Errorf("sync on GPU workers: test accuracy %.4f, on CPU workers %.4f", acc, cpu)
	}
	stdout, stderr, err = run(t, append(base, "--in-graph", "--gpus", "2", "--logical-gpus", "2", "--gpu-platform", "sim")...)
	if err != nil {
		t.Fatalf("in-graph on GPUs: %v\n%s", err, stderr)
	}
	res = lastJSON(t, stdout)
	gpuPeak(t, res)
	if acc := res["test_accuracy"].(float64); acc < cpu-0.01 {
		t.Errorf("in-graph with 2 towers a worker: test accuracy %.4f, sync on CPUs %.4f", acc, cpu)
	}
	towerEpochs(t, "in-graph with 2 towers a worker", res, 4)
	// All-reduce (through the ps) with 2 towers a rank: the towers' mean
	// gradient goes round.
	stdout, stderr, err = run(t, append(base, "--allreduce", "--gpus", "2", "--logical-gpus", "2", "--gpu-platform", "sim")...)
	if err != nil {
		t.Fatalf("all-reduce on GPUs: %v\n%s", err, stderr)
	}
	res = lastJSON(t, stdout)
	gpuPeak(t, res)
	if devs := res["devices"].([]any); len(devs) != 2 {
		t.Errorf("all-reduce with 2 towers a rank on %d devices", len(devs))
	}
	if acc := res["test_accuracy"].(float64); acc < cpu-0.01 {
		t.Errorf("all-reduce with 2 towers a rank: test accuracy %.4f, sync on CPUs %.4f", acc, cpu)
	}
	towerEpochs(t, "all-reduce with 2 towers a rank", res, 4)
	// --epochs counts every tower's batches: 2 towers in one process
	// train an epoch in half the steps.
	stdout, stderr, err = run(t, "train", "--model", "mlp", "--data", "embedded", "--epochs", "1", "--json", "--quiet",
		"--gpus", "2", "--logical-gpus", "2", "--gpu-platform", "sim")
	if err != nil {
		t.Fatalf("2 towers in one process: %v\n%s", err, stderr)
	}
	res = lastJSON(t, stdout)
	if n, steps := res["train_examples"].(float64), res["global_step"].(float64); steps != math.Ceil(n/200) {
		t.Errorf("one epoch of %v examples, 2 towers of 100: %v steps; want %v", n, steps, math.Ceil(n/200))
	}
	towerEpochs(t, "2 towers in one process", res, 2)
}

// towerEpochs checks that a result's epochs count the batches of every
// tower of every replica: batches a global step.
func towerEpochs(t *testing.T, what string, res map[string]any, batches float64) {
	t.Helper()
	want := res["global_step"].(float64) * batches * res["batch"].(float64) / res["train_examples"].(float64)
	if got := res["epochs"].(float64); math.Abs(got-want) > 1e-9 {
		t.Errorf("%s: %v epochs; want %v (%v batches a step)", what, got, want, batches)
	}
}

// TestLocalClusterWorkersTakeTheirOwnGPUs: the training tasks of a local
// cluster share the machine's GPUs, each its own while there are enough:
// two workers on two logical GPUs of one card, or on two cards, each with
// the memory of its GPU; beyond, they share them, with their memory.
func TestLocalClusterWorkersTakeTheirOwnGPUs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--gpus", "1", "--logical-gpus", "2"}, []string{
			`[worker 0] .*"computing on a GPU" device=/gpu:0 platform=sim logical_gpu=0 card=0`,
			`[worker 1] .*"computing on a GPU" device=/gpu:0 platform=sim logical_gpu=1 card=0`}},
		{[]string{"--gpus", "1"}, []string{ // the tests' simulator has 2 cards
			`[worker 0] .*logical_gpu=0 card=0 memory_limit="921.6 MiB"`,
			`[worker 1] .*logical_gpu=1 card=1 memory_limit="921.6 MiB"`}},
		{[]string{"--gpus", "1", "--first-gpu", "1"}, []string{ // both on the second card, each with half
			`[worker 0] .*logical_gpu=1 card=1 memory_limit="460.8 MiB"`,
			`[worker 1] .*logical_gpu=1 card=1 memory_limit="460.8 MiB"`}},
		{[]string{"--gpus", "2"}, []string{ // both on both cards, each with half
			`[worker 0] .*device=/gpu:1 platform=sim logical_gpu=1 card=1 memory_limit="460.8 MiB"`,
			`[worker 1] .*device=/gpu:1 platform=sim logical_gpu=1 card=1 memory_limit="460.8 MiB"`}},
	} {
		args := append([]string{"train", "--model", "mlp", "--data", "embedded", "--steps", "20", "--json", "--local-cluster", "ps=1,worker=2", "--sync", "--gpu-platform", "sim"}, c.args...)
		_, stderr, err := run(t, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, stderr)
		}
		for _, w := range c.want {
			if !regexp.MustCompile(regexp.QuoteMeta(w[:10]) + w[10:]).MatchString(stderr) {
				t.Errorf("%v: no line matches %q:\n%s", c.args, w, grepLines(stderr, "computing on a GPU"))
			}
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestNoCUDAHere: on a machine without the NVIDIA driver, --gpus is
// refused before anything starts, naming the library it did not find.
func TestNoCUDAHere(t *testing.T) {
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/cuda/lib64"} {
		if _, err := os.Stat(dir + "/libcuda.so.1"); err == nil {
			t.Skipf("this machine has the CUDA driver (%s)", dir)
		}
	}
	_, stderr, err := run(t, "train", "--model", "mlp", "--data", "embedded", "--steps", "1", "--quiet", "--gpus", "1")
	if err == nil || !strings.Contains(stderr, "libcuda.so.1") || !strings.Contains(stderr, "DISTFLOW_CUDA_LIB_PATH") {
		t.Errorf("--gpus 1 without CUDA: %v\n%s", err, stderr)
	}
	stdout, _, err := run(t, "devices")
	if err != nil || !strings.Contains(stdout, "/cpu:0") || !strings.Contains(stdout, "libcuda.so.1") {
		t.Errorf("distflow devices without CUDA: %v\n%s", err, stdout)
	}
}

func TestGPUFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--gpus", "3", "--gpu-platform", "sim"}, []string{"--gpus 3", "2 sim card(s)", "--logical-gpus"}},
		{[]string{"--gpu-platform", "sim"}, []string{"--gpu-platform goes with --gpus"}},
		{[]string{"--gpus", "1", "--gpu-platform", "tpu"}, []string{"--gpu-platform", `"tpu"`}},
		{[]string{"--gpus", "-1"}, []string{"--gpus -1"}},
		{[]string{"--gpus", "1", "--first-gpu", "2", "--gpu-platform", "sim"}, []string{"--first-gpu 2 --gpus 1", "2 sim GPU(s)", "the last is 1"}},
		{[]string{"--first-gpu", "1"}, []string{"--first-gpu goes with --gpus"}},
		// A share of no memory at all is refused as the devices open,
		// not as out of memory at the first step.
		{[]string{"--gpus", "1", "--gpu-platform", "sim", "--gpu-memory-fraction", "1e-9"}, []string{"--gpu-memory-fraction 1e-09", "GPU:0 no memory", "1.0 GiB"}},
	} {
		_, stderr, err := run(t, append([]string{"train", "--model", "mlp", "--data", "embedded", "--steps", "1", "--quiet"}, c.args...)...)
		if err == nil {
			t.Errorf("%v: accepted", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: the error does not say %q:\n%s", c.args, w, stderr)
			}
		}
	}
}

// TestLocalClusterGPUsRefusedBeforeStart: GPUs a local cluster's tasks
// would not find are refused by the launcher, naming the flag, before
// any task starts (not as a worker that fails, is restarted and fails).
func TestLocalClusterGPUsRefusedBeforeStart(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--gpus", "3"}, "--gpus 3: this machine has 2 sim card(s)"},
		{[]string{"--gpus", "1", "--first-gpu", "5"}, "--first-gpu 5 --gpus 1"},
		{[]string{"--gpus", "1", "--gpu-platform", "tpu"}, `"tpu"`},
	} {
		args := append([]string{"train", "--model", "mlp", "--data", "embedded", "--steps", "1",
			"--local-cluster", "ps=1,worker=2", "--gpu-platform", "sim"}, c.args...)
		_, stderr, err := run(t, args...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: %v, want an error saying %q:\n%s", c.args, err, c.want, stderr)
		}
		if strings.Contains(stderr, "local cluster:") {
			t.Errorf("%v: tasks were started:\n%s", c.args, stderr)
		}
	}
}

// TestBF16PrecisionOnGPUsRefused: --precision rounds the CPU's matrix
// products to bf16, which a GPU's kernels do not: with --gpus it is
// refused at once, not run in float32 on a GPU and bf16 on the simulator.
func TestBF16PrecisionOnGPUsRefused(t *testing.T) {
	if missing := linalg.BF16Missing(); missing != "" {
		t.Skipf("no bf16 products here: %s", missing)
	}
	for _, extra := range [][]string{nil, {"--local-cluster", "ps=1,worker=1"}} {
		args := append([]string{"train", "--model", "mlp", "--data", "embedded", "--steps", "1", "--quiet",
			"--precision", "bf16", "--gpus", "1", "--gpu-platform", "sim"}, extra...)
		_, stderr, err := run(t, args...)
		if err == nil || !strings.Contains(stderr, "--precision bf16 --gpus 1") {
			t.Errorf("%v: %v\n%s", args, err, stderr)
		}
	}
}

// TestGPUOutOfMemory: a model that does not fit in the device's memory is
// refused, naming the device, the bytes asked for and free; nothing
// crashes.
func TestGPUOutOfMemory(t *testing.T) {
	cmd := exec.Command(binary, "train", "--model", "cnn", "--data", "embedded", "--steps", "2", "--quiet",
		"--gpus", "1", "--gpu-platform", "sim")
	cmd.Env = append(os.Environ(), "DISTFLOW_SIM_GPU_MEMORY=4000000")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a CNN step in 4 MB of device memory succeeded:\n%s", out)
	}
	for _, w := range []string{"out of memory", "GPU:0", "asked for", "free of a"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("the error does not say %q:\n%s", w, out)
		}
	}
	if strings.Contains(string(out), "panic") || strings.Contains(string(out), "goroutine ") {
		t.Errorf("out of memory crashed the process:\n%s", out)
	}
}

func TestDevicesCommand(t *testing.T) {
	// --gpu-platform is distflow train's spelling of --platform.
	for _, flag := range []string{"--platform", "--gpu-platform"} {
		stdout, stderr, err := run(t, "devices", flag, "sim")
		if err != nil {
			t.Fatalf("%s: %v\n%s", flag, err, stderr)
		}
		for _, w := range []string{"/cpu:0", "/gpu:0", "/gpu:1", "simulated accelerator", "1.0 GiB"} {
			if !strings.Contains(stdout, w) {
				t.Errorf("distflow devices %s sim does not list %q:\n%s", flag, w, stdout)
			}
		}
	}
}
