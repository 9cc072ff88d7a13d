package train_test

import (
	"context"
	"os"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// TestHashEmbeddingUnderLimitLearns trains a logistic model over a hash
// embedding (two shards) on a click log with 10x more distinct ids than the
// shards' row limit: the tables stay under the limit, the model still
// learns (AUC well above chance), and exporting and importing the rows into
// three shards (resharding) keeps every row and the predictions.
func TestHashEmbeddingUnderLimitLearns(t *testing.T) {
	const vocab, batch, steps = 100, 256, 300
	log, err := data.SyntheticClickLog(data.ClickLogConfig{Examples: steps*batch + 20000, Vocab: vocab, Seed: 9, Interaction: -1})
	if err != nil {
		t.Fatal(err)
	}
	distinct := data.CategoricalFeatures * vocab // 5200 ids; raise them far apart
	limit := distinct / 10 / 2                   // per shard: 10x fewer rows in all
	if os.Getenv("HASH_NOLIMIT") != "" {
		limit = 0
	}
	build := func(devices []string) (*graph.Graph, ops.HashEmbedding, graph.Output, graph.Output, graph.Output, *graph.Node, graph.Output) {
		s := graph.NewScope()
		h := ops.HashEmbedding{Name: "ids", Dim: 1, MaxRows: limit, Devices: devices}
		ids := ops.Placeholder(s, "ids", tensor.Int64, tensor.MakeShape(-1))
		y := ops.Placeholder(s, "y", tensor.Float32, tensor.MakeShape(-1))
		lk := h.Lookup(s, ids, true)
		b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
		logit := ops.Add(s, ops.Sum(s, ops.ReshapeTo(s, lk.Rows, -1, data.CategoricalFeatures), []int{1}, false), b.Value())
		loss := ops.Mean(s, ops.Sub(s, ops.Softplus(s, logit), ops.Mul(s, y, logit)), nil, false)
		up, err := train.ApplyHashAdagrad(s, lk, loss, 0.3)
		if err != nil {
			t.Fatal(err)
		}
		step, err := train.Minimize(s.WithControlDependencies(up...), train.NewAdagrad(0.3, 0.1), loss, nil)
		if err != nil {
			t.Fatal(err)
		}
		eval := h.Lookup(s.SubScope("eval"), ids, false)
		evalLogit := ops.Add(s, ops.Sum(s, ops.ReshapeTo(s, eval.Rows, -1, data.CategoricalFeatures), []int{1}, false), b.Value())
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		_ = ops.GlobalVariablesInitializer(s)
		return s.Graph(), h, ids, y, evalLogit, step, loss
	}
	// Ids far apart and negative too: any int64 is an id.
	spread := func(v []int64) []int64 {
		out := make([]int64, len(v))
		for i, id := range v {
			out[i] = id*1_000_000_007 - 3_000_000_000_000
		}
		return out
	}
	g, h, ids, y, evalLogit, step, _ := build([]string{"/job:localhost/task:0/cpu:0", "/job:localhost/task:0/cpu:0"})
	sess, err := session.New(g)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := graph.NewScopeWithGraph(g)
	init := g.Node("init")
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	cat, labels := log.Cat.Int64s(), log.Labels.Float32s()
	sizes := h.Size(s)
	for i := range steps {
		lo, hi := i*batch, (i+1)*batch
		feeds := map[graph.Output]*tensor.Tensor{
			ids: tensor.MustFromSlice(spread(cat[lo*26:hi*26]), batch*26),
			y:   tensor.MustFromSlice(labels[lo:hi], batch),
		}
		if _, err := sess.Run(ctx, feeds, nil, []*graph.Node{step}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := sess.Run(ctx, nil, sizes, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, sz := range out {
		if n := sz.Int64s()[0]; (limit > 0 && n > int64(limit)) || n == 0 {
			t.Fatalf("shard %d holds %d rows: limit %d", i, n, limit)
		}
	}
	lo := steps * batch
	n := log.Len() - lo
	evalFeeds := map[graph.Output]*tensor.Tensor{ids: tensor.MustFromSlice(spread(cat[lo*26:]), n*26)}
	pred, err := sess.Run(ctx, evalFeeds, []graph.Output{evalLogit}, nil)
	if err != nil {
		t.Fatal(err)
	}
	scores := make([]float64, n)
	for i := range scores {
		scores[i] = pred[0].Float64At(i)
	}
	auc, planted := data.AUC(scores, labels[lo:]), data.AUC(log.Planted[lo:], labels[lo:])
	t.Logf("%d distinct ids, row limit %d (2 shards of %d): shard sizes %d and %d, AUC %.4f (planted %.4f)",
		distinct, 2*limit, limit, out[0].Int64s()[0], out[1].Int64s()[0], auc, planted)
	if auc < 0.6 {
		t.Errorf("AUC %.4f: the model did not learn under the row limit", auc)
	}

	// Reshard: export the two shards, import into three.
	keys, vals, accs := h.Export(s)
	h3 := h
	h3.Devices = []string{"/job:localhost/task:0/cpu:0", "/job:localhost/task:0/cpu:0", "/job:localhost/task:0/cpu:0"}
	h3.Name = "ids3"
	imp := h3.Import(s, ops.Concat(s, 0, keys...), ops.Concat(s, 0, vals...), ops.Concat(s, 0, accs...))
	lk3 := h3.Lookup(s.SubScope("eval3"), ids, false)
	logit3 := ops.Add(s, ops.Sum(s, ops.ReshapeTo(s, lk3.Rows, -1, data.CategoricalFeatures), []int{1}, false), g.Node("b").Output(0))
	sizes3 := h3.Size(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Run(ctx, nil, nil, imp); err != nil {
		t.Fatal(err)
	}
	got, err := sess.Run(ctx, evalFeeds, append([]graph.Output{logit3, evalLogit}, sizes3...), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(got[0], got[1]) {
		t.Error("the resharded table predicts differently")
	}
	total := got[2].Int64s()[0] + got[3].Int64s()[0] + got[4].Int64s()[0]
	if total != out[0].Int64s()[0]+out[1].Int64s()[0] {
		t.Errorf("resharding into 3 kept %d rows of %d", total, out[0].Int64s()[0]+out[1].Int64s()[0])
	}
}
