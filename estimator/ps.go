package estimator

import (
	"context"
	"errors"
	"fmt"
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
	cfg, log := r.cfg, r.log
	s := graph.NewScope()
	// One tower, or one per accelerator (RunConfig.Devices).
	towerDevices := []string{""}
	gpus := cfg.gpuDevices()
	if len(gpus) > 0 {
		towerDevices = slices.Clone(gpus)
	}
	var filters []string
	var srv *server.Server
	if cfg.Cluster != nil {
		var err error
		if srv, err = r.startServer(); err != nil {
			return nil, err
		}
		defer srv.Stop()
		self := cfg.Task.String()
		workerDevice := self
		if len(gpus) == 1 {
			workerDevice, towerDevices = self+gpus[0], []string{""}
		}
		s = s.WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
			PSTasks: cfg.Cluster.NumTasks("ps"), WorkerDevice: workerDevice, Strategy: cfg.PSPlacement,
		}))
		filters = []string{"/job:ps", self}
		if len(gpus) > 1 {
			for i, d := range towerDevices {
				towerDevices[i] = self + d
			}
		}
		if plan.inGraph {
			// A tower per worker, or per accelerator of each worker:
			// the workers are taken to have the chief's.
			towerDevices, filters = nil, nil
			for _, t := range r.reps {
				if len(gpus) == 0 {
					towerDevices = append(towerDevices, t.String())
				}
				for _, d := range gpus {
					towerDevices = append(towerDevices, t.String()+d)
				}
			}
		}
	}

	// One input per tower: a replica's own shard, or each tower's. The
	// input may claim its batches (InputContext.Examples): one claim per
	// step for every tower.
	ins := make([]*openInput, len(towerDevices))
	claims := &claimer{towers: int64(len(towerDevices))}
	for i := range towerDevices {
		ic := InputContext{NumReplicas: r.numReplicas(), ReplicaIndex: r.index, Seed: cfg.Seed, claims: claims, tower: i}
		if plan.inGraph {
			ic.NumReplicas, ic.ReplicaIndex = max(ic.NumReplicas, len(towerDevices)), i
		}
		in, err := openTrainInput(ctx, r.input, ic)
		if err != nil {
			return nil, err
		}
		defer in.close()
		ins[i] = in
	}
	if claims.block == 0 {
		claims = nil // the input function shards by itself
	}
	spec := ins[0].spec
	r.e.rememberInput(spec)

	towers := make([]*tower, len(towerDevices))
	modelFrom := s.Graph().NumNodes() // the first node of the towers
	var modelVars []*ops.Variable
	for i, d := range towerDevices {
		ts := s
		if len(towerDevices) > 1 {
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
		t, err := buildTower(ts, r.e.fn, spec, Train)
		if err != nil {
			return nil, err
		}
		towers[i] = t
		if i == 0 {
			modelVars = ops.GlobalVariables(s.Graph())
		}
	}
	trainable := ops.TrainableVariables(s.Graph())
	if len(trainable) == 0 {
		return nil, fmt.Errorf("estimator: the model function created no trainable variable")
	}
	globalStep := train.CreateGlobalStep(s)
	opt := towers[0].spec.Optimizer
	if err := train.ScheduleOverRun(opt, r.stop.steps(ins[0].first[0].Shape()[0], cfg.Strategy.Update(r.numReplicas()).Batches)); err != nil {
		return nil, err
	}
	if plan.optimizer != nil {
		opt = plan.optimizer(opt)
	}
	opt = cfg.Compression.pushOptimizer(opt)
	if plan.build != nil {
		plan.build(s)
	}
	var trainOp *graph.Node
	var err error
	if len(towers) == 1 {
		trainOp, err = train.Minimize(s, opt, towers[0].spec.Loss, globalStep)
	} else {
		losses := make([]graph.Output, len(towers))
		for i, t := range towers {
			losses[i] = t.spec.Loss
		}
		trainOp, err = averagedUpdate(s, opt, losses, trainable, globalStep)
	}
	if err != nil {
		return nil, fmt.Errorf("estimator: building the update: %w", err)
	}
	if claims != nil {
		var after *graph.Node
		if plan.claimAfter != nil {
			after = plan.claimAfter()
		}
		claims.build(s, globalStep, after)
	}
	markHalfPulls(s.Graph(), modelFrom, cfg.PullCompression)

	// One completion flag per replica, on the ps tasks: the chief stops the
	// cluster once every replica that is still alive has finished.
	var done []*ops.Variable
	var markDone, initDone *graph.Node
	var stop *stopSignal
	if cfg.Cluster != nil && !plan.inGraph {
		ds := s.SubScope("replica_done")
		for _, t := range r.reps {
			done = append(done, ops.NewVariable(ds, fmt.Sprintf("%s_%d", t.Job, t.Index), tensor.Float32, nil, ops.ZerosInit(), ops.NotTrainable()))
		}
		markDone = ops.Assign(s, done[r.index].Value(), ops.Scalar(s, tensor.Float32, 1)).Node
		stop = newStopSignal(s)
		initDone = ops.VariablesInitializer(s, append(done, stop.v)...)
	}
	var saver *checkpoint.Saver
	// Asynchronous replicas train on while the chief is away: a deputy
	// saves too (deputy.go).
	deputies := cfg.Cluster != nil && cfg.CheckpointDir != "" && plan.recoverable && plan.coordinator == nil && !plan.inGraph && len(r.reps) > 1
	var deputy *deputyHook
	if cfg.CheckpointDir != "" && (r.chief() || deputies) {
		skip := map[*graph.Node]bool{}
		for _, v := range done {
			skip[v.Node()] = true
		}
		if stop != nil {
			skip[stop.v.Node()] = true
		}
		var vars []*ops.Variable
		for _, v := range ops.GlobalVariables(s.Graph()) {
			if !skip[v.Node()] {
				vars = append(vars, v)
			}
		}
		if saver, deputy, err = newSavers(s, r, vars, deputies); err != nil {
			return nil, err
		}
	}
	summaries := r.modelSummaries(s, trainable)
	if err := r.beginHooks(s); err != nil {
		return nil, err
	}
	var cont *assignment
	if r.chief() {
		cont = r.e.continuation(s, modelVars, globalStep)
	}
	initOp := ops.GlobalVariablesInitializer(s)
	ready, numVars := train.ReadyOp(s, ops.GlobalVariables(s.Graph()))
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("estimator: building the training graph: %w", err)
	}

	var sess *session.Session
	if srv != nil {
		sess, err = session.New(s.Graph(), session.WithMaster(srv.Master(), &pb.SessionConfig{
			DeviceFilters: filters, DefaultDevice: cfg.Task.String(), StepTimeoutMs: cfg.StepTimeout.Milliseconds(),
		}))
	} else {
		sess, err = session.New(s.Graph(), cfg.sessionOptions()...)
	}
	if err != nil {
		return nil, err
	}
	defer sess.Close()

	mcfg := train.MonitoredConfig{
		Session: sess, IsChief: r.chief(), InitOp: initOp, AfterRestore: initDone, Saver: saver,
		Ready: ready, Variables: numVars, ReadyTimeout: cfg.WaitTimeout, GlobalStep: globalStep, Logger: log,
		Hooks: []train.Hook{train.NanGuardHook{Loss: towers[0].spec.Loss}},
	}
	savedAt := int64(-1) // the step of the last checkpoint saved here
	if saver != nil {
		h := r.observeCheckpoints(&train.CheckpointHook{Saver: saver, Schedule: &checkpoint.Schedule{
			Steps: cfg.SaveCheckpointsSteps, Every: cfg.SaveCheckpointsSecs,
		}, Logger: log})
		observe := h.Saved
		h.Saved = func(step int64, took time.Duration) {
			savedAt = step
			if observe != nil {
				observe(step, took)
			}
		}
		mcfg.Hooks = append(mcfg.Hooks, periodicSaves{h})
	}
	if deputy != nil {
		mcfg.Hooks = append(mcfg.Hooks, deputy)
		defer deputy.elect(ctx, r)()
	}
	mcfg.Hooks = append(mcfg.Hooks, r.trainHooks()...)
	if srv != nil {
		// The tasks the session uses: the ps tasks, and with in-graph
		// replication the other replicas. A missing one is named after
		// WaitTimeout, not left to the step deadline.
		var tasks []string
		for _, t := range cfg.Cluster.Tasks() {
			if t.Job == "ps" || plan.inGraph && t != cfg.Task && slices.Contains(r.reps, t) {
				tasks = append(tasks, t.String())
			}
		}
		// A replica that waits for the cluster stops waiting once the
		// chief has marked the end of training (ended.go).
		target := r.stop.steps(ins[0].first[0].Shape()[0], r.cfg.Strategy.Update(r.numReplicas()).Batches)
		wait := func(ctx context.Context) error {
			return untilTrainingEnds(ctx, cfg.CheckpointDir, target, endedPoll, func(ctx context.Context) error {
				return rpc.WaitForTasks(ctx, srv.Workers(), tasks, log)
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
		if plan.recoverable && cfg.CheckpointDir != "" {
			mcfg.WaitForCluster = wait
			if c := plan.coordinator; c != nil {
				mcfg.AfterRecovery = func(ctx context.Context) error { return c.afterRecovery(ctx, sess) }
			}
		}
	}
	mctx, cancel := context.WithTimeout(ctx, cfg.WaitTimeout)
	ms, err := train.NewMonitoredSession(mctx, mcfg)
	cancel()
	if err != nil {
		return nil, err
	}
	if cont != nil && ms.RestoredStep < 0 { // no checkpoint: go on from the model trained before
		if _, err := sess.Run(ctx, cont.feeds, nil, cont.targets); err != nil {
			return nil, fmt.Errorf("estimator: continuing from the model trained before: %w", err)
		}
	}
	if err := r.sessionCreated(ctx, sess); err != nil {
		return nil, err
	}
	if claims != nil {
		if err := claims.openTrainedLog(r.who()); err != nil {
			return nil, err
		}
		if claims.trained != nil {
			defer claims.trained.Close()
		}
		claims.run = func(ctx context.Context) (int64, error) {
			out, err := sess.Run(ctx, nil, []graph.Output{claims.first}, nil)
			if err != nil {
				return 0, err
			}
			return int64(out[0].Float64At(0)) - claims.span(), nil
		}
		for _, in := range ins {
			in.skipFirst = true // read to learn the shapes, not claimed: not trained
		}
	}
	var endCoordination func(context.Context)
	if plan.coordinator != nil {
		if endCoordination, err = plan.coordinator.begin(ctx, sess, r.chief(), log); err != nil {
			return nil, err
		}
		defer plan.coordinator.stop() // whatever way the loop ends
	}
	if cfg.Cluster != nil {
		// Every lost task is named in the logs, whatever the strategy.
		defer watchCluster(ctx, r, plan.coordinator == nil)()
	}

	l := &loop{
		r: r, ms: ms, towers: towers, ins: ins, trainOp: trainOp, coord: plan.coordinator, claims: claims,
		perStep: r.cfg.Strategy.Update(r.numReplicas()).Batches, summaries: summaries, globalStep: globalStep.Value(), stop: stop,
	}
	st, err := l.run(ctx)
	if err != nil {
		return nil, err
	}
	if st.ended { // the ps tasks are gone: nothing to report to them
		return r.result(st, l.batch), nil
	}
	if markDone != nil {
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{markDone}); err != nil {
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
		if err := ms.Close(ctx); err != nil {
			return nil, err
		}
		if gs, err := sess.Run(ctx, nil, []graph.Output{globalStep.Value()}, nil); err == nil {
			res.GlobalStep = int64(gs[0].Float64At(0))
		}
		return res, nil // the session closes before the chief stops the ps tasks
	}
	if endCoordination != nil {
		endCoordination(ctx)
	}
	// The other replicas first: once they have finished, nothing updates
	// the model, so the final checkpoint is the trained model, and a run
	// on the finished directory evaluates what this one did.
	if done != nil {
		waitForReplicas(ctx, sess, r, done)
	}
	if err := ms.Close(ctx); err != nil {
		return nil, err
	}
	if err := r.e.keepTrained(ctx, sess, modelVars, globalStep); err != nil {
		return nil, err
	}
	res.GlobalStep = r.e.trainedStep()
	if saver != nil && res.GlobalStep != savedAt && res.GlobalStep != ms.RestoredStep {
		// The final checkpoint, at the global step the model is at (the
		// last step's estimate of it may lag behind the others' steps).
		start := time.Now()
		prefix, err := saver.Save(ctx, sess, res.GlobalStep)
		if err != nil {
			return nil, fmt.Errorf("estimator: the final checkpoint: %w", err)
		}
		r.observeCheckpoint(time.Since(start))
		log.Info("saved a checkpoint", "prefix", prefix, "global_step", res.GlobalStep)
	}
	if cfg.Cluster != nil {
		sess.Close() // while every task still answers
		res.PSVariables = psVariables(ctx, r)
	}
	if cfg.CheckpointDir != "" {
		// After the final checkpoint and before the ps tasks go: a replica
		// that cannot reach them then knows why, and a chief started again
		// on the directory finishes here (ended.go).
		if err := markTrainingEnded(cfg.CheckpointDir, res.GlobalStep, res); err != nil {
			log.Warn("a replica away now will wait for the ps tasks until its wait timeout, and a run on this directory trains again", "err", err)
		} else {
			r.holdAfterEnded(ctx)
		}
	}
	if cfg.Cluster != nil {
		shutdownCluster(ctx, r, plan.inGraph)
	}
	return res, nil
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
}

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
		return b, nil
	}
	return in.it.Next()
}

func (in *openInput) close() { in.it.Close() }
