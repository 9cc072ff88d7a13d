package estimator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/localcluster"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/train"
)

// Strategy is how the replicas of a cluster share one model. Each
// strategy is one implementation of this interface; RunConfig.Strategy
// chooses it. Code outside a strategy reads its answers (Validate, Update,
// Recovery) rather than asking which strategy it is. Replica builds a
// task's part in training: a user's strategy returns a *PSReplica, which
// trains on parameter servers through the shared training loop with
// coordination of its own (examples/customstrategy shows one).
type Strategy interface {
	// String names the strategy in logs and results.
	String() string
	// Validate checks the strategy against the cluster (nil: a single
	// process) before anything starts.
	Validate(c *cluster.Spec) error
	// Update is the shape of one update of the model with n replicas.
	Update(n int) Update
	// Recovery is what the strategy survives: what a supervisor restarts.
	Recovery() Recovery
	// Replica returns the part in training of the replica that info
	// describes.
	Replica(info ReplicaInfo) (Replica, error)
}

// Update is the shape of one update of the model.
type Update struct {
	// Batches is how many batches one global step consumes.
	Batches int
	// Averaged is how many batches one update of the model averages (1:
	// each replica applies its own gradients).
	Averaged int
	// Compresses says that the replicas' gradients may travel compressed
	// (RunConfig.Compression).
	Compresses bool
	// PullsFromPS says that the replicas read the variables from ps tasks
	// (RunConfig.PullCompression applies).
	PullsFromPS bool
	// ChiefOnly says that one client, the chief, builds and runs every
	// replica's tower; the other workers only serve.
	ChiefOnly bool
	// SumsOnPS says that the cluster's ps tasks, if any, sum the replicas'
	// gradients and hold no variables (summation servers).
	SumsOnPS bool
}

// Recovery is what a strategy survives, for a supervisor (the local
// cluster launcher, or an operator's) to act on.
type Recovery struct {
	// RestartPS says that a ps task that dies is worth restarting on its
	// address; with PSNeedsCheckpoints only when checkpoints are kept
	// (the replicas restore its share of the model from them).
	RestartPS          bool
	PSNeedsCheckpoints bool
	// RestartWorkers says that a worker that dies is worth restarting: it
	// rejoins training.
	RestartWorkers bool
	// ToleratesWorkerLoss says that the others go on, and end training,
	// without a worker (other than the chief) that is lost for good.
	ToleratesWorkerLoss bool
}

// LocalCluster sets the restart policy of a local cluster that trains
// with checkpoints kept (checkpoints) or not: a lost chief resumes from
// the latest checkpoint.
func (rc Recovery) LocalCluster(c *localcluster.Config, checkpoints bool) {
	c.RestartPS = rc.RestartPS && (checkpoints || !rc.PSNeedsCheckpoints)
	c.RestartWorkers = rc.RestartWorkers
	c.TolerateWorkerLoss = rc.ToleratesWorkerLoss
	c.RestartChief = checkpoints
}

// ReplicaInfo describes a replica to its strategy.
type ReplicaInfo struct {
	// Index is the replica's place among Replicas (the chief is 0), and
	// Replicas how many train (1 in a single process).
	Index, Replicas int
	// Chief says whether this replica is the chief.
	Chief bool
	// Logger is the replica's.
	Logger *slog.Logger
}

// Replica is a replica's part in training under a strategy: a
// *PSReplica (on parameter servers) or a *RingReplica (a collective
// strategy over the workers' ring), whose fields a user's strategy fills;
// either trains through the shared training loop.
type Replica interface {
	train(ctx context.Context, r *replica) (*Result, error)
}

// AveragedBatches is how many batches one update of the model averages
// under the configured strategy and cluster: 1 for asynchronous training,
// the aggregated replicas of Sync, the towers of InGraph, the ranks of
// AllReduce. Learning rates are often scaled by it (Goyal et al. 2017).
func (c RunConfig) AveragedBatches() int {
	return c.update().Averaged
}

// update is the configured strategy's shape of an update.
func (c RunConfig) update() Update {
	s := c.Strategy
	if s == nil {
		s = Async{}
	}
	n := 1
	if c.Cluster != nil {
		n = len(replicas(c.Cluster))
	}
	return s.Update(max(n, 1))
}

