package estimator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// trainOnPS is the training loop of the parameter-server strategies, and
// of a single process: build the towers and the update (the variables on
// the ps tasks), ready the model through a monitored session (the chief
// initialises or restores; the others wait), train to the step limit, and
// end: the chief saves the final checkpoint, keeps the trained variables,
// waits for the other replicas and stops the cluster.
func trainOnPS(ctx context.Context, r *replica, plan psPlan) (*Result, error) {
	p := &psRun{r: r, plan: plan, savedAt: -1}
	defer p.cleanUp()
	if err := p.place(); err != nil {
		return nil, err
	}
	if err := p.openInputs(ctx); err != nil {
		return nil, err
	}
	if err := p.buildTowers(); err != nil {
		return nil, err
	}
	if err := p.buildUpdate(); err != nil {
		return nil, err
	}
	if err := p.buildBookkeeping(); err != nil {
		return nil, err
	}
	if res, err := p.openSession(ctx); res != nil || err != nil {
		return res, err
	}
	if err := p.begin(ctx); err != nil {
		return nil, err
	}
	l := &loop{
		r: r, ms: p.ms, towers: p.towers, ins: p.ins, trainOp: p.trainOp, loss: p.loss, coord: plan.coordinator, claims: p.claims,
		perStep: r.batchesPerStep(), summaries: p.summaries, globalStep: p.globalStep.Value(), stop: p.stop,
	}
	st, err := l.run(ctx)
	if err != nil {
		return nil, err
	}
	return p.end(ctx, st, l)
}

// psRun is one replica's training on parameter servers (or in a single
// process), built and run by trainOnPS in steps.
type psRun struct {
	r    *replica
	plan psPlan
	// cleanUps run when training ends, the last added first.
	cleanUps []func()

	s   *graph.Scope
	srv *server.Server
	// towerDevices are the towers' devices ("" for the default), and
	// filters the devices the session sees (nil: all).
	towerDevices, filters []string
	ins                   []*openInput
	claims                *claimer

	towers     []*tower
	modelFrom  int // the first node of the towers
	modelVars  []*ops.Variable
	trainable  []*ops.Variable
	globalStep *ops.Variable
	trainOp    *graph.Node
	// loss is the step's: the towers' mean, which the progress reports
	// and the NaN guard watches.
	loss graph.Output

	// done holds one completion flag per replica, on the ps tasks: the
	// chief stops the cluster once every replica still alive has finished.
	done               []*ops.Variable
	markDone, initDone *graph.Node
	stop               *stopSignal
	saver              *checkpoint.Saver
	deputy             *deputyHook
	summaries          graph.Output
	cont               *assignment
	initOp             *graph.Node
	ready              graph.Output
	numVars            int

	sess            *session.Session
	ms              *train.MonitoredSession
	savedAt         int64 // the step of the last checkpoint saved here
	endCoordination func(context.Context)
}

func (p *psRun) onEnd(f func()) { p.cleanUps = append(p.cleanUps, f) }

func (p *psRun) cleanUp() {
	for i := len(p.cleanUps) - 1; i >= 0; i-- {
		p.cleanUps[i]()
	}
}

