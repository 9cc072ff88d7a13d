package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// trainAllReduce trains as one rank of a ring of workers with no parameter
// server: every worker holds the whole model in a local session and, each
// step, the workers average their gradients over the ring (--allreduce), or
// train locally and average their variables every --average-every steps
// (periodic averaging; 0 adapts the period to the cost of communication).
// The ring serves on the task's own address.
func trainAllReduce(ctx context.Context, f trainFlags, spec *cluster.Spec, self cluster.TaskID, stdout, stderr io.Writer) error {
	started := time.Now()
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("task", self.String())
	if spec.NumTasks("ps") > 0 {
		return errors.New("--allreduce trains without parameter servers: drop --ps_hosts")
	}
	reps := replicas(spec)
	rank := -1
	peers, names := make([]string, len(reps)), make([]string, len(reps))
	for i, r := range reps {
		peers[i], _ = spec.Address(r)
		names[i] = r.String()
		if r == self {
			rank = i
		}
	}
	if rank < 0 {
		return fmt.Errorf("--allreduce: %s is not a worker", self)
	}
	lis, err := inheritedListener(f.listenFD)
	if err != nil {
		return err
	}
	ring, err := allreduce.New(allreduce.Config{Rank: rank, Peers: peers, Names: names, Listener: lis, Logger: log})
	if err != nil {
		return err
	}
	if err := ring.Start(); err != nil {
		return err
	}
	defer ring.Close()

	s := graph.NewScope()
	m, err := models.Build(s, f.model, models.Config{Seed: f.seed})
	if err != nil {
		return err
	}
	opt, err := train.NewOptimizer(f.optimizer, float32(f.lr))
	if err != nil {
		return fmt.Errorf("--optimizer: %w", err)
	}
	gs := train.CreateGlobalStep(s)
	var (
		trainer  *train.AllReduceTrainer
		averager *train.PeriodicAverager
		trainOp  *graph.Node
	)
	if f.averageEvery < 0 {
		trainer, err = train.NewAllReduceTrainer(s, opt, m.Loss, m.Variables)
	} else {
		if trainOp, err = train.Minimize(s, opt, m.Loss, gs); err == nil {
			averager, err = train.NewPeriodicAverager(s, m.Variables, train.AveragingConfig{Tau: f.averageEvery, Logger: log})
		}
	}
	if err != nil {
		return err
	}
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		return err
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		return err
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		return err
	}
	// Every rank starts from rank 0's values.
	bctx, cancel := context.WithTimeout(ctx, f.waitTimeout)
	if trainer != nil {
		err = trainer.Broadcast(bctx, sess, ring, -1)
	} else {
		err = averager.Broadcast(bctx, sess, ring)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("waiting for the other workers (--wait-timeout %v): %w", f.waitTimeout, err)
	}

	ex, err := loadExamples(f)
	if err != nil {
		return err
	}
	it, err := batches(ctx, ex, f, len(reps), rank)
	if err != nil {
		return err
	}
	defer it.Close()
	n := ex.trainX.Shape()[0]
	// A step is one batch on every rank; every rank runs the same number.
	steps := f.steps
	if steps == 0 {
		steps = int(f.epochs * float64(n) / float64(f.batch*len(reps)))
	}
	mode := "all-reduce of gradients every step"
	if averager != nil {
		mode = "periodic averaging of variables"
	}
	log.Info("training", "model", f.model, "mode", mode, "rank", rank, "ranks", len(reps), "steps", steps, "batch", f.batch)

	var loss float64
	// Throughput is timed after the warm-up, as in the ps modes (see trainLoop).
	warmup, timedFrom := warmupSteps(steps), 0
	trainStart := time.Now()
	window, windowStart := 0, trainStart
	for step := 1; step <= steps; step++ {
		b, err := it.Next()
		if err != nil {
			return err
		}
		feeds := map[graph.Output]*tensor.Tensor{m.Input: b[0], m.Label: b[1]}
		sctx, cancel := context.WithTimeout(ctx, f.stepTimeout)
		if trainer != nil {
			loss, err = trainer.Step(sctx, sess, feeds, ring, int64(step))
		} else {
			var out []*tensor.Tensor
			if out, err = sess.Run(sctx, feeds, []graph.Output{m.Loss}, []*graph.Node{trainOp}); err == nil {
				loss = out[0].Float64At(0)
				_, err = averager.Step(sctx, sess, ring)
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%s: step %d: %w", self, step, err)
		}
		window++
		if step == warmup {
			trainStart, timedFrom = time.Now(), warmup
		}
		if step%f.logEvery == 0 || step == steps {
			now := time.Now()
			line := fmt.Sprintf("%s: step %d/%d  epoch %.2f  loss %.4f  %.0f examples/s (all ranks)",
				self, step, steps, float64(step*f.batch*len(reps))/float64(n), loss,
				float64(window*f.batch*len(reps))/now.Sub(windowStart).Seconds())
			if averager != nil {
				line += fmt.Sprintf("  tau %d", averager.Tau())
			}
			fmt.Fprintln(stderr, line)
			window, windowStart = 0, now
		}
	}
	if averager != nil {
		if err := averager.Average(ctx, sess, ring); err != nil {
			return err
		}
	}
	seconds := time.Since(trainStart).Seconds()
	timed := steps - timedFrom

	res := result{Model: f.model, Optimizer: f.optimizer, LearningRate: f.lr, Batch: f.batch, Task: self.String(),
		GlobalStep: int64(steps), LocalSteps: steps, Loss: loss, Data: ex.source, TrainExamples: n,
		Epochs:                   float64(steps*f.batch*len(reps)) / float64(n),
		ExamplesPerSecond:        float64(timed*f.batch) / seconds,
		ClusterExamplesPerSecond: float64(timed*f.batch*len(reps)) / seconds}
	if f.model == "linreg" || rank == 0 { // the ranks hold the same model: one evaluates
		if err := addModelFigures(ctx, sess, m, ex, &res); err != nil {
			return err
		}
	}
	res.WallSeconds = time.Since(started).Seconds()
	return report(stdout, res, f.jsonOut)
}
