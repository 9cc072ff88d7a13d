package cpu_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// syncAccGraph is an accumulator of float32[2] with its ops, fed by
// placeholders.
type syncAccGraph struct {
	g                 *graph.Graph
	localStep, grad   graph.Output
	setStep, required graph.Output
	apply, set        *graph.Node
	mean, offered     graph.Output
	num, dropped      graph.Output
}

func syncNewAcc(t *testing.T, shape tensor.Shape) *syncAccGraph {
	t.Helper()
	s := graph.NewScope()
	a := &syncAccGraph{g: s.Graph()}
	h := ops.ConditionalAccumulator(s, tensor.Float32, shape, "")
	a.localStep = ops.Placeholder(s, "local_step", tensor.Int64, tensor.ScalarShape())
	a.grad = ops.Placeholder(s, "grad", tensor.Float32, tensor.UnknownShape())
	a.setStep = ops.Placeholder(s, "set_step", tensor.Int64, tensor.ScalarShape())
	a.required = ops.Placeholder(s, "required", tensor.Int32, tensor.ScalarShape())
	a.apply = ops.AccumulatorApplyGradient(s, h, a.localStep, a.grad)
	a.set = ops.AccumulatorSetGlobalStep(s, h, a.setStep)
	a.mean, a.offered = ops.AccumulatorTakeGradient(s, h, a.required)
	a.num = ops.AccumulatorNumAccumulated(s, h)
	a.dropped = ops.AccumulatorNumDropped(s, h)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return a
}

func syncSession(t *testing.T, g *graph.Graph) *session.Session {
	t.Helper()
	sess, err := session.New(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

func (a *syncAccGraph) applyGrad(ctx context.Context, sess *session.Session, step int64, g ...float32) error {
	_, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{
		a.localStep: tensor.Scalar(step), a.grad: tensor.MustFromSlice(g, len(g)),
	}, nil, []*graph.Node{a.apply})
	return err
}

func (a *syncAccGraph) take(ctx context.Context, sess *session.Session, n int32) (*tensor.Tensor, int64, error) {
	out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{a.required: tensor.Scalar(n)}, []graph.Output{a.mean, a.offered}, nil)
	if err != nil {
		return nil, 0, err
	}
	return out[0], out[1].Int64s()[0], nil
}