// place starts the task's server in a cluster and sets where the towers
// and the variables go: one tower, or one per accelerator
// (RunConfig.Devices); with in-graph replication one per worker, or per
// accelerator of each worker.
func (p *psRun) place() error {
	r, cfg := p.r, p.r.cfg
	p.s = graph.NewScope()
	p.towerDevices = []string{""}
	gpus := cfg.gpuDevices()
	if len(gpus) > 0 {
		p.towerDevices = slices.Clone(gpus)
	}
	if cfg.Cluster == nil {
		return nil
	}
	srv, err := r.startServer()
	if err != nil {
		return err
	}
	p.srv = srv
	p.onEnd(srv.Stop)
	self := cfg.Task.String()
	workerDevice := self
	if len(gpus) == 1 {
		workerDevice, p.towerDevices = self+gpus[0], []string{""}
	}
	p.s = p.s.WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
		PSTasks: cfg.Cluster.NumTasks("ps"), WorkerDevice: workerDevice, Strategy: cfg.PSPlacement,
	}))
	p.filters = []string{"/job:ps", self}
	if len(gpus) > 1 {
		for i, d := range p.towerDevices {
			p.towerDevices[i] = self + d
		}
	}
	if p.plan.inGraph {
		// A tower per worker, or per accelerator of each worker: the
		// workers are taken to have the chief's.
		p.towerDevices, p.filters = nil, nil
		for _, t := range r.reps {
			if len(gpus) == 0 {
				p.towerDevices = append(p.towerDevices, t.String())
			}
			for _, d := range gpus {
				p.towerDevices = append(p.towerDevices, t.String()+d)
			}
		}
	}
	return nil
}

// openInputs opens one input per tower: a replica's own shard, or each
// tower's. The input may claim its batches (InputContext.Examples): one
// claim per step for every tower.
func (p *psRun) openInputs(ctx context.Context) error {
	r, cfg := p.r, p.r.cfg
	p.ins = make([]*openInput, len(p.towerDevices))
	p.claims = &claimer{towers: int64(len(p.towerDevices))}
	for i := range p.towerDevices {
		ic := InputContext{NumReplicas: r.numReplicas(), ReplicaIndex: r.index, Seed: cfg.Seed, claims: p.claims, tower: i}
		if p.plan.inGraph {
			ic.NumReplicas, ic.ReplicaIndex = max(ic.NumReplicas, len(p.towerDevices)), i
		}
		in, err := openTrainInput(ctx, r.input, ic)
		if err != nil {
			return err
		}
		in.training = true
		p.onEnd(in.close)
		p.ins[i] = in
	}
	if p.claims.block == 0 {
		p.claims = nil // the input function shards by itself
	}
	r.e.rememberInput(p.ins[0].spec)
	return nil
}

// buildTowers builds the model once per tower, the towers after the first
// reusing its variables.
func (p *psRun) buildTowers() error {
	r, cfg, s := p.r, p.r.cfg, p.s
	p.towers = make([]*tower, len(p.towerDevices))
	p.modelFrom = s.Graph().NumNodes()
	for i, d := range p.towerDevices {
		ts := s
		if len(p.towerDevices) > 1 {
			ts = s.NameScope(fmt.Sprintf("tower_%d", i))
			if i > 0 {
				ts = ts.ReuseVariables()
			}
		}
		if d != "" && cfg.Cluster == nil {
			ts = ts.WithDevice(d) // its variables stay on the host: no kernel on a device
		} else if d != "" {
			// The tower's ops on its task, its variables (made by the
			// first) on the ps tasks: WithDevice(d) would pin the
			// variables to the first tower's task too.
			ts = ts.WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
				PSTasks: cfg.Cluster.NumTasks("ps"), WorkerDevice: d, Strategy: cfg.PSPlacement,
			}))
		}
		t, err := buildTower(ts, r.e.fn, p.ins[0].spec, Train)
		if err != nil {
			return err
		}
		p.towers[i] = t
		if i == 0 {
			p.modelVars = ops.GlobalVariables(s.Graph())
		}
	}
	p.trainable = ops.TrainableVariables(s.Graph())
	if len(p.trainable) == 0 {
		return fmt.Errorf("estimator: the model function created no trainable variable")
	}
	return nil
}

