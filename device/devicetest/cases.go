package devicetest

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/distflow/distflow/tensor"
)

// Cases returns the kernel checks of every op of device.Ops, on odd sizes
// and with broadcasting, from fixed seeds.
func Cases() []Case {
	r := rand.New(rand.NewPCG(1, 2))
	f := func(shape ...int) *tensor.Tensor { return randFloats(r, shape...) }
	pos := func(shape ...int) *tensor.Tensor { // away from zero, for Div
		t := randFloats(r, shape...)
		for i, v := range t.Float32s() {
			t.Float32s()[i] = 0.5 + abs(v)
		}
		return t
	}
	ints := func(n, hi int) *tensor.Tensor {
		t := tensor.New(tensor.Int32, n)
		for i := range t.Int32s() {
			t.Int32s()[i] = int32(r.IntN(hi))
		}
		return t
	}
	i32 := func(v ...int32) *tensor.Tensor { return tensor.MustFromSlice(v, len(v)) }
	bools := func(n int) *tensor.Tensor {
		t := tensor.New(tensor.Bool, n)
		for i := range t.Bools() {
			t.Bools()[i] = r.IntN(2) == 1
		}
		return t
	}
	conv := func(padding string, stride int) map[string]any {
		return map[string]any{"padding": padding, "strides": []int{stride, stride}}
	}
	pool := func(padding string) map[string]any {
		return map[string]any{"ksize": []int{2, 2}, "strides": []int{2, 2}, "padding": padding}
	}
	var cases []Case
	for _, op := range []string{"Add", "Sub", "Mul", "SquaredDifference", "GreaterEqual", "Equal"} {
		cases = append(cases,
			Case{Op: op, Inputs: []*tensor.Tensor{f(3, 5), f(3, 5)}},
			Case{Op: op, Inputs: []*tensor.Tensor{f(3, 5), f(5)}},
			Case{Op: op, Inputs: []*tensor.Tensor{f(2, 1, 3), f(4, 1)}},
			Case{Op: op, Inputs: []*tensor.Tensor{f(), f(7)}})
	}
	cases = append(cases,
		Case{Op: "Div", Inputs: []*tensor.Tensor{f(3, 5), pos(3, 5)}},
		Case{Op: "Div", Inputs: []*tensor.Tensor{f(4, 5), pos(5)}},
		Case{Op: "Equal", Inputs: []*tensor.Tensor{ints(9, 3), ints(9, 3)}},
		Case{Op: "Neg", Inputs: []*tensor.Tensor{f(5, 7)}},
		Case{Op: "Relu", Inputs: []*tensor.Tensor{f(5, 7)}},
		Case{Op: "Sigmoid", Inputs: []*tensor.Tensor{f(5, 7)}},
		Case{Op: "ReluGrad", Inputs: []*tensor.Tensor{f(5, 7), f(5, 7)}, Gradient: true},
		Case{Op: "SigmoidGrad", Inputs: []*tensor.Tensor{f(5, 7), f(5, 7)}, Gradient: true},
		Case{Op: "Identity", Inputs: []*tensor.Tensor{f(3, 4)}},
		Case{Op: "OnesLike", Inputs: []*tensor.Tensor{f(3, 4)}},
		Case{Op: "ZerosLike", Inputs: []*tensor.Tensor{f(3, 4)}},
		Case{Op: "Shape", Inputs: []*tensor.Tensor{f(3, 4, 2)}},
		Case{Op: "Shape", Inputs: []*tensor.Tensor{f()}},
		Case{Op: "Size", Inputs: []*tensor.Tensor{f(3, 4, 2)}},
		Case{Op: "MatMul", Inputs: []*tensor.Tensor{f(5, 7), f(7, 3)}},
		Case{Op: "MatMul", Attrs: map[string]any{"transpose_a": true}, Inputs: []*tensor.Tensor{f(7, 5), f(7, 3)}},
		Case{Op: "MatMul", Attrs: map[string]any{"transpose_b": true}, Inputs: []*tensor.Tensor{f(5, 7), f(3, 7)}},
		Case{Op: "MatMul", Attrs: map[string]any{"transpose_a": true, "transpose_b": true}, Inputs: []*tensor.Tensor{f(7, 5), f(3, 7)}},
		Case{Op: "MatMul", Inputs: []*tensor.Tensor{f(33, 65), f(65, 17)}},
		Case{Op: "BiasAdd", Inputs: []*tensor.Tensor{f(4, 6), f(6)}},
		Case{Op: "BiasAdd", Inputs: []*tensor.Tensor{f(2, 3, 3, 5), f(5)}},
		Case{Op: "BiasAddGrad", Inputs: []*tensor.Tensor{f(4, 6)}, Gradient: true},
		Case{Op: "BiasAddGrad", Inputs: []*tensor.Tensor{f(2, 3, 3, 5)}, Gradient: true},
		Case{Op: "Sum", Inputs: []*tensor.Tensor{f(4, 6)}},
		Case{Op: "Sum", Attrs: map[string]any{"axis": []int{1}}, Inputs: []*tensor.Tensor{f(4, 6, 3)}},
		Case{Op: "Sum", Attrs: map[string]any{"axis": []int{0, 2}, "keep_dims": true}, Inputs: []*tensor.Tensor{f(4, 6, 3)}},
		Case{Op: "Mean", Inputs: []*tensor.Tensor{f(4, 6)}},
		Case{Op: "Mean", Attrs: map[string]any{"axis": []int{0}}, Inputs: []*tensor.Tensor{f(5, 3)}},
		Case{Op: "ArgMax", Attrs: map[string]any{"axis": 1}, Inputs: []*tensor.Tensor{f(6, 10)}},
		Case{Op: "ArgMax", Attrs: map[string]any{"axis": 0, "output_type": tensor.Int32}, Inputs: []*tensor.Tensor{f(6, 10)}},
		Case{Op: "Cast", Attrs: map[string]any{"dtype": tensor.Int32}, Inputs: []*tensor.Tensor{ints(8, 100)}},
		Case{Op: "Cast", Attrs: map[string]any{"dtype": tensor.Float32}, Inputs: []*tensor.Tensor{ints(8, 100)}},
		Case{Op: "Cast", Attrs: map[string]any{"dtype": tensor.Int64}, Inputs: []*tensor.Tensor{ints(8, 100)}},
		Case{Op: "Cast", Attrs: map[string]any{"dtype": tensor.Float32}, Inputs: []*tensor.Tensor{bools(9)}},
		Case{Op: "Cast", Attrs: map[string]any{"dtype": tensor.Int32}, Inputs: []*tensor.Tensor{f(9)}},
		Case{Op: "Reshape", Inputs: []*tensor.Tensor{f(3, 4), i32(2, -1)}},
		Case{Op: "ExpandDims", Attrs: map[string]any{"axis": 1}, Inputs: []*tensor.Tensor{f(3, 4)}},
		Case{Op: "Fill", Inputs: []*tensor.Tensor{i32(2, 3), tensor.Scalar(float32(1.5))}},
		// An embedding's lookup: repeated ids, each element size, an axis
		// inside, indices of rank 2, none, and several blocks.
		Case{Op: "Gather", Inputs: []*tensor.Tensor{f(37, 33), ints(50, 37)}},
		Case{Op: "Gather", Attrs: map[string]any{"axis": 1}, Inputs: []*tensor.Tensor{f(3, 10, 2), idx64(r, 10, 2, 3)}},
		Case{Op: "Gather", Attrs: map[string]any{"axis": -1}, Inputs: []*tensor.Tensor{f(4, 6), ints(3, 6)}},
		Case{Op: "Gather", Inputs: []*tensor.Tensor{ints(20, 1000), idx64(r, 20, 5)}},
		Case{Op: "Gather", Inputs: []*tensor.Tensor{bools(9), ints(4, 9)}},
		Case{Op: "Gather", Inputs: []*tensor.Tensor{idx64(r, 1<<40, 7, 2), ints(11, 7)}},
		Case{Op: "Gather", Inputs: []*tensor.Tensor{f(5, 3), tensor.New(tensor.Int32, 0)}},
		Case{Op: "Gather", Inputs: []*tensor.Tensor{f(1000, 64), idx64(r, 1000, 300)}},
		Case{Op: "BroadcastTo", Inputs: []*tensor.Tensor{f(3), i32(2, 3)}},
		Case{Op: "BroadcastTo", Inputs: []*tensor.Tensor{f(4, 1), i32(2, 4, 3)}},
		Case{Op: "SumToShape", Inputs: []*tensor.Tensor{f(2, 3), i32(3)}, Gradient: true},
		Case{Op: "SumToShape", Inputs: []*tensor.Tensor{f(2, 4, 3), i32(4, 1)}, Gradient: true},
		Case{Op: "Conv2D", Attrs: conv("SAME", 1), Inputs: []*tensor.Tensor{f(2, 8, 8, 3), f(3, 3, 3, 4)}},
		Case{Op: "Conv2D", Attrs: conv("VALID", 2), Inputs: []*tensor.Tensor{f(2, 9, 7, 3), f(3, 3, 3, 5)}},
		Case{Op: "Conv2D", Attrs: conv("SAME", 1), Inputs: []*tensor.Tensor{f(1, 28, 28, 1), f(5, 5, 1, 8)}},
		Case{Op: "Conv2DBackpropInput", Attrs: conv("SAME", 1), Inputs: []*tensor.Tensor{i32(2, 8, 8, 3), f(3, 3, 3, 4), f(2, 8, 8, 4)}, Gradient: true},
		Case{Op: "Conv2DBackpropInput", Attrs: conv("VALID", 2), Inputs: []*tensor.Tensor{i32(2, 9, 7, 3), f(3, 3, 3, 5), f(2, 4, 3, 5)}, Gradient: true},
		Case{Op: "Conv2DBackpropFilter", Attrs: conv("SAME", 1), Inputs: []*tensor.Tensor{f(2, 8, 8, 3), i32(3, 3, 3, 4), f(2, 8, 8, 4)}, Gradient: true},
		Case{Op: "Conv2DBackpropFilter", Attrs: conv("VALID", 2), Inputs: []*tensor.Tensor{f(2, 9, 7, 3), i32(3, 3, 3, 5), f(2, 4, 3, 5)}, Gradient: true},
		// The GEMM convolutions' paths: a 1x1 filter at stride 1 (one
		// product, no im2col), uneven strides, even filters whose SAME
		// padding is uneven, windows that skip input rows.
		Case{Op: "Conv2D", Attrs: conv("VALID", 1), Inputs: []*tensor.Tensor{f(2, 5, 6, 7), f(1, 1, 7, 3)}},
		Case{Op: "Conv2D", Attrs: conv("SAME", 2), Inputs: []*tensor.Tensor{f(2, 5, 6, 7), f(1, 1, 7, 3)}},
		Case{Op: "Conv2D", Attrs: map[string]any{"padding": "SAME", "strides": []int{1, 3}}, Inputs: []*tensor.Tensor{f(3, 11, 13, 2), f(4, 2, 2, 5)}},
		Case{Op: "Conv2D", Attrs: conv("VALID", 3), Inputs: []*tensor.Tensor{f(1, 11, 10, 3), f(2, 2, 3, 4)}},
		Case{Op: "Conv2DBackpropInput", Attrs: conv("SAME", 1), Inputs: []*tensor.Tensor{i32(2, 5, 6, 7), f(1, 1, 7, 3), f(2, 5, 6, 3)}, Gradient: true},
		Case{Op: "Conv2DBackpropInput", Attrs: map[string]any{"padding": "SAME", "strides": []int{1, 3}}, Inputs: []*tensor.Tensor{i32(3, 11, 13, 2), f(4, 2, 2, 5), f(3, 11, 5, 5)}, Gradient: true},
		Case{Op: "Conv2DBackpropInput", Attrs: conv("VALID", 3), Inputs: []*tensor.Tensor{i32(1, 11, 10, 3), f(2, 2, 3, 4), f(1, 4, 3, 4)}, Gradient: true},
		Case{Op: "Conv2DBackpropFilter", Attrs: conv("SAME", 1), Inputs: []*tensor.Tensor{f(2, 5, 6, 7), i32(1, 1, 7, 3), f(2, 5, 6, 3)}, Gradient: true},
		Case{Op: "Conv2DBackpropFilter", Attrs: map[string]any{"padding": "SAME", "strides": []int{1, 3}}, Inputs: []*tensor.Tensor{f(3, 11, 13, 2), i32(4, 2, 2, 5), f(3, 11, 5, 5)}, Gradient: true},
		Case{Op: "Conv2DBackpropFilter", Attrs: conv("VALID", 3), Inputs: []*tensor.Tensor{f(1, 11, 10, 3), i32(2, 2, 3, 4), f(1, 4, 3, 4)}, Gradient: true},
		Case{Op: "MaxPool", Attrs: pool("SAME"), Inputs: []*tensor.Tensor{f(2, 7, 7, 3)}},
		Case{Op: "MaxPool", Attrs: pool("VALID"), Inputs: []*tensor.Tensor{f(2, 8, 6, 3)}},
	)
	x := f(2, 7, 7, 3)
	mp, _ := maxPool(x)
	cases = append(cases,
		Case{Op: "MaxPoolGrad", Attrs: pool("SAME"), Inputs: []*tensor.Tensor{x, mp, f(mp.Shape()...)}, Gradient: true},
		Case{Op: "SparseSoftmaxCrossEntropyWithLogits", Inputs: []*tensor.Tensor{f(4, 10), ints(4, 10)}},
		Case{Op: "SparseSoftmaxCrossEntropyWithLogits", Inputs: []*tensor.Tensor{f(37, 3), ints(37, 3)}},
	)
	return slices.Concat(cases, largeCases(), wideDeepCases(), layersCases())
}