func (a *syncAccGraph) counts(t *testing.T, sess *session.Session) (num int32, dropped int64) {
	t.Helper()
	out, err := sess.Run(context.Background(), nil, []graph.Output{a.num, a.dropped}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out[0].Int32s()[0], out[1].Int64s()[0]
}

// TestAccumulatorRounds replays a script of applies and takes against one
// accumulator: the mean of the fresh gradients, stale ones dropped.
func TestAccumulatorRounds(t *testing.T) {
	a := syncNewAcc(t, tensor.MakeShape(2))
	sess := syncSession(t, a.g)
	ctx := context.Background()
	type apply struct {
		step int64
		g    []float32
	}
	rounds := []struct {
		applies     []apply
		wantNum     int32
		wantDropped int64
		take        int32
		wantMean    []float32
		wantOffered int64
	}{
		// Round 0 (global step 0): two fresh gradients.
		{applies: []apply{{0, []float32{1, 2}}, {0, []float32{3, 6}}}, wantNum: 2, take: 2, wantMean: []float32{2, 4}, wantOffered: 2},
		// Round 1: a late gradient of step 0 is dropped; steps 1 and 5 count.
		{applies: []apply{{0, []float32{100, 100}}, {1, []float32{1, 1}}, {5, []float32{2, 3}}, {1, []float32{3, 2}}},
			wantNum: 3, wantDropped: 1, take: 2, wantMean: []float32{2, 2}, wantOffered: 4},
		// Round 2: the take needs only one.
		{applies: []apply{{2, []float32{-1, 1}}}, wantNum: 1, wantDropped: 1, take: 1, wantMean: []float32{-1, 1}, wantOffered: 1},
	}
	for i, r := range rounds {
		for _, ap := range r.applies {
			if err := a.applyGrad(ctx, sess, ap.step, ap.g...); err != nil {
				t.Fatalf("round %d: apply: %v", i, err)
			}
		}
		if num, dropped := a.counts(t, sess); num != r.wantNum || dropped != r.wantDropped {
			t.Errorf("round %d: accumulated %d, dropped %d; want %d, %d", i, num, dropped, r.wantNum, r.wantDropped)
		}
		mean, offered, err := a.take(ctx, sess, r.take)
		if err != nil {
			t.Fatalf("round %d: take: %v", i, err)
		}
		if want := tensor.MustFromSlice(r.wantMean, 2); !tensor.Equal(mean, want) || offered != r.wantOffered {
			t.Errorf("round %d: take = %v (offered %d), want %v (%d)", i, mean, offered, want, r.wantOffered)
		}
		if num, _ := a.counts(t, sess); num != 0 {
			t.Errorf("round %d: %d gradients left after the take", i, num)
		}
	}
}

func TestAccumulatorSetGlobalStep(t *testing.T) {
	a := syncNewAcc(t, tensor.UnknownShape())
	sess := syncSession(t, a.g)
	ctx := context.Background()
	if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{a.setStep: tensor.Scalar(int64(7))}, nil, []*graph.Node{a.set}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []int64{6, 7, 8} {
		if err := a.applyGrad(ctx, sess, step, 1); err != nil {
			t.Fatal(err)
		}
	}
	if num, dropped := a.counts(t, sess); num != 2 || dropped != 1 {
		t.Errorf("after steps 6, 7, 8 at global step 7: accumulated %d, dropped %d; want 2, 1", num, dropped)
	}
}

// TestAccumulatorTakeWaits checks that a take returns only once enough
// gradients are there.
func TestAccumulatorTakeWaits(t *testing.T) {
	a := syncNewAcc(t, tensor.MakeShape(1))
	sess := syncSession(t, a.g)
	ctx := context.Background()
	type result struct {
		mean *tensor.Tensor
		err  error
	}
	done := make(chan result, 1)
	go func() {
		m, _, err := a.take(ctx, sess, 2)
		done <- result{m, err}
	}()
	if err := a.applyGrad(ctx, sess, 0, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		t.Fatalf("the take returned with one gradient of two: %v, %v", r.mean, r.err)
	default:
	}
	if err := a.applyGrad(ctx, sess, 0, 3); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.mean.Float32s()[0] != 2 {
		t.Fatalf("take = %v, %v; want [2]", r.mean, r.err)
	}
}

// TestBlockedKernelsEndWithTheStep checks that a cancelled step ends a take
// or a dequeue that waits.
func TestBlockedKernelsEndWithTheStep(t *testing.T) {
	a := syncNewAcc(t, tensor.MakeShape(1))
	s := graph.NewScopeWithGraph(a.g)
	q := ops.FIFOQueue(s, tensor.Int64, -1, "")
	deq := ops.QueueDequeue(s, q, tensor.ScalarShape())
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess := syncSession(t, a.g)
	for name, run := range map[string]func(ctx context.Context) error{
		"take": func(ctx context.Context) error { _, _, err := a.take(ctx, sess, 1); return err },
		"dequeue": func(ctx context.Context) error {
			_, err := sess.Run(ctx, nil, []graph.Output{deq}, nil)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- run(ctx) }()
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want one wrapping context.Canceled", err)
			}
		})
	}
	// The accumulator still works after a cancelled take.
	if err := a.applyGrad(context.Background(), sess, 0, 4); err != nil {
		t.Fatal(err)
	}
	if m, _, err := a.take(context.Background(), sess, 1); err != nil || m.Float32s()[0] != 4 {
		t.Errorf("take after a cancelled one = %v, %v; want [4]", m, err)
	}
}

func TestAccumulatorErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		run  func(a *syncAccGraph, sess *session.Session) error
		want string
	}{
		{"wrong shape", func(a *syncAccGraph, sess *session.Session) error { return a.applyGrad(ctx, sess, 0, 1, 2, 3) },
			"holds shape [2], got a gradient of shape [3]"},
		{"num_required 0", func(a *syncAccGraph, sess *session.Session) error { _, _, err := a.take(ctx, sess, 0); return err },
			"num_required must be at least 1"},
		{"wrong dtype", func(a *syncAccGraph, sess *session.Session) error {
			s := graph.NewScopeWithGraph(a.g)
			h := a.apply.Input(0)
			n := ops.AccumulatorApplyGradient(s, h, ops.Const(s, int64(0)), ops.Const(s, []float64{1, 2}))
			if err := s.Err(); err != nil {
				return err
			}
			_, err := sess.Run(ctx, nil, nil, []*graph.Node{n})
			return err
		}, "holds float32, got a float64 gradient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := syncNewAcc(t, tensor.MakeShape(2))
			err := tc.run(a, syncSession(t, a.g))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestHandleMustComeFromTheResource checks the kernel factory's check of
// input 0.
func TestHandleMustComeFromTheResource(t *testing.T) {
	s := graph.NewScope()
	fake := ops.Const(s, int64(0))
	n := s.AddNode("QueueSize", "size", []graph.Output{fake}, nil)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	f, err := kernel.Lookup("QueueSize", kernel.CPU)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f(n); err == nil || !strings.Contains(err.Error(), "must come directly from a FIFOQueue node") {
		t.Errorf("err = %v, want a complaint about input 0", err)
	}
}

func TestSharedNamesAndConflicts(t *testing.T) {
	s := graph.NewScope()
	q1 := ops.FIFOQueue(s, tensor.Int64, -1, "tokens")
	q2 := ops.FIFOQueue(s, tensor.Int64, -1, "tokens")
	bad := ops.FIFOQueue(s, tensor.Int64, 5, "tokens")
	enq := ops.QueueEnqueueMany(s, q1, ops.Const(s, []int64{1, 2}))
	size2 := ops.QueueSize(s, q2)
	sizeBad := ops.QueueSize(s, bad)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess := syncSession(t, s.Graph())
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{enq}); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{size2}, nil)
	if err != nil || out[0].Int32s()[0] != 2 {
		t.Errorf("size through the second node = %v, %v; want 2", out, err)
	}
	if _, err := sess.Run(ctx, nil, []graph.Output{sizeBad}, nil); !errors.Is(err, cpu.ErrResourceConflict) {
		t.Errorf("err = %v, want cpu.ErrResourceConflict", err)
	}
	// Another session (another resource container) has its own queue.
	other := syncSession(t, s.Graph())
	if out, err := other.Run(ctx, nil, []graph.Output{size2}, nil); err != nil || out[0].Int32s()[0] != 0 {
		t.Errorf("size in another session = %v, %v; want 0", out, err)
	}
}

// syncQueueGraph is an int64 queue of the given capacity with its ops.
type syncQueueGraph struct {
	g      *graph.Graph
	values graph.Output
	enq    *graph.Node
	deq    graph.Output
	size   graph.Output
	close  *graph.Node
	cancel *graph.Node
}

func syncNewQueue(t *testing.T, capacity int) *syncQueueGraph {
	t.Helper()
	s := graph.NewScope()
	q := &syncQueueGraph{g: s.Graph()}
	h := ops.FIFOQueue(s, tensor.Int64, capacity, "")
	q.values = ops.Placeholder(s, "values", tensor.Int64, tensor.MakeShape(-1))
	q.enq = ops.QueueEnqueueMany(s, h, q.values)
	q.deq = ops.QueueDequeue(s, h, tensor.ScalarShape())
	q.size = ops.QueueSize(s, h)
	q.close = ops.QueueClose(s, h, false)
	q.cancel = ops.QueueClose(s, h, true)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return q
}

func (q *syncQueueGraph) enqueue(ctx context.Context, sess *session.Session, v ...int64) error {
	_, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{q.values: tensor.MustFromSlice(v, len(v))}, nil, []*graph.Node{q.enq})
	return err
}