// buildUpdate builds the update of the model from the towers' losses
// (their mean gradients with several towers), through the plan's and the
// compression's optimizer wrappers, and the claims of the next batches.
func (p *psRun) buildUpdate() error {
	r, cfg, s, plan := p.r, p.r.cfg, p.s, p.plan
	p.globalStep = train.CreateGlobalStep(s)
	opt := p.towers[0].spec.Optimizer
	if err := train.ScheduleOverRun(opt, r.stop.steps(p.ins[0].first[0].Shape()[0], r.batchesPerStep())); err != nil {
		return err
	}
	if plan.optimizer != nil {
		opt = plan.optimizer(opt)
	}
	opt = cfg.Compression.pushOptimizer(opt)
	if plan.build != nil {
		plan.build(s)
	}
	losses := make([]graph.Output, len(p.towers))
	for i, t := range p.towers {
		losses[i] = t.spec.Loss
	}
	p.loss = meanLoss(s, losses)
	var err error
	if len(p.towers) == 1 {
		p.trainOp, err = train.Minimize(s, opt, p.loss, p.globalStep)
	} else {
		p.trainOp, err = averagedUpdate(s, opt, losses, p.trainable, p.globalStep)
	}
	if err != nil {
		return fmt.Errorf("estimator: building the update: %w", err)
	}
	if p.claims != nil {
		var after *graph.Node
		if plan.claimAfter != nil {
			after = plan.claimAfter()
		}
		p.claims.build(s, p.globalStep, after)
	}
	markHalfPulls(s.Graph(), p.modelFrom, cfg.PullCompression)
	return nil
}

// buildBookkeeping builds what surrounds the update: the replicas'
// completion flags and the chief's stop flag, the savers, the summaries,
// the user's hooks' nodes, and the initialisation.
func (p *psRun) buildBookkeeping() error {
	r, cfg, s := p.r, p.r.cfg, p.s
	if cfg.Cluster != nil && !p.plan.inGraph {
		ds := s.SubScope("replica_done")
		for _, t := range r.reps {
			p.done = append(p.done, ops.NewVariable(ds, fmt.Sprintf("%s_%d", t.Job, t.Index), tensor.Float32, nil, ops.ZerosInit(), ops.NotTrainable()))
		}
		p.markDone = ops.Assign(s, p.done[r.index].Value(), ops.Scalar(s, tensor.Float32, 1)).Node
		p.stop = newStopSignal(s)
		p.initDone = ops.VariablesInitializer(s, append(p.done, p.stop.v)...)
	}
	if err := p.buildSavers(); err != nil {
		return err
	}
	p.summaries = r.modelSummaries(s, p.trainable)
	if err := r.beginHooks(s); err != nil {
		return err
	}
	if r.chief() {
		p.cont = r.e.continuation(s, p.modelVars, p.globalStep)
	}
	p.initOp = ops.GlobalVariablesInitializer(s)
	p.ready, p.numVars = train.ReadyOp(s, ops.GlobalVariables(s.Graph()))
	if err := s.Err(); err != nil {
		return fmt.Errorf("estimator: building the training graph: %w", err)
	}
	return nil
}

// buildSavers builds the chief's saver of the model's variables (not the
// flags) and, when asynchronous replicas train on while the chief is
// away, a deputy's (deputy.go).
func (p *psRun) buildSavers() error {
	r, cfg, plan := p.r, p.r.cfg, p.plan
	deputies := cfg.Cluster != nil && cfg.CheckpointDir != "" && plan.recoverable && plan.coordinator == nil && !plan.inGraph && len(r.reps) > 1
	if cfg.CheckpointDir == "" || !(r.chief() || deputies) {
		return nil
	}
	skip := map[*graph.Node]bool{}
	for _, v := range p.done {
		skip[v.Node()] = true
	}
	if p.stop != nil {
		skip[p.stop.v.Node()] = true
	}
	var vars []*ops.Variable
	for _, v := range ops.GlobalVariables(p.s.Graph()) {
		if !skip[v.Node()] {
			vars = append(vars, v)
		}
	}
	var err error
	p.saver, p.deputy, err = newSavers(p.s, r, vars, deputies)
	return err
}

