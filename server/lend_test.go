package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// TestSentVariableIsUpdatedInPlace: a ps variable that a worker reads over
// the tensor channel is handed back to the variable once written to the
// socket, so the ps updates it in place afterwards instead of moving it to
// a copy (which a share kept for good forced at every update); and the
// value the worker received stays the one it read.
func TestSentVariableIsUpdatedInPlace(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	const n = 1 << 16
	s := graph.NewScope()
	onPS := s.WithDevice("/job:ps/task:0")
	v := ops.NewVariable(onPS, "v", tensor.Float32, []int{n}, ops.ZerosInit())
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	inc := ops.AssignAdd(onPS, v.Value(), ops.Const(onPS, tensor.MustFromSlice(ones, n)))
	read := ops.Mul(s.WithDevice("/job:worker/task:0"), v.Value(), ops.Scalar(s, tensor.Float32, 1))
	sess, variable := sessionWithPSVariable(t, ctx, s)
	buffer := func() *tensor.Tensor {
		b, l, err := variable.Share()
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		return b
	}

	var got []*tensor.Tensor
	moves := 0
	const steps = 20
	for step := range steps {
		out, err := sess.Run(ctx, nil, []graph.Output{read}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out[0])
		before := buffer()
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{inc.Node}); err != nil {
			t.Fatal(err)
		}
		if buffer() != before {
			moves++
			t.Logf("update %d moved the variable to another buffer", step)
		}
	}
	// The share comes back when the ps's RecvTensor has written the value,
	// a moment after the worker has it all: an update racing that moment
	// still moves the variable (about one in 50 here). Kept for good, the
	// share made every update move it.
	if moves > steps/4 {
		t.Errorf("%d of %d updates after a read moved the variable: the share sent to the worker was not handed back", moves, steps)
	}
	for step, out := range got {
		if vals := out.Float32s(); vals[0] != float32(step) || slices.ContainsFunc(vals, func(x float32) bool { return x != vals[0] }) {
			t.Errorf("read %d changed after the update: got %v..., want all %d", step, vals[:4], step)
		}
	}
}

// TestPushedValueIsTaken: a ps variable assigned a worker's tensor takes
// the storage the tensor was received into over the tensor channel, the
// step's own, instead of copying it; the values stay right.
func TestPushedValueIsTaken(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	const n = 1 << 12
	s := graph.NewScope()
	onPS, onWorker := s.WithDevice("/job:ps/task:0"), s.WithDevice("/job:worker/task:0")
	v := ops.NewVariable(onPS, "v", tensor.Float32, []int{n}, ops.ZerosInit())
	x := ops.Placeholder(onWorker, "x", tensor.Float32, tensor.MakeShape(n))
	push := ops.Assign(onPS, v.Value(), ops.Mul(onWorker, x, ops.Scalar(onWorker, tensor.Float32, 2)))
	sess, variable := sessionWithPSVariable(t, ctx, s)
	storage := func() *float32 {
		b, l, err := variable.Share()
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release()
		return &b.Float32s()[0]
	}
	seen := map[*float32]bool{storage(): true}
	for step := range 5 {
		fed := tensor.New(tensor.Float32, n)
		for i := range fed.Float32s() {
			fed.Float32s()[i] = float32(step)
		}
		if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: fed}, nil, []*graph.Node{push.Node}); err != nil {
			t.Fatal(err)
		}
		now := storage()
		if seen[now] {
			t.Errorf("push %d: the variable kept a buffer it had: it copied the received tensor", step)
		}
		seen[now] = true
		got, err := variable.Read()
		if err != nil {
			t.Fatal(err)
		}
		if vals := got.Float32s(); slices.ContainsFunc(vals, func(x float32) bool { return x != float32(2*step) }) {
			t.Errorf("push %d: v = %v..., want all %d", step, vals[:4], 2*step)
		}
	}
}

// sessionWithPSVariable starts a cluster of a ps and a worker, opens a
// session of s's graph on the worker, runs its variables' initializers,
// and returns the session and the ps's variable "v".
func sessionWithPSVariable(t *testing.T, ctx context.Context, s *graph.Scope) (*session.Session, *kernel.Variable) {
	t.Helper()
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	tc := newTestCluster(t, map[string]int{"ps": 1, "worker": 1})
	ps := tc.start(t, "ps", 0, nil)
	w := tc.start(t, "worker", 0, nil)
	sess, err := session.Open(ctx, w.Target(), s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	variable, ok := ps.Worker().(*worker.Worker).Resources().Lookup("v")
	if !ok {
		t.Fatal("no variable v on the ps")
	}
	return sess, variable
}
