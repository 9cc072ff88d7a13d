package server_test

import (
	"context"
	"net"
	"testing"

	"github.com/distflow/distflow/internal/abtest"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/server"
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
		var lis [2]net.Listener
		for i := range lis {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			lis[i] = l
		}
		spec, err := cluster.NewSpec(map[string][]string{"ps": {lis[0].Addr().String()}, "worker": {lis[1].Addr().String()}})
		if err != nil {
			b.Fatal(err)
		}
		var w *server.Server
		for i, id := range []cluster.TaskID{{Job: "ps"}, {Job: "worker"}} {
			s, err := server.New(server.Config{Cluster: spec, Task: id, Listener: lis[i], Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Start(); err != nil {
				b.Fatal(err)
			}
			defer s.Stop()
			w = s
		}
		g, init := abtest.LinearModel(b, 0)
		sess, err := session.Open(context.Background(), w.Target(), g)
		if err != nil {
			b.Fatal(err)
		}
		defer sess.Close()
		run(b, sess, init)
	})
}