// openSession opens the session (through the task's master in a
// cluster), waits for the tasks it uses, and readies the model with a
// monitored session: the chief initialises or restores, the others wait.
// A replica that finds training ended while it was away returns its
// result.
func (p *psRun) openSession(ctx context.Context) (*Result, error) {
	r, cfg := p.r, p.r.cfg
	var err error
	if p.srv != nil {
		p.sess, err = session.New(p.s.Graph(), session.WithMaster(p.srv.Master(), &pb.SessionConfig{
			DeviceFilters: p.filters, DefaultDevice: cfg.Task.String(), StepTimeoutMs: cfg.StepTimeout.Milliseconds(),
		}))
	} else {
		p.sess, err = session.New(p.s.Graph(), cfg.sessionOptions()...)
	}
	if err != nil {
		return nil, err
	}
	p.onEnd(func() { p.sess.Close() })
	mcfg := p.monitoredConfig(ctx)
	if p.srv != nil {
		if res, err := p.waitForCluster(ctx, &mcfg); res != nil || err != nil {
			return res, err
		}
	}
	mctx, cancel := context.WithTimeout(ctx, cfg.WaitTimeout)
	p.ms, err = train.NewMonitoredSession(mctx, mcfg)
	cancel()
	if err != nil {
		return nil, err
	}
	if p.cont != nil && p.ms.RestoredStep < 0 { // no checkpoint: go on from the model trained before
		if _, err := p.sess.Run(ctx, p.cont.feeds, nil, p.cont.targets); err != nil {
			return nil, fmt.Errorf("estimator: continuing from the model trained before: %w", err)
		}
	}
	return nil, r.sessionCreated(ctx, p.sess)
}

// monitoredConfig is the monitored session's: the NaN guard, the periodic
// checkpoints, a deputy's saves, then the user's hooks.
func (p *psRun) monitoredConfig(ctx context.Context) train.MonitoredConfig {
	r, cfg, log := p.r, p.r.cfg, p.r.log
	mcfg := train.MonitoredConfig{
		Session: p.sess, IsChief: r.chief(), InitOp: p.initOp, AfterRestore: p.initDone, Saver: p.saver,
		Ready: p.ready, Variables: p.numVars, ReadyTimeout: cfg.WaitTimeout, GlobalStep: p.globalStep, Logger: log,
		Hooks: []train.Hook{train.NanGuardHook{Loss: p.loss}},
	}
	if p.saver != nil {
		h := r.observeCheckpoints(&train.CheckpointHook{Saver: p.saver, Schedule: &checkpoint.Schedule{
			Steps: cfg.SaveCheckpointsSteps, Every: cfg.SaveCheckpointsSecs,
		}, Logger: log})
		observe := h.Saved
		h.Saved = func(step int64, took time.Duration) {
			p.savedAt = step
			if observe != nil {
				observe(step, took)
			}
		}
		mcfg.Hooks = append(mcfg.Hooks, periodicSaves{h})
	}
	if p.deputy != nil {
		mcfg.Hooks = append(mcfg.Hooks, p.deputy)
		p.onEnd(p.deputy.elect(ctx, r))
	}
	mcfg.Hooks = append(mcfg.Hooks, r.trainHooks()...)
	return mcfg
}

// waitForCluster waits for the tasks the session uses: the ps tasks, and
// with in-graph replication the other replicas; a missing one is named
// after WaitTimeout, not left to the step deadline. A replica that waits
// stops waiting once the chief has marked the end of training
// (ended.go). With checkpoints, a recoverable plan's session waits so for
// a lost task too.
func (p *psRun) waitForCluster(ctx context.Context, mcfg *train.MonitoredConfig) (*Result, error) {
	r, cfg, log := p.r, p.r.cfg, p.r.log
	var tasks []string
	for _, t := range cfg.Cluster.Tasks() {
		if t.Job == "ps" || p.plan.inGraph && t != cfg.Task && slices.Contains(r.reps, t) {
			tasks = append(tasks, t.String())
		}
	}
	target := r.stop.steps(p.ins[0].first[0].Shape()[0], r.batchesPerStep())
	wait := func(ctx context.Context) error {
		return untilTrainingEnds(ctx, cfg.CheckpointDir, target, endedPoll, func(ctx context.Context) error {
			return rpc.WaitForTasks(ctx, p.srv.Workers(), tasks, log)
		})
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.WaitTimeout)
	err := wait(wctx)
	cancel()
	if errors.Is(err, errTrainingEnded) && !r.chief() {
		log.Info("training ended while this replica was away; exiting", "task", cfg.Task.String(), "err", err)
		return &Result{Task: cfg.Task.String(), Strategy: cfg.Strategy.String(), WallSeconds: time.Since(r.started).Seconds()}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("estimator: %s: waiting for the cluster (wait timeout %v): %w", cfg.Task, cfg.WaitTimeout, err)
	}
	if p.plan.recoverable && cfg.CheckpointDir != "" {
		mcfg.WaitForCluster = wait
		if c := p.plan.coordinator; c != nil {
			sess := p.sess
			mcfg.AfterRecovery = func(ctx context.Context) error { return c.afterRecovery(ctx, sess) }
		}
	}
	return nil, nil
}

