package layers_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/grad/gradtest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
)

// A partitioned table is its shards ("<name>/embeddings/part_<i>", or
// TableName's), spread over the ps tasks by a replica device setter; a
// lookup finds id i in shard i % Shards ("mod") or in its block of rows
// ("div"), keeps the ids' shape, and a reusing scope shares the shards.
// One shard is one variable, initialised by ShardInit(0).
func TestPartitionedEmbedding(t *testing.T) {
	s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{PSTasks: 2}))
	ids := ops.Placeholder(s, "ids", tensor.Int64, tensor.MakeShape(-1, 5))
	shardIndex := func(i int) ops.Initializer { return ops.ConstantInit(float64(i)) }
	mod := layers.Embedding{InputDim: 10, OutputDim: 2, Shards: 3, ShardInit: shardIndex, Name: "mod"}
	div := layers.Embedding{InputDim: 10, OutputDim: 2, Shards: 3, ShardInit: shardIndex, PartitionStrategy: "div", Name: "div"}
	seven := func(i int) ops.Initializer { return ops.ConstantInit(float64(7 + i)) }
	outs := []graph.Output{
		mod.Apply(s, ids, true),
		div.Apply(s, ids, true),
		mod.Apply(s.NameScope("tower_1").ReuseVariables(), ids, true),
		layers.Embedding{InputDim: 10, OutputDim: 1, Shards: 2, Init: ops.OnesInit(), Name: "wide", TableName: "emb"}.Apply(s, ids, true),
		layers.Embedding{InputDim: 10, OutputDim: 1, Shards: 1, ShardInit: seven, Name: "one"}.Apply(s, ids, true),
	}
	want := "mod/embeddings/part_0 mod/embeddings/part_1 mod/embeddings/part_2 " +
		"div/embeddings/part_0 div/embeddings/part_1 div/embeddings/part_2 wide/emb/part_0 wide/emb/part_1 one/embeddings"
	if got := strings.Join(variableNames(s.Graph()), " "); got != want {
		t.Fatalf("variables %q, want %q", got, want)
	}
	devices := map[string]bool{}
	for _, v := range ops.GlobalVariables(s.Graph()) {
		devices[v.Node().Device()] = true
	}
	if !devices["/job:ps/task:0"] || !devices["/job:ps/task:1"] || len(devices) != 2 {
		t.Errorf("the shards are on %v; want both ps tasks", devices)
	}
	for i, width := range []int{2, 2, 2, 1, 1} {
		if o, want := outs[i], tensor.MakeShape(-1, 5, width); !o.Shape().Equal(want) {
			t.Errorf("output %d of shape %v, want %v", i, o.Shape(), want)
		}
	}
	batch := tensor.MustFromSlice([]int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 2, 5)
	got := run(t, s, map[graph.Output]*tensor.Tensor{ids: batch}, outs)
	for id := range 10 {
		wantMod, wantDiv := float32(id%3), []float32{0, 0, 0, 0, 1, 1, 1, 2, 2, 2}[id] // blocks of 4, 3, 3 rows
		m, d := got[0].Float32s()[2*id:2*id+2], got[1].Float32s()[2*id:2*id+2]
		if !slices.Equal(m, []float32{wantMod, wantMod}) || !slices.Equal(d, []float32{wantDiv, wantDiv}) {
			t.Errorf("id %d: mod row %v, div row %v; want shard %v and %v", id, m, d, wantMod, wantDiv)
		}
		if w := got[3].Float32s()[id]; w != 1 {
			t.Errorf("id %d: wide row %v; want Init's 1 in every shard", id, w)
		}
		if o := got[4].Float32s()[id]; o != 7 {
			t.Errorf("id %d: the one-shard table's row %v; want ShardInit(0)'s 7", id, o)
		}
	}
	if !slices.Equal(got[0].Float32s(), got[2].Float32s()) {
		t.Errorf("the reusing build reads %v, the first %v", got[2], got[0])
	}
}