// needsCluster is the validation of strategies that coordinate replicas.
func needsCluster(name string, c *cluster.Spec, ps bool) error {
	switch {
	case c == nil:
		return fmt.Errorf("estimator: strategy %s coordinates the workers of a cluster: configure one (RunConfig.Cluster, TF_CONFIG or a local cluster)", name)
	case ps && c.NumTasks("ps") == 0:
		return fmt.Errorf("estimator: strategy %s keeps the variables on parameter servers: the cluster has no ps task", name)
	case !ps && c.NumTasks("ps") > 0:
		return fmt.Errorf("estimator: strategy %s trains without parameter servers: the cluster has ps tasks (%v): drop the ps tasks", name, c.Addresses("ps"))
	}
	return nil
}

// Async is between-graph asynchronous training on parameter servers: each
// worker applies its gradients as soon as it has them. Without a cluster it
// is plain training in this process. It survives a ps that dies and is
// restarted, when checkpoints are kept.
type Async struct{}

func (Async) String() string { return "async" }

func (Async) Validate(c *cluster.Spec) error {
	if c == nil {
		return nil
	}
	return needsCluster("async", c, true)
}

func (Async) Update(int) Update {
	return Update{Batches: 1, Averaged: 1, Compresses: true, PullsFromPS: true}
}

// Recovery: a lost ps is restored from the latest checkpoint; the other
// workers go on without a lost one.
func (Async) Recovery() Recovery {
	return Recovery{RestartPS: true, PSNeedsCheckpoints: true, RestartWorkers: true, ToleratesWorkerLoss: true}
}

func (Async) Replica(ReplicaInfo) (Replica, error) {
	return psReplica(func(*replica) psPlan { return psPlan{recoverable: true} }), nil
}

// Sync is synchronous training on parameter servers (the sync-replicas
// optimizer): each update averages the gradients of ReplicasToAggregate
// replicas (0: all); with fewer than all, the slowest are backup workers
// whose stale gradients are dropped.
type Sync struct {
	ReplicasToAggregate int
}

func (s Sync) String() string { return "sync" }

func (s Sync) Validate(c *cluster.Spec) error {
	if err := needsCluster("sync", c, true); err != nil {
		return err
	}
	if n := len(replicas(c)); s.ReplicasToAggregate < 0 || s.ReplicasToAggregate > n {
		return fmt.Errorf("estimator: Sync.ReplicasToAggregate %d: want 1 to %d (the number of workers), or 0 for all", s.ReplicasToAggregate, n)
	}
	return nil
}

func (s Sync) aggregate(n int) int {
	if s.ReplicasToAggregate > 0 {
		return s.ReplicasToAggregate
	}
	return n
}

func (s Sync) Update(n int) Update {
	k := s.aggregate(n)
	return Update{Batches: k, Averaged: k, Compresses: true, PullsFromPS: true}
}

// Recovery: a lost ps is restored from the latest checkpoint, with the
// synchronisation state it held; a lost worker rejoins, and the rounds
// aggregate the live replicas without it meanwhile (or for good).
func (Sync) Recovery() Recovery {
	return Recovery{RestartPS: true, PSNeedsCheckpoints: true, RestartWorkers: true, ToleratesWorkerLoss: true}
}

func (s Sync) Replica(ReplicaInfo) (Replica, error) {
	return psReplica(s.plan), nil
}

func (s Sync) plan(r *replica) psPlan {
	c := &syncCoordinator{r: r, recovered: make(chan struct{}, 1)}
	return psPlan{
		// A restarted ps is restored from the checkpoint, and the sync
		// state it lost set up again (afterRecovery).
		recoverable: true,
		optimizer: func(opt train.Optimizer) train.Optimizer {
			c.opt = train.NewSyncReplicas(opt, s.aggregate(len(r.reps)), len(r.reps))
			c.opt.SetReplica(r.index) // a token queue of its own
			return c.opt
		},
		claimAfter:  func() *graph.Node { return c.opt.RoundEnd() },
		coordinator: c,
	}
}

// Staleness is asynchronous training on parameter servers in which no
// replica runs more than Bound steps ahead of the slowest.
type Staleness struct {
	Bound int
}

func (s Staleness) String() string { return fmt.Sprintf("staleness(%d)", s.Bound) }