// maxPool is the 2x2 SAME max-pool of x on the CPU, for MaxPoolGrad's
// orig_output.
func maxPool(x *tensor.Tensor) (*tensor.Tensor, error) {
	out, err := cpu(Case{Op: "MaxPool", Attrs: map[string]any{"ksize": []int{2, 2}, "strides": []int{2, 2}, "padding": "SAME"},
		Inputs: []*tensor.Tensor{x}})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

func randFloats(r *rand.Rand, shape ...int) *tensor.Tensor {
	t := tensor.New(tensor.Float32, shape...)
	for i := range t.Float32s() {
		t.Float32s()[i] = float32(r.NormFloat64())
	}
	return t
}

// randInts is a tensor of dtype dt of integers in [-hi, hi).
func randInts(r *rand.Rand, dt tensor.DType, hi int, shape ...int) *tensor.Tensor {
	t := tensor.New(dt, shape...)
	for i := range t.NumElements() {
		t.SetFloat64At(i, float64(r.IntN(2*hi)-hi))
	}
	return t
}

// randBools is a tensor of random bools.
func randBools(r *rand.Rand, shape ...int) *tensor.Tensor {
	t := tensor.New(tensor.Bool, shape...)
	for i := range t.Bools() {
		t.Bools()[i] = r.IntN(2) == 1
	}
	return t
}

func abs(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

// largeCases are checks on sizes that take many blocks, many threads per
// reduction and partial GEMM tiles, and on the integer and bool types.
func largeCases() []Case {
	r := rand.New(rand.NewPCG(3, 4))
	f := func(shape ...int) *tensor.Tensor {
		t := tensor.New(tensor.Float32, shape...)
		for i := range t.Float32s() {
			t.Float32s()[i] = float32(r.NormFloat64())
		}
		return t
	}
	ints := func(dt tensor.DType, hi int, shape ...int) *tensor.Tensor {
		t := tensor.New(dt, shape...)
		for i := range t.NumElements() {
			t.SetFloat64At(i, float64(r.IntN(2*hi)-hi))
		}
		return t
	}
	labels := func(n, classes int) *tensor.Tensor {
		t := tensor.New(tensor.Int64, n)
		for i := range t.Int64s() {
			t.Int64s()[i] = int64(r.IntN(classes))
		}
		return t
	}
	shape := func(v ...int32) *tensor.Tensor { return tensor.MustFromSlice(v, len(v)) }
	conv := func(padding string, stride int) map[string]any {
		return map[string]any{"padding": padding, "strides": []int{stride, stride}}
	}
	pool := func(k, s int) map[string]any {
		return map[string]any{"ksize": []int{k, k}, "strides": []int{s, s}, "padding": "SAME"}
	}
	x := f(3, 17, 19, 8)
	return []Case{
		{Op: "Add", Inputs: []*tensor.Tensor{f(300, 257), f(257)}},
		{Op: "Mul", Inputs: []*tensor.Tensor{f(7, 1, 33), f(5, 33)}},
		{Op: "Sub", Inputs: []*tensor.Tensor{ints(tensor.Int32, 1000, 40, 50), ints(tensor.Int32, 1000, 50)}},
		{Op: "Add", Inputs: []*tensor.Tensor{ints(tensor.Int64, 1<<40, 3, 1, 5), ints(tensor.Int64, 1<<40, 4, 1)}},
		{Op: "GreaterEqual", Inputs: []*tensor.Tensor{ints(tensor.Int32, 3, 600), ints(tensor.Int32, 3, 600)}},
		// Long float sums: the CPU's float32 accumulation is off the exact
		// sum (the device's, in double) by more than 1e-5.
		{Op: "Sum", Attrs: map[string]any{"axis": []int{0}}, Inputs: []*tensor.Tensor{f(1000, 300)}, Tol: 1e-4},
		{Op: "Sum", Inputs: []*tensor.Tensor{f(70000)}, Tol: 1e-4},
		{Op: "Sum", Attrs: map[string]any{"axis": []int{1}}, Inputs: []*tensor.Tensor{ints(tensor.Int64, 1000, 30, 700)}},
		{Op: "Mean", Attrs: map[string]any{"axis": []int{0, 2}, "keep_dims": true}, Inputs: []*tensor.Tensor{f(33, 513, 3)}, Tol: 1e-4},
		{Op: "Mean", Attrs: map[string]any{"axis": []int{1}}, Inputs: []*tensor.Tensor{ints(tensor.Int32, 100, 9, 301)}},
		{Op: "BiasAddGrad", Inputs: []*tensor.Tensor{f(2000, 37)}, Tol: 1e-4},
		{Op: "Sum", Attrs: map[string]any{"axis": []int{1}}, Inputs: []*tensor.Tensor{f(5000, 3)}},
		{Op: "Mean", Attrs: map[string]any{"axis": []int{0}}, Inputs: []*tensor.Tensor{ints(tensor.Int64, 1000, 64, 300)}},
		{Op: "BiasAdd", Inputs: []*tensor.Tensor{f(2000, 37), f(37)}},
		{Op: "SumToShape", Inputs: []*tensor.Tensor{f(64, 30, 20), shape(30, 1)}},
		{Op: "BroadcastTo", Inputs: []*tensor.Tensor{f(30, 1), shape(64, 30, 20)}},
		{Op: "ArgMax", Attrs: map[string]any{"axis": 1}, Inputs: []*tensor.Tensor{f(300, 1000)}},
		{Op: "ArgMax", Attrs: map[string]any{"axis": 0, "output_type": tensor.Int32}, Inputs: []*tensor.Tensor{ints(tensor.Int32, 50, 700, 30)}},
		{Op: "Cast", Attrs: map[string]any{"dtype": tensor.Bool}, Inputs: []*tensor.Tensor{ints(tensor.Int32, 2, 1000)}},
		{Op: "Cast", Attrs: map[string]any{"dtype": tensor.Int64}, Inputs: []*tensor.Tensor{f(1000)}},
		{Op: "Relu", Inputs: []*tensor.Tensor{f(100000)}},
		{Op: "MatMul", Inputs: []*tensor.Tensor{f(130, 70), f(70, 90)}},
		{Op: "MatMul", Attrs: map[string]any{"transpose_a": true}, Inputs: []*tensor.Tensor{f(70, 130), f(70, 90)}},
		{Op: "MatMul", Attrs: map[string]any{"transpose_a": true, "transpose_b": true}, Inputs: []*tensor.Tensor{f(33, 17), f(45, 33)}},
		{Op: "MatMul", Attrs: map[string]any{"transpose_b": true}, Inputs: []*tensor.Tensor{f(3, 40, 50), f(3, 20, 50)}},
		{Op: "Conv2D", Attrs: conv("SAME", 1), Inputs: []*tensor.Tensor{x, f(5, 5, 8, 6)}},
		{Op: "Conv2D", Attrs: conv("VALID", 2), Inputs: []*tensor.Tensor{x, f(3, 3, 8, 5)}},
		{Op: "Conv2DBackpropInput", Attrs: conv("SAME", 2), Inputs: []*tensor.Tensor{shape(3, 17, 19, 8), f(3, 3, 8, 6), f(3, 9, 10, 6)}, Tol: 1e-4},
		{Op: "Conv2DBackpropFilter", Attrs: conv("SAME", 1), Inputs: []*tensor.Tensor{x, shape(5, 5, 8, 6), f(3, 17, 19, 6)}, Tol: 1e-4},
		{Op: "MaxPool", Attrs: pool(3, 2), Inputs: []*tensor.Tensor{x}},
		{Op: "MaxPoolGrad", Attrs: pool(3, 2), Inputs: []*tensor.Tensor{x, mustMaxPool(x, pool(3, 2)), f(3, 9, 10, 8)}, Tol: 1e-4},
		{Op: "SparseSoftmaxCrossEntropyWithLogits", Inputs: []*tensor.Tensor{f(300, 1000), labels(300, 1000)}},
	}
}

// mustMaxPool pools x on the CPU, for MaxPoolGrad's orig_output.
func mustMaxPool(x *tensor.Tensor, attrs map[string]any) *tensor.Tensor {
	out, err := cpu(Case{Op: "MaxPool", Attrs: attrs, Inputs: []*tensor.Tensor{x}})
	if err != nil {
		panic(err)
	}
	return out[0]
}

// UpdateCases returns the checks of the optimizers' updates
// (device.Updates): a variable and its slots (positive where a rule takes
// a square root of them) of an odd size that takes several blocks, the
// hyper-parameters train's optimizers use, and a gradient.
func UpdateCases() []Case {
	r := rand.New(rand.NewPCG(7, 8))
	const n = 1000 + 37
	f := func(shape ...int) *tensor.Tensor { return randFloats(r, shape...) }
	pos := func(shape ...int) *tensor.Tensor {
		t := randFloats(r, shape...)
		for i, v := range t.Float32s() {
			t.Float32s()[i] = 0.1 + abs(v)
		}
		return t
	}
	sc := func(v float32) *tensor.Tensor { return tensor.Scalar(v) }
	return []Case{
		{Op: "ApplyGradientDescent", Inputs: []*tensor.Tensor{f(n), sc(0.1), f(n)}},
		{Op: "ApplyGradientDescent", Inputs: []*tensor.Tensor{f(5, 3, 7), sc(0.5), f(5, 3, 7)}},
		{Op: "ApplyMomentum", Inputs: []*tensor.Tensor{f(n), f(n), sc(0.01), f(n), sc(0.9)}},
		{Op: "ApplyMomentum", Attrs: map[string]any{"use_nesterov": true}, Inputs: []*tensor.Tensor{f(33, 31), f(33, 31), sc(0.01), f(33, 31), sc(0.9)}},
		{Op: "ApplyAdagrad", Inputs: []*tensor.Tensor{f(n), pos(n), sc(0.1), f(n)}},
		{Op: "ApplyRMSProp", Inputs: []*tensor.Tensor{f(n), pos(n), f(n), sc(0.01), sc(0.9), sc(0.5), sc(1e-10), f(n)}},
		{Op: "ApplyAdam", Inputs: []*tensor.Tensor{f(n), f(n), pos(n), sc(0.9), sc(0.999), sc(0.001), sc(0.9), sc(0.999), sc(1e-8), f(n)}},
		{Op: "ApplyAdam", Inputs: []*tensor.Tensor{f(7, 300), f(7, 300), pos(7, 300), sc(0.729), sc(0.997), sc(0.01), sc(0.9), sc(0.999), sc(1e-7), f(7, 300)}},
	}
}

// RandomCases returns the checks of the random ops (device.Random): sizes
// that are not multiples of Philox's four words, several blocks, an empty
// output, and seeds with either half zero.
func RandomCases() []Case {
	shape := func(v ...int32) *tensor.Tensor { return tensor.MustFromSlice(v, len(v)) }
	seeds := func(seed, seed2 int) map[string]any {
		return map[string]any{"dtype": tensor.Float32, "seed": seed, "seed2": seed2}
	}
	return []Case{
		{Op: "RandomUniform", Attrs: seeds(1, 0), Inputs: []*tensor.Tensor{shape(1)}},
		{Op: "RandomUniform", Attrs: seeds(0, 3), Inputs: []*tensor.Tensor{shape(5)}},
		{Op: "RandomUniform", Attrs: seeds(123456789, 987654321), Inputs: []*tensor.Tensor{shape(3, 7, 11)}},
		{Op: "RandomUniform", Attrs: seeds(7, 1<<40), Inputs: []*tensor.Tensor{shape(300, 257)}},
		{Op: "RandomUniform", Attrs: seeds(9, 9), Inputs: []*tensor.Tensor{shape(2, 0)}},
	}
}

// SparseUpdateCases returns the checks of the sparse updates
// (device.SparseUpdates): variables of odd row widths and counts, their
// slots positive where a rule takes a square root of them, int32 and int64
// indices that repeat (each index's gradient rows summed first) and skip
// rows, a variable of rows of one element, and enough indices and rows for
// several blocks.
func SparseUpdateCases() []Case {
	r := rand.New(rand.NewPCG(9, 10))
	f := func(shape ...int) *tensor.Tensor { return randFloats(r, shape...) }
	pos := func(shape ...int) *tensor.Tensor {
		t := randFloats(r, shape...)
		for i, v := range t.Float32s() {
			t.Float32s()[i] = 0.1 + abs(v)
		}
		return t
	}
	// idx draws n indices below rows, repeating some: the first twice,
	// and every third one of a few rows.
	idx := func(dt tensor.DType, n, rows int) *tensor.Tensor {
		v := make([]int64, n)
		for i := range v {
			v[i] = int64(r.IntN(rows))
			if i%3 == 2 {
				v[i] = int64(r.IntN(min(rows, 4)))
			}
		}
		if n > 3 {
			v[n-1] = v[0]
		}
		t := tensor.New(dt, n)
		for i, x := range v {
			if dt == tensor.Int32 {
				t.Int32s()[i] = int32(x)
			} else {
				t.Int64s()[i] = x
			}
		}
		return t
	}
	sc := func(v float32) *tensor.Tensor { return tensor.Scalar(v) }
	const rows, width, n = 37, 33, 50
	return []Case{
		{Op: "SparseApplyGradientDescent", Inputs: []*tensor.Tensor{f(rows, width), sc(0.1), f(n, width), idx(tensor.Int32, n, rows)}},
		{Op: "SparseApplyGradientDescent", Inputs: []*tensor.Tensor{f(101), sc(0.5), f(7), idx(tensor.Int64, 7, 101)}},
		{Op: "SparseApplyGradientDescent", Inputs: []*tensor.Tensor{f(1000, 3, 5), sc(0.01), f(300, 3, 5), idx(tensor.Int64, 300, 1000)}},
		{Op: "SparseApplyMomentum", Inputs: []*tensor.Tensor{f(rows, width), f(rows, width), sc(0.01), f(n, width), idx(tensor.Int64, n, rows), sc(0.9)}},
		{Op: "SparseApplyMomentum", Attrs: map[string]any{"use_nesterov": true},
			Inputs: []*tensor.Tensor{f(rows, 7), f(rows, 7), sc(0.01), f(n, 7), idx(tensor.Int32, n, rows), sc(0.9)}},
		{Op: "SparseApplyAdagrad", Inputs: []*tensor.Tensor{f(rows, width), pos(rows, width), sc(0.1), f(n, width), idx(tensor.Int32, n, rows)}},
		{Op: "SparseApplyAdagrad", Inputs: []*tensor.Tensor{f(1000, 17), pos(1000, 17), sc(0.1), f(400, 17), idx(tensor.Int64, 400, 1000)}},
		// Enough indices for a device to sort them rather than scan.
		{Op: "SparseApplyAdagrad", Inputs: []*tensor.Tensor{f(3000, 3), pos(3000, 3), sc(0.1), f(5000, 3), idx(tensor.Int32, 5000, 3000)}},
		{Op: "SparseApplyAdam", Inputs: []*tensor.Tensor{f(rows, width), f(rows, width), pos(rows, width), sc(0.9), sc(0.999), sc(0.001),
			sc(0.9), sc(0.999), sc(1e-8), f(n, width), idx(tensor.Int64, n, rows)}},
		{Op: "SparseApplyAdam", Inputs: []*tensor.Tensor{f(13), f(13), pos(13), sc(0.729), sc(0.997), sc(0.01),
			sc(0.9), sc(0.999), sc(1e-7), f(20), idx(tensor.Int32, 20, 13)}},
	}
}

// AssignCases returns the checks of AssignAdd and AssignSub: each dtype of
// device.AssignDTypes, an odd size over several blocks, and an int64
// scalar as a global step's increment.
func AssignCases() []Case {
	r := rand.New(rand.NewPCG(11, 12))
	const n = 1000 + 37
	f := func(shape ...int) *tensor.Tensor { return randFloats(r, shape...) }
	ints := func(dt tensor.DType, shape ...int) *tensor.Tensor {
		t := tensor.New(dt, shape...)
		for i := range t.NumElements() {
			v := r.Int64N(1<<20) - 1<<19
			if dt == tensor.Int32 {
				t.Int32s()[i] = int32(v)
			} else {
				t.Int64s()[i] = v
			}
		}
		return t
	}
	return []Case{
		{Op: "AssignAdd", Inputs: []*tensor.Tensor{f(n), f(n)}},
		{Op: "AssignAdd", Inputs: []*tensor.Tensor{ints(tensor.Int32, 5, 3, 7), ints(tensor.Int32, 5, 3, 7)}},
		{Op: "AssignAdd", Inputs: []*tensor.Tensor{tensor.Scalar(int64(41)), tensor.Scalar(int64(1))}},
		{Op: "AssignSub", Inputs: []*tensor.Tensor{f(33, 31), f(33, 31)}},
		{Op: "AssignSub", Inputs: []*tensor.Tensor{ints(tensor.Int64, n), ints(tensor.Int64, n)}},
		{Op: "AssignSub", Inputs: []*tensor.Tensor{ints(tensor.Int32, 3), ints(tensor.Int32, 3)}},
	}
}

// idx64 returns int64 values below hi of shape.
func idx64(r *rand.Rand, hi int64, shape ...int) *tensor.Tensor {
	t := tensor.New(tensor.Int64, shape...)
	for i := range t.Int64s() {
		t.Int64s()[i] = r.Int64N(hi)
	}
	return t
}

// wideDeepCases are the checks of the ops of the wide-and-deep model's
// dense part and its binary classification head, and of their gradients:
// Concat and Slice (its gradient), Pad (Slice's), AddN (summed
// gradients), the sigmoid cross-entropy's Abs, Sign, Maximum, SelectV2
// and Softplus, and Greater. Each on the shapes the model gives them,
// with broadcasting, empty tensors and the integer types the CPU takes,
// and the exact ops on edge values (signed zeros, infinities, NaNs,
// integer minimums) bit for bit.
func wideDeepCases() []Case {
	r := rand.New(rand.NewPCG(13, 14))
	f := func(shape ...int) *tensor.Tensor { return randFloats(r, shape...) }
	ints := func(dt tensor.DType, hi int, shape ...int) *tensor.Tensor { return randInts(r, dt, hi, shape...) }
	bools := func(shape ...int) *tensor.Tensor { return randBools(r, shape...) }
	f64 := func(shape ...int) *tensor.Tensor {
		t := tensor.New(tensor.Float64, shape...)
		for i := range t.Float64s() {
			t.Float64s()[i] = r.NormFloat64()
		}
		return t
	}
	// edge holds the float32 values whose handling differs between
	// careless implementations: both zeros, both infinities, NaN, the
	// smallest subnormal, the largest float and ordinary values.
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	edgeVals := []float32{negZero, 0, nan, inf, -inf, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
		math.MaxFloat32, -math.MaxFloat32, 1, -1, 2.5, -0.75, 88.5, -104, 30, -30}
	edge := func(shape ...int) *tensor.Tensor { return tensor.MustFromSlice(slices.Clone(edgeVals), shape...) }
	ne := len(edgeVals)
	intEdge := tensor.MustFromSlice([]int32{math.MinInt32, math.MinInt32 + 1, -7, -1, 0, 1, 7, math.MaxInt32}, 8)
	int64Edge := tensor.MustFromSlice([]int64{math.MinInt64, math.MinInt64 + 1, -1 << 40, -1, 0, 1, 1 << 40, math.MaxInt64}, 8)
	scalar := func(v float32) *tensor.Tensor { return tensor.Scalar(v) }
	pad := func(p ...int) map[string]any { return map[string]any{"paddings": p} }
	box := func(begin, size []int) map[string]any { return map[string]any{"begin": begin, "size": size} }
	axis := func(a int) map[string]any { return map[string]any{"axis": a} }
	const batch = 37 // the model's batch, shrunk to an odd size
	var cases []Case
	for _, op := range []string{"Abs", "Sign"} {
		cases = append(cases,
			Case{Op: op, Inputs: []*tensor.Tensor{f(batch)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f(300, 257)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{edge(ne)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{intEdge}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{int64Edge}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{ints(tensor.Int32, 5, 7, 9)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f(0, 3)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f()}, Exact: true})
	}
	// Every pair of edge values, through a broadcast of [n, 1] with [n].
	col, row := edge(ne, 1), edge(ne)
	for _, op := range []string{"Maximum", "Greater"} {
		cases = append(cases,
			Case{Op: op, Inputs: []*tensor.Tensor{f(batch), tensor.New(tensor.Float32, batch)}, Exact: true}, // max(x, 0) of the loss
			Case{Op: op, Inputs: []*tensor.Tensor{f(3, 5), f(3, 5)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f(3, 5), f(5)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f(2, 1, 3), f(4, 1)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f(), f(7)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{col, row}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{row, col}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{ints(tensor.Int32, 4, 9, 11), ints(tensor.Int32, 4, 11)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{ints(tensor.Int64, 1<<40, 3, 1, 5), ints(tensor.Int64, 1<<40, 4, 1)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f(0, 3), f(3)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f(300, 257), f(257)}, Exact: true})
	}
	cases = append(cases,
		Case{Op: "Greater", Inputs: []*tensor.Tensor{intEdge, tensor.MustFromSlice([]int32{0, math.MinInt32, 3, -1, 0, 2, 7, math.MaxInt32}, 8)}},
		// The loss: log(1 + e^x) of -|x|, and of values where a naive
		// form overflows or loses all digits.
		Case{Op: "Softplus", Inputs: []*tensor.Tensor{f(batch)}},
		Case{Op: "Softplus", Inputs: []*tensor.Tensor{f(300, 257)}},
		Case{Op: "Softplus", Inputs: []*tensor.Tensor{edge(ne)}},
		Case{Op: "Softplus", Inputs: []*tensor.Tensor{tensor.MustFromSlice([]float32{-200, -90, -20, -1e-3, 1e-3, 15, 20, 90, 200}, 9)}},
		Case{Op: "Softplus", Inputs: []*tensor.Tensor{f(0, 4)}},
		// SelectV2 as Maximum's gradient builds it (a mask, dy, a scalar
		// zero), with each operand broadcast, each element size, a
		// scalar condition, and nothing selected.
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(batch), f(batch), scalar(0)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(batch), scalar(0), f(batch)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(3, 5), f(3, 5), f(3, 5)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(5), f(3, 5), f(3, 1)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(3, 1), f(1, 4), f(2, 3, 4)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{tensor.Scalar(true), f(4, 3), f(4, 3)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(300, 257), f(300, 257), f(257)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(ne), edge(ne), edge(ne)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(9), ints(tensor.Int32, 100, 9), ints(tensor.Int32, 100, 9)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(2, 9), ints(tensor.Int64, 1<<40, 9), ints(tensor.Int64, 1<<40, 2, 1)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(9), bools(9), bools(9)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(4, 3), f64(4, 3), f64(3)}, Exact: true},
		Case{Op: "SelectV2", Inputs: []*tensor.Tensor{bools(0, 3), f(0, 3), scalar(1)}, Exact: true},
		// AddN as gradients are summed: one input, a few, more than one
		// launch takes (summed in the inputs' order, as the CPU does).
		Case{Op: "AddN", Inputs: []*tensor.Tensor{f(5, 7)}, Exact: true},
		Case{Op: "AddN", Inputs: []*tensor.Tensor{f(5, 7), f(5, 7)}, Exact: true},
		Case{Op: "AddN", Inputs: []*tensor.Tensor{f(batch, 13), f(batch, 13), f(batch, 13)}, Exact: true},
		Case{Op: "AddN", Inputs: slices.Collect(func(yield func(*tensor.Tensor) bool) {
			for range 19 {
				if !yield(f(300, 7)) {
					return
				}
			}
		}), Exact: true},
		Case{Op: "AddN", Inputs: []*tensor.Tensor{ints(tensor.Int32, 1000, 9), ints(tensor.Int32, 1000, 9), ints(tensor.Int32, 1000, 9)}, Exact: true},
		Case{Op: "AddN", Inputs: []*tensor.Tensor{ints(tensor.Int64, 1<<40, 2, 5), ints(tensor.Int64, 1<<40, 2, 5)}, Exact: true},
		Case{Op: "AddN", Inputs: []*tensor.Tensor{f(0, 4), f(0, 4)}, Exact: true},
		Case{Op: "AddN", Inputs: []*tensor.Tensor{f(), f(), f()}, Exact: true},
		// Concat: the model's embeddings and dense features, on the
		// first, a middle and the last axis, an empty input, one input,
		// and other element sizes.
		Case{Op: "Concat", Attrs: axis(1), Inputs: []*tensor.Tensor{f(batch, 208), f(batch, 13)}, Exact: true},
		Case{Op: "Concat", Attrs: axis(0), Inputs: []*tensor.Tensor{f(2, 3), f(4, 3), f(1, 3)}, Exact: true},
		Case{Op: "Concat", Attrs: axis(-1), Inputs: []*tensor.Tensor{f(2, 3, 4), f(2, 3, 1), f(2, 3, 5)}, Exact: true},
		Case{Op: "Concat", Attrs: axis(2), Inputs: []*tensor.Tensor{f(2, 3, 4, 5), f(2, 3, 1, 5)}, Exact: true},
		Case{Op: "Concat", Attrs: axis(1), Inputs: []*tensor.Tensor{f(4, 0), f(4, 3), f(4, 0)}, Exact: true},
		Case{Op: "Concat", Attrs: axis(0), Inputs: []*tensor.Tensor{f(0, 3), f(0, 3)}, Exact: true},
		Case{Op: "Concat", Attrs: axis(0), Inputs: []*tensor.Tensor{f(6)}, Exact: true},
		Case{Op: "Concat", Attrs: axis(1), Inputs: []*tensor.Tensor{ints(tensor.Int64, 1<<40, 3, 2), ints(tensor.Int64, 1<<40, 3, 5)}, Exact: true},
		Case{Op: "Concat", Attrs: axis(0), Inputs: []*tensor.Tensor{bools(3, 2), bools(1, 2)}, Exact: true},
		Case{Op: "Concat", Attrs: axis(1), Inputs: []*tensor.Tensor{f(300, 200), f(300, 57)}, Exact: true},
		// Slice: Concat's gradient (a block of columns to the end), a
		// middle box, whole rows (one copy), nothing, other types.
		Case{Op: "Slice", Attrs: box([]int{0, 208}, []int{-1, 13}), Inputs: []*tensor.Tensor{f(batch, 221)}, Exact: true},
		Case{Op: "Slice", Attrs: box([]int{0, 0}, []int{-1, 208}), Inputs: []*tensor.Tensor{f(batch, 221)}, Exact: true},
		Case{Op: "Slice", Attrs: box([]int{1, 2}, []int{3, 4}), Inputs: []*tensor.Tensor{f(5, 7)}, Exact: true},
		Case{Op: "Slice", Attrs: box([]int{1, 0, 2}, []int{2, -1, 1}), Inputs: []*tensor.Tensor{f(4, 3, 5)}, Exact: true},
		Case{Op: "Slice", Attrs: box([]int{2, 0}, []int{3, -1}), Inputs: []*tensor.Tensor{f(6, 4)}, Exact: true},
		Case{Op: "Slice", Attrs: box([]int{1, 1}, []int{0, 2}), Inputs: []*tensor.Tensor{f(3, 4)}, Exact: true},
		Case{Op: "Slice", Attrs: box([]int{}, []int{}), Inputs: []*tensor.Tensor{f()}, Exact: true},
		Case{Op: "Slice", Attrs: box([]int{3}, []int{4}), Inputs: []*tensor.Tensor{ints(tensor.Int32, 100, 9)}, Exact: true},
		Case{Op: "Slice", Attrs: box([]int{0, 1}, []int{2, 1}), Inputs: []*tensor.Tensor{bools(3, 3)}, Exact: true},
		Case{Op: "Slice", Attrs: box([]int{0, 2, 1, 0, 0, 1, 0}, []int{1, 2, 1, 2, 1, 2, 2}),
			Inputs: []*tensor.Tensor{f(2, 5, 3, 2, 2, 3, 2)}, Exact: true},
		// Pad: Slice's gradient, zeros around the input.
		Case{Op: "Pad", Attrs: pad(0, 0, 208, 0), Inputs: []*tensor.Tensor{f(batch, 13)}, Exact: true},
		Case{Op: "Pad", Attrs: pad(1, 2, 0, 3), Inputs: []*tensor.Tensor{f(3, 4)}, Exact: true},
		Case{Op: "Pad", Attrs: pad(0, 1, 2, 0, 1, 1), Inputs: []*tensor.Tensor{f(2, 3, 4)}, Exact: true},
		Case{Op: "Pad", Attrs: pad(0, 0, 0, 0), Inputs: []*tensor.Tensor{f(3, 4)}, Exact: true},
		Case{Op: "Pad", Attrs: pad(1, 1, 0, 0), Inputs: []*tensor.Tensor{f(0, 3)}, Exact: true},
		Case{Op: "Pad", Attrs: pad(2, 3), Inputs: []*tensor.Tensor{ints(tensor.Int64, 1<<40, 4)}, Exact: true},
	)
	return cases
}