func (q *syncQueueGraph) dequeue(ctx context.Context, sess *session.Session) (int64, error) {
	out, err := sess.Run(ctx, nil, []graph.Output{q.deq}, nil)
	if err != nil {
		return 0, err
	}
	return out[0].Int64s()[0], nil
}

func TestQueueOrderAndSize(t *testing.T) {
	q := syncNewQueue(t, -1)
	sess := syncSession(t, q.g)
	ctx := context.Background()
	if err := q.enqueue(ctx, sess, 4, 5, 6); err != nil {
		t.Fatal(err)
	}
	if err := q.enqueue(ctx, sess, 7); err != nil {
		t.Fatal(err)
	}
	if out, err := sess.Run(ctx, nil, []graph.Output{q.size}, nil); err != nil || out[0].Int32s()[0] != 4 {
		t.Fatalf("size = %v, %v; want 4", out, err)
	}
	for _, want := range []int64{4, 5, 6, 7} {
		if got, err := q.dequeue(ctx, sess); err != nil || got != want {
			t.Errorf("dequeue = %d, %v; want %d", got, err, want)
		}
	}
}

func TestQueueCapacity(t *testing.T) {
	q := syncNewQueue(t, 2)
	sess := syncSession(t, q.g)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- q.enqueue(ctx, sess, 1, 2, 3) }()
	// The enqueue cannot finish before a dequeue makes room for 3.
	if got, err := q.dequeue(ctx, sess); err != nil || got != 1 {
		t.Fatalf("dequeue = %d, %v; want 1", got, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, want := range []int64{2, 3} {
		if got, err := q.dequeue(ctx, sess); err != nil || got != want {
			t.Errorf("dequeue = %d, %v; want %d", got, err, want)
		}
	}
}

// TestQueueClose checks that closing wakes a waiting dequeue, lets the
// remaining elements out, then fails dequeues and enqueues.
func TestQueueClose(t *testing.T) {
	q := syncNewQueue(t, -1)
	sess := syncSession(t, q.g)
	ctx := context.Background()
	waiting := make(chan error, 1)
	go func() { _, err := q.dequeue(ctx, sess); waiting <- err }()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{q.close}); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; !errors.Is(err, cpu.ErrQueueClosed) {
		t.Errorf("waiting dequeue: err = %v, want cpu.ErrQueueClosed", err)
	}
	if err := q.enqueue(ctx, sess, 1); !errors.Is(err, cpu.ErrQueueClosed) {
		t.Errorf("enqueue after close: err = %v, want cpu.ErrQueueClosed", err)
	}

	// Elements enqueued before the close still come out.
	q = syncNewQueue(t, 1)
	sess = syncSession(t, q.g)
	if err := q.enqueue(ctx, sess, 9); err != nil {
		t.Fatal(err)
	}
	pending := make(chan error, 1)
	go func() { pending <- q.enqueue(ctx, sess, 10) }() // waits for room
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{q.cancel}); err != nil {
		t.Fatal(err)
	}
	if err := <-pending; !errors.Is(err, cpu.ErrQueueClosed) {
		t.Errorf("pending enqueue after close(cancel): err = %v, want cpu.ErrQueueClosed", err)
	}
	if got, err := q.dequeue(ctx, sess); err != nil || got != 9 {
		t.Errorf("dequeue after close = %d, %v; want 9", got, err)
	}
	if _, err := q.dequeue(ctx, sess); !errors.Is(err, cpu.ErrQueueClosed) {
		t.Errorf("dequeue from closed empty queue: err = %v, want cpu.ErrQueueClosed", err)
	}
}

func TestSyncKernelsDeclareMayBlock(t *testing.T) {
	a := syncNewAcc(t, tensor.MakeShape(1))
	q := syncNewQueue(t, -1)
	for _, n := range []*graph.Node{a.mean.Node, q.enq, q.deq.Node, a.apply, q.size.Node} {
		f, err := kernel.Lookup(n.Op(), kernel.CPU)
		if err != nil {
			t.Fatal(err)
		}
		k, err := f(n)
		if err != nil {
			t.Fatal(err)
		}
		b, ok := k.(interface{ MayBlock() bool })
		blocks := ok && b.MayBlock()
		if want := n.Op() != "AccumulatorApplyGradient" && n.Op() != "QueueSize"; blocks != want {
			t.Errorf("%s: MayBlock = %v, want %v", n.Op(), blocks, want)
		}
	}
}