func (s Staleness) Validate(c *cluster.Spec) error {
	if s.Bound < 0 {
		return fmt.Errorf("estimator: Staleness.Bound %d: must not be negative", s.Bound)
	}
	return needsCluster("staleness", c, true)
}

func (Staleness) Update(int) Update {
	return Update{Batches: 1, Averaged: 1, Compresses: true, PullsFromPS: true}
}

// Recovery: a lost ps is restored from the latest checkpoint, the step
// counters with it; a lost worker rejoins at the others' step, and the
// bound holds among the live ones without it meanwhile (or for good).
func (Staleness) Recovery() Recovery {
	return Recovery{RestartPS: true, PSNeedsCheckpoints: true, RestartWorkers: true, ToleratesWorkerLoss: true}
}

func (s Staleness) Replica(ReplicaInfo) (Replica, error) {
	return psReplica(s.plan), nil
}

func (s Staleness) plan(r *replica) psPlan {
	c := &stalenessCoordinator{r: r}
	return psPlan{
		// The step counters are variables: a lost ps is restored from
		// the checkpoint, and each replica takes up again (afterRecovery).
		recoverable: true,
		build: func(sc *graph.Scope) {
			c.bound = train.NewStalenessBound(sc, len(r.reps), r.index, s.Bound)
		},
		coordinator: c,
	}
}

// InGraph is in-graph replication: the chief builds one tower per replica
// (each on its task, the variables on the ps tasks) and applies the mean
// of their gradients; the other workers only serve. With checkpoints it
// survives a ps or worker that dies and is restarted on its address.
type InGraph struct{}

func (InGraph) String() string { return "in-graph" }

func (InGraph) Validate(c *cluster.Spec) error {
	if c == nil {
		return nil
	}
	return needsCluster("in-graph", c, true)
}

func (InGraph) Update(n int) Update {
	return Update{Batches: n, Averaged: n, PullsFromPS: true, ChiefOnly: true}
}

// Recovery: one client, no queues or counters: a lost ps or worker is
// recovered from as in asynchronous training (the towers' tasks come back
// on their addresses; a ps's shard is restored from the checkpoint).
func (InGraph) Recovery() Recovery {
	return Recovery{RestartPS: true, PSNeedsCheckpoints: true, RestartWorkers: true}
}

func (InGraph) Replica(info ReplicaInfo) (Replica, error) {
	if info.Index > 0 {
		return servingReplica{}, nil
	}
	return psReplica(func(r *replica) psPlan { return psPlan{inGraph: r.cfg.Cluster != nil, recoverable: true} }), nil
}

// servingReplica only serves its task until the chief ends training.
type servingReplica struct{}

func (servingReplica) train(ctx context.Context, r *replica) (*Result, error) { return r.serve(ctx) }

// psReplica trains on parameter servers through the shared loop, with the
// plan of a built-in strategy.
type psReplica func(r *replica) psPlan

func (p psReplica) train(ctx context.Context, r *replica) (*Result, error) {
	return trainOnPS(ctx, r, p(r))
}

// psPlan is a parameter-server strategy's part of the shared training
// loop (trainOnPS).
type psPlan struct {
	// inGraph builds one tower per replica on the chief.
	inGraph bool
	// recoverable: the run survives a lost ps, restored from checkpoints
	// (the queues and counters of the other plans are not in checkpoints).
	recoverable bool
	// optimizer, if set, wraps the model's optimizer.
	optimizer func(train.Optimizer) train.Optimizer
	// build, if set, adds the plan's own nodes to the graph.
	build func(s *graph.Scope)
	// claimAfter, if set, returns (once the update is built) the node
	// after which a step claims its replica's next batch: the end of the
	// step's round, so that every round trains the same batches, whatever
	// the replicas' timing (see InputContext.Examples).
	claimAfter func() *graph.Node
	// coordinator, if set, coordinates the replicas around the steps.
	coordinator coordinator
}

