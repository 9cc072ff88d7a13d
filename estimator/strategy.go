package estimator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/train"
)

// Strategy is how the replicas of a cluster share one model. Each
// strategy is one implementation of this interface; RunConfig.Strategy
// chooses it. The parameter-server strategies (Async, Sync, Staleness,
// InGraph) describe their part of the shared ps training loop as a psPlan;
// the collective ones (AllReduce, Averaging) run a loop of their own.
type Strategy interface {
	// String names the strategy in logs and results.
	String() string
	// validate checks the strategy against the cluster (nil: a single
	// process) before anything starts.
	validate(c *cluster.Spec) error
	// batchesPerStep is how many batches one global step consumes, and
	// averaged how many batches one update averages, with n replicas.
	batchesPerStep(n int) int
	averaged(n int) int
	// train trains as replica r and returns what it did.
	train(ctx context.Context, r *replica) (*Result, error)
}

// AveragedBatches is how many batches one update of the model averages
// under the configured strategy and cluster: 1 for asynchronous training,
// the aggregated replicas of Sync, the towers of InGraph, the ranks of
// AllReduce. Learning rates are often scaled by it (Goyal et al. 2017).
func (c RunConfig) AveragedBatches() int {
	s := c.Strategy
	if s == nil {
		s = Async{}
	}
	n := 1
	if c.Cluster != nil {
		n = len(replicas(c.Cluster))
	}
	return s.averaged(n)
}

// needsCluster is the validation of strategies that coordinate replicas.
func needsCluster(name string, c *cluster.Spec, ps bool) error {
	switch {
	case c == nil:
		return fmt.Errorf("estimator: strategy %s coordinates the workers of a cluster: configure one (RunConfig.Cluster, TF_CONFIG or a local cluster)", name)
	case ps && c.NumTasks("ps") == 0:
		return fmt.Errorf("estimator: strategy %s keeps the variables on parameter servers: the cluster has no ps task", name)
	case !ps && c.NumTasks("ps") > 0:
		return fmt.Errorf("estimator: strategy %s trains without parameter servers: the cluster has ps tasks (%v)", name, c.Addresses("ps"))
	}
	return nil
}

// Async is between-graph asynchronous training on parameter servers: each
// worker applies its gradients as soon as it has them. Without a cluster it
// is plain training in this process. It survives a ps that dies and is
// restarted, when checkpoints are kept.
type Async struct{}

func (Async) String() string { return "async" }

func (Async) validate(c *cluster.Spec) error {
	if c == nil {
		return nil
	}
	return needsCluster("async", c, true)
}

func (Async) batchesPerStep(int) int { return 1 }
func (Async) averaged(int) int       { return 1 }

func (Async) train(ctx context.Context, r *replica) (*Result, error) {
	return trainOnPS(ctx, r, psPlan{recoverable: true})
}

// Sync is synchronous training on parameter servers (the sync-replicas
// optimizer): each update averages the gradients of ReplicasToAggregate
// replicas (0: all); with fewer than all, the slowest are backup workers
// whose stale gradients are dropped.
type Sync struct {
	ReplicasToAggregate int
}

func (s Sync) String() string { return "sync" }

func (s Sync) validate(c *cluster.Spec) error {
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

func (s Sync) batchesPerStep(n int) int { return s.aggregate(n) }
func (s Sync) averaged(n int) int       { return s.aggregate(n) }

func (s Sync) train(ctx context.Context, r *replica) (*Result, error) {
	c := &syncCoordinator{r: r, recovered: make(chan struct{}, 1)}
	return trainOnPS(ctx, r, psPlan{
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
	})
}

// Staleness is asynchronous training on parameter servers in which no
// replica runs more than Bound steps ahead of the slowest.
type Staleness struct {
	Bound int
}

func (s Staleness) String() string { return fmt.Sprintf("staleness(%d)", s.Bound) }

func (s Staleness) validate(c *cluster.Spec) error {
	if s.Bound < 0 {
		return fmt.Errorf("estimator: Staleness.Bound %d: must not be negative", s.Bound)
	}
	return needsCluster("staleness", c, true)
}

func (Staleness) batchesPerStep(int) int { return 1 }
func (Staleness) averaged(int) int       { return 1 }

func (s Staleness) train(ctx context.Context, r *replica) (*Result, error) {
	c := &stalenessCoordinator{r: r}
	return trainOnPS(ctx, r, psPlan{
		// The step counters are variables: a lost ps is restored from
		// the checkpoint, and each replica takes up again (afterRecovery).
		recoverable: true,
		build: func(sc *graph.Scope) {
			c.bound = train.NewStalenessBound(sc, len(r.reps), r.index, s.Bound)
		},
		coordinator: c,
	})
}

// InGraph is in-graph replication: the chief builds one tower per replica
// (each on its task, the variables on the ps tasks) and applies the mean
// of their gradients; the other workers only serve. With checkpoints it
// survives a ps or worker that dies and is restarted on its address.
type InGraph struct{}

func (InGraph) String() string { return "in-graph" }

func (InGraph) validate(c *cluster.Spec) error {
	if c == nil {
		return nil
	}
	return needsCluster("in-graph", c, true)
}

func (InGraph) batchesPerStep(n int) int { return n }
func (InGraph) averaged(n int) int       { return n }

func (InGraph) train(ctx context.Context, r *replica) (*Result, error) {
	if r.index > 0 {
		return r.serve(ctx)
	}
	// One client, no queues or counters: a lost ps or worker is recovered
	// from as in asynchronous training (the towers' tasks come back on
	// their addresses; a ps's shard is restored from the checkpoint).
	return trainOnPS(ctx, r, psPlan{inGraph: r.cfg.Cluster != nil, recoverable: true})
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
}

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
			if !train.TaskLost(err) {
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

// averagedUpdate computes each tower's gradients on its device and applies
// their mean once (in-graph replication).
func averagedUpdate(s *graph.Scope, opt train.Optimizer, losses []graph.Output, vars []*ops.Variable, step *ops.Variable) (*graph.Node, error) {
	perVar := make([][]graph.Output, len(vars))
	for i, loss := range losses {
		gvs, err := opt.ComputeGradients(s.SubScope(fmt.Sprintf("tower_%d_gradients", i)), loss, vars)
		if err != nil {
			return nil, err
		}
		for k, gv := range gvs {
			perVar[k] = append(perVar[k], gv.Grad)
		}
	}
	as := s.SubScope("average_gradients")
	gvs := make([]train.GradVar, len(vars))
	for k, v := range vars {
		scale := ops.Scalar(as, v.DType(), 1/float64(len(losses)))
		gvs[k] = train.GradVar{Var: v, Grad: ops.Mul(as, ops.AddN(as, perVar[k]...), scale)}
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
