// Package savedmodeltest builds small models with random weights for the
// tests and benchmarks of savedmodel, serving and the distflow command: each
// comes with a session holding its variables, as a training program would
// have it at export time, so tests can compare a loaded export with the
// in-process computation.
//
//	b, err := savedmodeltest.MLP(1)
//	defer b.Close()
//	_, dir, err := savedmodel.WriteVersion(base, b.Model)
//	want, err := b.Run(ctx, map[string]*tensor.Tensor{"images": savedmodeltest.Images(5, 7)})
package savedmodeltest

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// Built is a model built in process: its export description (with the
// variables' current values filled in) and the session that holds them.
type Built struct {
	Model   savedmodel.Model
	Session *session.Session
}

// Close closes the session.
func (b *Built) Close() error { return b.Session.Close() }

// Run computes the model's outputs in process, with the session that built
// it: the reference an export's predictions must equal.
func (b *Built) Run(ctx context.Context, inputs map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	feeds := map[graph.Output]*tensor.Tensor{}
	for name, t := range inputs {
		o, ok := b.Model.Inputs[name]
		if !ok {
			return nil, fmt.Errorf("savedmodeltest: unknown input %q", name)
		}
		feeds[o] = t
	}
	var names []string
	var fetches []graph.Output
	for name, o := range b.Model.Outputs {
		names = append(names, name)
		fetches = append(fetches, o)
	}
	vals, err := b.Session.Run(ctx, feeds, fetches, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]*tensor.Tensor{}
	for i, n := range names {
		out[n] = vals[i]
	}
	return out, nil
}

// finish initialises the variables, reads their values into m.Variables and
// adds training nodes (an SGD update and a saver) the export must prune.
func finish(s *graph.Scope, m savedmodel.Model, step int64) (*Built, error) {
	vars := ops.GlobalVariables(s.Graph())
	ts := s.SubScope("train")
	lr := ops.Scalar(ts, tensor.Float32, 0.1)
	var updates []*graph.Node
	for _, v := range vars {
		updates = append(updates, ops.ApplyGradientDescent(ts, v.Value(), lr, ops.ZerosLike(ts, v.Value())))
	}
	ops.Group(ts, "train_op", updates...)
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("savedmodeltest: building: %w", err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		sess.Close()
		return nil, err
	}
	fetches := make([]graph.Output, len(vars))
	for i, v := range vars {
		fetches[i] = v.Value()
	}
	vals, err := sess.Run(ctx, nil, fetches, nil)
	if err != nil {
		sess.Close()
		return nil, err
	}
	m.Graph = s.Graph()
	m.Variables = map[string]*tensor.Tensor{}
	for i, v := range vars {
		m.Variables[v.Name()] = vals[i]
	}
	m.GlobalStep = step
	return &Built{Model: m, Session: sess}, nil
}

// MLP builds the 784-100-10 perceptron (sigmoid hidden layer, softmax
// output) with random weights drawn from seed. Input "images" float32
// [-1,784]; outputs "probabilities" float32 [-1,10] and "classes" int32 [-1].
func MLP(seed int) (*Built, error) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "images", tensor.Float32, tensor.MakeShape(-1, 784))
	dense := func(name string, h graph.Output, in, out int, k int) graph.Output {
		ls := s.SubScope(name)
		w := ops.NewVariable(ls, "W", tensor.Float32, []int{in, out}, ops.RandomNormalInit(0, 0.1, seed*10+k))
		b := ops.NewVariable(ls, "b", tensor.Float32, []int{out}, ops.RandomNormalInit(0, 0.1, seed*10+k+1))
		if w == nil || b == nil {
			return graph.Output{}
		}
		return ops.BiasAdd(ls, ops.MatMul(ls, h, w.Value(), false, false), b.Value())
	}
	h := ops.Sigmoid(s, dense("hidden", x, 784, 100, 0))
	logits := dense("softmax", h, 100, 10, 2)
	probs := ops.Softmax(s, logits)
	classes := ops.Cast(s, ops.ArgMax(s, logits, 1), tensor.Int32)
	return finish(s, savedmodel.Model{
		Inputs:  map[string]graph.Output{"images": x},
		Outputs: map[string]graph.Output{"probabilities": probs, "classes": classes},
	}, 1000)
}

