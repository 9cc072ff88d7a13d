package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/summary"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// job is the training graph of one client process: the model's towers (one,
// or one per worker for in-graph replication), the update, and the
// bookkeeping a cluster needs.
type job struct {
	f          trainFlags
	towers     []*models.Model
	globalStep *ops.Variable
	trainOp    *graph.Node
	initOp     *graph.Node
	// initialized counts the initialised variables (float32 scalar), so that
	// non-chief workers can wait for the chief.
	initialized graph.Output
	numVars     int
	// summaries merges the graph's summaries (weight histograms) when
	// --logdir is set; invalid otherwise.
	summaries graph.Output
	// saver writes checkpoints (the chief's, when a checkpoint directory is
	// set; nil otherwise) on schedule.
	saver    *checkpoint.Saver
	schedule checkpoint.Schedule
	log      *slog.Logger
	// sync aggregates the replicas' gradients (--sync; nil otherwise).
	sync *train.SyncReplicasOptimizer
	// stale bounds how far this replica runs ahead (--staleness; nil otherwise).
	stale *train.StalenessBound
	// replicas is the number of training processes.
	replicas int
	// waitForCluster, when set, waits until the tasks the session uses
	// answer: the monitored session then recovers from a lost task (see
	// train.MonitoredConfig.WaitForCluster).
	waitForCluster func(ctx context.Context) error
}

// checkpointDir is where checkpoints go: --checkpoint-dir, else --logdir.
func (f trainFlags) checkpointDir() string {
	if f.ckptDir != "" {
		return f.ckptDir
	}
	return f.logdir
}

// addSaver makes this job save and restore checkpoints of every variable
// except those in exclude (bookkeeping that must start afresh).
func (j *job) addSaver(s *graph.Scope, exclude []*ops.Variable, log *slog.Logger) error {
	dir := j.f.checkpointDir()
	if dir == "" {
		return nil
	}
	skip := map[*graph.Node]bool{}
	for _, v := range exclude {
		skip[v.Node()] = true
	}
	var vars []*ops.Variable
	for _, v := range ops.GlobalVariables(s.Graph()) {
		if !skip[v.Node()] {
			vars = append(vars, v)
		}
	}
	sv, err := checkpoint.NewSaver(s, vars, checkpoint.SaverConfig{Dir: dir, Keep: j.f.keepCkpts, Logger: log})
	if err != nil {
		return err
	}
	j.saver, j.log = sv, log
	j.schedule = checkpoint.Schedule{Steps: int64(j.f.saveSteps), Every: time.Duration(j.f.saveSecs) * time.Second}
	return nil
}

// monitor readies the model through a train.MonitoredSession (the chief
// initialises, restores or continues; the others wait for it) with the hooks
// of this run: the NaN guard and, for a chief with a checkpoint directory,
// the checkpoint saver.
func (j *job) monitor(ctx context.Context, sess *session.Session, chief bool, initOp, afterRestore *graph.Node, log *slog.Logger) (*train.MonitoredSession, error) {
	hooks := []train.Hook{train.NanGuardHook{Loss: j.towers[0].Loss}}
	if j.saver != nil {
		hooks = append(hooks, &train.CheckpointHook{Saver: j.saver, Schedule: &j.schedule, Logger: log})
	}
	ctx, cancel := context.WithTimeout(ctx, j.f.waitTimeout)
	defer cancel()
	return train.NewMonitoredSession(ctx, train.MonitoredConfig{
		Session: sess, IsChief: chief, InitOp: initOp, AfterRestore: afterRestore, Saver: j.saver,
		Ready: j.initialized, Variables: j.numVars, ReadyTimeout: j.f.waitTimeout,
		GlobalStep: j.globalStep, Hooks: hooks, Logger: log, WaitForCluster: j.waitForCluster,
	})
}

// clusterRate is the whole cluster's training throughput seen from this
// process: global steps made while it trained, times the examples per global
// step (a batch per tower; with --sync, one per aggregated replica).
func (j *job) clusterRate(st loopStats) float64 {
	perStep := j.f.batch * j.batchesPerStep()
	if st.seconds == 0 {
		return 0
	}
	return float64((st.lastGlobal-st.firstGlobal)*perStep) / st.seconds
}

