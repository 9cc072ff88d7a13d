package estimator

import (
	"context"
	"fmt"
	"time"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// AllReduce trains with every worker holding the whole model: each step,
// the workers average their gradients with a chunked, pipelined ring
// all-reduce, and all-gather the rows of their sparse gradients (an
// embedding table's, always round the ring), which the optimizer's sparse
// update applies as on parameter servers (train.AllReduceTrainer). When
// the cluster has ps tasks the sums go through them instead, BytePS's
// design: each ps sums a slice of every gradient and returns it, holding
// no variables (allreduce.Config.Servers). A ps that is lost fails the
// step on every worker; the ring's leader then sends a view that goes
// round the ring while a ps does not answer, and one that goes through
// the ps tasks again once they all do (probed every 5 s). Every worker
// takes the route of its view.
type AllReduce struct{}

func (AllReduce) String() string { return "allreduce" }

func (AllReduce) Validate(c *cluster.Spec) error {
	if c == nil {
		return needsCluster("allreduce", c, false)
	}
	return nil
}

func (AllReduce) Update(n int) Update {
	return Update{Batches: n, Averaged: n, Compresses: true, SumsOnPS: true}
}

// Recovery: a rank that dies rejoins when restarted (the others go on
// without it meanwhile, or for good); a summation server holds nothing to
// restore.
func (AllReduce) Recovery() Recovery {
	return Recovery{RestartPS: true, RestartWorkers: true, ToleratesWorkerLoss: true}
}

func (AllReduce) Replica(ReplicaInfo) (Replica, error) {
	return ringReplica(func(r *replica) collectiveBuild {
		return func(s *graph.Scope, opt train.Optimizer, loss graph.Output, vars []*ops.Variable, _ *ops.Variable) (RingStep, error) {
			t, err := train.NewAllReduceTrainer(s, opt, loss, vars)
			if err != nil {
				return nil, err
			}
			return &allReduceStep{t: t, comp: newGradCompressor(r.cfg.Compression)}, nil
		}
	}), nil
}

// Averaging trains locally on every worker and averages the variables over
// the ring every Every steps (periodic averaging); 0 adapts the period to
// the measured cost of communication.
type Averaging struct {
	Every int
}

func (a Averaging) String() string { return fmt.Sprintf("averaging(%d)", a.Every) }

func (a Averaging) Validate(c *cluster.Spec) error {
	if a.Every < 0 {
		return fmt.Errorf("estimator: Averaging.Every %d: must not be negative (0 adapts it)", a.Every)
	}
	return needsCluster("averaging", c, false)
}

func (Averaging) Update(n int) Update { return Update{Batches: n, Averaged: 1} }

// Recovery: a rank that dies rejoins when restarted (the others go on
// without it meanwhile, or for good).
func (Averaging) Recovery() Recovery {
	return Recovery{RestartWorkers: true, ToleratesWorkerLoss: true}
}

func (a Averaging) Replica(ReplicaInfo) (Replica, error) {
	return ringReplica(func(r *replica) collectiveBuild {
		return func(s *graph.Scope, opt train.Optimizer, loss graph.Output, vars []*ops.Variable, gs *ops.Variable) (RingStep, error) {
			op, err := train.Minimize(s, opt, loss, gs)
			if err != nil {
				return nil, err
			}
			av, err := train.NewPeriodicAverager(s, vars, train.AveragingConfig{Tau: a.Every, Logger: r.log})
			if err != nil {
				return nil, err
			}
			return &averagingStep{op: op, loss: loss, av: av}, nil
		}
	}), nil
}

// RingReplica is the part in training of a replica of a collective
// strategy: every worker holds the whole model in its own session, and
// the workers form an elastic ring (the lowest rank alive leads, views,
// rejoins, the leader's checkpoints) over which the strategy's step
// communicates, through the shared training loop (hooks, summaries,
// progress, the stop condition). What a user's collective strategy
// returns from Strategy.Replica.
type RingReplica struct {
	// Build builds the strategy's step into a rank's graph, from the
	// model's optimizer, loss and trainable variables, and the global
	// step (which the ring sets; the step need not update it).
	Build func(s *graph.Scope, opt train.Optimizer, loss graph.Output, vars []*ops.Variable, globalStep *ops.Variable) (RingStep, error)
}

func (b *RingReplica) train(ctx context.Context, r *replica) (*Result, error) {
	if b.Build == nil {
		return nil, fmt.Errorf("estimator: %s: RingReplica.Build is nil: it builds the strategy's step", r.cfg.Strategy)
	}
	return trainCollective(ctx, r, b.Build)
}

// RingStep is one step of a collective strategy on one rank of the ring.
// The ring calls its methods from one goroutine; a step cut short (a
// member lost, a newer view) sees its context cancelled, and the step is
// then taken again in the next view.
type RingStep interface {
	// Broadcast makes every member of a new view start from the values
	// of the ring's root (the member furthest on).
	Broadcast(ctx context.Context, sess *session.Session, ring train.AllReducer) error
	// Restart starts the strategy's own schedule afresh, on every member
	// at once, after a new view of the ring.
	Restart()
	// Step trains on the batch in feeds and communicates over ring; it
	// returns the batch loss and the values of extra (the hooks' and the
	// progress line's fetches), fetched with the batch's forward pass.
	Step(ctx context.Context, sess *session.Session, feeds map[graph.Output]*tensor.Tensor, ring train.AllReducer, step int64, extra []graph.Output) (float64, []*tensor.Tensor, error)
	// Finish runs after the last step.
	Finish(ctx context.Context, sess *session.Session, ring train.AllReducer) error
	// Describe adds to a progress line ("": nothing).
	Describe() string
}

// collectiveBuild builds a collective strategy's step into a rank's graph.
type collectiveBuild func(s *graph.Scope, opt train.Optimizer, loss graph.Output, vars []*ops.Variable, gs *ops.Variable) (RingStep, error)

// ringReplica is a built-in collective strategy's RingReplica, which
// reads the run's configuration (its compression, its logger).
type ringReplica func(r *replica) collectiveBuild

func (b ringReplica) train(ctx context.Context, r *replica) (*Result, error) {
	return trainCollective(ctx, r, b(r))
}

type allReduceStep struct {
	t    *train.AllReduceTrainer
	comp *gradCompressor // nil: float32 gradients
}

func (a *allReduceStep) Broadcast(ctx context.Context, sess *session.Session, ring train.AllReducer) error {
	return a.t.Broadcast(ctx, sess, ring, -1)
}

func (a *allReduceStep) Step(ctx context.Context, sess *session.Session, feeds map[graph.Output]*tensor.Tensor, ring train.AllReducer, step int64, extra []graph.Output) (float64, []*tensor.Tensor, error) {
	return a.t.StepFetching(ctx, sess, feeds, extra, a.comp.wrap(ring), step)
}

func (a *allReduceStep) Finish(context.Context, *session.Session, train.AllReducer) error { return nil }
func (a *allReduceStep) Describe() string                                                 { return "" }
func (a *allReduceStep) Restart()                                                         {}

type averagingStep struct {
	op   *graph.Node
	loss graph.Output
	av   *train.PeriodicAverager
}

func (a *averagingStep) Broadcast(ctx context.Context, sess *session.Session, ring train.AllReducer) error {
	return a.av.Broadcast(ctx, sess, ring)
}

func (a *averagingStep) Step(ctx context.Context, sess *session.Session, feeds map[graph.Output]*tensor.Tensor, ring train.AllReducer, _ int64, extra []graph.Output) (float64, []*tensor.Tensor, error) {
	out, err := sess.Run(ctx, feeds, append([]graph.Output{a.loss}, extra...), []*graph.Node{a.op})
	if err != nil {
		return 0, nil, err
	}
	_, err = a.av.Step(ctx, sess, ring)
	return out[0].Float64At(0), out[1:], err
}

func (a *averagingStep) Restart() { a.av.Restart() }

func (a *averagingStep) Finish(ctx context.Context, sess *session.Session, ring train.AllReducer) error {
	return a.av.Average(ctx, sess, ring)
}

func (a *averagingStep) Describe() string { return fmt.Sprintf("  tau %d", a.av.Tau()) }

// trainCollective trains as one rank of a ring of workers with no
// parameter server, on the task's own address: every rank holds the model
// in a local session, starts from the leader's values, and runs the same
// number of steps; rank 0 ends with the trained model.
func trainCollective(ctx context.Context, r *replica, build collectiveBuild) (*Result, error) {
	cfg := r.cfg
	srv, servers, err := startRingServer(r)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()

	// The ranks' batches: the members of each view read consecutive
	// blocks of one permutation per epoch from a position that rank 0's
	// views carry (ringloop.go), when the input uses Examples; a rank
	// with several GPUs reads a block per tower.
	towers := max(len(cfg.gpuDevices()), 1)
	claims := &claimer{towers: int64(towers)}
	ins := make([]*openInput, towers)
	for i := range ins {
		ic := InputContext{NumReplicas: len(r.reps) * towers, ReplicaIndex: r.index*towers + i, Seed: cfg.Seed, claims: claims, tower: i}
		in, err := openTrainInput(ctx, r.input, ic)
		if err != nil {
			return nil, err
		}
		in.training = true
		defer in.close()
		ins[i] = in
	}
	if claims.block == 0 {
		claims = nil
	}
	r.e.rememberInput(ins[0].spec)
	g, err := buildRank(r, ins[0], claims != nil, build)
	if err != nil {
		return nil, err
	}
	sess, err := session.New(g.s.Graph(), cfg.sessionOptions()...)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	// Every rank initialises its own copy of the model (the members of a
	// view then take the model of the one furthest on); the session runs
	// the hooks around each step.
	mon, err := train.NewMonitoredSession(ctx, train.MonitoredConfig{Session: sess, IsChief: true, InitOp: g.init,
		GlobalStep: g.gs, Hooks: r.trainHooks(), Logger: r.log})
	if err != nil {
		return nil, err
	}

	batch := ins[0].first[0].Shape()[0]
	steps := r.stop.steps(batch, len(r.reps)*towers)
	l := &ringLoop{r: r, ring: srv.Ring(), st: g.st, sess: sess, ms: mon, towers: g.towers, ins: ins, steps: steps, batch: batch,
		setStep: g.setStep, stepsMade: g.stepsMade, gsType: g.gs.DType(), feeds: map[graph.Output]*tensor.Tensor{},
		claims: claims, position: g.pos}
	if claims != nil {
		if err := claims.openTrainedLog(r.who()); err != nil {
			return nil, err
		}
		if claims.trained != nil {
			defer claims.trained.Close()
		}
		claims.run = func(context.Context) (int64, error) { return l.pos + int64(l.rank*batch*towers), nil }
		for _, in := range ins {
			in.skipFirst = true // read to learn the shapes: not trained
		}
	}
	start, err := l.restore(ctx, g.s)
	if err != nil {
		return nil, err
	}
	if err := r.sessionCreated(ctx, sess); err != nil {
		return nil, err
	}
	if l.prog, err = newProgress(r, g.towers[0].spec, g.summaries, batch, len(r.reps)*towers, towers, steps); err != nil {
		return nil, err
	}
	r.log.Info("training", "strategy", cfg.Strategy.String(), "compression", cfg.Compression.String(), "rank", r.index, "ranks", len(r.reps),
		"summation_servers", len(servers), "steps", steps, "batch", batch, "first_step", start)
	err = l.run(ctx)
	if cerr := l.prog.close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if v, ok := l.ring.NewestView(); ok && v.Stop && v.Step-1 < l.steps {
		l.steps = v.Step - 1 // the leader's hooks ended training there
	}
	if err := mon.Close(ctx); err != nil { // the hooks' End
		return nil, err
	}
	return l.end(ctx, g, len(servers) > 0)
}

// startRingServer starts the task's server, which serves the ring (ranks:
// the training tasks) beside its master and worker services, on its one
// address; it returns the summation servers of the ring too.
func startRingServer(r *replica) (*server.Server, []cluster.TaskID, error) {
	cfg := r.cfg
	lis, err := r.listener()
	if err != nil {
		return nil, nil, err
	}
	servers := r.ringServers()
	srv, err := server.New(server.Config{Cluster: cfg.Cluster, Task: cfg.Task, Listener: lis, Logger: cfg.Logger, Ring: r.reps, RingServers: servers, FileRoots: cfg.fileRoots(), RPC: cfg.rpc,
		Metrics: r.e.Metrics(), MetricsEndpoint: r.e.metricsEndpoint()})
	if err != nil {
		return nil, nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, nil, err
	}
	return srv, servers, nil
}

// rankGraph is a rank's training graph.
type rankGraph struct {
	s *graph.Scope
	// towers are the model's, one per GPU of the task (one without).
	towers    []*tower
	st        RingStep
	modelVars []*ops.Variable
	gs        *ops.Variable
	summaries graph.Output
	init      *graph.Node
	// stepsMade/setStep write the global step (the steps made).
	stepsMade graph.Output
	setStep   *graph.Node
	// pos, when the input claims its batches, saves the input position
	// with the model.
	pos *inputPosition
}

// buildRank builds a rank's model (a tower on each of the task's GPUs,
// if it has some, the first holding the variables), the strategy's step
// on the towers' mean loss (so the mean of their gradients), the
// summaries and the user's hooks' nodes.
func buildRank(r *replica, in *openInput, claims bool, build collectiveBuild) (*rankGraph, error) {
	s := graph.NewScope()
	devices, vs := r.cfg.gpuDevices(), s
	if len(devices) == 0 {
		devices = []string{""}
	} else {
		vs = s.WithDevice(devices[0]) // the variables, in the first GPU's memory
	}
	g := &rankGraph{s: s, towers: make([]*tower, len(devices))}
	losses := make([]graph.Output, len(devices))
	var err error
	layers.Towers(vs, devices, func(ts *graph.Scope, i int) {
		if err == nil {
			g.towers[i], err = buildTower(ts, r.e.fn, in.spec, Train)
		}
		if err == nil {
			losses[i] = g.towers[i].spec.Loss
		}
	})
	if err == nil {
		err = s.Err()
	}
	if err != nil {
		return nil, err
	}
	g.modelVars, g.gs = ops.GlobalVariables(s.Graph()), train.CreateGlobalStep(s)
	spec := g.towers[0].spec
	if err := train.ScheduleOverRun(spec.Optimizer, r.stop.steps(in.first[0].Shape()[0], len(r.reps)*len(devices))); err != nil {
		return nil, err
	}
	if g.st, err = build(s, spec.Optimizer, meanLoss(s, losses), ops.TrainableVariables(s.Graph()), g.gs); err != nil {
		return nil, fmt.Errorf("estimator: building the update: %w", err)
	}
	g.summaries = r.modelSummaries(s, ops.TrainableVariables(s.Graph()))
	if err := r.beginHooks(s); err != nil {
		return nil, err
	}
	g.stepsMade = ops.Placeholder(s, "steps_made", g.gs.DType(), tensor.MakeShape())
	g.setStep = ops.Assign(s, g.gs.Value(), g.stepsMade).Node
	if claims {
		g.pos = newInputPosition(s)
	}
	g.init = ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("estimator: building the training graph: %w", err)
	}
	return g, nil
}