// coordinator coordinates the replicas of a ps strategy around the steps
// of the training loop.
type coordinator interface {
	// begin runs once the model is ready; it returns a function that the
	// chief calls after its last step (nil: nothing to do).
	begin(ctx context.Context, sess *session.Session, chief bool, log *slog.Logger) (end func(context.Context), err error)
	// beforeStep and afterStep run around each step.
	beforeStep(ctx context.Context, sess *session.Session) error
	afterStep(ctx context.Context, sess *session.Session) error
	// finished reports whether a step's error means that training is over
	// for this replica (the chief ended it).
	finished(err error) bool
	// done runs after this replica's last step.
	done(ctx context.Context, sess *session.Session) error
	// rejoin takes a replica (not the chief) whose step outlived the step
	// deadline back in at the current global step, as a restarted
	// process would begin.
	rejoin(ctx context.Context, sess *session.Session) error
	// afterRecovery sets up again, once a lost ps is restored from a
	// checkpoint, the state of the plan that the ps held.
	afterRecovery(ctx context.Context, sess *session.Session) error
	// stop ends what begin started (watches, loops), however training
	// ends; it may be called more than once.
	stop()
}

// PSReplica is the part in training of a replica that trains on
// parameter servers through the shared training loop (hooks, summaries,
// checkpoints, recovery, the stop condition): what a user's strategy
// returns from Strategy.Replica. Every field is optional; the zero value
// is asynchronous training without recovery from a lost ps.
type PSReplica struct {
	// Optimizer wraps the model's optimizer (a replica's update rule).
	Optimizer func(train.Optimizer) train.Optimizer
	// Build adds the strategy's own nodes to the replica's graph, before
	// the model's update is built.
	Build func(s *graph.Scope)
	// Coordinator coordinates the replicas around their steps.
	Coordinator Coordinator
	// Recoverable says that training survives a ps that is lost and
	// restarted (its share restored from the latest checkpoint): the
	// strategy keeps no state on the ps tasks outside the checkpoints.
	Recoverable bool
}

func (p *PSReplica) train(ctx context.Context, r *replica) (*Result, error) {
	plan := psPlan{optimizer: p.Optimizer, build: p.Build, recoverable: p.Recoverable}
	if p.Coordinator != nil {
		plan.coordinator = userCoordinator{p.Coordinator}
	}
	return trainOnPS(ctx, r, plan)
}

// Coordinator coordinates the replicas of a user's parameter-server
// strategy around the steps of the training loop (a PSReplica's). The
// session reaches the whole cluster; every call may block, within ctx.
type Coordinator interface {
	// Begin runs once the model is ready, before the first step. It
	// returns a function that the chief calls after its last step, before
	// it ends training for the cluster (nil: nothing to do).
	Begin(ctx context.Context, sess *session.Session) (end func(context.Context), err error)
	// BeforeStep and AfterStep run around each step of this replica.
	BeforeStep(ctx context.Context, sess *session.Session) error
	AfterStep(ctx context.Context, sess *session.Session) error
	// Done runs after this replica's last step.
	Done(ctx context.Context, sess *session.Session) error
}

// userCoordinator runs a user's Coordinator as a plan's coordinator.
type userCoordinator struct{ c Coordinator }

func (u userCoordinator) begin(ctx context.Context, sess *session.Session, _ bool, _ *slog.Logger) (func(context.Context), error) {
	return u.c.Begin(ctx, sess)
}
func (u userCoordinator) beforeStep(ctx context.Context, sess *session.Session) error {
	return u.c.BeforeStep(ctx, sess)
}
func (u userCoordinator) afterStep(ctx context.Context, sess *session.Session) error {
	return u.c.AfterStep(ctx, sess)
}
func (u userCoordinator) done(ctx context.Context, sess *session.Session) error {
	return u.c.Done(ctx, sess)
}
func (userCoordinator) finished(error) bool { return false }

// rejoin: a replica whose step outlived the deadline goes on at the
// current global step; a user's coordinator has nothing to set up again.
func (userCoordinator) rejoin(context.Context, *session.Session) error        { return nil }
func (userCoordinator) afterRecovery(context.Context, *session.Session) error { return nil }
func (userCoordinator) stop()                                                 {}

// syncCoordinator runs the token queue and the chief's aggregation loop of
// synchronous training.
type syncCoordinator struct {
	r   *replica
	opt *train.SyncReplicasOptimizer
	// recovered tells the chief's aggregation loop, paused by a lost ps,
	// that the model and the sync state are back.
	recovered chan struct{}
	// stopWatch stops a worker's watch of the chief.
	stopWatch func()
}

