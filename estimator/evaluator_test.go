package estimator_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/summary"
)

// TestEvaluatorFollowsTraining runs an evaluator task beside a cluster
// that trains and saves a checkpoint every 100 steps: the evaluator
// evaluates checkpoints as they appear, writes each evaluation to
// ModelDir/eval, stops after the final one and exports it. With sync
// replicas that is the chief's model at the last step; asynchronous
// replicas may step past the chief's final checkpoint, which the evaluator
// still ends with.
func TestEvaluatorFollowsTraining(t *testing.T) {
	const steps = 600
	for _, strategy := range []estimator.Strategy{estimator.Sync{}, estimator.Async{}} {
		t.Run(strategy.String(), func(t *testing.T) {
			dir := t.TempDir()
			chief, eval := trainBesideEvaluator(t, strategy, dir, steps, estimator.EvalSpec{ExportDir: filepath.Join(dir, "export")})
			_, last, err := checkpoint.FindLatest(dir, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if eval.GlobalStep != last || last < steps || eval.Task != "/job:evaluator/task:0" {
				t.Errorf("the evaluator ended at step %d as %q, want the final checkpoint's, %d, as /job:evaluator/task:0", eval.GlobalStep, eval.Task, last)
			}
			if _, sync := strategy.(estimator.Sync); sync {
				if got, want := eval.Metrics["mae"], chief.Metrics["mae"]; eval.GlobalStep != chief.GlobalStep || got != want || got == 0 {
					t.Errorf("the evaluator's last mae %v at step %d, the chief's %v at %d: want the same evaluation of the same model", got, eval.GlobalStep, want, chief.GlobalStep)
				}
			}
			if eval.Export == "" {
				t.Error("no export from the evaluator")
			} else if _, err := os.Stat(filepath.Join(eval.Export, "model.json")); err != nil {
				t.Errorf("the export: %v", err)
			}
			// Its event file: one mae per checkpoint evaluated, rising steps.
			files, _ := filepath.Glob(filepath.Join(dir, "eval", "events.out.tfevents.*"))
			if len(files) != 1 || !strings.HasSuffix(files[0], "evaluator-0") {
				t.Fatalf("event files in eval/: %v, want one of the evaluator's", files)
			}
			evs, err := summary.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			var evalSteps []int64
			for _, e := range evs {
				for _, v := range e.GetSummary().GetValue() {
					if v.GetTag() == "mae" {
						evalSteps = append(evalSteps, e.GetStep())
					}
				}
			}
			if len(evalSteps) < 2 || evalSteps[len(evalSteps)-1] != eval.GlobalStep {
				t.Fatalf("evaluations at steps %v, want several, the last at %d", evalSteps, eval.GlobalStep)
			}
			for i := 1; i < len(evalSteps); i++ {
				if evalSteps[i] <= evalSteps[i-1] {
					t.Fatalf("evaluations at steps %v, want rising steps", evalSteps)
				}
			}
			t.Logf("the evaluator evaluated the checkpoints at steps %v", evalSteps)
		})
	}
}

// TestEvaluatorExportsTheBest: with ExportBest the evaluator exports each
// checkpoint whose loss is lower than every one before, as a new version,
// that checkpoint's own model.
func TestEvaluatorExportsTheBest(t *testing.T) {
	dir := t.TempDir()
	export := filepath.Join(dir, "export")
	_, eval := trainBesideEvaluator(t, estimator.Sync{}, dir, 600, estimator.EvalSpec{ExportDir: export, ExportBest: true})
	files, _ := filepath.Glob(filepath.Join(dir, "eval", "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("event files in eval/: %v", files)
	}
	evs, err := summary.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var bestSteps []int64 // the evaluations that lowered the loss
	best := math.Inf(1)
	for _, e := range evs {
		for _, v := range e.GetSummary().GetValue() {
			if l := float64(v.GetSimpleValue()); v.GetTag() == "loss" && l < best {
				best = l
				bestSteps = append(bestSteps, e.GetStep())
			}
		}
	}
	t.Logf("the loss fell at steps %v", bestSteps)
	versions, err := savedmodel.Versions(export)
	if err != nil || len(versions) != len(bestSteps) || len(versions) == 0 {
		t.Fatalf("versions %v (%v), want one per improvement, at steps %v", versions, err, bestSteps)
	}
	for i, v := range versions {
		p, err := savedmodel.Load(filepath.Join(export, strconv.FormatInt(v, 10)))
		if err != nil {
			t.Fatal(err)
		}
		if p.GlobalStep() != bestSteps[i] {
			t.Errorf("version %d holds the model of step %d, want %d (the improvements: %v)", v, p.GlobalStep(), bestSteps[i], bestSteps)
		}
		p.Close()
	}
	if want := filepath.Join(export, strconv.FormatInt(versions[len(versions)-1], 10)); eval.Export != want {
		t.Errorf("the result names export %q, want the last, %q", eval.Export, want)
	}
}

// trainBesideEvaluator trains the linear model on 1 ps and 2 workers,
// goroutines of this test, with an evaluator task started first (it waits
// for the checkpoints) with evalSpec and the test input, all with ModelDir
// dir; it returns the chief's and the evaluator's results.
func trainBesideEvaluator(t *testing.T, strategy estimator.Strategy, dir string, steps int64, evalSpec estimator.EvalSpec) (chief, eval *estimator.Result) {
	t.Helper()
	spec, lis := loopbackTasks(t, cluster.TaskID{Job: "ps"}, cluster.TaskID{Job: "worker"}, cluster.TaskID{Job: "worker", Index: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ts := estimator.TrainSpec{Input: linearInput(1000, true), Stop: estimator.Stop{MaxSteps: steps}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	run := func(task cluster.TaskID, es estimator.EvalSpec) {
		est, err := estimator.New(linearModel, estimator.RunConfig{Cluster: spec, Task: task, Listener: lis[task], Seed: 1,
			ModelDir: dir, Strategy: strategy, SaveCheckpointsSteps: 100, Logger: quiet, Progress: io.Discard,
			WaitTimeout: 20 * time.Second,
			StepDelay:   time.Millisecond}) // a run long enough for the evaluator to see several checkpoints
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := estimator.TrainAndEvaluate(ctx, est, ts, es)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("%s: %v", task, err)
				cancel()
			case task.Job == cluster.EvaluatorJob:
				eval = res
			case res.Chief:
				chief = res
			}
		}()
	}
	es := estimator.EvalSpec{Input: linearInput(200, false)}
	evalSpec.Input, evalSpec.PollInterval = es.Input, 5*time.Millisecond
	run(cluster.TaskID{Job: cluster.EvaluatorJob}, evalSpec)
	for task := range lis {
		run(task, es)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return chief, eval
}

// TestEvaluatorGivesUp: with no checkpoint coming, the evaluator returns
// an error that names the directory and the wait, not a hang.
func TestEvaluatorGivesUp(t *testing.T) {
	spec, err := cluster.NewSpec(map[string][]string{"ps": {"127.0.0.1:1"}, "worker": {"127.0.0.1:2"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	est, err := estimator.New(linearModel, estimator.RunConfig{Cluster: spec, Task: cluster.TaskID{Job: cluster.EvaluatorJob},
		CheckpointDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = estimator.TrainAndEvaluate(context.Background(), est,
		estimator.TrainSpec{Input: linearInput(100, true), Stop: estimator.Stop{MaxSteps: 10}},
		estimator.EvalSpec{Input: linearInput(100, false), WaitTimeout: 50 * time.Millisecond, PollInterval: 5 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "no new checkpoint") {
		t.Fatalf("error %v, want one naming %s and the wait", err, dir)
	}
	if _, err := est.Train(context.Background(), linearInput(100, true), estimator.Stop{MaxSteps: 1}); err == nil || !strings.Contains(err.Error(), "evaluator") {
		t.Errorf("Train on an evaluator: %v", err)
	}
}