// buildJob builds the model (one tower per entry of towerDevices; "" is the
// scope's own placement) and its update. With several towers the gradients
// of all towers are averaged into one update (in-graph replication).
func buildJob(s *graph.Scope, f trainFlags, towerDevices []string, replicas, index int) (*job, error) {
	towers, err := models.BuildTowers(s, f.model, models.Config{Seed: f.seed}, towerDevices)
	if err != nil {
		return nil, err
	}
	opt, err := train.NewOptimizer(f.optimizer, float32(f.lr))
	if err != nil {
		return nil, fmt.Errorf("--optimizer: %w", err)
	}
	j := &job{f: f, towers: towers, globalStep: train.CreateGlobalStep(s), replicas: replicas}
	if f.sync {
		agg := f.replicasToAggregate
		if agg == 0 {
			agg = replicas
		}
		if agg < 1 || agg > replicas {
			return nil, fmt.Errorf("--replicas-to-aggregate %d: want 1 to %d (the number of workers)", agg, replicas)
		}
		j.sync = train.NewSyncReplicas(opt, agg, replicas)
		j.sync.SetReplica(index) // a token queue of its own
		opt = j.sync
	}
	if f.staleness >= 0 {
		j.stale = train.NewStalenessBound(s, replicas, index, f.staleness)
	}
	if len(towers) == 1 {
		j.trainOp, err = train.Minimize(s, opt, towers[0].Loss, j.globalStep)
	} else {
		j.trainOp, err = averagedUpdate(s, opt, towers, j.globalStep)
	}
	if err != nil {
		return nil, err
	}
	j.initOp = ops.GlobalVariablesInitializer(s)
	j.initialized, j.numVars = train.ReadyOp(s, ops.GlobalVariables(s.Graph()))
	if f.logdir != "" {
		for _, v := range towers[0].Variables {
			ops.HistogramSummary(s, v.Name(), v.Value())
		}
		j.summaries = ops.MergeAllSummaries(s)
	}
	return j, s.Err()
}

// averagedUpdate computes each tower's gradients on its device and applies
// their mean once.
func averagedUpdate(s *graph.Scope, opt train.Optimizer, towers []*models.Model, step *ops.Variable) (*graph.Node, error) {
	vars := towers[0].Variables
	perVar := make([][]graph.Output, len(vars))
	for i, t := range towers {
		gvs, err := opt.ComputeGradients(s.SubScope(fmt.Sprintf("tower_%d_gradients", i)), t.Loss, vars)
		if err != nil {
			return nil, err
		}
		for k, gv := range gvs {
			perVar[k] = append(perVar[k], gv.Grad)
		}
	}
	as := s.SubScope("average_gradients")
	scale := ops.Scalar(as, vars[0].DType(), 1/float64(len(towers)))
	gvs := make([]train.GradVar, len(vars))
	for k, v := range vars {
		gvs[k] = train.GradVar{Var: v, Grad: ops.Mul(as, ops.AddN(as, perVar[k]...), scale)}
	}
	return opt.ApplyGradients(s, gvs, step)
}

// examples is a training set and an optional test set.
type examples struct {
	trainX, trainY *tensor.Tensor
	testX, testY   *tensor.Tensor
	source         string
}

func loadExamples(f trainFlags) (examples, error) {
	if f.model == "linreg" {
		// SPEC section 6: y = 2x + 10 + noise(0.33).
		// One example per step, between 1,000 and 100,000 (then repeated).
		x, y := data.Linear(min(max(f.steps*f.batch, 1000), 100_000), int64(f.seed), 2, 10, 0.33)
		return examples{trainX: x, trainY: y, source: "synthetic y=2x+10+N(0,0.33)"}, nil
	}
	tr, te, source, err := data.Load(f.dataDir)
	if err != nil {
		return examples{}, err
	}
	return examples{trainX: tr.Images, trainY: tr.Labels, testX: te.Images, testY: te.Labels, source: source}, nil
}

// targetSteps is the number of global steps the run trains for: --steps,
// or enough for --epochs when each global step consumes perStep batches
// (one, or the aggregated replicas of synchronous training).
func (f trainFlags) targetSteps(n, perStep int) int {
	if f.steps > 0 {
		return f.steps
	}
	return int(math.Ceil(f.epochs * float64(n) / float64(f.batch*perStep)))
}

// batchesPerStep is the number of batches one global step consumes.
func (j *job) batchesPerStep() int {
	if j.sync == nil {
		return len(j.towers)
	}
	if j.f.replicasToAggregate > 0 {
		return j.f.replicasToAggregate
	}
	return j.replicas
}

// batches returns an endless iterator over the batches of shard
// index of shards (the training loop's feed for one worker). Every epoch,
// all shards are cut from one permutation of the whole training set, the
// same on every worker (the seed does not depend on index), as PyTorch's
// DistributedSampler does: together the workers see each example once per
// epoch, and the union of the workers' k-th batches is the k-th batch of
// shards*batch examples of a single process with the same seed. A
// synchronous step over the shards is then exactly the single-process step
// on that batch. (Fixed shards shuffled separately see the same examples
// but in batches no single process would draw.) One shard is the
// single-process pipeline.
func batches(ctx context.Context, ex examples, f trainFlags, shards, index int) (*data.Iterator, error) {
	ds, err := data.FromTensors(ex.trainX, ex.trainY)
	if err != nil {
		return nil, err
	}
	ds = ds.Shuffle(ex.trainX.Shape()[0], int64(f.seed))
	if shards > 1 {
		ds = ds.Shard(shards, index)
	}
	return ds.Repeat(-1).Batch(f.batch, true).Prefetch(2).Iterator(ctx), nil
}

