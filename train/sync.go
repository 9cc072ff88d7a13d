package train

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// ErrTrainingFinished is wrapped by the error of a synchronous worker step
// that could not get a token because the chief called Finish: the worker
// should stop training, not report a failure.
var ErrTrainingFinished = errors.New("training is finished")

// SyncReplicasOptimizer wraps an optimizer for synchronous data-parallel
// training with replicas (TensorFlow's SyncReplicasOptimizer). Each
// replica's step puts its gradients into one conditional accumulator per
// variable, on the variable's device, tagged with the replica's local step
// (the global step its parameters were read at), then waits for a token
// from a queue on the global step's device. The chief runs the update in a
// loop (ChiefQueueRunner): it takes the mean of ReplicasToAggregate
// gradients from every accumulator, applies it with the wrapped optimizer,
// increments the global step (once per aggregation) and enqueues one token
// holding the new global step for each of the TotalReplicas replicas; a
// worker's token becomes its new local step.
//
// A variable whose gradient is indexed slices (GradVar.Sparse: an
// embedding table read through lookups) gets a sparse accumulator instead,
// which holds only the rows the round's gradients touch, and the wrapped
// optimizer gets their mean as indexed slices: in sync mode, as in async,
// neither the wire nor the ps's memory grows with the table's size.
//
// Gradients tagged with a local step older than the accumulator's step
// (computed on parameters that have since been updated) are dropped and
// counted (Dropped). With ReplicasToAggregate < TotalReplicas the extra
// replicas are backup workers: each round proceeds as soon as the fastest
// ReplicasToAggregate gradients are in, and the late ones are dropped.
//
// Tokens. After SetReplica every replica has a token queue of its own and
// each round puts one token in each: a replica whose gradient went into a
// round waits for that round's update and no replica can take another's
// token, so that without backup workers every round averages exactly one
// gradient per replica, computed on the same variables (the single-process
// step on the union of the replicas' batches), and none is dropped.
// Without SetReplica the replicas share one queue, TensorFlow's scheme:
// InitTokens enqueues TotalReplicas-ReplicasToAggregate tokens and every
// round TotalReplicas, and a fast replica may take a slow one's token and
// put two gradients into a round. (TensorFlow starts with
// ReplicasToAggregate tokens: without backup workers each replica then runs
// a second step on the parameters of the first, and those gradients are
// dropped.)
//
// A replica's new local step is the global step read after its token, not
// the token's value: with backup workers the tokens of a slow replica pile
// up, and a replica whose gradient was dropped, or whose token is old,
// skips ahead to the current step and computes its next gradient on fresh
// variables instead of one that would be dropped. (The queue of a replica
// that stopped grows by one token, about a hundred bytes, per round.)
//
// The first ApplyGradients on a graph builds the shared part (accumulators,
// token queue, chief update); each call builds one replica's training step,
// with its own local step variable on the replica's device (the device the
// scope's device function gives ordinary ops, so that between-graph
// replicas do not share it). In between-graph replication every worker
// builds the same graph with its own optimizer (and calls SetReplica with
// its index); in one process several replicas can share one graph by
// calling ApplyGradients once each (after SetReplica(0)).
//
// The optimizer's methods that run steps are safe for concurrent use;
// building is not.
type SyncReplicasOptimizer struct {
	opt                                Optimizer
	replicasToAggregate, totalReplicas int
	// Logger receives the chief's reports of dropped gradients; nil means
	// slog.Default().
	Logger *slog.Logger
	// Observe, when set before ChiefQueueRunner starts, is told of every
	// round it completes: how long the round took (its wait for the
	// replicas' gradients, and the update), and how many stale gradients
	// were dropped since the round before (for metrics).
	Observe func(round time.Duration, dropped int64)

	g          *graph.Graph
	globalStep *ops.Variable
	vars       []*ops.Variable
	accums     []graph.Output
	sparse     []bool // accums[i] is a SparseConditionalAccumulator
	// firstReplica is the index of the first replica built on this graph
	// (SetReplica), -1 for one shared token queue; nextReplica counts the
	// replicas built.
	firstReplica, nextReplica int
	queues                    []graph.Output // one, or one per replica
	update                    *graph.Node    // the chief's round: take, apply, increment, enqueue
	newStep                   graph.Output   // the global step after the round
	initTokens                *graph.Node
	finish                    *graph.Node
	dropped                   []graph.Output
	localInits                []*graph.Node
	localInit                 *graph.Node // Group of localInits, built by LocalStepInit
	localInitN                int         // len(localInits) when localInit was built
	roundEnd                  *graph.Node // of the last replica built: see RoundEnd

	aggregations atomic.Int64

	// Membership (per-replica token queues only): the chief aggregates
	// among the live replicas. required is fed every round; releases put
	// a fed token into one replica's queue; counts and drains empty the
	// accumulators after an interrupted round; tokenSize and tokenTake
	// are this process's replica's queue (DrainTokens).
	required      graph.Output
	releaseToken  graph.Output
	releases      []*graph.Node
	counts        []graph.Output
	drainRequired graph.Output
	drains        []*graph.Node
	tokenSize     graph.Output
	tokenTake     graph.Output

	mu          sync.Mutex
	live        []bool // nil: every replica
	welcome     []int  // replicas back, to be given a token
	changed     chan struct{}
	roundCancel context.CancelFunc
}