// begin readies the batches' claims and the plan's coordination before
// the first step, and watches the cluster's tasks.
func (p *psRun) begin(ctx context.Context) error {
	r, cfg, sess, claims := p.r, p.r.cfg, p.sess, p.claims
	if claims != nil {
		if err := claims.openTrainedLog(r.who()); err != nil {
			return err
		}
		if claims.trained != nil {
			p.onEnd(func() { claims.trained.Close() })
		}
		claims.run = func(ctx context.Context) (int64, error) {
			out, err := sess.Run(ctx, nil, []graph.Output{claims.first}, nil)
			if err != nil {
				return 0, err
			}
			return int64(out[0].Float64At(0)) - claims.span(), nil
		}
		for _, in := range p.ins {
			in.skipFirst = true // read to learn the shapes, not claimed: not trained
		}
	}
	if c := p.plan.coordinator; c != nil {
		var err error
		if p.endCoordination, err = c.begin(ctx, sess, r.chief(), r.log); err != nil {
			return err
		}
		p.onEnd(c.stop) // whatever way the loop ends
	}
	if cfg.Cluster != nil {
		// Every lost task is named in the logs, whatever the strategy.
		p.onEnd(watchCluster(ctx, r, p.plan.coordinator == nil))
	}
	return nil
}

// end ends a replica's training after its loop: it reports its completion
// on the ps tasks; the chief then ends the coordination, waits for the
// other replicas, keeps the trained model, saves the final checkpoint,
// marks the end of training and stops the cluster.
func (p *psRun) end(ctx context.Context, st loopStats, l *loop) (*Result, error) {
	r, cfg, log, sess := p.r, p.r.cfg, p.r.log, p.sess
	if st.ended { // the ps tasks are gone: nothing to report to them
		return r.result(st, l.batch), nil
	}
	if p.markDone != nil {
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{p.markDone}); err != nil {
			// Resumed after the chief ended training: its last step
			// went through before the ps tasks left, not the report.
			if step, ok := trainingEnded(cfg.CheckpointDir, l.target); ok && !r.chief() {
				log.Info("training ended while this replica was away; exiting", "task", cfg.Task.String(), "global_step", step, "err", err)
				return r.result(st, l.batch), nil
			}
			return nil, fmt.Errorf("estimator: %s: reporting completion: %w", cfg.Task, err)
		}
	}
	res := r.result(st, l.batch)
	if !r.chief() {
		if err := p.ms.Close(ctx); err != nil {
			return nil, err
		}
		if gs, err := sess.Run(ctx, nil, []graph.Output{p.globalStep.Value()}, nil); err == nil {
			res.GlobalStep = int64(gs[0].Float64At(0))
		}
		return res, nil // the session closes before the chief stops the ps tasks
	}
	if p.endCoordination != nil {
		p.endCoordination(ctx)
	}
	// The other replicas first: once they have finished, nothing updates
	// the model, so the final checkpoint is the trained model, and a run
	// on the finished directory evaluates what this one did.
	if p.done != nil {
		waitForReplicas(ctx, sess, r, p.done)
	}
	if err := p.ms.Close(ctx); err != nil {
		return nil, err
	}
	if err := r.e.keepTrained(ctx, sess, p.modelVars, p.globalStep); err != nil {
		return nil, err
	}
	res.GlobalStep = r.e.trainedStep()
	if err := p.finalCheckpoint(ctx, res.GlobalStep); err != nil {
		return nil, err
	}
	if cfg.Cluster != nil {
		sess.Close() // while every task still answers
		res.PSVariables = psVariables(ctx, r)
	}
	r.markEnded(ctx, res)
	if cfg.Cluster != nil {
		shutdownCluster(ctx, r, p.plan.inGraph)
	}
	return res, nil
}

