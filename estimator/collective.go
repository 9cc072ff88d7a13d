package estimator

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// AllReduce trains without parameter servers: every worker holds the
// whole model and, each step, the workers average their gradients with a
// chunked, pipelined ring all-reduce.
type AllReduce struct{}

func (AllReduce) String() string { return "allreduce" }

func (AllReduce) validate(c *cluster.Spec) error { return needsCluster("allreduce", c, false) }

func (AllReduce) batchesPerStep(n int) int { return n }
func (AllReduce) averaged(n int) int       { return n }

func (AllReduce) train(ctx context.Context, r *replica) (*Result, error) {
	return trainCollective(ctx, r, func(s *graph.Scope, opt train.Optimizer, loss graph.Output, vars []*ops.Variable, _ *ops.Variable) (collectiveStep, error) {
		t, err := train.NewAllReduceTrainer(s, opt, loss, vars)
		if err != nil {
			return nil, err
		}
		return &allReduceStep{t: t}, nil
	})
}

// Averaging trains locally on every worker and averages the variables over
// the ring every Every steps (periodic averaging); 0 adapts the period to
// the measured cost of communication.
type Averaging struct {
	Every int
}

func (a Averaging) String() string { return fmt.Sprintf("averaging(%d)", a.Every) }

func (a Averaging) validate(c *cluster.Spec) error {
	if a.Every < 0 {
		return fmt.Errorf("estimator: Averaging.Every %d: must not be negative (0 adapts it)", a.Every)
	}
	return needsCluster("averaging", c, false)
}

func (Averaging) batchesPerStep(n int) int { return n }
func (Averaging) averaged(int) int         { return 1 }

func (a Averaging) train(ctx context.Context, r *replica) (*Result, error) {
	return trainCollective(ctx, r, func(s *graph.Scope, opt train.Optimizer, loss graph.Output, vars []*ops.Variable, gs *ops.Variable) (collectiveStep, error) {
		op, err := train.Minimize(s, opt, loss, gs)
		if err != nil {
			return nil, err
		}
		av, err := train.NewPeriodicAverager(s, vars, train.AveragingConfig{Tau: a.Every, Logger: r.log})
		if err != nil {
			return nil, err
		}
		return &averagingStep{op: op, loss: loss, av: av}, nil
	})
}

// collectiveStep is one step of a collective strategy on one rank.
type collectiveStep interface {
	// broadcast makes every rank start from rank 0's values.
	broadcast(ctx context.Context, sess *session.Session, ring *allreduce.Ring) error
	// step trains on a batch and communicates; it returns the batch loss.
	step(ctx context.Context, sess *session.Session, feeds map[graph.Output]*tensor.Tensor, ring *allreduce.Ring, step int64) (float64, error)
	// finish runs after the last step.
	finish(ctx context.Context, sess *session.Session, ring *allreduce.Ring) error
	// describe adds to a progress line.
	describe() string
}

type allReduceStep struct{ t *train.AllReduceTrainer }

func (a *allReduceStep) broadcast(ctx context.Context, sess *session.Session, ring *allreduce.Ring) error {
	return a.t.Broadcast(ctx, sess, ring, -1)
}

func (a *allReduceStep) step(ctx context.Context, sess *session.Session, feeds map[graph.Output]*tensor.Tensor, ring *allreduce.Ring, step int64) (float64, error) {
	return a.t.Step(ctx, sess, feeds, ring, step)
}

func (a *allReduceStep) finish(context.Context, *session.Session, *allreduce.Ring) error { return nil }
func (a *allReduceStep) describe() string                                                { return "" }

type averagingStep struct {
	op   *graph.Node
	loss graph.Output
	av   *train.PeriodicAverager
}

func (a *averagingStep) broadcast(ctx context.Context, sess *session.Session, ring *allreduce.Ring) error {
	return a.av.Broadcast(ctx, sess, ring)
}

func (a *averagingStep) step(ctx context.Context, sess *session.Session, feeds map[graph.Output]*tensor.Tensor, ring *allreduce.Ring, _ int64) (float64, error) {
	out, err := sess.Run(ctx, feeds, []graph.Output{a.loss}, []*graph.Node{a.op})
	if err != nil {
		return 0, err
	}
	_, err = a.av.Step(ctx, sess, ring)
	return out[0].Float64At(0), err
}

func (a *averagingStep) finish(ctx context.Context, sess *session.Session, ring *allreduce.Ring) error {
	return a.av.Average(ctx, sess, ring)
}

func (a *averagingStep) describe() string { return fmt.Sprintf("  tau %d", a.av.Tau()) }