// NewSyncReplicas wraps opt: each update averages replicasToAggregate
// gradients, out of totalReplicas replicas (>= replicasToAggregate >= 1;
// ApplyGradients reports invalid counts).
func NewSyncReplicas(opt Optimizer, replicasToAggregate, totalReplicas int) *SyncReplicasOptimizer {
	return &SyncReplicasOptimizer{opt: opt, replicasToAggregate: replicasToAggregate, totalReplicas: totalReplicas, firstReplica: -1}
}

// SetReplica gives every replica a token queue of its own (see the type's
// documentation): the next ApplyGradients builds replica i, 0 <= i <
// TotalReplicas, and later calls on the same graph build i+1, i+2, ...
// Every process of a between-graph replication calls it, with its own
// replica index, before ApplyGradients; the chief is replica 0.
func (o *SyncReplicasOptimizer) SetReplica(i int) {
	o.firstReplica, o.nextReplica = i, i
}

// ReplicasToAggregate returns how many gradients a round aggregates when
// every replica is live.
func (o *SyncReplicasOptimizer) ReplicasToAggregate() int { return o.replicasToAggregate }

// Name returns "SyncReplicas".
func (o *SyncReplicasOptimizer) Name() string { return "SyncReplicas" }

// ComputeGradients delegates to the wrapped optimizer.
func (o *SyncReplicasOptimizer) ComputeGradients(s *graph.Scope, loss graph.Output, vars []*ops.Variable) ([]GradVar, error) {
	return o.opt.ComputeGradients(s, loss, vars)
}

// ApplyGradients builds one replica's training step and returns it: apply
// every gradient to its accumulator, wait for a token, store it as the
// replica's local step. Fetching output 0 of the returned node gives the new
// local step. globalStep is required. See the type's documentation.
func (o *SyncReplicasOptimizer) ApplyGradients(s *graph.Scope, gvs []GradVar, globalStep *ops.Variable) (*graph.Node, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	switch {
	case o.opt == nil:
		return nil, fmt.Errorf("train: sync replicas: no optimizer to wrap")
	case o.replicasToAggregate < 1 || o.totalReplicas < o.replicasToAggregate:
		return nil, fmt.Errorf("train: sync replicas: replicas to aggregate %d and total replicas %d: want 1 <= aggregate <= total",
			o.replicasToAggregate, o.totalReplicas)
	case globalStep == nil:
		return nil, fmt.Errorf("train: sync replicas: a global step is required (train.CreateGlobalStep)")
	case len(gvs) == 0:
		return nil, fmt.Errorf("train: sync replicas: no gradients to apply")
	}
	for _, gv := range gvs {
		if gv.Var == nil || !gv.Grad.Valid() {
			return nil, fmt.Errorf("train: sync replicas: a gradient or its variable is missing (%v)", gv.Var)
		}
	}
	if o.g != s.Graph() {
		if err := o.buildShared(s, gvs, globalStep); err != nil {
			return nil, err
		}
	} else if err := o.sameVars(gvs, globalStep); err != nil {
		return nil, err
	}
	return o.buildReplica(s, gvs)
}

