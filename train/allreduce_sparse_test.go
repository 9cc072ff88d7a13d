package train_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// sparseRank is one rank of an embedding model: a table read by Gather
// of the fed ids (its gradient is indexed slices) and a dense bias, the
// loss the mean of (row + bias - 1)^2, or with table only, sum(row * w).
type sparseRank struct {
	g     *graph.Graph
	sess  *session.Session
	ar    *train.AllReduceTrainer
	ids   graph.Output
	w     graph.Output // table only: the weight of the rows
	table *ops.Variable
}

func newSparseRank(t *testing.T, opt train.Optimizer, rows, dim int, tableOnly bool) *sparseRank {
	t.Helper()
	s := graph.NewScope()
	r := &sparseRank{g: s.Graph()}
	r.table = ops.NewVariable(s, "table", tensor.Float32, []int{rows, dim}, ops.RandomUniformInit(-0.5, 0.5, 3))
	r.ids = ops.Placeholder(s, "ids", tensor.Int64, tensor.MakeShape(-1))
	looked := ops.Gather(s, r.table.Value(), r.ids, 0)
	var loss graph.Output
	if tableOnly {
		r.w = ops.Placeholder(s, "w", tensor.Float32, tensor.ScalarShape())
		loss = ops.Sum(s, ops.Mul(s, looked, r.w), nil, false)
	} else {
		bias := ops.NewVariable(s, "bias", tensor.Float32, []int{dim}, ops.ZerosInit())
		loss = ops.Mean(s, ops.Square(s, ops.Sub(s, ops.Add(s, looked, bias.Value()), ops.Scalar(s, tensor.Float32, 1))), nil, false)
	}
	var err error
	if r.ar, err = train.NewAllReduceTrainer(s, opt, loss, nil); err != nil {
		t.Fatal(err)
	}
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if r.sess, err = session.New(s.Graph()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.sess.Close() })
	if _, err := r.sess.Run(t.Context(), nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	return r
}

// state reads the table and its slots (names after "table/").
func (r *sparseRank) state(t *testing.T, slots []string) []*tensor.Tensor {
	t.Helper()
	outs := []graph.Output{r.table.Value()}
	for _, name := range slots {
		v := ops.LookupVariable(r.g, "table/"+name)
		if v == nil {
			t.Fatalf("no slot table/%s", name)
		}
		outs = append(outs, v.Value())
	}
	vals, err := r.sess.Run(t.Context(), nil, outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

func (r *sparseRank) step(ctx context.Context, ring train.AllReducer, round int64, ids ...int64) error {
	_, err := r.ar.Step(ctx, r.sess, map[graph.Output]*tensor.Tensor{r.ids: tensor.MustFromSlice(ids, len(ids))}, ring, round)
	return err
}

// rowOf returns row i of a [rows, dim] tensor.
func rowOf(x *tensor.Tensor, i int) []float32 {
	dim := x.Shape()[1]
	return x.Float32s()[i*dim : (i+1)*dim]
}

// noGather is a ring without the optional AllGather: the trainer gathers
// by broadcasts.
type noGather struct{ r *allreduce.Ring }

func (n noGather) AllReduceMean(ctx context.Context, name string, round int64, data []float32) error {
	return n.r.AllReduceMean(ctx, name, round, data)
}

func (n noGather) Broadcast(ctx context.Context, name string, round int64, root int, data []float32) error {
	return n.r.Broadcast(ctx, name, round, root, data)
}
func (n noGather) Rank() int { return n.r.Rank() }
func (n noGather) Size() int { return n.r.Size() }

// TestAllReduceSparseUpdateIsLazy trains an embedding table on two and
// three ranks: at step 0 each rank looks up rows of its own (one twice)
// and a shared row, then only the shared row and one more each. The
// sparse update is lazy, as on parameter servers: the rows of step 0
// keep their values and slots (Adam's moments, the momentum) after it,
// the rows no rank looked up keep their initial ones, and every rank
// ends with the same table and slots, bit for bit, whether the ring
// all-gathers or only broadcasts. The table's gradient was averaged
// densely, so that Adam and momentum moved every row they had seen.
func TestAllReduceSparseUpdateIsLazy(t *testing.T) {
	const rows, dim, steps = 16, 3, 4
	const shared = 8
	for _, tc := range []struct {
		name  string
		opt   func() train.Optimizer
		slots []string
	}{
		{"adam", func() train.Optimizer { return train.NewAdam(0.1, 0.9, 0.999, 1e-7) }, []string{"Adam_m", "Adam_v"}},
		{"adagrad", func() train.Optimizer { return train.NewAdagrad(0.5, 0.1) }, []string{"Adagrad"}},
		{"momentum", func() train.Optimizer { return train.NewMomentum(0.1, 0.9, false) }, []string{"Momentum"}},
	} {
		for _, ranks := range []int{2, 3} {
			for _, gather := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%d ranks/all-gather %v", tc.name, ranks, gather), func(t *testing.T) {
					ring := rings(t, ranks, 0)
					reps := make([]*sparseRank, ranks)
					for i := range reps {
						reps[i] = newSparseRank(t, tc.opt(), rows, dim, false)
					}
					ctx := timeout(t)
					ringOf := func(rank int) train.AllReducer {
						if gather {
							return ring[rank]
						}
						return noGather{ring[rank]}
					}
					var initial, afterFirst []*tensor.Tensor
					runWorkers(t, ranks, func(rank int) error {
						return reps[rank].ar.Broadcast(ctx, reps[rank].sess, ring[rank], -1)
					})
					initial = reps[0].state(t, tc.slots)
					for step := range steps {
						runWorkers(t, ranks, func(rank int) error {
							ids := []int64{shared, int64(shared + 1 + rank)}
							if step == 0 {
								ids = []int64{int64(2 * rank), int64(2*rank + 1), int64(2 * rank), shared}
							}
							return reps[rank].step(ctx, ringOf(rank), int64(step), ids...)
						})
						if step == 0 {
							afterFirst = reps[0].state(t, tc.slots)
						}
					}
					final := reps[0].state(t, tc.slots)
					for rank, r := range reps[1:] {
						for i, x := range r.state(t, tc.slots) {
							if !tensor.Equal(x, final[i]) {
								t.Errorf("rank %d's %s differs from rank 0's:\n%v\n%v", rank+1, append([]string{"table"}, tc.slots...)[i], x, final[i])
							}
						}
					}
					names := append([]string{"table"}, tc.slots...)
					for i, name := range names {
						for row := range rows {
							want := initial[i]
							switch {
							case row < 2*ranks:
								want = afterFirst[i] // looked up at step 0 only
							case row == shared || (row > shared && row <= shared+ranks):
								continue
							}
							if got := rowOf(final[i], row); !slices.Equal(got, rowOf(want, row)) {
								t.Errorf("%s row %d is %v after %d steps; want %v (not looked up since)", name, row, got, steps, rowOf(want, row))
							}
						}
					}
					if slices.Equal(rowOf(final[0], shared), rowOf(afterFirst[0], shared)) {
						t.Errorf("the shared row %v did not move after step 0", rowOf(final[0], shared))
					}
				})
			}
		}
	}
}