// CNN builds a small convolutional network with random weights: the
// reference CNN's structure (conv 5x5 SAME, relu, 2x2 max-pool, twice, then
// two dense layers) with fewer channels: 8 and 16, dense 784->32->10.
// Input "images" float32 [-1,784]; output "logits" float32 [-1,10].
func CNN(seed int) (*Built, error) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "images", tensor.Float32, tensor.MakeShape(-1, 784))
	v := func(ls *graph.Scope, name string, shape []int, k int) graph.Output {
		vv := ops.NewVariable(ls, name, tensor.Float32, shape, ops.RandomNormalInit(0, 0.1, seed*10+k))
		if vv == nil {
			return graph.Output{}
		}
		return vv.Value()
	}
	h := ops.ReshapeTo(s, x, -1, 28, 28, 1)
	for i, ch := range [][2]int{{1, 8}, {8, 16}} {
		ls := s.SubScope(fmt.Sprintf("conv%d", i+1))
		h = ops.Conv2D(ls, h, v(ls, "W", []int{5, 5, ch[0], ch[1]}, 2*i), [2]int{1, 1}, "SAME")
		h = ops.Relu(ls, ops.BiasAdd(ls, h, v(ls, "b", []int{ch[1]}, 2*i+1)))
		h = ops.MaxPool(ls, h, [2]int{2, 2}, [2]int{2, 2}, "SAME")
	}
	h = ops.ReshapeTo(s, h, -1, 7*7*16)
	fc1 := s.SubScope("fc1")
	h = ops.Relu(fc1, ops.BiasAdd(fc1, ops.MatMul(fc1, h, v(fc1, "W", []int{784, 32}, 4), false, false), v(fc1, "b", []int{32}, 5)))
	fc2 := s.SubScope("fc2")
	logits := ops.BiasAdd(fc2, ops.MatMul(fc2, h, v(fc2, "W", []int{32, 10}, 6), false, false), v(fc2, "b", []int{10}, 7))
	return finish(s, savedmodel.Model{
		Inputs:  map[string]graph.Output{"images": x},
		Outputs: map[string]graph.Output{"logits": logits},
	}, 2000)
}

// Small builds a model with two inputs and two outputs of different dtypes:
// "x" float32 [-1,3] and "k" int32 [-1]; "y" = x·W + b float32 [-1,2] and
// "k2" = k + k int32 [-1]. W and b are fixed: W = [[1,2],[3,4],[5,6]],
// b = [0.5, -0.5]. version shifts b by version-1, so tests can tell versions
// apart by their results.
func Small(version int) (*Built, error) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 3))
	k := ops.Placeholder(s, "k", tensor.Int32, tensor.MakeShape(-1))
	w := ops.NewVariable(s, "W", tensor.Float32, []int{3, 2}, ops.ZerosInit())
	b := ops.NewVariable(s, "b", tensor.Float32, []int{2}, ops.ZerosInit())
	if w == nil || b == nil {
		return nil, s.Err()
	}
	y := ops.BiasAdd(s, ops.MatMul(s, x, w.Value(), false, false), b.Value())
	k2 := ops.Add(s, k, k)
	built, err := finish(s, savedmodel.Model{
		Inputs:  map[string]graph.Output{"x": x, "k": k},
		Outputs: map[string]graph.Output{"y": y, "k2": k2},
	}, int64(version))
	if err != nil {
		return nil, err
	}
	built.Model.Variables["W"] = tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 3, 2)
	off := float32(version - 1)
	built.Model.Variables["b"] = tensor.MustFromSlice([]float32{0.5 + off, -0.5 + off}, 2)
	// Make the session agree with the exported values.
	ctx := context.Background()
	assign := ops.Assign(s, w.Value(), ops.Const(s, built.Model.Variables["W"]))
	assignB := ops.Assign(s, b.Value(), ops.Const(s, built.Model.Variables["b"]))
	if err := s.Err(); err != nil {
		return nil, err
	}
	if _, err := built.Session.Run(ctx, nil, []graph.Output{assign, assignB}, nil); err != nil {
		return nil, err
	}
	return built, nil
}

// Images returns n random images [n,784] with values in [0,1), drawn from seed.
func Images(n int, seed uint64) *tensor.Tensor {
	r := rand.New(rand.NewPCG(seed, 42))
	d := make([]float32, n*784)
	for i := range d {
		d[i] = r.Float32()
	}
	return tensor.MustFromSlice(d, n, 784)
}

// Rows returns rows [from, to) of a tensor of rank >= 1, as a copy.
func Rows(t *tensor.Tensor, from, to int) *tensor.Tensor {
	shape := append([]int{to - from}, t.Shape()[1:]...)
	per := t.NumElements() / max(t.Shape()[0], 1) * t.DType().Size()
	out, err := tensor.FromRawBytes(t.DType(), shape, t.RawBytes()[from*per:to*per])
	if err != nil {
		panic(err) // a programmer error in a test
	}
	return out
}