// sameVars checks that a later replica trains the variables of the first.
func (o *SyncReplicasOptimizer) sameVars(gvs []GradVar, globalStep *ops.Variable) error {
	if globalStep.Node() != o.globalStep.Node() || len(gvs) != len(o.vars) {
		return fmt.Errorf("train: sync replicas: every replica must train the same %d variables with global step %s", len(o.vars), o.globalStep.Name())
	}
	for i, gv := range gvs {
		if gv.Var.Node() != o.vars[i].Node() {
			return fmt.Errorf("train: sync replicas: replica trains %s where the first trains %s", gv.Var.Name(), o.vars[i].Name())
		}
	}
	return nil
}

// buildShared adds the accumulators, the token queue and the chief's nodes.
func (o *SyncReplicasOptimizer) buildShared(s *graph.Scope, gvs []GradVar, gs *ops.Variable) error {
	g := s.Graph()
	root := graph.NewScopeWithGraph(g).WithDeviceFunc(s.DeviceFunc()).SubScope("sync_replicas")
	o.vars, o.accums, o.dropped = nil, nil, nil
	var means []GradVar
	required := ops.Placeholder(root, "replicas_to_aggregate", tensor.Int32, tensor.ScalarShape())
	drainRequired := ops.Placeholder(root, "drain_required", tensor.Int32, tensor.ScalarShape())
	o.counts, o.drains = nil, nil
	var setSteps []*graph.Node
	o.sparse = nil
	for _, gv := range gvs {
		v := gv.Var
		vs := root.WithDevice(v.Node().Device())
		var acc graph.Output
		if gv.Sparse != nil {
			// Indexed slices (embedding lookups) stay sparse: the
			// accumulator holds the touched rows, and the wrapped
			// optimizer's sparse update applies them, so the table is
			// never densified (its dense form is built only for an
			// optimizer without a sparse update).
			acc = ops.SparseConditionalAccumulator(vs, gv.Grad.DType(), v.Shape(), v.Name()+"/grad_accum")
			idx, vals, shape, _ := ops.SparseAccumulatorTakeGradient(vs, acc, required)
			_, drained, _, _ := ops.SparseAccumulatorTakeGradient(vs.SubScope("drain"), acc, drainRequired)
			o.drains = append(o.drains, drained.Node)
			mean := grad.IndexedSlices{Indices: idx, Values: vals, DenseShape: shape}
			means = append(means, GradVar{Grad: mean.Dense(vs.SubScope("dense_mean")), Var: v, Sparse: &mean})
		} else {
			acc = ops.ConditionalAccumulator(vs, gv.Grad.DType(), v.Shape(), v.Name()+"/grad_accum")
			mean, _ := ops.AccumulatorTakeGradient(vs, acc, required)
			drained, _ := ops.AccumulatorTakeGradient(vs.SubScope("drain"), acc, drainRequired)
			o.drains = append(o.drains, drained.Node)
			means = append(means, GradVar{Grad: mean, Var: v})
		}
		o.counts = append(o.counts, ops.AccumulatorNumAccumulated(vs, acc))
		setSteps = append(setSteps, ops.AccumulatorSetGlobalStep(vs, acc, gs.Value()))
		o.dropped = append(o.dropped, ops.AccumulatorNumDropped(vs, acc))
		o.vars = append(o.vars, v)
		o.accums = append(o.accums, acc)
		o.sparse = append(o.sparse, gv.Sparse != nil)
	}
	if err := root.Err(); err != nil {
		return fmt.Errorf("train: sync replicas: %w", err)
	}
	apply, err := o.opt.ApplyGradients(root, means, nil)
	if err != nil {
		return fmt.Errorf("train: sync replicas: wrapped optimizer %s: %w", o.opt.Name(), err)
	}
	gsScope := root.WithDevice(gs.Node().Device())
	newStep := ops.AssignAdd(gsScope.WithControlDependencies(apply), gs.Value(), ops.Scalar(gsScope, gs.DType(), 1))
	release := gsScope.SubScope("release")
	initScope := gsScope.SubScope("init_tokens").WithControlDependencies(setSteps...)
	o.queues, o.initTokens = nil, nil
	if o.firstReplica < 0 {
		q := ops.FIFOQueue(gsScope, gs.DType(), -1, "sync_replicas/token_queue")
		o.queues = append(o.queues, q)
		o.update = ops.QueueEnqueueMany(release, q, ops.Fill(release, ops.Const(release, []int32{int32(o.totalReplicas)}), newStep))
		if extra := o.totalReplicas - o.replicasToAggregate; extra > 0 {
			o.initTokens = ops.QueueEnqueueMany(initScope, q, ops.Fill(initScope, ops.Const(initScope, []int32{int32(extra)}), gs.Value()))
		}
	} else {
		// No initial tokens: every replica's first step is free, and a
		// replica only waits once it has a gradient in the current round.
		one := ops.Reshape(release, newStep, ops.Const(release, []int32{1}))
		// A token for one replica, fed: the chief releases only the live
		// replicas when some are lost, and welcomes back those that return.
		o.releaseToken = ops.Placeholder(gsScope, "release_token", gs.DType(), tensor.ScalarShape())
		fed := ops.Reshape(gsScope, o.releaseToken, ops.Const(gsScope, []int32{1}))
		var enqueues []*graph.Node
		o.releases = nil
		for i := range o.totalReplicas {
			q := ops.FIFOQueue(gsScope, gs.DType(), -1, fmt.Sprintf("sync_replicas/token_queue_%d", i))
			o.queues = append(o.queues, q)
			enqueues = append(enqueues, ops.QueueEnqueueMany(release, q, one))
			o.releases = append(o.releases, ops.QueueEnqueueMany(gsScope.SubScope(fmt.Sprintf("release_%d", i)), q, fed))
		}
		o.update = ops.Group(release, "all", enqueues...)
	}
	if o.initTokens == nil {
		o.initTokens = ops.Group(initScope, "set_steps", setSteps...)
	}
	o.newStep = newStep
	o.required, o.drainRequired = required, drainRequired
	var closes []*graph.Node
	for _, q := range o.queues {
		closes = append(closes, ops.QueueClose(root.SubScope("finish"), q, true))
	}
	o.finish = ops.Group(root, "finish/all", closes...)
	if err := root.Err(); err != nil {
		return fmt.Errorf("train: sync replicas: %w", err)
	}
	o.g, o.globalStep, o.localInits, o.localInit = g, gs, nil, nil
	o.nextReplica = o.firstReplica
	return nil
}

