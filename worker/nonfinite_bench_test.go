package worker_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
	"github.com/distflow/distflow/worker"
)

// BenchmarkNonFiniteGuard times an SGD step (batch 100) of the reference
// MLP run on a task over gRPC, with the task's check of the values written
// into its variables (kernel.Policy.RefuseNonFiniteWrites) on and off:
// compare the two, A B A B, with -count.
func BenchmarkNonFiniteGuard(b *testing.B) {
	w, open := serveVictim(b, worker.Config{})
	s := graph.NewScope()
	m, err := models.Build(s, "mlp", models.Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	o, err := train.NewOptimizer("sgd", 0.5)
	if err != nil {
		b.Fatal(err)
	}
	trainOp, err := train.Minimize(s, o, m.Loss, train.CreateGlobalStep(s))
	if err != nil {
		b.Fatal(err)
	}
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		b.Fatal(err)
	}
	sess := open(s.Graph())
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		b.Fatal(err)
	}
	tr, _, err := data.Embedded()
	if err != nil {
		b.Fatal(err)
	}
	ds, err := data.FromTensors(tr.Images, tr.Labels)
	if err != nil {
		b.Fatal(err)
	}
	it := ds.Batch(100, true).Iterator(ctx)
	batch, err := it.Next()
	it.Close()
	if err != nil {
		b.Fatal(err)
	}
	feeds := map[graph.Output]*tensor.Tensor{m.Input: batch[0], m.Label: batch[1]}
	for _, guard := range []bool{false, true} {
		name := "guard=off"
		if guard {
			name = "guard=on"
		}
		b.Run(name, func(b *testing.B) {
			p := w.Resources().Policy()
			p.RefuseNonFiniteWrites = guard
			if err := w.Resources().SetPolicy(p); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := sess.Run(ctx, feeds, nil, []*graph.Node{trainOp}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