func (c *syncCoordinator) begin(ctx context.Context, sess *session.Session, chief bool, log *slog.Logger) (func(context.Context), error) {
	c.opt.Logger = log
	resumed := false
	if chief {
		gs, err := c.opt.GlobalStep(ctx, sess)
		if err != nil {
			return nil, fmt.Errorf("estimator: synchronous training: %w", err)
		}
		resumed = gs > 0
	}
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{c.opt.LocalStepInit()}); err != nil {
		return nil, fmt.Errorf("estimator: synchronous training: setting the local step: %w", err)
	}
	// A replica that starts again after it was lost: the tokens of the
	// rounds it missed are not its to take.
	if err := c.opt.DrainTokens(ctx, sess); err != nil {
		return nil, fmt.Errorf("estimator: synchronous training: %w", err)
	}
	if !chief {
		// The tokens come from the chief's aggregation loop: a worker
		// that waits for one names the chief when it is lost, rather than
		// failing later at its step deadline with no name.
		wctx, cancel := context.WithCancel(ctx)
		m := &membership{cfg: c.r.cfg, log: log, peers: map[int]cluster.TaskID{0: c.r.reps[0]}, onChange: func(int, bool) {},
			waiting: "the chief's next aggregation (this worker's token)"}
		watched := m.watch(wctx)
		c.stopWatch = func() { cancel(); watched() }
		return nil, nil
	}
	if err := c.opt.InitTokens(ctx, sess); err != nil {
		return nil, fmt.Errorf("estimator: synchronous training: %w", err)
	}
	if resumed {
		// A chief restarted while the others trained: the round its
		// predecessor ran may be half taken, the replicas waiting on it.
		if err := c.opt.Restart(ctx, sess); err != nil {
			return nil, fmt.Errorf("estimator: synchronous training: %w", err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	c.r.observeSync(c.opt)
	go func() {
		defer close(stopped)
		for {
			err := c.opt.ChiefQueueRunner(runCtx, sess)
			if err == nil {
				return
			}
			if !awaitsRecovery(err) {
				log.Warn("the chief's aggregation loop stopped", "err", err)
				return
			}
			// A ps was lost: the chief's session recovers it (restores
			// the model, sets the sync state up again), then the loop
			// goes on.
			log.Warn("the chief's aggregation loop waits for the cluster to recover", "err", err)
			select {
			case <-c.recovered:
			case <-runCtx.Done():
				return
			}
		}
	}()
	// The chief watches the other replicas: a lost one is no longer
	// waited for, and one that answers again is let back in.
	peers := map[int]cluster.TaskID{}
	for i, t := range c.r.reps[1:] {
		peers[i+1] = t
	}
	m := &membership{cfg: c.r.cfg, log: log, peers: peers, onChange: c.opt.SetLive,
		waiting: fmt.Sprintf("the gradients of the live replicas (%d to aggregate at most)", c.opt.ReplicasToAggregate())}
	watched := m.watch(runCtx)
	// Should training fail before the end, the loop and the watch stop
	// with trainOnPS (stop).
	c.stopWatch = func() { cancel(); <-stopped; watched() }
	return func(ctx context.Context) {
		// Release the replicas still waiting for a token: training is over.
		if err := c.opt.Finish(ctx, sess); err != nil {
			log.Warn("finishing synchronous training", "err", err)
		}
		cancel()
		<-stopped // no aggregation after this: the global step is final
		watched()
		dropped, _ := c.opt.Dropped(ctx, sess)
		log.Info("synchronous training", "aggregations", c.opt.Aggregations(), "stale_gradients_dropped", dropped)
	}, nil
}

// awaitsRecovery reports whether the chief's aggregation loop failed for
// a lost ps, and so goes on once the chief's session has recovered it:
// the ps did not answer, or it answers as a new process whose variables
// are not yet restored (the loop's round can reach a restarted ps before
// the chief's own step finds it restarted: the loop then stopped for
// good, and every replica waited for a token that never came).
func awaitsRecovery(err error) bool {
	return train.TaskLost(err) || errors.Is(err, kernel.ErrUninitialized)
}

// afterRecovery sets up again what a restarted ps lost: the replica's
// local step and, on the chief, the accumulators' step and the tokens of
// the live replicas; then the chief's aggregation loop goes on.
func (c *syncCoordinator) afterRecovery(ctx context.Context, sess *session.Session) error {
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{c.opt.LocalStepInit()}); err != nil {
		return fmt.Errorf("estimator: synchronous training: setting the local step: %w", err)
	}
	if !c.r.chief() {
		return nil
	}
	if err := c.opt.InitTokens(ctx, sess); err != nil {
		return fmt.Errorf("estimator: synchronous training: %w", err)
	}
	if err := c.opt.Restart(ctx, sess); err != nil {
		return fmt.Errorf("estimator: synchronous training: %w", err)
	}
	select {
	case c.recovered <- struct{}{}:
	default:
	}
	return nil
}

// rejoin sets the local step to the global step (the gradients of the
// step that timed out are stale and dropped) and drains the tokens of the
// rounds this replica missed, as begin does for a restarted worker.
func (c *syncCoordinator) rejoin(ctx context.Context, sess *session.Session) error {
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{c.opt.LocalStepInit()}); err != nil {
		return fmt.Errorf("estimator: synchronous training: setting the local step: %w", err)
	}
	if err := c.opt.DrainTokens(ctx, sess); err != nil {
		return fmt.Errorf("estimator: synchronous training: %w", err)
	}
	return nil
}