// buildReplica adds one replica's local step and training step.
func (o *SyncReplicasOptimizer) buildReplica(s *graph.Scope, gvs []GradVar) (*graph.Node, error) {
	g := s.Graph()
	// The replica's own device: where the scope's device function puts an
	// ordinary op (a variable would go to a ps, shared by all replicas).
	dev := s.Device()
	if f := s.DeviceFunc(); f != nil {
		dev = f(&graph.NodeSpec{Op: "NoOp", Name: "sync_replicas_worker/probe", Device: s.Device()})
	}
	rs := graph.NewScopeWithGraph(g).WithDevice(dev).SubScope("sync_replicas_worker")
	ls := rs.Out("Variable", "local_step", nil, map[string]any{"dtype": o.globalStep.DType(), "shape": tensor.ScalarShape()})
	init := rs.AddNode("Assign", "local_step/init", []graph.Output{ls, o.globalStep.Value()}, nil)
	var applies []*graph.Node
	for i, gv := range gvs {
		if !o.sparse[i] {
			applies = append(applies, ops.AccumulatorApplyGradient(rs, o.accums[i], ls, gv.Grad))
			continue
		}
		sl := gv.Sparse
		if sl == nil {
			return nil, fmt.Errorf("train: sync replicas: the gradient of %s is dense in this replica and indexed slices in the first: "+
				"every replica must read the variable the same way (through embedding lookups only, or not)", gv.Var.Name())
		}
		applies = append(applies, ops.SparseAccumulatorApplyGradient(rs, o.accums[i], ls, sl.Indices, sl.Values, sl.DenseShape))
	}
	queue := o.queues[0]
	if o.firstReplica >= 0 {
		if o.nextReplica >= o.totalReplicas {
			return nil, fmt.Errorf("train: sync replicas: replica %d of %d: SetReplica takes 0 to %d", o.nextReplica, o.totalReplicas, o.totalReplicas-1)
		}
		queue = o.queues[o.nextReplica]
		if o.nextReplica == o.firstReplica {
			ds := rs.SubScope("drain_tokens")
			o.tokenSize = ops.QueueSize(ds, queue)
			o.tokenTake = ops.QueueDequeue(ds, queue, tensor.ScalarShape())
		}
		o.nextReplica++
	}
	token := ops.QueueDequeue(rs.WithControlDependencies(applies...), queue, tensor.ScalarShape())
	// The global step as it is after the token: adding zero is a read that
	// a control dependency can order (a variable's value is read when the
	// step starts). It is at least the token's value.
	gsScope := rs.WithDevice(o.globalStep.Node().Device()).WithControlDependencies(token.Node)
	fresh := ops.AssignAdd(gsScope.SubScope("fresh_step"), o.globalStep.Value(), ops.Scalar(gsScope, o.globalStep.DType(), 0))
	step := rs.AddNode("Assign", "step", []graph.Output{ls, fresh}, nil)
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("train: sync replicas: replica step: %w", err)
	}
	o.localInits = append(o.localInits, init)
	o.roundEnd = fresh.Node
	return step, nil
}

