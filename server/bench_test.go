package server_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/internal/abtest"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// BenchmarkLinearRegressionStep compares one training step (batch 1) of the
// linear model run in process with the same step run through a remote
// session on a 1 ps + 1 worker cluster on loopback: the step overhead of the
// distributed runtime.
func BenchmarkLinearRegressionStep(b *testing.B) {
	feeds := map[string]*tensor.Tensor{"x": tensor.MustFromSlice([]float32{0.5}, 1, 1), "y": tensor.MustFromSlice([]float32{2}, 1, 1)}
	run := func(b *testing.B, sess *session.Session, init *graph.Node) {
		ctx := context.Background()
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := sess.RunNamed(ctx, feeds, nil, []string{"train"}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("local", func(b *testing.B) {
		g, init := abtest.LinearModel(b, 0)
		sess, err := session.New(g)
		if err != nil {
			b.Fatal(err)
		}
		defer sess.Close()
		run(b, sess, init)
	})
	b.Run("remote", func(b *testing.B) {
		tc := newTestCluster(b, map[string]int{"ps": 1, "worker": 1})
		tc.start(b, "ps", 0, nil)
		w := tc.start(b, "worker", 0, nil)
		g, init := abtest.LinearModel(b, 0)
		sess, err := session.Open(context.Background(), w.Target(), g)
		if err != nil {
			b.Fatal(err)
		}
		defer sess.Close()
		run(b, sess, init)
	})
}