// syncSparseAccGraph is a sparse accumulator of float32[rows, 2] beside a
// dense one of the same shape, fed the same indexed slices: the dense one
// through their dense form (GatherGrad), as the sync path did before the
// sparse accumulator.
type syncSparseAccGraph struct {
	g                            *graph.Graph
	localStep, indices, values   graph.Output
	required                     graph.Output
	applySparse, applyDense, set *graph.Node
	setStep                      graph.Output
	takeIdx, takeVals, takeShape graph.Output
	sparseOffered, mean, offered graph.Output
	num, dropped                 graph.Output
	denseNum, denseDropped       graph.Output
}

func syncNewSparseAcc(t *testing.T, rows int) *syncSparseAccGraph {
	t.Helper()
	s := graph.NewScope()
	a := &syncSparseAccGraph{g: s.Graph()}
	shape := tensor.MakeShape(rows, 2)
	sh := ops.SparseConditionalAccumulator(s, tensor.Float32, shape, "")
	dh := ops.ConditionalAccumulator(s, tensor.Float32, shape, "")
	a.localStep = ops.Placeholder(s, "local_step", tensor.Int64, tensor.ScalarShape())
	a.indices = ops.Placeholder(s, "indices", tensor.Int64, tensor.MakeShape(-1))
	a.values = ops.Placeholder(s, "values", tensor.Float32, tensor.MakeShape(-1, 2))
	a.required = ops.Placeholder(s, "required", tensor.Int32, tensor.ScalarShape())
	a.setStep = ops.Placeholder(s, "set_step", tensor.Int64, tensor.ScalarShape())
	dense := ops.Const(s, []int32{int32(rows), 2})
	a.applySparse = ops.SparseAccumulatorApplyGradient(s, sh, a.localStep, a.indices, a.values, dense)
	a.applyDense = ops.AccumulatorApplyGradient(s, dh, a.localStep, ops.GatherGrad(s, a.values, a.indices, dense, 0))
	a.set = ops.Group(s, "set", ops.AccumulatorSetGlobalStep(s, sh, a.setStep), ops.AccumulatorSetGlobalStep(s, dh, a.setStep))
	a.takeIdx, a.takeVals, a.takeShape, a.sparseOffered = ops.SparseAccumulatorTakeGradient(s, sh, a.required)
	a.mean, a.offered = ops.AccumulatorTakeGradient(s, dh, a.required)
	a.num, a.dropped = ops.AccumulatorNumAccumulated(s, sh), ops.AccumulatorNumDropped(s, sh)
	a.denseNum, a.denseDropped = ops.AccumulatorNumAccumulated(s, dh), ops.AccumulatorNumDropped(s, dh)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *syncSparseAccGraph) apply(ctx context.Context, sess *session.Session, step int64, ids []int64, vals []float32) error {
	_, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{
		a.localStep: tensor.Scalar(step), a.indices: tensor.MustFromSlice(ids, len(ids)),
		a.values: tensor.MustFromSlice(vals, len(ids), 2),
	}, nil, []*graph.Node{a.applySparse, a.applyDense})
	return err
}

