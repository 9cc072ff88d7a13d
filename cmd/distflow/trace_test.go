package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distflow/distflow/trace"
)

// TestTrainTraceSteps traces two steps of in-graph training on a local
// cluster (real processes over loopback): the chief writes
// --logdir/trace-<step>.json, a valid Chrome trace with the kernels of
// the ps and both workers.
func TestTrainTraceSteps(t *testing.T) {
	dir := t.TempDir()
	_, stderr, err := run(t, "train", "--model", "linreg", "--steps", "30", "--local-cluster", "ps=1,worker=2", "--in-graph",
		"--trace-steps", "2", "--trace-start", "5", "--logdir", dir, "--quiet")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	path, err := trace.Newest(dir)
	if err != nil || path == "" {
		t.Fatalf("no trace in %s (%v)", dir, err)
	}
	if !strings.HasPrefix(filepath.Base(path), "trace-") {
		t.Errorf("trace file %s", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(data); err != nil {
		t.Fatal(err)
	}
	var f trace.File
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	procs, kernels := map[int]string{}, map[string]int{}
	for _, e := range f.TraceEvents {
		if e.Name == "process_name" {
			procs[e.Pid] = e.Args["name"].(string)
		}
	}
	for _, e := range f.TraceEvents {
		if e.Ph == "X" && e.Cat == trace.CatKernel {
			kernels[procs[e.Pid]]++
		}
	}
	for _, task := range []string{"/job:ps/task:0", "/job:worker/task:0", "/job:worker/task:1"} {
		if kernels[task] == 0 {
			t.Errorf("no kernels of %s in the trace (kernels per task %v)", task, kernels)
		}
	}
}

func TestTrainTraceFlagsChecked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--trace-steps", "2"}, "--trace-file FILE, or --logdir"},
		{[]string{"train", "--trace-steps", "-1"}, "--trace-steps -1"},
		{[]string{"train", "--trace-file", "x.json"}, "go with --trace-steps"},
		{[]string{"train", "--trace-steps", "1", "--trace-file", "x.json", "--trace-start", "0"}, "--trace-start 0"},
	} {
		_, stderr, err := run(t, c.args...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: err %v, stderr %q; want a refusal naming %q", c.args, err, stderr, c.want)
		}
	}
}

// TestTrainTraceStepsAllReduce traces steps of the fastest mode, a ring
// of two workers (real processes): the chief's trace holds its kernels,
// and --logdir gets its training events.
func TestTrainTraceStepsAllReduce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ring.json")
	_, stderr, err := run(t, "train", "--model", "linreg", "--steps", "30", "--local-cluster", "worker=2", "--allreduce",
		"--trace-steps", "2", "--trace-file", path, "--logdir", dir, "--quiet")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(data); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"op":"MatMul"`) {
		t.Errorf("the trace lacks the model's MatMul:\n%.2000s", data)
	}
	if events, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*worker-0")); len(events) != 1 {
		entries, _ := os.ReadDir(dir)
		t.Errorf("the chief's event file in --logdir: %v (entries %v)", events, entries)
	}
}

// TestTrainTraceFileOneProcess traces a step of a single-process run into
// --trace-file: one task, localhost.
func TestTrainTraceFileOneProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "steps.json")
	if _, stderr, err := run(t, "train", "--model", "linreg", "--steps", "10", "--trace-steps", "1", "--trace-file", path, "--quiet"); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(data); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"name":"localhost"`) || !strings.Contains(string(data), `"op":"MatMul"`) {
		t.Errorf("the trace lacks the localhost process or its MatMul:\n%.2000s", data)
	}
}