// RoundEnd returns, after ApplyGradients built a replica's step, the node
// of that step that runs once the replica's round is over (its token
// taken, the round's update applied), on the global step's device; nil
// before. What a replica's step does after it (a control dependency)
// happens in the same order in every run: after the round, before the
// next one.
func (o *SyncReplicasOptimizer) RoundEnd() *graph.Node { return o.roundEnd }

// LocalStepInit returns the node that sets the local step of every replica
// built on the current graph to the global step. Every worker runs it once
// the global step is initialised (the chief after initialising, the others
// after the model is ready), before its first training step. The local
// steps are not in the global variables collection: the chief's
// initializer does not touch them.
func (o *SyncReplicasOptimizer) LocalStepInit() *graph.Node {
	if len(o.localInits) == 0 || o.g == nil {
		return nil
	}
	if o.localInit == nil || o.localInitN != len(o.localInits) {
		o.localInit = ops.Group(graph.NewScopeWithGraph(o.g), "sync_replicas_worker/local_step_init", o.localInits...)
		o.localInitN = len(o.localInits)
	}
	return o.localInit
}

// ChiefUpdate returns the node of one round of the chief (take the mean
// gradients, apply them, increment the global step, release the replicas).
// ChiefQueueRunner runs it in a loop; tests may run it step by step, with
// the feeds of RoundFeeds.
func (o *SyncReplicasOptimizer) ChiefUpdate() *graph.Node { return o.update }

// RoundFeeds returns the feeds of a round of ChiefUpdate that aggregates n
// gradients.
func (o *SyncReplicasOptimizer) RoundFeeds(n int) map[graph.Output]*tensor.Tensor {
	return map[graph.Output]*tensor.Tensor{o.required: tensor.Scalar(int32(n))}
}

func (o *SyncReplicasOptimizer) built() error {
	if o.update == nil {
		return fmt.Errorf("train: sync replicas: ApplyGradients has not built a graph")
	}
	return nil
}

func (o *SyncReplicasOptimizer) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

// InitTokens prepares the synchronisation after the chief has initialised
// or restored the variables: it sets every accumulator's step to the global
// step (so that gradients from before a restore are dropped), then, with
// a shared token queue, enqueues one token for each backup worker
// (TotalReplicas-ReplicasToAggregate) holding the global step. Only the
// chief calls it, once, before it starts ChiefQueueRunner.
func (o *SyncReplicasOptimizer) InitTokens(ctx context.Context, sess *session.Session) error {
	if err := o.built(); err != nil {
		return err
	}
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{o.initTokens}); err != nil {
		return fmt.Errorf("train: sync replicas: initialising the accumulators: %w", err)
	}
	return nil
}