// restore sets up the checkpoints and restores the latest, if any: the
// leader saves (rank 0, or the lowest rank alive while rank 0 is away);
// every rank restores the latest checkpoint when it starts, and the
// members of a view take the model of the one furthest on. It returns
// the first step to train.
func (l *ringLoop) restore(ctx context.Context, s *graph.Scope) (int64, error) {
	r, cfg := l.r, l.r.cfg
	start := int64(1)
	defer func() { l.done = start - 1 }()
	if cfg.CheckpointDir == "" {
		return start, nil
	}
	var err error
	if l.saver, err = checkpoint.NewSaver(s, ops.GlobalVariables(s.Graph()), checkpoint.SaverConfig{Dir: cfg.CheckpointDir, Keep: cfg.KeepCheckpoints, Logger: r.log}); err != nil {
		return 0, err
	}
	l.sched = &checkpoint.Schedule{Steps: cfg.SaveCheckpointsSteps, Every: cfg.SaveCheckpointsSecs}
	restored, ok, err := l.saver.RestoreLatest(ctx, l.sess)
	if err != nil {
		return 0, fmt.Errorf("estimator: restoring from %s: %w", cfg.CheckpointDir, err)
	}
	if ok {
		r.log.Info("resumed from a checkpoint", "dir", cfg.CheckpointDir, "global_step", restored)
		start = restored + 1
		if l.position != nil {
			if l.pos, err = l.position.read(ctx, l.sess); err != nil {
				return 0, err
			}
		}
	}
	l.sched.Saved(start-1, time.Now()) // the steps are counted from there
	return start, nil
}

