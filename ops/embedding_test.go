package ops_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// rowOf returns where id lives under strategy for a table of rows rows in
// shards shards, as (shard, row in shard), computed the obvious way.
func rowOf(id, rows, shards int, strategy string) (int, int) {
	if strategy == "mod" {
		return id % shards, id / shards
	}
	start := 0
	for p := range shards {
		n := rows / shards
		if p < rows%shards {
			n++
		}
		if id < start+n {
			return p, id - start
		}
		start += n
	}
	return -1, -1
}

func TestEmbeddingLookupMatchesGather(t *testing.T) {
	const rows, dim = 11, 3
	for _, strategy := range []string{"mod", "div"} {
		for _, shards := range []int{1, 2, 3} {
			s := graph.NewScope()
			table, err := ops.NewPartitionedVariable(s, "emb", tensor.Float64, []int{rows, dim}, ops.RandomUniformInit(-1, 1, 7), shards)
			if err != nil {
				t.Fatal(err)
			}
			ids := ops.Placeholder(s, "ids", tensor.Int64, tensor.MakeShape(2, -1))
			emb := ops.EmbeddingLookup(s, table, ids, strategy)
			// One dimension of the ids unknown: the graph knows the others.
			if got := emb.Shape(); !got.KnownRank() || fmt.Sprint(got.Dims()) != fmt.Sprint([]int{2, -1, dim}) {
				t.Fatalf("%s/%d: the lookup's static shape is %v; want [2 -1 %d]", strategy, shards, got, dim)
			}
			bags := ops.Const(s, []int32{0, 0, 2, 2, 2, 0})
			flat := ops.Const(s, []int64{10, 3, 3, 0, 7, 10})
			var combined []graph.Output
			for _, c := range []string{"sum", "mean", "sqrtn"} {
				combined = append(combined, ops.EmbeddingLookupSparse(s, table, flat, bags, ops.Const(s, int32(4)), strategy, c))
			}
			init := ops.GlobalVariablesInitializer(s)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			sess, err := session.New(s.Graph())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
				t.Fatal(err)
			}
			var shardOuts []graph.Output
			for _, v := range table.Shards() {
				shardOuts = append(shardOuts, v.Value())
			}
			idv := []int64{10, 3, 3, 0, 7, 5}
			fetch := append(append([]graph.Output{emb}, combined...), shardOuts...)
			out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{ids: tensor.MustFromSlice(idv, 2, 3)}, fetch, nil)
			if err != nil {
				t.Fatalf("%s/%d: %v", strategy, shards, err)
			}
			row := func(id int) []float64 {
				p, r := rowOf(id, rows, shards, strategy)
				return out[4+p].Float64s()[r*dim : (r+1)*dim]
			}
			if got := out[0].Shape(); len(got) != 3 || got[0] != 2 || got[1] != 3 || got[2] != dim {
				t.Fatalf("%s/%d: lookup shape %v, want [2 3 %d]", strategy, shards, got, dim)
			}
			for k, id := range idv {
				for c := range dim {
					if got, want := out[0].Float64s()[k*dim+c], row(int(id))[c]; got != want {
						t.Fatalf("%s/%d: id %d column %d = %v, want %v", strategy, shards, id, c, got, want)
					}
				}
			}
			// Bags: 0 = {10, 3, 10}, 1 = {}, 2 = {3, 0, 7}, 3 = {}.
			bagIDs := [][]int{{10, 3, 10}, nil, {3, 0, 7}, nil}
			for ci, div := range []func(n int) float64{
				func(int) float64 { return 1 },
				func(n int) float64 { return float64(max(n, 1)) },
				func(n int) float64 { return math.Sqrt(float64(max(n, 1))) },
			} {
				for b, members := range bagIDs {
					for c := range dim {
						want := 0.0
						for _, id := range members {
							want += row(id)[c]
						}
						want /= div(len(members))
						if got := out[1+ci].Float64s()[b*dim+c]; math.Abs(got-want) > 1e-12 {
							t.Fatalf("%s/%d: combiner %d, bag %d column %d = %v, want %v", strategy, shards, ci, b, c, got, want)
						}
					}
				}
			}
		}
	}
}

// TestEmbeddingGradientIsSparsePerShard: the gradient of a partitioned
// lookup reaches every shard as indexed slices of the distinct ids it holds.
func TestEmbeddingGradientIsSparsePerShard(t *testing.T) {
	s := graph.NewScope()
	table, err := ops.NewPartitionedVariable(s, "emb", tensor.Float64, []int{10, 2}, ops.ConstantInit(1), 2)
	if err != nil {
		t.Fatal(err)
	}
	emb := ops.EmbeddingLookup(s, table, ops.Const(s, []int64{1, 3, 3, 8, 4}), "mod")
	loss := ops.Sum(s, ops.Mul(s, emb, ops.Const(s, tensor.MustFromSlice([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 5, 2))), nil, false)
	var xs []graph.Output
	for _, v := range table.Shards() {
		xs = append(xs, v.Value())
	}
	gs, err := grad.Gradients(s, []graph.Output{loss}, xs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fetch []graph.Output
	for _, g := range gs {
		sl, ok := grad.SparseOf(s, g)
		if !ok {
			t.Fatalf("shard gradient %v is not sparse", g)
		}
		fetch = append(fetch, sl.Indices, sl.Values)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{ops.GlobalVariablesInitializer(s)}); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(ctx, nil, fetch, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Shard 1 (odd ids) holds ids 1 and 3 as rows 0 and 1; shard 0 holds 8, 4 as rows 4, 2.
	want := map[int]map[int64][]float64{
		0: {4: {7, 8}, 2: {9, 10}},
		1: {0: {1, 2}, 1: {3 + 5, 4 + 6}},
	}
	for p := range 2 {
		idx := out[2*p].Data()
		vals := out[2*p+1].Float64s()
		n := out[2*p].NumElements()
		if n != len(want[p]) {
			t.Fatalf("shard %d: %d rows %v, want %d", p, n, idx, len(want[p]))
		}
		for j := range n {
			id := int64(out[2*p].Float64At(j))
			w := want[p][id]
			if w == nil || vals[2*j] != w[0] || vals[2*j+1] != w[1] {
				t.Fatalf("shard %d: row %d has gradient %v, want %v", p, id, vals[2*j:2*j+2], w)
			}
		}
	}
}

// TestNewEmbeddingTableInitialisesShardsAlone: shard i gets init(i) with
// its own shape, in NewPartitionedVariable's row counts.
func TestNewEmbeddingTableInitialisesShardsAlone(t *testing.T) {
	s := graph.NewScope()
	table, err := ops.NewEmbeddingTable(s, "emb", tensor.Float32, 11, 2, func(i int) ops.Initializer { return ops.ConstantInit(float64(i)) }, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range table.Shards() {
		if want := []int{4, 4, 3}[i]; v.Shape().Dim(0) != want || v.Shape().Dim(1) != 2 {
			t.Fatalf("shard %d is %v, want [%d 2]", i, v.Shape(), want)
		}
	}
	emb := ops.EmbeddingLookup(s, table, ops.Const(s, []int64{0, 5, 10}), "div")
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{ops.GlobalVariablesInitializer(s)}); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{emb}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].Float32s(); got[0] != 0 || got[2] != 1 || got[4] != 2 {
		t.Errorf("rows %v: want shard 0, 1 and 2's values", got)
	}
	if _, err := ops.NewEmbeddingTable(graph.NewScope(), "e", tensor.Float32, 2, 1, nil, 3); err == nil {
		t.Error("2 rows in 3 shards were accepted")
	}
}