// ChiefQueueRunner runs the chief's rounds until ctx ends (it then returns
// nil) or Finish closes the token queue (nil too). It returns the error of
// a round that failed otherwise. Run it on its own goroutine in the chief,
// after InitTokens. It logs at Info when stale gradients were dropped.
//
// With a token queue per replica (SetReplica), each round aggregates
// min(ReplicasToAggregate, live replicas) gradients and releases the live
// replicas only (see SetLive). A round that a lost replica interrupts, or
// that outlives its step deadline, is abandoned: the gradients it gathered
// are discarded, the accumulators are set to the global step and every
// live replica is released, so that no replica waits for a round that
// cannot complete.
func (o *SyncReplicasOptimizer) ChiefQueueRunner(ctx context.Context, sess *session.Session) error {
	if err := o.built(); err != nil {
		return err
	}
	log := o.logger()
	last, err := o.readStep(ctx, sess)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var lastDropped int64
	fetches := append([]graph.Output{o.newStep}, o.dropped...)
	elastic := o.firstReplica >= 0
	for {
		live, welcome, changed, rctx, cancel := o.beginRound(ctx)
		n := o.totalReplicas
		if elastic {
			n = 0
			for _, ok := range live {
				if ok {
					n++
				}
			}
			if len(welcome) > 0 {
				// Replicas back from being lost may wait for a token
				// that no round gave them.
				if err := o.release(ctx, sess, welcome, last); err != nil && ctx.Err() == nil {
					log.Warn("sync replicas: releasing replicas that came back", "replicas", welcome, "err", err)
				}
			}
		}
		if n == 0 { // only the chief can be sure of itself; wait for news
			cancel()
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
			}
			continue
		}
		required := min(o.replicasToAggregate, n)
		var out []*tensor.Tensor
		roundStart := time.Now()
		if n == o.totalReplicas {
			out, err = sess.Run(rctx, o.RoundFeeds(required), fetches, []*graph.Node{o.update})
		} else if out, err = sess.Run(rctx, o.RoundFeeds(required), fetches, nil); err == nil {
			err = o.release(ctx, sess, liveIndices(live), out[0].Int64s()[0])
		}
		interrupted := rctx.Err() != nil
		cancel()
		if err != nil {
			if ctx.Err() != nil || errors.Is(CheckFinished(err), ErrTrainingFinished) {
				// The last round may have updated the variables and
				// failed to release the replicas (Finish closed the
				// queues): the global step says whether it counts.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				if gs, err := o.readStep(rctx, sess); err == nil && gs > last {
					o.aggregations.Add(gs - last)
				}
				return nil
			}
			if !elastic || !(interrupted || errors.Is(err, context.DeadlineExceeded)) {
				return fmt.Errorf("train: sync replicas: chief round: %w", err)
			}
			if !interrupted {
				log.Warn("sync replicas: a round did not complete within the step deadline; abandoning it",
					"global_step", last, "waiting_for_gradients", required, "live_replicas", liveIndices(live), "err", err)
			}
			if gs, err := o.abandonRound(ctx, sess); err != nil {
				if ctx.Err() != nil || errors.Is(CheckFinished(err), ErrTrainingFinished) {
					return nil
				}
				return err
			} else {
				last = gs
			}
			continue
		}
		o.aggregations.Add(1)
		last = out[0].Int64s()[0]
		var dropped int64
		for _, t := range out[1:] {
			dropped = max(dropped, t.Int64s()[0])
		}
		if o.Observe != nil {
			o.Observe(time.Since(roundStart), max(0, dropped-lastDropped))
		}
		if dropped > lastDropped {
			log.Info("sync replicas: stale gradients dropped", "global_step", out[0].Int64s()[0],
				"dropped", dropped, "new", dropped-lastDropped)
			lastDropped = dropped
		}
	}
}

// SetLive tells the chief's ChiefQueueRunner that replica i is lost
// (alive false: its gradients are no longer waited for, and a round
// waiting for them is abandoned) or back (it is given a token, in case it
// waits for one, and counted from the next round). The replicas start
// live. It is safe for concurrent use; it only has an effect with a token
// queue per replica (SetReplica).
func (o *SyncReplicasOptimizer) SetLive(i int, alive bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if i < 0 || i >= o.totalReplicas {
		return
	}
	if o.live == nil {
		o.live = make([]bool, o.totalReplicas)
		for k := range o.live {
			o.live[k] = true
		}
	}
	if o.live[i] == alive {
		return
	}
	o.live[i] = alive
	if alive {
		o.welcome = append(o.welcome, i)
	} else if o.roundCancel != nil {
		o.roundCancel()
	}
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
}