// end ends a rank's training: its result; the final checkpoint and the
// end-of-training marker (the leader at the end, which stops the
// summation servers too, when the ring has some); rank 0 keeps the model.
func (l *ringLoop) end(ctx context.Context, g *rankGraph, servers bool) (*Result, error) {
	r := l.r
	st := l.prog.stats()
	st.lastGlobal = int(l.steps)
	res := r.result(st, l.batch)
	// Each step of the ring trains a batch on each tower of its members.
	res.ClusterExamplesPerSecond = st.examplesPerSecond(l.batch * len(l.towers) * max(l.lastMembers, 1))
	if n := r.stop.ExamplesPerEpoch; n > 0 {
		res.Epochs = float64(l.steps*int64(l.batch*len(l.towers)*len(r.reps))) / float64(n)
	}
	last := r.chief() || l.ledLast
	// The ranks hold the same model: the leader at the end saves it, and
	// rank 0 keeps it (for evaluation and export).
	if l.saver != nil && last {
		if err := l.save(ctx, l.steps); err != nil { // the final checkpoint
			return nil, err
		}
	}
	if r.chief() {
		if err := l.setGlobalStep(ctx, l.steps); err != nil {
			return nil, err
		}
		if err := r.e.keepTrained(ctx, l.sess, g.modelVars, g.gs); err != nil {
			return nil, err
		}
	}
	if last {
		r.markEnded(ctx, res)
	}
	if servers && last {
		shutdownCluster(ctx, r, false) // the summation servers' work is done
	}
	res.WallSeconds = time.Since(r.started).Seconds()
	return res, nil
}