// trainCollective trains as one rank of a ring of workers with no
// parameter server, on the task's own address: every rank holds the model
// in a local session, starts from rank 0's values, and runs the same
// number of steps; rank 0 ends with the trained model.
func trainCollective(ctx context.Context, r *replica, build func(s *graph.Scope, opt train.Optimizer, loss graph.Output, vars []*ops.Variable, gs *ops.Variable) (collectiveStep, error)) (*Result, error) {
	cfg := r.cfg
	lis, err := r.listener()
	if err != nil {
		return nil, err
	}
	// The task's server serves the ring (ranks: the training tasks) beside
	// its master and worker services, on its one address.
	srv, err := server.New(server.Config{Cluster: cfg.Cluster, Task: cfg.Task, Listener: lis, Logger: cfg.Logger, Ring: r.reps, FileRoots: cfg.fileRoots(), RPC: cfg.rpc,
		Metrics: r.e.Metrics(), MetricsEndpoint: r.e.metricsEndpoint()})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	defer srv.Stop()
	ring := srv.Ring()

	in, err := openTrainInput(ctx, r.input, InputContext{NumReplicas: len(r.reps), ReplicaIndex: r.index, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	defer in.close()
	r.e.rememberInput(in.spec)
	s := graph.NewScope()
	t, err := buildTower(s, r.e.fn, in.spec, Train)
	if err != nil {
		return nil, err
	}
	modelVars := ops.GlobalVariables(s.Graph())
	gs := train.CreateGlobalStep(s)
	st, err := build(s, t.spec.Optimizer, t.spec.Loss, ops.TrainableVariables(s.Graph()), gs)
	if err != nil {
		return nil, fmt.Errorf("estimator: building the update: %w", err)
	}
	init := ops.GlobalVariablesInitializer(s)
	// Rank 0 records the steps made as the trained model's global step.
	stepsMade := ops.Placeholder(s, "steps_made", gs.DType(), tensor.MakeShape())
	setStep := ops.Assign(s, gs.Value(), stepsMade).Node
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("estimator: building the training graph: %w", err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		return nil, err
	}
	bctx, cancel := context.WithTimeout(ctx, cfg.WaitTimeout)
	err = st.broadcast(bctx, sess, ring)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("estimator: %s: waiting for the other workers (wait timeout %v): %w", cfg.Task, cfg.WaitTimeout, err)
	}

	batch := in.first[0].Shape()[0]
	ranks := len(r.reps)
	steps := r.stop.steps(batch, ranks)
	r.log.Info("training", "strategy", cfg.Strategy.String(), "rank", r.index, "ranks", ranks, "steps", steps, "batch", batch)
	var loss float64
	warmup, timedFrom := warmupSteps(steps), 0
	trainStart := time.Now()
	window, windowStart := 0, trainStart
	feeds := map[graph.Output]*tensor.Tensor{}
	for step := int64(1); step <= steps; step++ {
		b, err := in.next()
		if err != nil {
			return nil, fmt.Errorf("estimator: %sreading a batch: %w", r.who(), err)
		}
		if err := t.feeds(feeds, b); err != nil {
			return nil, err
		}
		if cfg.StepDelay > 0 {
			select {
			case <-time.After(cfg.StepDelay):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		sctx, cancel := context.WithTimeout(ctx, cfg.StepTimeout)
		stepStart := time.Now()
		loss, err = st.step(sctx, sess, feeds, ring, step)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("estimator: %sstep %d: %w", r.who(), step, err)
		}
		r.observeStep(time.Since(stepStart), batch, step, loss)
		if math.IsNaN(loss) || math.IsInf(loss, 0) { // as the NaN guard of the ps strategies
			return nil, fmt.Errorf("estimator: %sstep %d: %w (%v): lower the learning rate", r.who(), step, train.ErrNaNLoss, loss)
		}
		window++
		if int(step) == warmup {
			trainStart, timedFrom = time.Now(), warmup
		}
		if step%int64(cfg.LogEverySteps) == 0 || step == steps {
			now := time.Now()
			var line strings.Builder
			fmt.Fprintf(&line, "%sstep %d/%d", r.who(), step, steps)
			if n := r.stop.ExamplesPerEpoch; n > 0 {
				fmt.Fprintf(&line, "  epoch %.2f", float64(step*int64(batch*ranks))/float64(n))
			}
			fmt.Fprintf(&line, "  loss %.4f  %.0f examples/s (all ranks)%s", loss,
				float64(window*batch*ranks)/now.Sub(windowStart).Seconds(), st.describe())
			fmt.Fprintln(cfg.Progress, line.String())
			window, windowStart = 0, now
		}
	}
	if err := st.finish(ctx, sess, ring); err != nil {
		return nil, err
	}
	seconds := time.Since(trainStart).Seconds()
	timed := int(steps) - timedFrom
	res := &Result{
		Task: cfg.Task.String(), Strategy: cfg.Strategy.String(), Chief: r.chief(),
		GlobalStep: steps, LocalSteps: int(steps), Loss: loss, BatchSize: batch,
		ExamplesPerSecond:        float64(timed*batch) / seconds,
		ClusterExamplesPerSecond: float64(timed*batch*ranks) / seconds,
	}
	if n := r.stop.ExamplesPerEpoch; n > 0 {
		res.Epochs = float64(steps*int64(batch*ranks)) / float64(n)
	}
	if r.chief() { // the ranks hold the same model: rank 0 keeps it
		made := tensor.New(gs.DType())
		made.SetFloat64At(0, float64(steps))
		if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{stepsMade: made}, nil, []*graph.Node{setStep}); err != nil {
			return nil, err
		}
		if err := r.e.keepTrained(ctx, sess, modelVars, gs); err != nil {
			return nil, err
		}
	}
	res.WallSeconds = time.Since(r.started).Seconds()
	return res, nil
}
