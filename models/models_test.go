package models_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// trainer is a built model with its session and one fixed batch.
type trainer struct {
	sess    *session.Session
	m       *models.Model
	trainOp *graph.Node
	feeds   map[graph.Output]*tensor.Tensor
}

func newTrainer(tb testing.TB, name string, batch int) *trainer {
	tb.Helper()
	return newTrainerWith(tb, name, batch, models.Config{Seed: 1})
}

func newTrainerWith(tb testing.TB, name string, batch int, cfg models.Config) *trainer {
	tb.Helper()
	s := graph.NewScope()
	m, err := models.Build(s, name, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	opt, lr := "sgd", float32(0.1)
	switch name {
	case "mlp":
		lr = 0.5
	case "cnn":
		opt, lr = "adam", 1e-3
	}
	o, err := train.NewOptimizer(opt, lr)
	if err != nil {
		tb.Fatal(err)
	}
	trainOp, err := train.Minimize(s, o, m.Loss, train.CreateGlobalStep(s))
	if err != nil {
		tb.Fatal(err)
	}
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		tb.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sess.Close() })
	if _, err := sess.Run(context.Background(), nil, nil, []*graph.Node{init}); err != nil {
		tb.Fatal(err)
	}
	var x, y *tensor.Tensor
	if name == "linreg" {
		x, y = data.Linear(batch, 1, 2, 10, 0.33)
	} else {
		tr, _, err := data.Embedded()
		if err != nil {
			tb.Fatal(err)
		}
		ds, err := data.FromTensors(tr.Images, tr.Labels)
		if err != nil {
			tb.Fatal(err)
		}
		it := ds.Batch(batch, true).Iterator(context.Background())
		b, err := it.Next()
		it.Close()
		if err != nil {
			tb.Fatal(err)
		}
		x, y = b[0], b[1]
	}
	return &trainer{sess: sess, m: m, trainOp: trainOp, feeds: map[graph.Output]*tensor.Tensor{m.Input: x, m.Label: y}}
}

func (tr *trainer) step(tb testing.TB) float64 {
	out, err := tr.sess.Run(context.Background(), tr.feeds, []graph.Output{tr.m.Loss}, []*graph.Node{tr.trainOp})
	if err != nil {
		tb.Fatal(err)
	}
	return out[0].Float64At(0)
}

// TestModelsLearnOneBatch checks that each model can fit a fixed batch: the
// loss after some steps is well below the first one.
func TestModelsLearnOneBatch(t *testing.T) {
	for _, c := range []struct {
		model        string
		batch, steps int
	}{{"linreg", 32, 200}, {"mlp", 100, 50}, {"cnn", 16, 15}} {
		t.Run(c.model, func(t *testing.T) {
			tr := newTrainer(t, c.model, c.batch)
			first := tr.step(t)
			last := first
			for i := 0; i < c.steps; i++ {
				last = tr.step(t)
			}
			if !(last < first/2) {
				t.Errorf("loss went from %.4f to %.4f in %d steps", first, last, c.steps)
			}
		})
	}
}

// TestPartitionedWeightsTrainAlike: with MaxShards and MinShardBytes the
// mlp's 784x100 weight becomes 3 shards (313,600 bytes over slices of at
// least 64 KiB, at most 3) and the 100x10 one stays whole; the model starts
// from the same values and trains to the same losses as the unpartitioned
// one.
func TestPartitionedWeightsTrainAlike(t *testing.T) {
	whole := newTrainer(t, "mlp", 100)
	split := newTrainerWith(t, "mlp", 100, models.Config{Seed: 1, MaxShards: 3, MinShardBytes: 64 << 10})
	var names []string
	for _, v := range split.m.Variables {
		names = append(names, v.Name())
	}
	if len(split.m.Variables) != len(whole.m.Variables)+2 || !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, "W/part_2") }) {
		t.Fatalf("variables %v: want the hidden layer's W in 3 shards, the rest whole (%d variables unpartitioned)", names, len(whole.m.Variables))
	}
	for i := range 10 {
		a, b := whole.step(t), split.step(t)
		if math.Abs(a-b) > 1e-5*math.Abs(a) {
			t.Fatalf("step %d: loss %.7f partitioned, %.7f whole", i, b, a)
		}
	}
}

