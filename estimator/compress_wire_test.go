package estimator

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// countedListener counts the bytes its connections read and write.
type countedListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countedConn{c, l.n}, nil
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countedConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	c.n.Add(int64(k))
	return k, err
}

func (c countedConn) Write(b []byte) (int, error) {
	k, err := c.Conn.Write(b)
	c.n.Add(int64(k))
	return k, err
}

// TestHalfPushHalvesTheGradientBytes: a ps and a worker, real servers over
// loopback sockets whose bytes are counted; a step pulls a 256 KiB float32
// variable (the worker fetches it: the ps's connections) and pushes its
// gradient (the ps fetches it: the worker's connections). With fp16 and
// bf16 the push carries half the bytes and the pull stays float32; the
// variable ends as with float32, within half precision. Top-k at 1% pushes
// under a tenth of the bytes (8 bytes an entry sent), and still lowers the
// loss.
func TestHalfPushHalvesTheGradientBytes(t *testing.T) {
	// A transfer may be counted a step early or late (the runtime
	// overlaps them with the step), so a window of steps is measured and
	// one transfer's worth more or less is allowed.
	const rows, cols, steps = 256, 256, 8 // 256 KiB of float32
	type bytes struct{ pull, push int64 }
	perStep := map[CompressionKind]bytes{}
	values := map[CompressionKind][]float32{}
	losses := map[CompressionKind][2]float32{} // before and after the steps
	for _, comp := range []Compression{{}, {Kind: FP16}, {Kind: BF16}, {Kind: TopK, Ratio: 0.01}} {
		kind := comp.Kind
		pull, push, target := halfPushCluster(t)
		s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{PSTasks: 1, WorkerDevice: "/job:worker/task:0"}))
		w := ops.NewVariable(s, "w", tensor.Float32, []int{rows, cols}, ops.RandomUniformInit(-1, 1, 3))
		x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(4, rows))
		loss := ops.Sum(s, ops.Square(s, ops.MatMul(s, x, w.Value(), false, false)), nil, false)
		opt := comp.pushOptimizer(train.NewGradientDescent(0.001))
		step, err := train.Minimize(s, opt, loss, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		sess, feeds := openInitialized(t, s, target, x)
		run := func() {
			if _, err := sess.Run(ctx, feeds, nil, []*graph.Node{step}); err != nil {
				t.Fatalf("%v: %v", kind, err)
			}
		}
		lossNow := func() float32 {
			out, err := sess.Run(ctx, feeds, []graph.Output{loss}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return out[0].Float32s()[0]
		}
		before := lossNow()
		run() // the plan is made and registered
		pull0, push0 := pull.Load(), push.Load()
		for range steps {
			run()
		}
		perStep[kind] = bytes{(pull.Load() - pull0) / steps, (push.Load() - push0) / steps}
		losses[kind] = [2]float32{before, lossNow()}
		out, err := sess.Run(ctx, nil, []graph.Output{w.Value()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		values[kind] = out[0].Float32s()
	}
	// The pulls stay float32 (not checked: they overlap the steps most).
	t.Logf("bytes per step (pull, push): float32 %v, fp16 %v, bf16 %v, topk:0.01 %v", perStep[NoCompression], perStep[FP16], perStep[BF16], perStep[TopK])
	f32 := perStep[NoCompression]
	slackOf := func(n int64) int64 { return n/steps + 8<<10 }
	if f32.push < rows*cols*4-slackOf(f32.push) {
		t.Fatalf("float32 pushed %d bytes a step: less than the gradient", f32.push)
	}
	slack := slackOf(f32.push)
	for _, kind := range []CompressionKind{FP16, BF16} {
		c, name := perStep[kind], Compression{Kind: kind}
		if d := c.push - f32.push/2; d < -slack || d > slack {
			t.Errorf("%v pushes %d bytes a step, want half of float32's %d (within %d)", name, c.push, f32.push, slack)
		}
		tol := map[CompressionKind]float64{FP16: 1e-3, BF16: 1e-2}[kind]
		for i, v := range values[kind] {
			if d := float64(v - values[NoCompression][i]); d > tol || d < -tol {
				t.Fatalf("%v: w[%d] = %v after the steps, float32 gives %v", name, i, v, values[NoCompression][i])
			}
		}
	}
	if c := perStep[TopK]; c.push > f32.push/10 {
		t.Errorf("topk:0.01 pushes %d bytes a step, want under a tenth of float32's %d", c.push, f32.push)
	}
	if l := losses[TopK]; !(l[1] < l[0]) {
		t.Errorf("topk:0.01: the loss went from %v to %v in %d steps; want it lower", l[0], l[1], steps+1)
	}
}

// halfPushCluster starts a ps and a worker whose listeners count the
// bytes of their connections, into pull (the ps's) and push (the
// worker's); it returns the worker's target.
// openInitialized opens a session of s's graph on target, initialises the
// variables, and returns it (closed at the test's end) with a feed of x
// (4 rows of small values).
func openInitialized(t *testing.T, s *graph.Scope, target string, x graph.Output) (*session.Session, map[graph.Output]*tensor.Tensor) {
	t.Helper()
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sess, err := session.Open(ctx, target, s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	xs := make([]float32, x.Shape().NumElements())
	for i := range xs {
		xs[i] = float32(i%7) * 0.1
	}
	return sess, map[graph.Output]*tensor.Tensor{x: tensor.MustFromSlice(xs, x.Shape().Dims()...)}
}

func halfPushCluster(t *testing.T) (pull, push *atomic.Int64, target string) {
	t.Helper()
	pull, push = new(atomic.Int64), new(atomic.Int64)
	lis := map[string]net.Listener{}
	addrs := map[string][]string{}
	for job, n := range map[string]*atomic.Int64{"ps": pull, "worker": push} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[job] = []string{l.Addr().String()}
		lis[job] = countedListener{l, n}
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		t.Fatal(err)
	}
	for job, l := range lis {
		srv, err := server.New(server.Config{Cluster: spec, Task: cluster.TaskID{Job: job}, Listener: l, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		if job == "worker" {
			target = srv.Target()
		}
	}
	return pull, push, target
}

// TestHalfPullHalvesTheParameterBytes: as TestHalfPushHalvesTheGradientBytes,
// with the pull compressed (RunConfig.PullCompression): the worker reads the
// 256 KiB variable for its step as fp16 or bf16, half the bytes of
// float32, and the loss still falls; a fetch of the variable, built after
// the step, reads it whole, so the trained values are float32's and not
// rounded to the half type.
func TestHalfPullHalvesTheParameterBytes(t *testing.T) {
	const rows, cols, steps = 256, 256, 8
	perStep := map[CompressionKind]int64{}
	for _, kind := range []CompressionKind{NoCompression, FP16, BF16} {
		pull, _, target := halfPushCluster(t)
		s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{PSTasks: 1, WorkerDevice: "/job:worker/task:0"}))
		w := ops.NewVariable(s, "w", tensor.Float32, []int{rows, cols}, ops.RandomUniformInit(-1, 1, 3))
		from := s.Graph().NumNodes()
		x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(4, rows))
		loss := ops.Sum(s, ops.Square(s, ops.MatMul(s, x, w.Value(), false, false)), nil, false)
		step, err := train.Minimize(s, train.NewGradientDescent(0.001), loss, nil)
		if err != nil {
			t.Fatal(err)
		}
		markHalfPulls(s.Graph(), from, kind)
		weights := ops.Identity(s, w.Value())
		ctx := context.Background()
		sess, feeds := openInitialized(t, s, target, x)
		run := func(fetches ...graph.Output) []*tensor.Tensor {
			out, err := sess.Run(ctx, feeds, fetches, []*graph.Node{step})
			if err != nil {
				t.Fatalf("%v: %v", kind, err)
			}
			return out
		}
		before := run(loss)[0].Float32s()[0]
		pull0 := pull.Load()
		for range steps {
			run()
		}
		perStep[kind] = (pull.Load() - pull0) / steps
		if after := run(loss)[0].Float32s()[0]; !(after < before) {
			t.Errorf("pull %v: the loss went from %v to %v; want it lower", kind, before, after)
		}
		out, err := sess.Run(ctx, nil, []graph.Output{weights}, nil)
		if err != nil {
			t.Fatal(err)
		}
		whole := 0 // weights that no half type holds exactly
		for _, v := range out[0].Float32s() {
			if tensor.Float16From(tensor.Float16Bits(v)) != v && tensor.BFloat16From(tensor.BFloat16Bits(v)) != v {
				whole++
			}
		}
		if whole < rows*cols/2 {
			t.Errorf("pull %v: only %d of %d fetched weights are beyond half precision: the fetch was rounded", kind, whole, rows*cols)
		}
	}
	t.Logf("pull bytes per step: float32 %d, fp16 %d, bf16 %d", perStep[NoCompression], perStep[FP16], perStep[BF16])
	f32 := perStep[NoCompression]
	if f32 < rows*cols*4 {
		t.Fatalf("float32 pulled %d bytes a step: less than the variable", f32)
	}
	slack := f32/steps + 8<<10
	for _, kind := range []CompressionKind{FP16, BF16} {
		if d := perStep[kind] - f32/2; d < -slack || d > slack {
			t.Errorf("pull %v: %d bytes a step, want half of float32's %d (within %d)", kind, perStep[kind], f32, slack)
		}
	}
}
