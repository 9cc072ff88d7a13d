package grad_test

import (
	"context"
	"math"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/grad/gradtest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// nnUnary adapts a one-input builder to gradtest.Case.Build.
func nnUnary(f func(*graph.Scope, graph.Output) graph.Output) func(*graph.Scope, []graph.Output) graph.Output {
	return func(s *graph.Scope, x []graph.Output) graph.Output { return f(s, x[0]) }
}

// nnProbs returns a float64 [n, c] tensor whose rows are probability
// distributions.
func nnProbs(seed int64, n, c int) *tensor.Tensor {
	t := gradtest.Random(seed, n, c)
	d := t.Float64s()
	for r := 0; r < n; r++ {
		var sum float64
		for j := range c {
			d[r*c+j] = d[r*c+j] + 1.5
			sum += d[r*c+j]
		}
		for j := range c {
			d[r*c+j] /= sum
		}
	}
	return t
}

// nnDistinct returns a float64 tensor of the given shape holding a
// permutation of well-separated values, so that max pooling has no ties and
// finite differences never change a window's maximum.
func nnDistinct(seed int64, shape ...int) *tensor.Tensor {
	t := tensor.New(tensor.Float64, shape...)
	d := t.Float64s()
	n := len(d)
	for i := range d {
		// i*k mod n is a permutation when nnGCD(k, n) = 1.
		k := int(seed)*2 + 1
		for nnGCD(k, n) != 1 {
			k += 2
		}
		d[i] = float64((i*k)%n)/float64(n) - 0.5
	}
	return t
}

func nnGCD(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func TestNNGradients(t *testing.T) {
	labels := tensor.MustFromSlice([]int32{2, 0, 3}, 3)
	conv := func(strides [2]int, padding string) func(*graph.Scope, []graph.Output) graph.Output {
		return func(s *graph.Scope, x []graph.Output) graph.Output {
			return ops.Conv2D(s, x[0], x[1], strides, padding)
		}
	}
	pool := func(f func(*graph.Scope, graph.Output, [2]int, [2]int, string) graph.Output, k, st [2]int, padding string) func(*graph.Scope, []graph.Output) graph.Output {
		return func(s *graph.Scope, x []graph.Output) graph.Output { return f(s, x[0], k, st, padding) }
	}
	cases := []gradtest.Case{
		{Name: "BiasAdd", Inputs: []*tensor.Tensor{gradtest.Random(1, 2, 3, 4), gradtest.Random(2, 4)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output { return ops.BiasAdd(s, x[0], x[1]) }},
		{Name: "Relu", Inputs: []*tensor.Tensor{gradtest.Random(3, 3, 5)}, Build: nnUnary(ops.Relu)},
		{Name: "Sigmoid", Inputs: []*tensor.Tensor{gradtest.Random(4, 3, 5)}, Build: nnUnary(ops.Sigmoid)},
		{Name: "Tanh", Inputs: []*tensor.Tensor{gradtest.Random(5, 3, 5)}, Build: nnUnary(ops.Tanh)},
		{Name: "Softplus", Inputs: []*tensor.Tensor{gradtest.Random(6, 3, 5)}, Build: nnUnary(ops.Softplus)},
		{Name: "Softmax", Inputs: []*tensor.Tensor{gradtest.Random(7, 3, 5)}, Build: nnUnary(ops.Softmax)},
		{Name: "Softmax3D", Inputs: []*tensor.Tensor{gradtest.Random(8, 2, 2, 4)}, Build: nnUnary(ops.Softmax)},
		{Name: "LogSoftmax", Inputs: []*tensor.Tensor{gradtest.Random(9, 3, 5)}, Build: nnUnary(ops.LogSoftmax)},
		{Name: "L2Loss", Inputs: []*tensor.Tensor{gradtest.Random(10, 3, 5)}, Build: nnUnary(ops.L2Loss)},
		{Name: "SoftmaxXent", Inputs: []*tensor.Tensor{gradtest.Random(11, 3, 4), nnProbs(12, 3, 4)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				loss, _ := ops.SoftmaxCrossEntropyWithLogits(s, x[0], x[1])
				return loss
			}},
		// Differentiating the backprop output as well exercises its Jacobian term.
		{Name: "SoftmaxXentBoth", Inputs: []*tensor.Tensor{gradtest.Random(13, 3, 4), nnProbs(14, 3, 4)},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				loss, bp := ops.SoftmaxCrossEntropyWithLogits(s, x[0], x[1])
				return ops.Add(s, ops.ExpandDims(s, loss, 1), bp)
			}},
		{Name: "SparseSoftmaxXent", Inputs: []*tensor.Tensor{gradtest.Random(15, 3, 4), labels},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				loss, _ := ops.SparseSoftmaxCrossEntropyWithLogits(s, x[0], x[1])
				return loss
			}},
		{Name: "SparseSoftmaxXentBoth", Inputs: []*tensor.Tensor{gradtest.Random(16, 3, 4), labels},
			Build: func(s *graph.Scope, x []graph.Output) graph.Output {
				loss, bp := ops.SparseSoftmaxCrossEntropyWithLogits(s, x[0], x[1])
				return ops.Mul(s, ops.ExpandDims(s, loss, 1), bp)
			}},

		// Convolutions are float32 only; they are linear in each input, so
		// central differences are exact up to rounding.
		{Name: "Conv2DSame", Inputs: []*tensor.Tensor{gradtest.Random32(17, 2, 5, 5, 2), gradtest.Random32(18, 3, 3, 2, 3)},
			Build: conv([2]int{1, 1}, "SAME")},
		{Name: "Conv2DSameStride2", Inputs: []*tensor.Tensor{gradtest.Random32(19, 2, 6, 5, 2), gradtest.Random32(20, 3, 2, 2, 3)},
			Build: conv([2]int{2, 2}, "SAME")},
		{Name: "Conv2DValidStride2", Inputs: []*tensor.Tensor{gradtest.Random32(21, 1, 7, 6, 3), gradtest.Random32(22, 3, 3, 3, 2)},
			Build: conv([2]int{2, 2}, "VALID")},
		{Name: "Conv2DValid1x1", Inputs: []*tensor.Tensor{gradtest.Random32(23, 2, 3, 3, 2), gradtest.Random32(24, 1, 1, 2, 2)},
			Build: conv([2]int{1, 1}, "VALID")},

		{Name: "MaxPoolSame", Inputs: []*tensor.Tensor{nnDistinct(25, 2, 5, 5, 2)},
			Build: pool(ops.MaxPool, [2]int{2, 2}, [2]int{2, 2}, "SAME")},
		{Name: "MaxPoolValidOverlap", Inputs: []*tensor.Tensor{nnDistinct(26, 1, 6, 5, 3)},
			Build: pool(ops.MaxPool, [2]int{3, 3}, [2]int{2, 1}, "VALID")},
		{Name: "AvgPoolSame", Inputs: []*tensor.Tensor{gradtest.Random(27, 2, 5, 5, 2)},
			Build: pool(ops.AvgPool, [2]int{2, 2}, [2]int{2, 2}, "SAME")},
		{Name: "AvgPoolValidStride2", Inputs: []*tensor.Tensor{gradtest.Random(28, 1, 7, 6, 2)},
			Build: pool(ops.AvgPool, [2]int{3, 2}, [2]int{2, 2}, "VALID")},
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) { gradtest.Check(t, c) })
	}
}

