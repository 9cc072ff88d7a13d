package train_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
	"github.com/distflow/distflow/worker/workertest"
)

var syncQuiet = slog.New(slog.DiscardHandler)

// syncRig is a linear regression y = x*W + b trained by sync replicas. In
// one process all replicas share one graph; in a cluster each worker
// builds its own rig with one replica.
type syncRig struct {
	opt    *train.SyncReplicasOptimizer
	gs     *ops.Variable
	w, b   *ops.Variable
	xs, ys []graph.Output
	steps  []*graph.Node
	init   *graph.Node
	g      *graph.Graph
	seed   uint64 // added to the replica index to seed its batches
}

// syncBuild builds replicas of total replicas on s's graph, the first of
// them replica first (SetReplica; -1: one shared token queue).
func syncBuild(t testing.TB, s *graph.Scope, first, replicas, aggregate, total int, lr float32) *syncRig {
	t.Helper()
	r := &syncRig{g: s.Graph()}
	r.gs = train.CreateGlobalStep(s)
	r.w = ops.NewVariable(s, "W", tensor.Float32, []int{1, 1}, ops.ZerosInit())
	r.b = ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
	r.opt = train.NewSyncReplicas(train.NewGradientDescent(lr), aggregate, total)
	r.opt.Logger = syncQuiet
	if first >= 0 {
		r.opt.SetReplica(first)
	}
	for i := range replicas {
		rs := s.SubScope("replica")
		x := ops.Placeholder(rs, "x", tensor.Float32, tensor.MakeShape(-1, 1))
		y := ops.Placeholder(rs, "y", tensor.Float32, tensor.MakeShape(-1, 1))
		pred := ops.Add(rs, ops.MatMul(rs, x, r.w.Value(), false, false), r.b.Value())
		loss := ops.Mean(rs, ops.SquaredDifference(rs, pred, y), nil, false)
		gvs, err := r.opt.ComputeGradients(rs, loss, nil)
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		step, err := r.opt.ApplyGradients(rs, gvs, r.gs)
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		r.xs, r.ys, r.steps = append(r.xs, x), append(r.ys, y), append(r.steps, step)
	}
	r.init = ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

// initChief initialises the variables, the local steps and the
// accumulators, as the chief does.
func (r *syncRig) initChief(t testing.TB, sess *session.Session) {
	t.Helper()
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{r.init}); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{r.opt.LocalStepInit()}); err != nil {
		t.Fatal(err)
	}
	if err := r.opt.InitTokens(ctx, sess); err != nil {
		t.Fatal(err)
	}
}

// batch returns a batch of y = 2x + 10 with a little noise.
func syncBatch(rng *rand.Rand, n int) (x, y *tensor.Tensor) {
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range n {
		xs[i] = float32(rng.Float64()*2 - 1)
		ys[i] = 2*xs[i] + 10 + float32(rng.NormFloat64()*0.01)
	}
	return tensor.MustFromSlice(xs, n, 1), tensor.MustFromSlice(ys, n, 1)
}