// countingRing records the length of each operation of a ring.
type countingRing struct {
	*allreduce.Ring
	mu   sync.Mutex
	lens map[string]int
}

func (c *countingRing) record(name string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lens == nil {
		c.lens = map[string]int{}
	}
	c.lens[name] = max(c.lens[name], n)
}

func (c *countingRing) AllReduceMean(ctx context.Context, name string, round int64, data []float32) error {
	c.record(name, len(data))
	return c.Ring.AllReduceMean(ctx, name, round, data)
}

func (c *countingRing) AllGather(ctx context.Context, name string, round int64, data []float32) error {
	c.record(name, len(data))
	return c.Ring.AllGather(ctx, name, round, data)
}

// TestAllReduceSparseGradientsSendTheRowsUsed: a step of a 1000-row table
// of which each rank looks up three rows sends the dense bias round the
// ring and the rows looked up, not the table: the table's gradient went
// round the ring whole.
func TestAllReduceSparseGradientsSendTheRowsUsed(t *testing.T) {
	const ranks, rows, dim = 2, 1000, 8
	ring := rings(t, ranks, 0)
	counted := make([]*countingRing, ranks)
	reps := make([]*sparseRank, ranks)
	for i := range reps {
		counted[i] = &countingRing{Ring: ring[i]}
		reps[i] = newSparseRank(t, train.NewAdam(0.1, 0.9, 0.999, 1e-7), rows, dim, false)
	}
	ctx := timeout(t)
	runWorkers(t, ranks, func(rank int) error {
		return reps[rank].step(ctx, counted[rank], 0, int64(rank), 500, int64(rank), 999)
	})
	sent := 0
	for name, n := range counted[0].lens {
		sent += n
		if n >= rows {
			t.Errorf("operation %q carried %d words; want fewer than the table's %d rows", name, n, rows)
		}
	}
	// The bias, two counts, and per rank three rows of 1+dim words.
	if want := dim + ranks + ranks*3*(1+dim); sent != want {
		t.Errorf("a step carried %d words (%v); want %d", sent, counted[0].lens, want)
	}
}

