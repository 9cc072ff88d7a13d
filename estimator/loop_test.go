package estimator_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/summary"
)

// TestEveryStrategyRunsHooksAndWritesEvents: under every strategy, each
// training replica's hooks see begin, the session, every step and the
// end, and its model directory gets training events (loss, throughput,
// the model's summaries): one loop's duties, whichever way the replicas
// share the model.
func TestEveryStrategyRunsHooksAndWritesEvents(t *testing.T) {
	ps := map[string]int{"ps": 1, "worker": 2}
	ring := map[string]int{"worker": 2}
	for _, tc := range []struct {
		strategy estimator.Strategy
		jobs     map[string]int
	}{
		{estimator.Async{}, ps},
		{estimator.Sync{}, ps},
		{estimator.Staleness{Bound: 2}, ps},
		{estimator.InGraph{}, ps},
		{estimator.AllReduce{}, ring},
		{estimator.Averaging{Every: 4}, ring},
	} {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			dir := t.TempDir()
			var mu sync.Mutex
			hooks := map[string]*countingHook{}
			_, results := clusterRun{model: linearModel, jobs: tc.jobs, strategy: tc.strategy, steps: 60,
				task: func(task cluster.TaskID, cfg *estimator.RunConfig) []estimator.Hook {
					mu.Lock()
					defer mu.Unlock()
					cfg.ModelDir, cfg.LogEverySteps = dir, 10
					h := &countingHook{}
					hooks[task.String()] = h
					return []estimator.Hook{h}
				}}.run(t)
			trained := 0
			for _, res := range results {
				if res.Served {
					continue
				}
				h := hooks[res.Task]
				if res.LocalSteps == 0 {
					// The others reached the target before this replica
					// began (asynchronous training): it still begins and
					// ends.
					if h.begin != 1 || h.end != 1 || h.before != 0 {
						t.Errorf("%s: hook calls %+v without a step; want begin and end once", res.Task, *h)
					}
					continue
				}
				trained++
				if h.begin != 1 || h.created != 1 || h.end != 1 || h.fetched != 42 {
					t.Errorf("%s: hook calls %+v; want begin, created and end once, and the extra fetch 42", res.Task, *h)
				}
				if h.before != res.LocalSteps || h.after != res.LocalSteps || res.LocalSteps == 0 {
					t.Errorf("%s: BeforeRun %d and AfterRun %d times for %d steps", res.Task, h.before, h.after, res.LocalSteps)
				}
				task, err := cluster.ParseTaskID(res.Task)
				if err != nil {
					t.Fatal(err)
				}
				checkTrainingEvents(t, dir, fmt.Sprintf("%s-%d", task.Job, task.Index))
			}
			if trained == 0 {
				t.Fatal("no replica trained")
			}
		})
	}
}

// checkTrainingEvents checks that dir holds a task's event file (named
// with suffix) with the loss, the throughput and a histogram of the
// weights.
func checkTrainingEvents(t *testing.T, dir, suffix string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"+suffix))
	if len(files) != 1 {
		entries, _ := os.ReadDir(dir)
		t.Errorf("%s: event files %v (entries %v); want one", dir, files, entries)
		return
	}
	evs, err := summary.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]int{}
	for _, e := range evs {
		for _, v := range e.GetSummary().GetValue() {
			tags[v.GetTag()]++
		}
	}
	for _, want := range []string{"loss", "examples_per_second", "w"} {
		if tags[want] == 0 {
			var got []string
			for tag := range tags {
				got = append(got, tag)
			}
			t.Errorf("%s: no %q among the events' tags %s", files[0], want, strings.Join(got, ", "))
		}
	}
}