// read returns the global step, W and b.
func (r *syncRig) read(t testing.TB, sess *session.Session) (int64, float32, float32) {
	t.Helper()
	out, err := sess.Run(context.Background(), nil, []graph.Output{r.gs.Value(), r.w.Value(), r.b.Value()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out[0].Int64s()[0], out[1].Float32s()[0], out[2].Float32s()[0]
}

// syncWorker runs replica i's steps on fresh batches until its local step
// reaches stopAt or training is finished; before each step it calls
// before (if not nil). It returns the number of steps run and of rounds
// skipped (a local step that advanced by more than one).
func (r *syncRig) worker(ctx context.Context, sess *session.Session, i int, stopAt int64, before func()) (steps, skipped int, err error) {
	rng := rand.New(rand.NewPCG(uint64(i)+r.seed, 7))
	prev := int64(-1)
	for {
		if before != nil {
			before()
		}
		x, y := syncBatch(rng, 16)
		ls, err := r.opt.RunStep(ctx, sess, map[graph.Output]*tensor.Tensor{r.xs[i]: x, r.ys[i]: y}, r.steps[i])
		if errors.Is(err, train.ErrTrainingFinished) {
			return steps, skipped, nil
		}
		if err != nil {
			return steps, skipped, err
		}
		if steps++; prev >= 0 && ls != prev+1 {
			skipped++
		}
		prev = ls
		if ls >= stopAt {
			return steps, skipped, nil
		}
	}
}

func syncSession(t testing.TB, g *graph.Graph, opts ...session.Option) *session.Session {
	t.Helper()
	sess, err := session.New(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// TestSyncReplicasOneUpdateHandComputed runs one round by hand: two
// replicas' gradients, one averaged update, the global step advanced once,
// both replicas released with the new step. Without backup workers there
// are no initial tokens: each replica's first step waits for the round.
func TestSyncReplicasOneUpdateHandComputed(t *testing.T) {
	r := syncBuild(t, graph.NewScope(), 0, 2, 2, 2, 0.1)
	sess := syncSession(t, r.g)
	r.initChief(t, sess)
	ctx := context.Background()
	feeds := []map[graph.Output]*tensor.Tensor{
		{r.xs[0]: tensor.MustFromSlice([]float32{1}, 1, 1), r.ys[0]: tensor.MustFromSlice([]float32{3}, 1, 1)},
		{r.xs[1]: tensor.MustFromSlice([]float32{2}, 1, 1), r.ys[1]: tensor.MustFromSlice([]float32{5}, 1, 1)},
	}
	type stepResult struct {
		ls  int64
		err error
	}
	results := make([]chan stepResult, 2)
	for i := range 2 {
		results[i] = make(chan stepResult, 1)
		go func() {
			ls, err := r.opt.RunStep(ctx, sess, feeds[i], r.steps[i])
			results[i] <- stepResult{ls, err}
		}()
	}
	// The round takes both gradients (it waits for them) and releases the
	// replicas.
	if _, err := sess.Run(ctx, r.opt.RoundFeeds(2), nil, []*graph.Node{r.opt.ChiefUpdate()}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if res := <-results[i]; res.err != nil || res.ls != 1 {
			t.Errorf("replica %d: local step %d, %v; want 1", i, res.ls, res.err)
		}
	}
	// At W=0, b=0: dL/dW = 2(xW+b-y)x = -6 and -20, dL/db = -6 and -10;
	// the means are -13 and -8, so W = 0.1*13 and b = 0.1*8.
	gs, w, b := r.read(t, sess)
	if gs != 1 || math.Abs(float64(w)-1.3) > 1e-6 || math.Abs(float64(b)-0.8) > 1e-6 {
		t.Errorf("after one round: global_step %d, W %v, b %v; want 1, 1.3, 0.8", gs, w, b)
	}
	if d, err := r.opt.Dropped(ctx, sess); err != nil || d != 0 {
		t.Errorf("dropped = %d, %v; want 0", d, err)
	}
}

// TestSyncReplicasStepIsOneBigBatchStep checks that a round over two
// replicas' half batches updates the variables as one step of the wrapped
// optimizer on the whole batch does, round after round.
func TestSyncReplicasStepIsOneBigBatchStep(t *testing.T) {
	const rounds, half = 5, 8
	r := syncBuild(t, graph.NewScope(), 0, 2, 2, 2, 0.1)
	sess := syncSession(t, r.g)
	r.initChief(t, sess)
	// The single process: the same model, one step on both halves.
	s := graph.NewScope()
	w := ops.NewVariable(s, "W", tensor.Float32, []int{1, 1}, ops.ZerosInit())
	b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 1))
	y := ops.Placeholder(s, "y", tensor.Float32, tensor.MakeShape(-1, 1))
	loss := ops.Mean(s, ops.SquaredDifference(s, ops.Add(s, ops.MatMul(s, x, w.Value(), false, false), b.Value()), y), nil, false)
	step, err := train.Minimize(s, train.NewGradientDescent(0.1), loss, nil)
	if err != nil {
		t.Fatal(err)
	}
	init := ops.GlobalVariablesInitializer(s)
	single := syncSession(t, s.Graph())
	ctx := context.Background()
	if _, err := single.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(3, 4))
	xs, ys := make([][2]*tensor.Tensor, rounds), make([][2]*tensor.Tensor, rounds)
	for k := range rounds {
		for i := range 2 {
			xs[k][i], ys[k][i] = syncBatch(rng, half)
		}
		both := func(a, b *tensor.Tensor) *tensor.Tensor {
			return tensor.MustFromSlice(append(append([]float32(nil), a.Float32s()...), b.Float32s()...), 2*half, 1)
		}
		if _, err := single.Run(ctx, map[graph.Output]*tensor.Tensor{x: both(xs[k][0], xs[k][1]), y: both(ys[k][0], ys[k][1])}, nil, []*graph.Node{step}); err != nil {
			t.Fatal(err)
		}
	}
	chiefCtx, stopChief := context.WithCancel(ctx)
	chief := make(chan error, 1)
	go func() { chief <- r.opt.ChiefQueueRunner(chiefCtx, sess) }()
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			for k := range rounds {
				if _, err := r.opt.RunStep(ctx, sess, map[graph.Output]*tensor.Tensor{r.xs[i]: xs[k][i], r.ys[i]: ys[k][i]}, r.steps[i]); err != nil {
					t.Errorf("replica %d, round %d: %v", i, k, err)
					return
				}
			}
		})
	}
	wg.Wait()
	stopChief()
	if err := <-chief; err != nil {
		t.Errorf("chief: %v", err)
	}
	gs, gotW, gotB := r.read(t, sess)
	out, err := single.Run(ctx, nil, []graph.Output{w.Value(), b.Value()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantW, wantB := out[0].Float32s()[0], out[1].Float32s()[0]
	if gs != rounds || math.Abs(float64(gotW-wantW)) > 1e-5 || math.Abs(float64(gotB-wantB)) > 1e-5 {
		t.Errorf("after %d rounds (global step %d): W %v, b %v; one process on the whole batches: W %v, b %v",
			rounds, gs, gotW, gotB, wantW, wantB)
	}
}

// TestSyncReplicasLinearRegression trains with two replicas and the chief's
// runner: one update per round, and the model converges. With a token
// queue per replica every round takes one gradient from each: no replica
// skips a round and none is dropped. With the shared queue (TensorFlow's
// scheme) a fast replica may take the other's token.
func TestSyncReplicasLinearRegression(t *testing.T) {
	const steps = 2000
	for _, tc := range []struct {
		name     string
		first    int
		lockstep bool
	}{
		{"token queue per replica", 0, true},
		{"shared token queue", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := syncBuild(t, graph.NewScope(), tc.first, 2, 2, 2, 0.1)
			sess := syncSession(t, r.g)
			r.initChief(t, sess)
			chiefCtx, stopChief := context.WithCancel(context.Background())
			chief := make(chan error, 1)
			go func() { chief <- r.opt.ChiefQueueRunner(chiefCtx, sess) }()
			var wg sync.WaitGroup
			var skipped [2]int
			for i := range 2 {
				wg.Go(func() {
					var err error
					if _, skipped[i], err = r.worker(context.Background(), sess, i, steps, nil); err != nil {
						t.Errorf("replica %d: %v", i, err)
					}
				})
			}
			if !tc.lockstep {
				// A replica whose token was taken may wait for a round
				// that its partner, already done, will not make.
				defer func() {
					_ = r.opt.Finish(context.Background(), sess)
				}()
			}
			wg.Wait()
			stopChief()
			if err := <-chief; err != nil {
				t.Errorf("chief: %v", err)
			}
			gs, w, b := r.read(t, sess)
			if gs < steps || gs != r.opt.Aggregations() {
				t.Errorf("global_step %d after %d rounds, want %d or more, equal", gs, r.opt.Aggregations(), steps)
			}
			if math.Abs(float64(w)-2) >= 0.05 || math.Abs(float64(b)-10) >= 0.1 {
				t.Errorf("W = %v, b = %v; want |W-2| < 0.05, |b-10| < 0.1", w, b)
			}
			dropped, err := r.opt.Dropped(context.Background(), sess)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rounds skipped by each replica %v; dropped %d", skipped, dropped)
			if tc.lockstep && (skipped != [2]int{} || dropped != 0) {
				t.Errorf("rounds skipped %v, gradients dropped %d; want none without backup workers", skipped, dropped)
			}
		})
	}
}