// TestSparseAccumulatorEqualsDense replays random rounds (ids repeated
// within a gradient and across gradients, stale gradients, num_required
// below the number applied, a global step set by hand) against a sparse
// and a dense accumulator: the sparse mean, scattered, is the dense mean
// bit for bit, its indices are the distinct touched rows in ascending
// order, and the counts agree.
func TestSparseAccumulatorEqualsDense(t *testing.T) {
	const rows = 50
	a := syncNewSparseAcc(t, rows)
	sess := syncSession(t, a.g)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(17, 1))
	step := int64(0)
	for round := range 12 {
		if round == 6 { // jump ahead: every older gradient is stale
			step += 3
			if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{a.setStep: tensor.Scalar(step)}, nil, []*graph.Node{a.set}); err != nil {
				t.Fatal(err)
			}
		}
		applied := 0
		touched := map[int64]bool{}
		for range 1 + rng.IntN(4) {
			local := step
			if rng.IntN(4) == 0 {
				local = step - 1 - int64(rng.IntN(2)) // stale (or, at step 0, from before the start)
			}
			n := rng.IntN(12)
			ids, vals := make([]int64, n), make([]float32, 2*n)
			for i := range ids {
				ids[i] = int64(rng.IntN(rows / 5)) // few distinct: repeats within and across gradients
				vals[2*i], vals[2*i+1] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			if err := a.apply(ctx, sess, local, ids, vals); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if local >= step {
				applied++
				for _, id := range ids {
					touched[id] = true
				}
			}
		}
		out, err := sess.Run(ctx, nil, []graph.Output{a.num, a.dropped, a.denseNum, a.denseDropped}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Int32s()[0] != out[2].Int32s()[0] || out[1].Int64s()[0] != out[3].Int64s()[0] || int(out[0].Int32s()[0]) != applied {
			t.Fatalf("round %d: sparse accumulated %v dropped %v, dense %v and %v; want %d accumulated",
				round, out[0], out[1], out[2], out[3], applied)
		}
		if applied == 0 {
			continue
		}
		required := int32(1 + rng.IntN(applied))
		out, err = sess.Run(ctx, map[graph.Output]*tensor.Tensor{a.required: tensor.Scalar(required)},
			[]graph.Output{a.takeIdx, a.takeVals, a.takeShape, a.sparseOffered, a.mean, a.offered}, nil)
		if err != nil {
			t.Fatalf("round %d: take: %v", round, err)
		}
		idx, vals, mean := out[0].Int64s(), out[1].Float32s(), out[4].Float32s()
		if !slices.IsSorted(idx) || len(idx) != len(touched) {
			t.Fatalf("round %d: indices %v: want the %d touched rows, ascending", round, idx, len(touched))
		}
		if got := out[2].Int64s(); !slices.Equal(got, []int64{rows, 2}) {
			t.Errorf("round %d: dense shape %v, want [%d 2]", round, got, rows)
		}
		if out[3].Int64s()[0] != out[5].Int64s()[0] {
			t.Errorf("round %d: offered %d (sparse) and %d (dense)", round, out[3].Int64s()[0], out[5].Int64s()[0])
		}
		scattered := make([]float32, rows*2)
		for i, id := range idx {
			if !touched[id] {
				t.Fatalf("round %d: row %d was not touched", round, id)
			}
			copy(scattered[id*2:id*2+2], vals[i*2:i*2+2])
		}
		if !slices.Equal(scattered, mean) {
			t.Fatalf("round %d: sparse mean\n%v\ndense mean\n%v", round, scattered, mean)
		}
		step++
	}
}