// loopStats is what a training loop did.
type loopStats struct {
	localSteps int
	loss       float64
	// timedSteps and seconds are the local steps after the warm-up and the
	// time they took: the throughput figures leave out the first steps,
	// which build the executors and connections and fault the buffers in.
	timedSteps int
	seconds    float64
	// firstGlobal and lastGlobal are the global steps seen at the end of
	// the warm-up and at the last local step: their difference is the whole
	// cluster's progress in the timed steps.
	firstGlobal, lastGlobal int
}

// warmupSteps is how many first steps of a run of target steps the
// throughput figures leave out (as bench/torch_train.py does for PyTorch):
// 20, or a tenth of a short run (none under 10 steps).
func warmupSteps(target int) int {
	return min(20, target/10)
}

// examplesPerSecond is the throughput of this process's timed steps, of
// perStep examples each.
func (st loopStats) examplesPerSecond(perStep int) float64 {
	if st.seconds == 0 {
		return 0
	}
	return float64(st.timedSteps*perStep) / st.seconds
}

// trainLoop runs training steps until the global step reaches target. Each
// step feeds one batch to each tower (its)  and runs the update. who names
// the process in progress lines ("" for a single process).
func (j *job) trainLoop(ctx context.Context, ms *train.MonitoredSession, its []*data.Iterator, target, n int, who string, stderr io.Writer, events *summary.Writer) (loopStats, error) {
	sess := ms.Session()
	f := j.f
	fetches := []graph.Output{j.towers[0].Loss}
	if f.model == "linreg" {
		fetches = append(fetches, j.towers[0].Params["W"], j.towers[0].Params["b"])
	}
	// On logging steps the merged summaries are fetched too.
	logFetches := fetches
	if events != nil && j.summaries.Valid() {
		logFetches = append(fetches[:len(fetches):len(fetches)], j.summaries)
	}
	targets := []*graph.Node{j.trainOp}
	feeds := map[graph.Output]*tensor.Tensor{}
	var st loopStats
	// The throughput is timed from the end of the warm-up; a run that ends
	// before it is timed whole.
	warmup, timedFrom := warmupSteps(target), 0
	start := time.Now()
	window, windowStart := 0, start
	examplesPerStep := f.batch * len(j.towers)
	for {
		for i, t := range j.towers {
			b, err := its[i].Next()
			if err != nil {
				return st, fmt.Errorf("reading a batch: %w", err)
			}
			feeds[t.Input], feeds[t.Label] = b[0], b[1]
		}
		logging := (st.localSteps+1)%f.logEvery == 0
		fs := fetches
		if logging {
			fs = logFetches
		}
		if j.stale != nil {
			if err := j.stale.Wait(ctx, sess); err != nil {
				return st, fmt.Errorf("%swaiting for the slowest replica: %w", prefix(who), err)
			}
		}
		if f.stepDelay > 0 { // fault injection: a slow worker
			select {
			case <-time.After(f.stepDelay):
			case <-ctx.Done():
				return st, ctx.Err()
			}
		}
		out, err := ms.Run(ctx, feeds, fs, targets)
		if j.sync != nil && errors.Is(train.CheckFinished(err), train.ErrTrainingFinished) {
			fmt.Fprintf(stderr, "%sthe chief finished synchronous training at local_step %d\n", prefix(who), st.localSteps)
			break
		}
		if err != nil {
			return st, fmt.Errorf("%slocal step %d: %w", prefix(who), st.localSteps+1, err)
		}
		if j.stale != nil {
			if err := j.stale.Advance(ctx, sess); err != nil {
				return st, err
			}
		}
		st.localSteps++
		window++
		st.loss = out[0].Float64At(0)
		// The fetched global step may precede this step's own increment.
		gstep := int(ms.GlobalStep())
		switch st.localSteps {
		case 1:
			st.firstGlobal = gstep - 1
		case warmup:
			start, timedFrom, st.firstGlobal = time.Now(), warmup, gstep
		}
		st.lastGlobal = gstep
		done := gstep >= target
		if st.localSteps%f.logEvery == 0 || done {
			now := time.Now()
			elapsed := now.Sub(windowStart)
			line := fmt.Sprintf("%slocal_step %d  global_step %d/%d  epoch %.2f  loss %.4f  avg_step %s  %.0f examples/s",
				prefix(who), st.localSteps, gstep, target, float64(gstep*f.batch)/float64(n), st.loss,
				(elapsed / time.Duration(window)).Round(time.Microsecond), float64(window*examplesPerStep)/elapsed.Seconds())
			if f.model == "linreg" {
				line += fmt.Sprintf("  W %.4f  b %.4f", out[1].Float64At(0), out[2].Float64At(0))
			}
			fmt.Fprintln(stderr, line)
			if events != nil {
				writeEvents(events, int64(gstep), st.loss, float64(window*examplesPerStep)/elapsed.Seconds(),
					float64(window)/elapsed.Seconds(), out[len(fetches):])
				if f.model == "linreg" {
					_ = events.AddScalar("W", int64(gstep), out[1].Float64At(0))
					_ = events.AddScalar("b", int64(gstep), out[2].Float64At(0))
				}
			}
			window, windowStart = 0, now
		}
		if done {
			break
		}
	}
	st.seconds = time.Since(start).Seconds()
	st.timedSteps = st.localSteps - timedFrom
	if j.stale != nil {
		if err := j.stale.Done(ctx, sess); err != nil {
			return st, err
		}
	}
	return st, nil
}

