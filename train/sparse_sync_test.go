package train_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// sparseSyncRig is an embedding table (2 shards, mod) plus a dense bias,
// loss sum((lookup(ids) + bias - 1)^2), trained by sync replicas that all
// share one graph (one token queue per replica).
type sparseSyncRig struct {
	g      *graph.Graph
	opt    *train.SyncReplicasOptimizer
	shards []*ops.Variable
	bias   *ops.Variable
	ids    []graph.Output
	steps  []*graph.Node
	init   *graph.Node
}

// sparseSyncBuild builds total replicas; dense clears GradVar.Sparse, so
// that the table's gradients go through dense accumulators (the path
// before the sparse accumulator), for comparison.
func sparseSyncBuild(t testing.TB, device graph.DeviceFunc, opt train.Optimizer, rows, dim, aggregate, total int, init ops.Initializer, dense bool) *sparseSyncRig {
	t.Helper()
	s := graph.NewScope()
	if device != nil {
		s = s.WithDeviceFunc(device)
	}
	r := &sparseSyncRig{g: s.Graph()}
	gs := train.CreateGlobalStep(s)
	table, err := ops.NewPartitionedVariable(s, "emb", tensor.Float32, []int{rows, dim}, init, 2)
	if err != nil {
		t.Fatal(err)
	}
	r.shards = table.Shards()
	r.bias = ops.NewVariable(s, "bias", tensor.Float32, []int{dim}, ops.ZerosInit())
	vars := append(slices.Clone(r.shards), r.bias)
	r.opt = train.NewSyncReplicas(opt, aggregate, total)
	r.opt.Logger = syncQuiet
	r.opt.SetReplica(0)
	for i := range total {
		rs := s.SubScope(fmt.Sprintf("replica_%d", i))
		ids := ops.Placeholder(rs, "ids", tensor.Int64, tensor.MakeShape(-1))
		e := ops.Add(rs, ops.EmbeddingLookup(rs, table, ids, "mod"), r.bias.Value())
		loss := ops.Sum(rs, ops.Square(rs, ops.Sub(rs, e, ops.Scalar(rs, tensor.Float32, 1))), nil, false)
		gvs, err := r.opt.ComputeGradients(rs, loss, vars)
		if err != nil {
			t.Fatal(err)
		}
		for k := range gvs {
			if k < len(r.shards) && gvs[k].Sparse == nil {
				t.Fatalf("replica %d: the gradient of %s is not indexed slices", i, gvs[k].Var.Name())
			}
			if dense {
				gvs[k].Sparse = nil
			}
		}
		step, err := r.opt.ApplyGradients(rs, gvs, gs)
		if err != nil {
			t.Fatal(err)
		}
		r.ids, r.steps = append(r.ids, ids), append(r.steps, step)
	}
	r.init = ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *sparseSyncRig) initChief(t testing.TB, sess *session.Session) {
	t.Helper()
	ctx := context.Background()
	for _, n := range []*graph.Node{r.init, r.opt.LocalStepInit()} {
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{n}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.opt.InitTokens(ctx, sess); err != nil {
		t.Fatal(err)
	}
}

// round runs one synchronous round in a fixed order: the replicas of
// fresh apply their gradients (and wait for their tokens), the chief's
// update takes ReplicasToAggregate of them, then the replicas of late run
// their steps, whose gradients, computed before the update, are dropped.
func (r *sparseSyncRig) round(t testing.TB, sess *session.Session, fresh, late []int, batch func(replica int) *tensor.Tensor) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	step := func(i int) {
		if _, err := r.opt.RunStep(ctx, sess, map[graph.Output]*tensor.Tensor{r.ids[i]: batch(i)}, r.steps[i]); err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
	for _, i := range fresh {
		wg.Go(func() { step(i) })
	}
	if _, err := sess.Run(ctx, r.opt.RoundFeeds(r.opt.ReplicasToAggregate()), nil, []*graph.Node{r.opt.ChiefUpdate()}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, i := range late {
		step(i)
	}
}

func (r *sparseSyncRig) values(t testing.TB, sess *session.Session) []*tensor.Tensor {
	t.Helper()
	fetch := []graph.Output{r.bias.Value()}
	for _, v := range r.shards {
		fetch = append(fetch, v.Value())
	}
	out, err := sess.Run(context.Background(), nil, fetch, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// reaches returns the ops of the nodes the given nodes depend on (data and
// control inputs), counting only the GatherGrads into a table shard's
// shape (tableRows rows), and
// the shapes of the dense accumulators among them.
func reaches(tableRows int, nodes ...*graph.Node) (ops map[string]int, accumShapes []tensor.Shape) {
	ops = map[string]int{}
	seen := map[*graph.Node]bool{}
	for len(nodes) > 0 {
		n := nodes[len(nodes)-1]
		nodes = nodes[:len(nodes)-1]
		if n == nil || seen[n] {
			continue
		}
		seen[n] = true
		if n.Op() != "GatherGrad" {
			ops[n.Op()]++
		}
		if n.Op() == "GatherGrad" {
			if sh := n.Output(0).Shape(); sh.KnownRank() && sh.Rank() > 0 && sh.Dim(0) == tableRows {
				ops["GatherGrad"]++
			}
		}
		if n.Op() == "ConditionalAccumulator" {
			accumShapes = append(accumShapes, n.AttrShape("shape"))
		}
		for _, in := range n.Inputs() {
			nodes = append(nodes, in.Node)
		}
		nodes = append(nodes, n.ControlInputs()...)
	}
	return ops, accumShapes
}

// densified hands the optimizer it wraps every gradient in dense form.
type densified struct{ train.Optimizer }

func (d densified) ApplyGradients(s *graph.Scope, gvs []train.GradVar, gs *ops.Variable) (*graph.Node, error) {
	gvs = slices.Clone(gvs)
	for i := range gvs {
		gvs[i].Sparse = nil
	}
	return d.Optimizer.ApplyGradients(s, gvs, gs)
}

// TestSyncReplicasSparseAccumulatorEqualsDense trains an embedding table
// by sync replicas through sparse accumulators and through dense ones,
// with the same rounds: ids repeated within a replica's batch and across
// replicas, and with backup workers a late replica in every round whose
// stale gradient is dropped. With the mean densified before one same
// dense update, the two give the same variables bit for bit; with the
// optimizer's own updates (sparse Adagrad against dense Adagrad, which
// round differently) they agree to 1e-6. The dropped counts agree, and
// the sparse graph never densifies the table: no GatherGrad of a table's
// shape and no dense accumulator of a shard's shape is reachable from the
// replicas' steps or the chief's update.
func TestSyncReplicasSparseAccumulatorEqualsDense(t *testing.T) {
	const rows, dim, rounds = 40, 3, 6
	for _, tc := range []struct {
		name             string
		aggregate, total int
	}{
		{"no backup workers", 2, 2},
		{"one backup worker", 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			init := ops.RandomUniformInit(-0.5, 0.5, 9)
			build := func(opt train.Optimizer, dense bool) *sparseSyncRig {
				return sparseSyncBuild(t, nil, opt, rows, dim, tc.aggregate, tc.total, init, dense)
			}
			rigs := []*sparseSyncRig{
				build(densified{train.NewGradientDescent(0.5)}, false), build(densified{train.NewGradientDescent(0.5)}, true),
				build(train.NewAdagrad(0.1, 0.1), false), build(train.NewAdagrad(0.1, 0.1), true),
			}
			sparse := rigs[2]
			found, shapes := reaches(rows/2, append(slices.Clone(sparse.steps), sparse.opt.ChiefUpdate())...)
			if found["GatherGrad"] > 0 || found["SparseConditionalAccumulator"] != 2 {
				t.Errorf("the sparse graph reaches %d GatherGrad of a table's shape and %d sparse accumulators, want 0 and 2 (one per shard)",
					found["GatherGrad"], found["SparseConditionalAccumulator"])
			}
			// The control: the dense path does reach them.
			if found, _ := reaches(rows/2, append(slices.Clone(rigs[3].steps), rigs[3].opt.ChiefUpdate())...); found["GatherGrad"] == 0 {
				t.Errorf("the dense graph reaches no GatherGrad of a table's shape: the check sees nothing")
			}
			for _, sh := range shapes {
				if sh.Rank() == 2 {
					t.Errorf("the sparse graph reaches a dense accumulator of shape %v", sh)
				}
			}
			sess := make([]*session.Session, len(rigs))
			for i, r := range rigs {
				sess[i] = syncSession(t, r.g)
				r.initChief(t, sess[i])
			}
			rng := rand.New(rand.NewPCG(5, 6))
			for k := range rounds {
				batches := make([]*tensor.Tensor, tc.total)
				for i := range batches {
					ids := make([]int64, 10)
					for j := range ids {
						ids[j] = int64(rng.IntN(rows / 3)) // repeats within and across replicas
					}
					batches[i] = tensor.MustFromSlice(ids, len(ids))
				}
				var fresh, late []int
				for i := range tc.total {
					if tc.total > tc.aggregate && i == k%tc.total {
						late = append(late, i)
					} else {
						fresh = append(fresh, i)
					}
				}
				for i, r := range rigs {
					r.round(t, sess[i], fresh, late, func(i int) *tensor.Tensor { return batches[i] })
				}
			}
			for pair := 0; pair < len(rigs); pair += 2 {
				got, want := rigs[pair].values(t, sess[pair]), rigs[pair+1].values(t, sess[pair+1])
				for i := range got {
					if pair == 0 && !tensor.Equal(got[i], want[i]) || !syncClose(got[i], want[i], 1e-6) {
						t.Errorf("%s: variable %d after %d rounds: sparse accumulators\n%v\ndense accumulators\n%v",
							rigs[pair].opt.Name(), i, rounds, got[i], want[i])
					}
				}
			}
			wantDropped := int64(0)
			if tc.total > tc.aggregate {
				wantDropped = rounds
			}
			for i, r := range rigs {
				if d, err := r.opt.Dropped(context.Background(), sess[i]); err != nil || d != wantDropped {
					t.Errorf("rig %d: dropped %d, %v; want %d", i, d, err, wantDropped)
				}
			}
		})
	}
}

// syncClose reports whether two float32 tensors of one shape agree to tol
// (relative to the larger magnitude, or absolute below 1).
func syncClose(a, b *tensor.Tensor, tol float64) bool {
	if !slices.Equal(a.Shape(), b.Shape()) {
		return false
	}
	x, y := a.Float32s(), b.Float32s()
	for i := range x {
		d, m := math.Abs(float64(x[i]-y[i])), max(1, math.Abs(float64(x[i])), math.Abs(float64(y[i])))
		if d > tol*m {
			return false
		}
	}
	return true
}