// Live returns the number of replicas counted as live.
func (o *SyncReplicasOptimizer) Live() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.live == nil {
		return o.totalReplicas
	}
	return len(liveIndices(o.live))
}

// beginRound snapshots the membership for a round and gives the round a
// context that SetLive cancels when a replica is lost.
func (o *SyncReplicasOptimizer) beginRound(ctx context.Context) (live []bool, welcome []int, changed <-chan struct{}, rctx context.Context, cancel context.CancelFunc) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.live == nil {
		live = make([]bool, o.totalReplicas)
		for k := range live {
			live[k] = true
		}
	} else {
		live = slices.Clone(o.live)
	}
	welcome, o.welcome = o.welcome, nil
	if o.changed == nil {
		o.changed = make(chan struct{})
	}
	rctx, cancel = context.WithCancel(ctx)
	o.roundCancel = cancel
	return live, welcome, o.changed, rctx, cancel
}

func liveIndices(live []bool) []int {
	var out []int
	for i, ok := range live {
		if ok {
			out = append(out, i)
		}
	}
	return out
}

// release puts a token holding step into the queues of the replicas.
func (o *SyncReplicasOptimizer) release(ctx context.Context, sess *session.Session, replicas []int, step int64) error {
	if len(replicas) == 0 {
		return nil
	}
	targets := make([]*graph.Node, len(replicas))
	for k, i := range replicas {
		targets[k] = o.releases[i]
	}
	token := tensor.New(o.globalStep.DType())
	token.SetFloat64At(0, float64(step))
	_, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{o.releaseToken: token}, nil, targets)
	return err
}

// Restart starts the chief's rounds afresh, for a chief that takes over
// from one that died: the round that one left may hold some replicas'
// gradients in some accumulators only, with those replicas waiting for
// tokens it will never give. It discards the gradients, sets the
// accumulators to the global step and releases every live replica (see
// ChiefQueueRunner). It needs a token queue per replica (SetReplica).
func (o *SyncReplicasOptimizer) Restart(ctx context.Context, sess *session.Session) error {
	if err := o.built(); err != nil {
		return err
	}
	if o.firstReplica < 0 {
		return fmt.Errorf("train: sync replicas: Restart needs a token queue per replica (SetReplica)")
	}
	_, err := o.abandonRound(ctx, sess)
	return err
}

// abandonRound recovers from a round that did not complete: some of its
// takes may have finished and others not, and the replicas that gave their
// gradients wait for tokens. It discards what the accumulators hold, sets
// them to the global step and releases the live replicas, which compute
// their next gradients on the current variables. It returns the global
// step.
func (o *SyncReplicasOptimizer) abandonRound(ctx context.Context, sess *session.Session) (int64, error) {
	gs, err := o.readStep(ctx, sess)
	if err != nil {
		return 0, err
	}
	out, err := sess.Run(ctx, nil, o.counts, nil)
	if err != nil {
		return 0, fmt.Errorf("train: sync replicas: reading the accumulators after an abandoned round: %w", err)
	}
	discarded := 0
	for i, t := range out {
		c := t.Int32s()[0]
		if c == 0 {
			continue
		}
		discarded = max(discarded, int(c))
		if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{o.drainRequired: tensor.Scalar(c)}, nil, []*graph.Node{o.drains[i]}); err != nil {
			return 0, fmt.Errorf("train: sync replicas: emptying accumulator %s: %w", o.vars[i].Name(), err)
		}
	}
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{o.initTokens}); err != nil {
		return 0, fmt.Errorf("train: sync replicas: resetting the accumulators: %w", err)
	}
	o.mu.Lock()
	live := liveIndices(o.live)
	if o.live == nil {
		live = nil
		for i := range o.totalReplicas {
			live = append(live, i)
		}
	}
	o.mu.Unlock()
	if err := o.release(ctx, sess, live, gs); err != nil {
		return 0, fmt.Errorf("train: sync replicas: releasing the replicas after an abandoned round: %w", err)
	}
	o.logger().Info("sync replicas: abandoned a round; the live replicas go on", "global_step", gs,
		"gradients_discarded", discarded, "live_replicas", live)
	return gs, nil
}