// TestSparseAccumulatorErrors checks that hostile slices are refused with
// errors naming what is wrong, and that the round goes on after them.
func TestSparseAccumulatorErrors(t *testing.T) {
	ctx := context.Background()
	build := func(s *graph.Scope, a *syncSparseAccGraph, idx graph.Output, vals graph.Output, shape graph.Output) *graph.Node {
		return ops.SparseAccumulatorApplyGradient(s, a.applySparse.Input(0), ops.Const(s, int64(0)), idx, vals, shape)
	}
	for _, tc := range []struct {
		name string
		node func(s *graph.Scope, a *syncSparseAccGraph) *graph.Node
		want string
	}{
		{"index out of range", func(s *graph.Scope, a *syncSparseAccGraph) *graph.Node {
			return build(s, a, ops.Const(s, []int64{1, 10}), ops.Const(s, tensor.MustFromSlice([]float32{1, 2, 3, 4}, 2, 2)), ops.Const(s, []int64{10, 2}))
		}, "index 10 at position 1 is outside the 10 rows"},
		{"negative index", func(s *graph.Scope, a *syncSparseAccGraph) *graph.Node {
			return build(s, a, ops.Const(s, []int32{-1}), ops.Const(s, tensor.MustFromSlice([]float32{1, 2}, 1, 2)), ops.Const(s, []int32{10, 2}))
		}, "index -1 at position 0"},
		{"rows and indices", func(s *graph.Scope, a *syncSparseAccGraph) *graph.Node {
			return build(s, a, ops.Const(s, []int64{1, 2}), ops.Const(s, tensor.MustFromSlice([]float32{1, 2}, 1, 2)), ops.Const(s, []int64{10, 2}))
		}, "2 indices for values of shape [1 2]"},
		{"dense shape against the declared one", func(s *graph.Scope, a *syncSparseAccGraph) *graph.Node {
			return build(s, a, ops.Const(s, []int64{1}), ops.Const(s, tensor.MustFromSlice([]float32{1, 2}, 1, 2)), ops.Const(s, []int64{11, 2}))
		}, "holds shape [10,2], got slices of dense shape [11,2]"},
		{"row width against the dense shape", func(s *graph.Scope, a *syncSparseAccGraph) *graph.Node {
			return build(s, a, ops.Const(s, []int64{1}), ops.Const(s, tensor.MustFromSlice([]float32{1, 2, 3}, 1, 3)), ops.Const(s, []int64{10, 2}))
		}, "want the same dimensions after the first"},
		{"dtype", func(s *graph.Scope, a *syncSparseAccGraph) *graph.Node {
			return build(s, a, ops.Const(s, []int64{1}), ops.Const(s, tensor.MustFromSlice([]float64{1, 2}, 1, 2)), ops.Const(s, []int64{10, 2}))
		}, "holds float32, got float64 values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := syncNewSparseAcc(t, 10)
			s := graph.NewScopeWithGraph(a.g)
			n := tc.node(s, a)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			sess := syncSession(t, a.g)
			if _, err := sess.Run(ctx, nil, nil, []*graph.Node{n}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
			if err := a.apply(ctx, sess, 0, []int64{3}, []float32{1, 2}); err != nil {
				t.Fatal(err)
			}
			out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{a.required: tensor.Scalar(int32(1))},
				[]graph.Output{a.takeIdx, a.sparseOffered}, nil)
			if err != nil || !slices.Equal(out[0].Int64s(), []int64{3}) || out[1].Int64s()[0] != 1 {
				t.Errorf("after the refused apply: take = %v, %v; want row 3, offered 1", out, err)
			}
		})
	}
}

// TestSparseAccumulatorMemory checks that the state follows the rows
// touched, not the table (a 10M-row table's dense accumulator would hold
// 160 MB), and that a round touching more than the task's budget allows
// is refused with ErrOverBudget, leaving the round usable.
func TestSparseAccumulatorMemory(t *testing.T) {
	ctx := context.Background()
	res := kernel.NewResources()
	a := syncNewSparseAcc(t, 10_000_000)
	sess, err := session.New(a.g, session.WithResources(res))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	s := graph.NewScopeWithGraph(a.g)
	ids := ops.Placeholder(s, "ids", tensor.Int64, tensor.MakeShape(-1))
	vals := ops.Placeholder(s, "vals", tensor.Float32, tensor.MakeShape(-1, 2))
	apply := ops.SparseAccumulatorApplyGradient(s, a.applySparse.Input(0), ops.Const(s, int64(0)), ids, vals, ops.Const(s, []int64{10_000_000, 2}))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	feed := func(n, stride int) map[graph.Output]*tensor.Tensor {
		v := make([]int64, n)
		for i := range v {
			v[i] = int64(i * stride)
		}
		return map[graph.Output]*tensor.Tensor{ids: tensor.MustFromSlice(v, n), vals: tensor.New(tensor.Float32, n, 2)}
	}
	if _, err := sess.Run(ctx, feed(1000, 9973), nil, []*graph.Node{apply}); err != nil {
		t.Fatal(err)
	}
	held, _ := cpu.AccumulatorBytes(res)
	perRow := int64(2*8 + 8 + 24)
	if held < 1000*2*8 || held > 2*1000*perRow {
		t.Errorf("1000 touched rows of 2 hold %d bytes, want about %d", held, 1000*perRow)
	}
	// A budget that fits 1000 rows but not 3000.
	if err := res.SetPolicy(kernel.Policy{MaxTensorBytes: 2000 * perRow}); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Run(ctx, feed(3000, 3331), nil, []*graph.Node{apply}); !errors.Is(err, kernel.ErrOverBudget) ||
		!strings.Contains(err.Error(), "touched rows") {
		t.Errorf("err = %v, want ErrOverBudget naming the touched rows", err)
	}
	out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{a.required: tensor.Scalar(int32(1))}, []graph.Output{a.takeIdx, a.sparseOffered}, nil)
	if err != nil || len(out[0].Int64s()) != 1000 || out[1].Int64s()[0] != 1 {
		t.Errorf("take after the refused apply = %v rows, %v: want the 1000 rows of the first gradient, offered 1", len(out[0].Int64s()), err)
	}
}