// finalCheckpoint saves the chief's final checkpoint, at the global step
// the model is at (the last step's estimate of it may lag behind the
// others' steps), unless one was saved or restored there.
func (p *psRun) finalCheckpoint(ctx context.Context, step int64) error {
	if p.saver == nil || step == p.savedAt || step == p.ms.RestoredStep {
		return nil
	}
	start := time.Now()
	prefix, err := p.saver.Save(ctx, p.sess, step)
	if err != nil {
		return fmt.Errorf("estimator: the final checkpoint: %w", err)
	}
	p.r.observeCheckpoint(time.Since(start))
	p.r.log.Info("saved a checkpoint", "prefix", prefix, "global_step", step)
	return nil
}

// periodicSaves is a checkpoint hook without its save at the end, which
// trainOnPS makes itself once the other replicas have finished.
type periodicSaves struct{ *train.CheckpointHook }

func (periodicSaves) End(context.Context, *train.MonitoredSession) error { return nil }

// openInput is an input being read: its iterator and its first batch,
// taken to learn the features' dtypes and shapes.
type openInput struct {
	it    *data.Iterator
	first []*tensor.Tensor
	spec  inputSpec
	// skipFirst: first only told the shapes; next does not return it.
	skipFirst bool
	// training: the input feeds training steps, so its end is an error
	// (ErrInputEnded) rather than the end of an evaluation.
	training bool
	// read counts the batches next returned.
	read int
}

// ErrInputEnded is wrapped (with io.EOF) by the error of a training step
// whose input ended before training reached its last step: a dataset
// batched but not repeated, say.
var ErrInputEnded = errors.New("estimator: the training input ended")

// openTrainInput calls fn and reads the first batch.
func openTrainInput(ctx context.Context, fn InputFn, ic InputContext) (*openInput, error) {
	in, err := fn(ic)
	if err != nil {
		return nil, fmt.Errorf("estimator: the input function: %w", err)
	}
	if in == nil || in.Dataset == nil {
		return nil, fmt.Errorf("estimator: the input function returned no dataset")
	}
	if err := in.Dataset.Err(); err != nil {
		return nil, fmt.Errorf("estimator: the input function's dataset: %w", err)
	}
	it := in.Dataset.Iterator(ctx)
	first, err := it.Next()
	if err != nil {
		it.Close()
		return nil, fmt.Errorf("estimator: reading the first batch of the input: %w", err)
	}
	spec, err := specOf(in, first)
	if err != nil {
		it.Close()
		return nil, err
	}
	return &openInput{it: it, first: first, spec: spec}, nil
}

// next returns the next batch (the first one first).
func (in *openInput) next() ([]*tensor.Tensor, error) {
	if b := in.first; b != nil && !in.skipFirst {
		in.first = nil
		in.read++
		return b, nil
	}
	b, err := in.it.Next()
	switch {
	case err == nil:
		in.read++
	case in.training && errors.Is(err, io.EOF):
		err = fmt.Errorf("%w after %d batches, before the last step of training: make it repeat (Dataset.Repeat(-1)), or read it with InputContext.Examples, which repeats, and end training with Stop (%w)",
			ErrInputEnded, in.read, err)
	}
	return b, err
}

func (in *openInput) close() { in.it.Close() }