// TestNNGradientOnlyOps checks that the backprop ops declare why they have
// no gradient of their own.
func TestNNGradientOnlyOps(t *testing.T) {
	for _, op := range []string{"BiasAddGrad", "ReluGrad", "SigmoidGrad", "TanhGrad",
		"Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPoolGrad", "AvgPoolGrad"} {
		fn, ok := grad.Lookup(op)
		if !ok || fn != nil || grad.NoneReason(op) == "" {
			t.Errorf("%s: want a RegisterNone entry with a reason", op)
		}
	}
}

// TestNNDropout checks the mask statistics, that rate 0 is the identity, and
// that the gradient is the same mask scaled by 1/(1-rate): with x = 1 in one
// run, dx equals y element for element.
func TestNNDropout(t *testing.T) {
	const n, rate = 20000, 0.25
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(n))
	y := ops.Dropout(s, x, rate, 7)
	if same := ops.Dropout(s, x, 0, 7); same != x {
		t.Errorf("Dropout with rate 0 returned %v, want x itself", same)
	}
	dx, err := grad.Gradients(s, []graph.Output{y}, []graph.Output{x}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ones := tensor.New(tensor.Float32, n)
	for i := range ones.Float32s() {
		ones.Float32s()[i] = 1
	}
	out, err := sess.Run(context.Background(), map[graph.Output]*tensor.Tensor{x: ones}, []graph.Output{y, dx[0]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for i, v := range out[0].Float32s() {
		switch {
		case v == 0:
		case math.Abs(float64(v)-1/(1-rate)) < 1e-6:
			kept++
		default:
			t.Fatalf("y[%d] = %v, want 0 or %v", i, v, 1/(1-rate))
		}
		if g := out[1].Float32s()[i]; g != v {
			t.Fatalf("dx[%d] = %v, want y[%d] = %v", i, g, i, v)
		}
	}
	// Binomial(n, 0.75): standard deviation about 61.
	if frac := float64(kept) / n; math.Abs(frac-(1-rate)) > 0.015 {
		t.Errorf("kept fraction %v, want about %v", frac, 1-rate)
	}

	// A bad rate is a build error, not a panic.
	s2 := graph.NewScope()
	ops.Dropout(s2, ops.Placeholder(s2, "x", tensor.Float32, tensor.MakeShape(2)), 1, 0)
	if s2.Err() == nil {
		t.Error("Dropout with rate 1: no error")
	}
}

// TestNNGradientsDynamicBatch differentiates a small CNN whose batch size is
// unknown when the graph is built, so the backprop ops get their shapes from
// Shape nodes at run time; the result must match the static-shape graph.
func TestNNGradientsDynamicBatch(t *testing.T) {
	xv, fv := gradtest.Random32(31, 2, 6, 6, 2), gradtest.Random32(32, 3, 3, 2, 4)
	run := func(batch int) []*tensor.Tensor {
		s := graph.NewScope()
		x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(batch, 6, 6, 2))
		f := ops.Placeholder(s, "f", tensor.Float32, tensor.MakeShape(3, 3, 2, 4))
		h := ops.Relu(s, ops.Conv2D(s, x, f, [2]int{2, 2}, "SAME"))
		y := ops.L2Loss(s, ops.AvgPool(s, h, [2]int{2, 2}, [2]int{1, 1}, "VALID"))
		gs, err := grad.Gradients(s, []graph.Output{y}, []graph.Output{x, f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sess, err := session.New(s.Graph())
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		out, err := sess.Run(context.Background(), map[graph.Output]*tensor.Tensor{x: xv, f: fv}, gs, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	static, dynamic := run(2), run(-1)
	for i := range static {
		if !tensor.Equal(static[i], dynamic[i]) {
			t.Errorf("gradient %d: static %v, dynamic %v", i, static[i], dynamic[i])
		}
	}
}