// TestSyncReplicasBackupWorker runs 3 replicas aggregating 2, one of them
// released only every 10th step of replica 0: the rounds go at the pace of
// the two fast ones, the slow one's late gradients are dropped (and it
// skips ahead to the current step), and Finish releases it at the end.
func TestSyncReplicasBackupWorker(t *testing.T) {
	const steps = 60
	r := syncBuild(t, graph.NewScope(), 0, 3, 2, 3, 0.1)
	sess := syncSession(t, r.g)
	r.initChief(t, sess)
	ctx := context.Background()
	chiefCtx, stopChief := context.WithCancel(ctx)
	chief := make(chan error, 1)
	go func() { chief <- r.opt.ChiefQueueRunner(chiefCtx, sess) }()

	release := make(chan struct{}, 1)
	var n0 int
	tick := func() {
		if n0++; n0%10 == 0 {
			select {
			case release <- struct{}{}:
			default:
			}
		}
	}
	var fast [2]int
	var fastWG sync.WaitGroup
	for i := range 2 {
		before := func() {}
		if i == 0 {
			before = tick
		}
		fastWG.Go(func() {
			n, _, err := r.worker(ctx, sess, i, steps, before)
			if err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
			fast[i] = n
		})
	}
	slow := make(chan int, 1)
	go func() {
		// It stops at the last round too: the tokens of the rounds it
		// missed are still in its queue after Finish.
		n, _, err := r.worker(ctx, sess, 2, steps, func() { <-release })
		if err != nil {
			t.Errorf("slow replica: %v", err)
		}
		slow <- n
	}()
	fastWG.Wait()
	// The slow replica is waiting for its release or for a token: Finish
	// ends it either way.
	if err := r.opt.Finish(ctx, sess); err != nil {
		t.Fatal(err)
	}
	close(release)
	slowSteps := <-slow
	stopChief()
	if err := <-chief; err != nil {
		t.Errorf("chief: %v", err)
	}
	gs, _, _ := r.read(t, sess)
	if gs < steps || gs != r.opt.Aggregations() {
		t.Errorf("global_step %d after %d rounds, want >= %d and equal", gs, r.opt.Aggregations(), steps)
	}
	if slowSteps >= fast[0] {
		t.Errorf("the slow replica ran %d steps, the fast ones %v: the rounds did not go at the fast pace", slowSteps, fast)
	}
	dropped, err := r.opt.Dropped(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("global_step %d; steps: fast %v, slow %d; stale gradients dropped: %d", gs, fast, slowSteps, dropped)
	// The fast replicas waste no work: only a gradient of the slow one,
	// or one that a gradient of the slow one displaced from its round, is
	// dropped.
	if dropped > int64(slowSteps) {
		t.Errorf("%d gradients dropped for %d steps of the slow replica", dropped, slowSteps)
	}
}

// TestSyncReplicasFinishReleasesWaitingReplica checks that replicas
// waiting for a token that will never come end with ErrTrainingFinished.
func TestSyncReplicasFinishReleasesWaitingReplica(t *testing.T) {
	s := graph.NewScope()
	r := syncBuild(t, s, 0, 2, 2, 2, 0.1)
	var count graph.Output
	for _, n := range r.g.Nodes() {
		if n.Op() == "ConditionalAccumulator" {
			count = ops.AccumulatorNumAccumulated(s, n.Output(0))
			break
		}
	}
	sess := syncSession(t, r.g)
	r.initChief(t, sess)
	ctx := context.Background()
	x, y := syncBatch(rand.New(rand.NewPCG(1, 2)), 4)
	done := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := r.opt.RunStep(ctx, sess, map[graph.Output]*tensor.Tensor{r.xs[i]: x, r.ys[i]: y}, r.steps[i])
			done <- err
		}()
	}
	// Both gradients are in once the accumulators count them; then both
	// replicas wait for a token.
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, err := sess.Run(ctx, nil, []graph.Output{count}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Int32s()[0] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the accumulator holds %d gradients after 10 s, want 2", out[0].Int32s()[0])
		}
		time.Sleep(time.Millisecond)
	}
	if err := r.opt.Finish(ctx, sess); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-done; !errors.Is(err, train.ErrTrainingFinished) {
			t.Errorf("err = %v, want train.ErrTrainingFinished", err)
		}
	}
	// The accumulators hold enough gradients for a round, whose release
	// finds the queue closed: the runner ends without error.
	if err := r.opt.ChiefQueueRunner(ctx, sess); err != nil {
		t.Errorf("chief runner after Finish: %v", err)
	}
}

func TestSyncReplicasBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name             string
		aggregate, total int
		noGlobalStep     bool
		want             string
	}{
		{"aggregate 0", 0, 2, false, "want 1 <= aggregate <= total"},
		{"total below aggregate", 3, 2, false, "want 1 <= aggregate <= total"},
		{"no global step", 1, 1, true, "a global step is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := graph.NewScope()
			gs := train.CreateGlobalStep(s)
			w := ops.NewVariable(s, "w", tensor.Float32, []int{1}, ops.ZerosInit())
			loss := ops.Mean(s, ops.Mul(s, w.Value(), w.Value()), nil, false)
			opt := train.NewSyncReplicas(train.NewGradientDescent(0.1), tc.aggregate, tc.total)
			gvs, err := opt.ComputeGradients(s, loss, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.noGlobalStep {
				gs = nil
			}
			if _, err := opt.ApplyGradients(s, gvs, gs); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestSyncReplicasInMemoryCluster trains between-graph over an in-memory
// cluster of 1 ps and 2 workers: variables, accumulators and the token
// queue on the ps, each worker's local step on its own task.
func TestSyncReplicasInMemoryCluster(t *testing.T) {
	const (
		ps    = "/job:ps/task:0"
		steps = 2000
	)
	workers := []string{"/job:worker/task:0", "/job:worker/task:1"}
	net := workertest.NewCluster(ps, workers[0], workers[1])
	var devices []string
	for _, task := range net.Tasks() {
		devices = append(devices, task+"/cpu:0")
	}
	rigs := make([]*syncRig, 2)
	sessions := make([]*session.Session, 2)
	for i, task := range workers {
		s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{PSTasks: 1, WorkerDevice: task}))
		rigs[i] = syncBuild(t, s, i, 1, 2, 2, 0.1)
		m := master.New(master.Config{Task: task, Devices: devices, Workers: net.From(task), Logger: syncQuiet})
		sessions[i] = syncSession(t, rigs[i].g, session.WithMaster(m, &pb.SessionConfig{DeviceFilters: []string{"/job:ps", task}}))
	}
	for _, n := range rigs[0].g.Nodes() {
		if (strings.Contains(n.Op(), "Accumulator") || strings.Contains(n.Op(), "Queue")) && !strings.HasPrefix(n.Device(), "/job:ps") {
			t.Errorf("node %s is on %q, want the ps", n, n.Device())
		}
		if n.Name() == "sync_replicas_worker/local_step" && !strings.HasPrefix(n.Device(), workers[0]) {
			t.Errorf("local step on %q, want %s", n.Device(), workers[0])
		}
	}
	ctx := context.Background()
	rigs[0].initChief(t, sessions[0])
	if _, err := sessions[1].Run(ctx, nil, nil, []*graph.Node{rigs[1].opt.LocalStepInit()}); err != nil {
		t.Fatal(err)
	}
	chiefCtx, stopChief := context.WithCancel(ctx)
	chief := make(chan error, 1)
	go func() { chief <- rigs[0].opt.ChiefQueueRunner(chiefCtx, sessions[0]) }()
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			// Each rig has one replica, index 0 of its own graph.
			r := *rigs[i]
			r.seed = uint64(100 * i)
			if _, _, err := r.worker(ctx, sessions[i], 0, steps, nil); err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	stopChief()
	if err := <-chief; err != nil {
		t.Errorf("chief: %v", err)
	}
	gs, w, b := rigs[1].read(t, sessions[1])
	if gs != steps || rigs[0].opt.Aggregations() != steps {
		t.Errorf("global_step %d after %d rounds, want %d each", gs, rigs[0].opt.Aggregations(), steps)
	}
	if math.Abs(float64(w)-2) >= 0.05 || math.Abs(float64(b)-10) >= 0.1 {
		t.Errorf("W = %v, b = %v after %d steps; want |W-2| < 0.05, |b-10| < 0.1", w, b, steps)
	}
	t.Logf("cluster: global_step %d, W %v, b %v", gs, w, b)
}