// FuzzSparseAccumulatorApplyGradient feeds hostile slices (any indices,
// values of any shape, any dense shape) to a sparse accumulator of
// float32[10, 2]: the kernel refuses or accepts them and never panics, and
// after an accepted gradient the take returns distinct in-range rows in
// ascending order.
func FuzzSparseAccumulatorApplyGradient(f *testing.F) {
	f.Add([]byte{3, 1, 2, 2, 5}, uint8(2), uint8(10), uint8(2))
	f.Add([]byte{0, 0, 9}, uint8(2), uint8(10), uint8(2))
	f.Add([]byte{200}, uint8(3), uint8(11), uint8(0))
	s := graph.NewScope()
	h := ops.SparseConditionalAccumulator(s, tensor.Float32, tensor.MakeShape(10, 2), "")
	idx := ops.Placeholder(s, "indices", tensor.Int64, tensor.UnknownShape())
	vals := ops.Placeholder(s, "values", tensor.Float32, tensor.UnknownShape())
	shape := ops.Placeholder(s, "dense_shape", tensor.Int64, tensor.UnknownShape())
	apply := ops.SparseAccumulatorApplyGradient(s, h, ops.Const(s, int64(0)), idx, vals, shape)
	num := ops.AccumulatorNumAccumulated(s, h)
	takeIdx, _, _, _ := ops.SparseAccumulatorTakeGradient(s, h, ops.Const(s, int32(1)))
	if err := s.Err(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ids []byte, width, rows, cols uint8) {
		if len(ids) > 64 || width > 8 {
			return
		}
		sess, err := session.New(s.Graph())
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		ctx := context.Background()
		iv := make([]int64, len(ids))
		for i, b := range ids {
			iv[i] = int64(int8(b)) // negatives too
		}
		feeds := map[graph.Output]*tensor.Tensor{
			idx:   tensor.MustFromSlice(iv, len(iv)),
			vals:  tensor.New(tensor.Float32, len(iv), int(width)),
			shape: tensor.MustFromSlice([]int64{int64(rows), int64(cols)}, 2),
		}
		if _, err := sess.Run(ctx, feeds, nil, []*graph.Node{apply}); err != nil {
			if strings.Contains(err.Error(), "panicked") {
				t.Fatal(err)
			}
			return
		}
		out, err := sess.Run(ctx, nil, []graph.Output{num}, nil)
		if err != nil || out[0].Int32s()[0] != 1 {
			t.Fatalf("accepted, but accumulated %v, %v", out, err)
		}
		out, err = sess.Run(ctx, nil, []graph.Output{takeIdx}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := out[0].Int64s()
		for i, id := range got {
			if id < 0 || id >= 10 || i > 0 && got[i-1] >= id {
				t.Fatalf("take returned rows %v from indices %v", got, iv)
			}
		}
	})
}