// TestAllReduceSparseEqualsSyncOnPS trains the embedding model of the
// sparse sync tests (a table of two shards and a bias) with the same
// batches two ways: sync replicas through sparse accumulators on a
// parameter server, and all-reduce between ranks. Both apply, each
// round, the same mean of the replicas' rows with the optimizer's lazy
// sparse update, and end with the same variables to float32 rounding.
func TestAllReduceSparseEqualsSyncOnPS(t *testing.T) {
	const rows, dim, rounds = 40, 3, 6
	init := ops.RandomUniformInit(-0.5, 0.5, 9)
	for _, tc := range []struct {
		name string
		opt  func() train.Optimizer
	}{
		{"adam", func() train.Optimizer { return train.NewAdam(0.1, 0.9, 0.999, 1e-7) }},
		{"adagrad", func() train.Optimizer { return train.NewAdagrad(0.1, 0.1) }},
		{"ftrl", func() train.Optimizer { return train.NewFtrl(0.1, 0.01, 0.01) }},
	} {
		for _, ranks := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d ranks", tc.name, ranks), func(t *testing.T) {
				rig := sparseSyncBuild(t, nil, tc.opt(), rows, dim, ranks, ranks, init, false)
				sess := syncSession(t, rig.g)
				rig.initChief(t, sess)

				ring := rings(t, ranks, 0)
				reps := make([]*embeddingRank, ranks)
				for i := range reps {
					reps[i] = newEmbeddingRank(t, tc.opt(), rows, dim, init)
				}
				ctx := timeout(t)
				runWorkers(t, ranks, func(rank int) error {
					return reps[rank].ar.Broadcast(ctx, reps[rank].sess, ring[rank], -1)
				})
				for i, x := range reps[0].values(t) {
					if want := rig.values(t, sess)[i]; !tensor.Equal(x, want) {
						t.Fatalf("variable %d starts at %v on the ranks, %v on the ps", i, x, want)
					}
				}
				rng := rand.New(rand.NewPCG(5, 6))
				all := make([]int, ranks)
				for i := range all {
					all[i] = i
				}
				for k := range rounds {
					batches := make([]*tensor.Tensor, ranks)
					for i := range batches {
						ids := make([]int64, 10)
						for j := range ids {
							ids[j] = int64(rng.IntN(rows / 3)) // repeats within and across replicas
						}
						batches[i] = tensor.MustFromSlice(ids, len(ids))
					}
					rig.round(t, sess, all, nil, func(i int) *tensor.Tensor { return batches[i] })
					runWorkers(t, ranks, func(rank int) error {
						r := reps[rank]
						_, err := r.ar.Step(ctx, r.sess, map[graph.Output]*tensor.Tensor{r.ids: batches[rank]}, ring[rank], int64(k))
						return err
					})
				}
				want := rig.values(t, sess)
				for rank, r := range reps {
					for i, got := range r.values(t) {
						if !syncClose(got, want[i], 1e-6) {
							t.Errorf("rank %d: variable %d after %d rounds:\n%v\nsync on the ps:\n%v", rank, i, rounds, got, want[i])
						}
					}
				}
			})
		}
	}
}

// embeddingRank is a rank of sparseSyncBuild's model: the table "emb" of
// two shards (mod), a bias, loss sum((lookup(ids) + bias - 1)^2).
type embeddingRank struct {
	sess   *session.Session
	ar     *train.AllReduceTrainer
	ids    graph.Output
	shards []*ops.Variable
	bias   *ops.Variable
}

func newEmbeddingRank(t *testing.T, opt train.Optimizer, rows, dim int, init ops.Initializer) *embeddingRank {
	t.Helper()
	s := graph.NewScope()
	train.CreateGlobalStep(s)
	table, err := ops.NewPartitionedVariable(s, "emb", tensor.Float32, []int{rows, dim}, init, 2)
	if err != nil {
		t.Fatal(err)
	}
	r := &embeddingRank{shards: table.Shards()}
	r.bias = ops.NewVariable(s, "bias", tensor.Float32, []int{dim}, ops.ZerosInit())
	r.ids = ops.Placeholder(s, "ids", tensor.Int64, tensor.MakeShape(-1))
	e := ops.Add(s, ops.EmbeddingLookup(s, table, r.ids, "mod"), r.bias.Value())
	loss := ops.Sum(s, ops.Square(s, ops.Sub(s, e, ops.Scalar(s, tensor.Float32, 1))), nil, false)
	if r.ar, err = train.NewAllReduceTrainer(s, opt, loss, append(slices.Clone(r.shards), r.bias)); err != nil {
		t.Fatal(err)
	}
	initOp := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	r.sess = syncSession(t, s.Graph())
	if _, err := r.sess.Run(t.Context(), nil, nil, []*graph.Node{initOp}); err != nil {
		t.Fatal(err)
	}
	return r
}