// By default each shard draws its own uniform values on [-0.05, 0.05),
// the same in every build; a penalty covers the whole table once.
func TestPartitionedEmbeddingInitAndPenalty(t *testing.T) {
	build := func() ([]*tensor.Tensor, float64) {
		s := graph.NewScope().WithSeed(5)
		ids := ops.Const(s, tensor.MustFromSlice([]int32{0, 1}, 2))
		layers.Embedding{InputDim: 9, OutputDim: 4, Shards: 3, Regularizer: layers.L2(1), Name: "e"}.Apply(s, ids, true)
		terms := s.Graph().Collection(ops.RegularizationLossesCollection)
		if len(terms) != 1 {
			t.Fatalf("%d regularization terms, want 1", len(terms))
		}
		var fetches []graph.Output
		for _, v := range ops.GlobalVariables(s.Graph()) {
			fetches = append(fetches, v.Value())
		}
		out := run(t, s, nil, append(fetches, terms[0].Output(0)))
		return out[:3], out[3].Float64At(0)
	}
	shards, penalty := build()
	again, _ := build()
	sumSquares := 0.0
	for i, sh := range shards {
		v := sh.Float32s()
		for _, x := range v {
			if x < -0.05 || x >= 0.05 {
				t.Fatalf("shard %d holds %v, outside [-0.05, 0.05)", i, x)
			}
			sumSquares += float64(x) * float64(x)
		}
		if !slices.Equal(v, again[i].Float32s()) {
			t.Errorf("shard %d differs between two builds: %v and %v", i, v, again[i])
		}
		if j := (i + 1) % 3; slices.Equal(v, shards[j].Float32s()) {
			t.Errorf("shards %d and %d start equal: %v", i, j, v)
		}
	}
	if diff := penalty - sumSquares/2; diff > 1e-6 || diff < -1e-6 {
		t.Errorf("penalty %v, want sum(w²)/2 over every shard = %v", penalty, sumSquares/2)
	}
}

func TestPartitionedEmbeddingGradient(t *testing.T) {
	gradtest.Check(t, gradtest.Case{Name: "PartitionedEmbedding", Variables: true,
		Inputs: []*tensor.Tensor{tensor.MustFromSlice([]int32{0, 2, 2, 1, 4, 0}, 2, 3)},
		Build: func(s *graph.Scope, x []graph.Output) graph.Output {
			return layers.Embedding{InputDim: 5, OutputDim: 3, Shards: 2, DType: tensor.Float64}.Apply(s, x[0], true)
		}})
}

func TestEmbeddingShardErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		e    layers.Embedding
		want []string
	}{
		{"more shards than rows", layers.Embedding{InputDim: 10, OutputDim: 2, Shards: 11}, []string{"Shards 11", "InputDim 10", "one shard per row"}},
		{"negative shards", layers.Embedding{InputDim: 10, OutputDim: 2, Shards: -1}, []string{"Shards -1"}},
		{"unknown strategy", layers.Embedding{InputDim: 10, OutputDim: 2, Shards: 2, PartitionStrategy: "hash"}, []string{`"hash"`, "want mod or div"}},
	} {
		s := graph.NewScope()
		c.e.Apply(s, ops.Placeholder(s, "ids", tensor.Int32, tensor.MakeShape(-1)), true)
		for _, w := range c.want {
			if err := s.Err(); err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err %v, want one naming %q", c.name, err, w)
			}
		}
	}
	// Built twice without reuse, a named table would not be shared.
	s := graph.NewScope()
	ids := ops.Placeholder(s, "ids", tensor.Int32, tensor.MakeShape(-1))
	e := layers.Embedding{InputDim: 10, OutputDim: 2, Shards: 2, Name: "e"}
	e.Apply(s, ids, true)
	e.Apply(s, ids, true)
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), `"e/embeddings" already exists`) {
		t.Errorf("a named partitioned table built twice: err %v", err)
	}
}