func (c *syncCoordinator) beforeStep(context.Context, *session.Session) error { return nil }
func (c *syncCoordinator) afterStep(context.Context, *session.Session) error  { return nil }

// done ends a worker's watch of the chief (the chief's loop goes on
// until its end function).
func (c *syncCoordinator) done(context.Context, *session.Session) error {
	if !c.r.chief() {
		c.stop()
	}
	return nil
}

// stop ends the watches, and the chief's aggregation loop.
func (c *syncCoordinator) stop() {
	if c.stopWatch != nil {
		c.stopWatch()
		c.stopWatch = nil
	}
}

func (c *syncCoordinator) finished(err error) bool {
	return errors.Is(train.CheckFinished(err), train.ErrTrainingFinished)
}

// stalenessCoordinator keeps a replica within the staleness bound; the
// bound ignores the replicas that its heartbeats find lost.
type stalenessCoordinator struct {
	r         *replica
	bound     *train.StalenessBound
	stopWatch func()
}

func (c *stalenessCoordinator) begin(ctx context.Context, sess *session.Session, _ bool, log *slog.Logger) (func(context.Context), error) {
	// A replica that starts again takes up at the others' step.
	if err := c.bound.Rejoin(ctx, sess); err != nil {
		return nil, fmt.Errorf("estimator: %w", err)
	}
	peers := map[int]cluster.TaskID{}
	for i, t := range c.r.reps {
		if i != c.r.index {
			peers[i] = t
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	m := &membership{cfg: c.r.cfg, log: log, peers: peers, onChange: c.bound.SetLive,
		waiting: "nothing: the staleness bound ignores it until it answers again"}
	watched := m.watch(wctx)
	c.stopWatch = func() { cancel(); watched() }
	return nil, nil
}

// afterRecovery takes up at the others' step again: the counters came
// back from a checkpoint.
func (c *stalenessCoordinator) afterRecovery(ctx context.Context, sess *session.Session) error {
	return c.bound.Rejoin(ctx, sess)
}

// stop ends the watch of the other replicas.
func (c *stalenessCoordinator) stop() {
	if c.stopWatch != nil {
		c.stopWatch()
		c.stopWatch = nil
	}
}

func (c *stalenessCoordinator) beforeStep(ctx context.Context, sess *session.Session) error {
	if err := c.bound.Wait(ctx, sess); err != nil {
		return fmt.Errorf("waiting for the slowest replica: %w", err)
	}
	return nil
}

func (c *stalenessCoordinator) afterStep(ctx context.Context, sess *session.Session) error {
	return c.bound.Advance(ctx, sess)
}

func (c *stalenessCoordinator) finished(error) bool { return false }

// rejoin takes up at the others' step, as a restarted replica does.
func (c *stalenessCoordinator) rejoin(ctx context.Context, sess *session.Session) error {
	if err := c.bound.Rejoin(ctx, sess); err != nil {
		return fmt.Errorf("estimator: %w", err)
	}
	return nil
}

func (c *stalenessCoordinator) done(ctx context.Context, sess *session.Session) error {
	c.stop()
	return c.bound.Done(ctx, sess)
}

// meanLoss is the mean of the towers' losses (the only one's, itself),
// on the scope's device: the loss of a step over every tower's batch.
func meanLoss(s *graph.Scope, losses []graph.Output) graph.Output {
	if len(losses) == 1 {
		return losses[0]
	}
	ls := s.SubScope("mean_tower_loss")
	return ops.Mul(ls, ops.AddN(ls, losses...), ops.Scalar(ls, losses[0].DType(), 1/float64(len(losses))))
}

// averagedUpdate computes each tower's gradients on its device and applies
// their mean once (in-graph replication). Gradients are matched to their
// variables by name: a variable that no tower's loss reaches has none, as
// Minimize leaves it out. A variable whose gradient is indexed slices in
// every tower (an embedding table's) gets the mean as indexed slices too,
// aggregated beside it, so that its update stays sparse as in one process.
func averagedUpdate(s *graph.Scope, opt train.Optimizer, losses []graph.Output, vars []*ops.Variable, step *ops.Variable) (*graph.Node, error) {
	type towerGrads struct {
		dense  []graph.Output
		sparse []grad.IndexedSlices
	}
	byVar := make(map[string]*towerGrads, len(vars))
	for i, loss := range losses {
		gvs, err := opt.ComputeGradients(s.SubScope(fmt.Sprintf("tower_%d_gradients", i)), loss, vars)
		if err != nil {
			return nil, err
		}
		for _, gv := range gvs {
			tg := byVar[gv.Var.Name()]
			if tg == nil {
				tg = &towerGrads{}
				byVar[gv.Var.Name()] = tg
			}
			tg.dense = append(tg.dense, gv.Grad)
			if gv.Sparse != nil {
				tg.sparse = append(tg.sparse, *gv.Sparse)
			}
		}
	}
	as := s.SubScope("average_gradients")
	var gvs []train.GradVar
	for _, v := range vars {
		tg := byVar[v.Name()]
		if tg == nil {
			continue
		}
		// A tower whose loss does not reach v adds zero: the mean is over
		// every tower.
		scale := ops.Scalar(as, v.DType(), 1/float64(len(losses)))
		gv := train.GradVar{Var: v, Grad: ops.Mul(as, ops.AddN(as, tg.dense...), scale)}
		if len(tg.sparse) == len(tg.dense) {
			vs := as.SubScope(v.Name() + "_sparse").WithDevice(v.Node().Device())
			vscale := ops.Scalar(vs, v.DType(), 1/float64(len(losses)))
			parts := make([]grad.IndexedSlices, len(tg.sparse))
			for j, p := range tg.sparse {
				parts[j] = grad.IndexedSlices{Indices: p.Indices, Values: ops.Mul(vs, p.Values, vscale), DenseShape: p.DenseShape}
			}
			mean := grad.AggregateIndexedSlices(vs, parts)
			gv.Sparse = &mean
		}
		gvs = append(gvs, gv)
	}
	if err := as.Err(); err != nil {
		return nil, fmt.Errorf("estimator: averaging the towers' gradients: %w", err)
	}
	return opt.ApplyGradients(s, gvs, step)
}

// ParseStrategy returns the strategy named s, as a flag would give it:
// "async", "sync" or "sync:K" (K replicas to aggregate), "staleness:S",
// "ingraph", "allreduce", "averaging" or "averaging:TAU" (TAU 0 adapts).
func ParseStrategy(s string) (Strategy, error) {
	name, arg, hasArg := strings.Cut(s, ":")
	n, err := strconv.Atoi(arg)
	if hasArg && (err != nil || n < 0) {
		return nil, fmt.Errorf("estimator: strategy %q: %q is not a count", s, arg)
	}
	switch {
	case name == "async" && !hasArg:
		return Async{}, nil
	case name == "sync":
		return Sync{ReplicasToAggregate: n}, nil
	case name == "staleness" && hasArg:
		return Staleness{Bound: n}, nil
	case name == "staleness":
		return nil, fmt.Errorf("estimator: strategy %q needs its bound: staleness:2 lets a worker run 2 steps ahead of the slowest", s)
	case (name == "ingraph" || name == "in-graph") && !hasArg:
		return InGraph{}, nil
	case name == "allreduce" && !hasArg:
		return AllReduce{}, nil
	case name == "averaging":
		return Averaging{Every: n}, nil
	}
	return nil, fmt.Errorf("estimator: unknown strategy %q (want async, sync[:K], staleness:S, ingraph, allreduce or averaging[:TAU])", s)
}