// writeEvents adds a logging step's scalars and fetched summaries to the
// event file. Errors are not fatal to training: the writer keeps the first
// one and Close reports it.
func writeEvents(w *summary.Writer, step int64, loss, examplesPerSec, stepsPerSec float64, summaries []*tensor.Tensor) {
	_ = w.AddScalar("loss", step, loss)
	_ = w.AddScalar("examples_per_second", step, examplesPerSec)
	_ = w.AddScalar("steps_per_second", step, stepsPerSec)
	for _, t := range summaries {
		_ = w.AddSummary(t.Uint8s(), step)
	}
}

func prefix(who string) string {
	if who == "" {
		return ""
	}
	return who + ": "
}

// evaluate returns the accuracy and mean loss over a test set, in batches.
func evaluate(ctx context.Context, sess *session.Session, m *models.Model, x, y *tensor.Tensor) (acc, loss float64, err error) {
	ds, err := data.FromTensors(x, y)
	if err != nil {
		return 0, 0, err
	}
	it := ds.Batch(1000, false).Iterator(ctx)
	defer it.Close()
	var correct, lossSum float64
	total := 0
	for {
		b, err := it.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, 0, err
		}
		out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{m.Input: b[0], m.Label: b[1]},
			[]graph.Output{m.Correct, m.EvalLoss}, nil)
		if err != nil {
			return 0, 0, fmt.Errorf("evaluating: %w", err)
		}
		k := b[0].Shape()[0]
		correct += out[0].Float64At(0)
		lossSum += out[1].Float64At(0) * float64(k)
		total += k
	}
	if total == 0 {
		return 0, 0, fmt.Errorf("evaluating: the test set is empty")
	}
	return correct / float64(total), lossSum / float64(total), nil
}

// finalResult reads the global step and the model's figures after training.
func (j *job) finalResult(ctx context.Context, sess *session.Session, ex examples, st loopStats, started time.Time) (result, error) {
	f := j.f
	n := ex.trainX.Shape()[0]
	gs, err := sess.Run(ctx, nil, []graph.Output{j.globalStep.Value()}, nil)
	if err != nil {
		return result{}, err
	}
	res := result{
		Model: f.model, Optimizer: f.optimizer, LearningRate: f.lr, Batch: f.batch,
		GlobalStep: int64(gs[0].Float64At(0)), LocalSteps: st.localSteps, Loss: st.loss,
		Data: ex.source, TrainExamples: n,
		ExamplesPerSecond: st.examplesPerSecond(f.batch * len(j.towers)),
	}
	res.Epochs = float64(res.GlobalStep*int64(f.batch)) / float64(n)
	res.ClusterExamplesPerSecond = j.clusterRate(st)
	if err := addModelFigures(ctx, sess, j.towers[0], ex, &res); err != nil {
		return result{}, err
	}
	res.WallSeconds = time.Since(started).Seconds()
	return res, nil
}

// addModelFigures puts what the trained model shows into res: W and b of
// the linear regression, or a classifier's accuracy and loss on the test set.
func addModelFigures(ctx context.Context, sess *session.Session, m *models.Model, ex examples, res *result) error {
	if m.Name == "linreg" {
		out, err := sess.Run(ctx, nil, []graph.Output{m.Params["W"], m.Params["b"]}, nil)
		if err != nil {
			return err
		}
		w, b := out[0].Float64At(0), out[1].Float64At(0)
		res.W, res.B = &w, &b
		return nil
	}
	acc, tl, err := evaluate(ctx, sess, m, ex.testX, ex.testY)
	if err != nil {
		return err
	}
	res.TestAccuracy, res.TestLoss, res.TestExamples = &acc, &tl, ex.testX.Shape()[0]
	return nil
}