func TestBuildRejectsUnknownModel(t *testing.T) {
	if _, err := models.Build(graph.NewScope(), "resnet", models.Config{}); err == nil {
		t.Error("unknown model accepted")
	}
}

// BenchmarkTrainStep times one training step of each reference model at its
// reference batch size and reports examples per second.
func BenchmarkTrainStep(b *testing.B) {
	for _, c := range []struct {
		model string
		batch int
	}{{"linreg", 1}, {"mlp", 100}, {"cnn", 50}} {
		b.Run(fmt.Sprintf("%s/batch=%d", c.model, c.batch), func(b *testing.B) {
			tr := newTrainer(b, c.model, c.batch)
			tr.step(b) // warm up: executor built, buffers sized
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tr.step(b)
			}
			b.ReportMetric(float64(b.N*c.batch)/b.Elapsed().Seconds(), "examples/s")
		})
	}
}

// TestTowersShareVariables checks in-graph replication's building block:
// each tower has its own inputs and loss over one set of variables.
func TestTowersShareVariables(t *testing.T) {
	s := graph.NewScope()
	towers, err := models.BuildTowers(s, "mlp", models.Config{}, []string{"/job:worker/task:0", "/job:worker/task:1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(towers) != 2 || towers[0].Input == towers[1].Input || towers[0].Loss == towers[1].Loss {
		t.Fatalf("towers are not distinct: %+v", towers)
	}
	if got := len(ops.GlobalVariables(s.Graph())); got != 4 {
		t.Errorf("%d variables in the graph, want 4 (W and b of two layers)", got)
	}
	for i, tw := range towers {
		if len(tw.Variables) != 4 || tw.Variables[0] != towers[0].Variables[0] {
			t.Errorf("tower %d does not share the variables", i)
		}
		if d := tw.Loss.Node.Device(); d != fmt.Sprintf("/job:worker/task:%d", i) {
			t.Errorf("tower %d loss on %q", i, d)
		}
	}
}

// TestEpochShardsMakeTheSingleProcessBatch checks that the k-th batches of
// two replicas' shards together are the k-th batch, twice as large, of a
// single process with the same seed, across epochs.
func TestEpochShardsMakeTheSingleProcessBatch(t *testing.T) {
	const n, batch = 40, 4
	x := tensor.New(tensor.Float32, n, 1)
	y := tensor.New(tensor.Int32, n)
	for i := range n {
		x.Float32s()[i], y.Int32s()[i] = float32(i), int32(i)
	}
	d := models.Data{TrainX: x, TrainY: y}
	open := func(batch, replicas, index int) *data.Iterator {
		in, err := d.TrainInput("x", batch)(estimator.InputContext{NumReplicas: replicas, ReplicaIndex: index, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		it := in.Dataset.Iterator(t.Context())
		t.Cleanup(it.Close)
		return it
	}
	single, w0, w1 := open(2*batch, 1, 0), open(batch, 2, 0), open(batch, 2, 1)
	seen := map[int32]int{}
	for k := range 3 * n / (2 * batch) { // three epochs
		want, err := single.Next()
		if err != nil {
			t.Fatal(err)
		}
		var got []int32
		for _, it := range []*data.Iterator{w0, w1} {
			b, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, b[1].Int32s()...)
		}
		wantLabels := slices.Clone(want[1].Int32s())
		slices.Sort(got)
		slices.Sort(wantLabels)
		if !slices.Equal(got, wantLabels) {
			t.Fatalf("batch %d: the replicas' examples %v, the single process's %v", k, got, wantLabels)
		}
		if k < n/(2*batch) {
			for _, l := range got {
				seen[l]++
			}
		}
	}
	if len(seen) != n {
		t.Errorf("the first epoch saw %d distinct examples of %d", len(seen), n)
	}
}
