package estimator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/trace"
)

// TestTraceHookOnACluster trains on 1 ps + 2 workers, synchronously
// between graphs and in-graph, with a TraceHook on every replica, and
// checks the files: valid Chrome traces named by the first traced global
// step, holding the kernels of every task the replica's steps ran on.
func TestTraceHookOnACluster(t *testing.T) {
	for _, tc := range []struct {
		strategy estimator.Strategy
		// tasks whose kernels each trace file must show, by the replica
		// that wrote it
		want map[string][]string
	}{
		{estimator.Sync{}, map[string][]string{
			"/job:worker/task:0": {"/job:ps/task:0", "/job:worker/task:0"},
			"/job:worker/task:1": {"/job:ps/task:0", "/job:worker/task:1"},
		}},
		{estimator.InGraph{}, map[string][]string{
			"/job:worker/task:0": {"/job:ps/task:0", "/job:worker/task:0", "/job:worker/task:1"},
		}},
	} {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			dir := t.TempDir()
			hooks := trainWithTraceHooks(t, tc.strategy, dir)
			for task, tasks := range tc.want {
				h := hooks[task]
				if h == nil || h.Path() == "" {
					t.Fatalf("%s wrote no trace", task)
				}
				newest, err := trace.Newest(filepath.Dir(h.Path()))
				if err != nil || newest != h.Path() {
					t.Errorf("%s: Newest = %q, %v; want %s", task, newest, err, h.Path())
				}
				checkTraceFile(t, h.Path(), tasks)
			}
		})
	}
}

// trainWithTraceHooks trains the linear model for 30 steps on 1 ps + 2
// workers, each task a goroutine with its own server on loopback; every
// task gets a TraceHook of 2 steps from local step 5 writing into its own
// directory under dir. It returns the hooks by task.
func trainWithTraceHooks(t *testing.T, strategy estimator.Strategy, dir string) map[string]*estimator.TraceHook {
	t.Helper()
	addrs := map[string][]string{}
	lis := map[cluster.TaskID]net.Listener{}
	for _, job := range []string{"ps", "worker", "worker"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[cluster.TaskID{Job: job, Index: len(addrs[job])}] = l
		addrs[job] = append(addrs[job], l.Addr().String())
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	hooks := map[string]*estimator.TraceHook{}
	var wg sync.WaitGroup
	for task, l := range lis {
		est, err := estimator.New(linearModel, estimator.RunConfig{
			Cluster: spec, Task: task, Strategy: strategy, Listener: l, Seed: 1,
			Logger: quiet, Progress: io.Discard, WaitTimeout: 20 * time.Second, StepTimeout: 20 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		h := &estimator.TraceHook{Steps: 2, Start: 5, Dir: filepath.Join(dir, fmt.Sprintf("%s%d", task.Job, task.Index)), Logger: quiet}
		hooks[task.String()] = h
		wg.Go(func() {
			if _, err := est.Train(ctx, linearInput(1000, true), estimator.Stop{MaxSteps: 30}, h); err != nil {
				t.Errorf("%s: %v", task, err)
				cancel()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return hooks
}

// checkTraceFile validates a trace file and checks that it has two steps,
// kernels of every task of tasks, and the model's variables (w and b) on
// the ps task only: in-graph towers once pinned them to the first tower's
// worker.
func checkTraceFile(t *testing.T, path string, tasks []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(data); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var f trace.File
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if ids, _ := f.OtherData["step_ids"].([]any); len(ids) != 2 {
		t.Errorf("%s: steps %v, want 2", path, f.OtherData["step_ids"])
	}
	procs := map[int]string{}
	kernels := map[string]int{}
	for _, e := range f.TraceEvents {
		if e.Name == "process_name" {
			procs[e.Pid] = e.Args["name"].(string)
		}
	}
	variables := 0
	for _, e := range f.TraceEvents {
		if e.Ph != "X" || e.Cat != trace.CatKernel {
			continue
		}
		kernels[procs[e.Pid]]++
		if e.Name == "w" || e.Name == "b" {
			variables++
			if procs[e.Pid] != "/job:ps/task:0" {
				t.Errorf("%s: variable %s runs on %s, want /job:ps/task:0", path, e.Name, procs[e.Pid])
			}
		}
	}
	if variables == 0 {
		t.Errorf("%s: no kernel of the variables w and b", path)
	}
	for _, task := range tasks {
		if kernels[task] == 0 {
			t.Errorf("%s: no kernels of %s (kernels per task %v)", path, task, kernels)
		}
	}
}