// DrainTokens empties this process's replica's token queue (SetReplica):
// a replica that starts again after it was lost finds there the tokens of
// rounds it took no part in, which would let it run ahead of the others.
// Each replica calls it before its first step.
func (o *SyncReplicasOptimizer) DrainTokens(ctx context.Context, sess *session.Session) error {
	if !o.tokenSize.Valid() {
		return nil
	}
	out, err := sess.Run(ctx, nil, []graph.Output{o.tokenSize}, nil)
	if err != nil {
		return fmt.Errorf("train: sync replicas: reading the replica's token queue: %w", err)
	}
	for range out[0].Int32s()[0] {
		if _, err := sess.Run(ctx, nil, []graph.Output{o.tokenTake}, nil); err != nil {
			return fmt.Errorf("train: sync replicas: emptying the replica's token queue: %w", err)
		}
	}
	return nil
}

// GlobalStep reads the global step.
func (o *SyncReplicasOptimizer) GlobalStep(ctx context.Context, sess *session.Session) (int64, error) {
	if err := o.built(); err != nil {
		return 0, err
	}
	return o.readStep(ctx, sess)
}

func (o *SyncReplicasOptimizer) readStep(ctx context.Context, sess *session.Session) (int64, error) {
	out, err := sess.Run(ctx, nil, []graph.Output{o.globalStep.Value()}, nil)
	if err != nil {
		return 0, fmt.Errorf("train: sync replicas: reading the global step: %w", err)
	}
	return out[0].Int64s()[0], nil
}

// Aggregations returns the number of rounds ChiefQueueRunner ran: the
// updates it applied, including a last one whose release Finish cut short.
func (o *SyncReplicasOptimizer) Aggregations() int64 { return o.aggregations.Load() }

// Dropped returns the number of stale gradients dropped so far: the largest
// count over the accumulators (each replica step offers one gradient to
// each, so they agree once all replicas have applied a step).
func (o *SyncReplicasOptimizer) Dropped(ctx context.Context, sess *session.Session) (int64, error) {
	if err := o.built(); err != nil {
		return 0, err
	}
	out, err := sess.Run(ctx, nil, o.dropped, nil)
	if err != nil {
		return 0, fmt.Errorf("train: sync replicas: reading the dropped counts: %w", err)
	}
	var n int64
	for _, t := range out {
		n = max(n, t.Int64s()[0])
	}
	return n, nil
}

// Finish closes the token queue: replicas waiting for a token, and every
// later step, fail with an error that CheckFinished turns into
// ErrTrainingFinished. The chief calls it when training ends, then cancels
// ChiefQueueRunner's context.
func (o *SyncReplicasOptimizer) Finish(ctx context.Context, sess *session.Session) error {
	if err := o.built(); err != nil {
		return err
	}
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{o.finish}); err != nil {
		return fmt.Errorf("train: sync replicas: closing the token queue: %w", err)
	}
	return nil
}

// RunStep runs a replica's training step (the node ApplyGradients returned)
// with feeds and returns the replica's new local step. Once the chief has
// called Finish the error wraps ErrTrainingFinished.
func (o *SyncReplicasOptimizer) RunStep(ctx context.Context, sess *session.Session, feeds map[graph.Output]*tensor.Tensor, step *graph.Node) (int64, error) {
	if step == nil || step.NumOutputs() == 0 {
		return 0, fmt.Errorf("train: sync replicas: no replica step to run")
	}
	out, err := sess.Run(ctx, feeds, []graph.Output{step.Output(0)}, nil)
	if err != nil {
		return 0, CheckFinished(err)
	}
	return out[0].Int64s()[0], nil
}

// CheckFinished returns err wrapped with ErrTrainingFinished if it reports
// a closed token queue (the rpc layer keeps the sentinel across processes),
// and err unchanged otherwise.
func CheckFinished(err error) error {
	if err == nil || errors.Is(err, ErrTrainingFinished) {
		return err
	}
	if errors.Is(err, cpu.ErrQueueClosed) {
		return fmt.Errorf("train: sync replicas: %w: %w", ErrTrainingFinished, err)
	}
	return err
}