// values reads the bias and the shards, in sparseSyncRig.values's order.
func (r *embeddingRank) values(t *testing.T) []*tensor.Tensor {
	t.Helper()
	fetch := []graph.Output{r.bias.Value()}
	for _, v := range r.shards {
		fetch = append(fetch, v.Value())
	}
	out, err := r.sess.Run(t.Context(), nil, fetch, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// corruptRing all-gathers, then puts an index past the table in rank 1's
// piece of the sparse rows.
type corruptRing struct {
	*allreduce.Ring
	index uint32
}

func (c corruptRing) AllGather(ctx context.Context, name string, round int64, data []float32) error {
	err := c.Ring.AllGather(ctx, name, round, data)
	if err == nil && name == "grads/sparse" {
		data[len(data)/c.Size()] = math.Float32frombits(c.index)
	}
	return err
}

// TestAllReduceSparseGradientErrors: what a step with sparse gradients
// refuses, on every rank, as a ring or a parameter server would: ids
// outside the table (the lookup fails), a row index outside the table in
// another rank's piece (ErrMismatch, naming the rank), and a gradient that
// is not finite (allreduce.ErrNonFinite).
func TestAllReduceSparseGradientErrors(t *testing.T) {
	const ranks, rows, dim = 2, 10, 2
	setup := func(t *testing.T, tableOnly bool) ([]*allreduce.Ring, []*sparseRank, context.Context) {
		ring := rings(t, ranks, 0)
		reps := make([]*sparseRank, ranks)
		for i := range reps {
			reps[i] = newSparseRank(t, train.NewAdam(0.1, 0.9, 0.999, 1e-7), rows, dim, tableOnly)
		}
		return ring, reps, timeout(t)
	}
	errs := func(f func(rank int) error) []error {
		out := make([]error, ranks)
		var wg sync.WaitGroup
		for i := range ranks {
			wg.Go(func() { out[i] = f(i) })
		}
		wg.Wait()
		return out
	}
	t.Run("ids outside the table", func(t *testing.T) {
		ring, reps, ctx := setup(t, false)
		for rank, err := range errs(func(rank int) error { return reps[rank].step(ctx, ring[rank], 0, 1, rows+3) }) {
			if err == nil || !strings.Contains(err.Error(), "out of range") {
				t.Errorf("rank %d: %v; want the id out of range named", rank, err)
			}
		}
	})
	t.Run("a row outside the table from another rank", func(t *testing.T) {
		ring, reps, ctx := setup(t, false)
		before := reps[0].state(t, nil)[0]
		for rank, err := range errs(func(rank int) error {
			return reps[rank].step(ctx, corruptRing{ring[rank], rows + 5}, 0, 1, 2)
		}) {
			if !errors.Is(err, allreduce.ErrMismatch) || !strings.Contains(err.Error(), "rank 1 sent row 15") {
				t.Errorf("rank %d: %v; want ErrMismatch naming rank 1 and row 15", rank, err)
			}
		}
		if after := reps[0].state(t, nil)[0]; !tensor.Equal(after, before) {
			t.Errorf("the table changed in the step that failed")
		}
	})
	t.Run("a NaN gradient", func(t *testing.T) {
		ring, reps, ctx := setup(t, true)
		for rank, err := range errs(func(rank int) error {
			r := reps[rank]
			feeds := map[graph.Output]*tensor.Tensor{r.ids: tensor.MustFromSlice([]int64{1, 2}, 2), r.w: tensor.Scalar(float32(math.NaN()))}
			_, err := r.ar.Step(ctx, r.sess, feeds, ring[rank], 0)
			return err
		}) {
			if !errors.Is(err, allreduce.ErrNonFinite) {
				t.Errorf("rank %d: %v; want ErrNonFinite", rank, err)
			}
		}
	})
}

// TestAllReduceSparseWithoutSparseUpdate: an optimizer without a sparse
// update (RMSProp) applies the dense form of the gathered mean; the
// ranks stay equal, bit for bit.
func TestAllReduceSparseWithoutSparseUpdate(t *testing.T) {
	const ranks, rows, dim = 3, 12, 2
	ring := rings(t, ranks, 0)
	reps := make([]*sparseRank, ranks)
	for i := range reps {
		reps[i] = newSparseRank(t, train.NewRMSProp(0.01, 0.9, 0, 1e-10), rows, dim, false)
	}
	ctx := timeout(t)
	start := reps[0].state(t, nil)[0]
	for step := range 3 {
		runWorkers(t, ranks, func(rank int) error {
			return reps[rank].step(ctx, ring[rank], int64(step), int64(rank), int64(rank+step), 7)
		})
	}
	final := reps[0].state(t, nil)[0]
	if tensor.Equal(final, start) {
		t.Errorf("the table did not move")
	}
	for rank, r := range reps[1:] {
		if x := r.state(t, nil)[0]; !tensor.Equal(x, final) {
			t.Errorf("rank %d's table %v differs from rank 0's %v", rank+1, x, final)
		}
	}
}
