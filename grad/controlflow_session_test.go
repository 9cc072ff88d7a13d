package grad_test

import (
	"context"
	"math"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/partition"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
	"github.com/distflow/distflow/worker/workertest"
)

// recurrentModel builds a tiny recurrent regression whose forward pass is a
// while loop over the rows of a fed sequence: h = tanh(h W + x[i] U + b),
// then loss = mean((h V - y)^2). The variables are read inside the loop
// (captured), and a training step from gradient descent updates them. The
// variables go on varDevice, everything else on the scope's device.
func recurrentModel(s *graph.Scope, varDevice string) (x, y, loss graph.Output, step *graph.Node, err error) {
	x = ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(5, 2, 3)) // time, batch, features
	y = ops.Placeholder(s, "y", tensor.Float32, tensor.MakeShape(2, 1))
	vs := s.WithDevice(varDevice)
	w := ops.NewVariable(vs, "W", tensor.Float32, []int{4, 4}, ops.RandomNormalInit(0, 0.3, 1))
	u := ops.NewVariable(vs, "U", tensor.Float32, []int{3, 4}, ops.RandomNormalInit(0, 0.3, 2))
	b := ops.NewVariable(vs, "b", tensor.Float32, []int{4}, ops.ZerosInit())
	v := ops.NewVariable(vs, "V", tensor.Float32, []int{4, 1}, ops.RandomNormalInit(0, 0.3, 3))
	out := ops.WhileLoop(s,
		func(s *graph.Scope, lv []graph.Output) graph.Output {
			return ops.Less(s, lv[0], ops.Const(s, int32(5)))
		},
		func(s *graph.Scope, lv []graph.Output) []graph.Output {
			xi := ops.Gather(s, x, lv[0], 0)
			pre := ops.Add(s, ops.MatMul(s, lv[1], w.Value(), false, false), ops.MatMul(s, xi, u.Value(), false, false))
			h := ops.Tanh(s, ops.Add(s, pre, b.Value()))
			return []graph.Output{ops.Add(s, lv[0], ops.Const(s, int32(1))), h}
		},
		[]graph.Output{ops.Const(s, int32(0)), ops.Zeros(s, tensor.Float32, 2, 4)})
	pred := ops.MatMul(s, out[1], v.Value(), false, false)
	loss = ops.Mean(s, ops.Square(s, ops.Sub(s, pred, y)), nil, false)
	step, err = train.Minimize(s, train.NewGradientDescent(0.3), loss, nil)
	if err == nil {
		err = s.Err()
	}
	return x, y, loss, step, err
}

func sequenceData() (*tensor.Tensor, *tensor.Tensor) {
	xv := tensor.New(tensor.Float32, 5, 2, 3)
	for i := range xv.Float32s() {
		xv.Float32s()[i] = float32(math.Sin(float64(i) * 0.7))
	}
	return xv, tensor.MustFromSlice([]float32{0.5, -0.25}, 2, 1)
}

// trainLoop initialises the variables and runs steps training steps,
// returning the loss before each.
func trainLoop(t *testing.T, sess *session.Session, s *graph.Scope, x, y, loss graph.Output, step *graph.Node, steps int) []float32 {
	t.Helper()
	ctx := context.Background()
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	xv, yv := sequenceData()
	feeds := map[graph.Output]*tensor.Tensor{x: xv, y: yv}
	var losses []float32
	for range steps {
		out, err := sess.Run(ctx, feeds, []graph.Output{loss}, []*graph.Node{step})
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, out[0].Float32s()[0])
	}
	return losses
}

// TestWhileLoopTrains trains the recurrent model through a local session:
// the loss falls.
func TestWhileLoopTrains(t *testing.T) {
	s := graph.NewScope()
	x, y, loss, step, err := recurrentModel(s, "")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	losses := trainLoop(t, sess, s, x, y, loss, step, 40)
	first, last := losses[0], losses[len(losses)-1]
	t.Logf("loss %.4g -> %.4g", first, last)
	if !(last < first/10) {
		t.Errorf("loss went from %v to %v in %d steps, want a tenfold fall", first, last, len(losses))
	}
}

// TestWhileLoopAcrossTasks trains the same model through a master over
// two in-process tasks: the variables on the parameter server, the loop
// on the worker, so the values the loop captures and the gradients of
// the updates cross tasks as ordinary Send/Recv edges. The losses match
// the local session's step for step.
func TestWhileLoopAcrossTasks(t *testing.T) {
	const ps, wk = "/job:ps/task:0", "/job:worker/task:0"
	net := workertest.NewCluster(ps, wk)
	m := master.New(master.Config{Task: wk, Workers: net.From(wk)})

	s := graph.NewScope()
	x, y, loss, step, err := recurrentModel(s.WithDevice(wk), ps)
	if err != nil {
		t.Fatal(err)
	}
	// The partitions: the forward and backward loops on the worker, each
	// taking the variables it reads from a Recv.
	devs := map[*graph.Node]string{}
	for _, n := range s.Graph().Nodes() {
		devs[n] = n.Device()
	}
	parts, err := partition.Partition(s.Graph().Nodes(), devs)
	if err != nil {
		t.Fatal(err)
	}
	loops := 0
	for _, n := range parts[wk].Nodes() {
		if n.Op() != "While" {
			continue
		}
		loops++
		recvs := 0
		for _, in := range n.Inputs() {
			if in.Node.Op() == "Recv" {
				recvs++
			}
		}
		if recvs == 0 {
			t.Errorf("loop %s on the worker takes no input from the parameter server", n)
		}
	}
	if loops != 2 {
		t.Errorf("%d loops in the worker's partition, want 2 (forward and gradient)", loops)
	}
	remote, err := session.New(s.Graph(), session.WithMaster(m, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	got := trainLoop(t, remote, s, x, y, loss, step, 10)

	ls := graph.NewScope()
	lx, ly, lloss, lstep, err := recurrentModel(ls, "")
	if err != nil {
		t.Fatal(err)
	}
	local, err := session.New(ls.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	want := trainLoop(t, local, ls, lx, ly, lloss, lstep, 10)
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
			t.Errorf("step %d: loss %v across tasks, %v locally", i, got[i], want[i])
		}
	}
	if !(got[len(got)-1] < got[0]) {
		t.Errorf("the loss did not fall across tasks: %v", got)
	}
}
