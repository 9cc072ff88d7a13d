package devicetest

import (
	"math"
	"math/rand/v2"

	"github.com/distflow/distflow/tensor"
)

// layersCases are the checks of the ops the layers' models and the losses
// add to the reference models' and of their gradients: the recurrent
// cells' Tanh, TanhGrad, Split and Squeeze, the normalizations' Square,
// Rsqrt and StopGradient, AvgPool and AvgPoolGrad, Softmax, LogSoftmax,
// Exp and Log, and the losses' SoftmaxCrossEntropyWithLogits, Minimum,
// Less and LessEqual. Each on the shapes a small model gives them, odd
// sizes over several blocks, and edge values: infinities, NaNs, signed
// zeros, magnitudes where Exp and Tanh overflow or saturate, and logits
// far from zero, where only a softmax that subtracts the row's maximum
// stays finite.
func layersCases() []Case {
	r := rand.New(rand.NewPCG(15, 16))
	f := func(shape ...int) *tensor.Tensor { return randFloats(r, shape...) }
	scaled := func(s float32, shape ...int) *tensor.Tensor {
		t := randFloats(r, shape...)
		for i, v := range t.Float32s() {
			t.Float32s()[i] = s * v
		}
		return t
	}
	pos := func(shape ...int) *tensor.Tensor {
		t := randFloats(r, shape...)
		for i, v := range t.Float32s() {
			t.Float32s()[i] = 1e-3 + 3*abs(v)
		}
		return t
	}
	vals := func(v ...float32) *tensor.Tensor { return tensor.MustFromSlice(v, len(v)) }
	ints := func(dt tensor.DType, hi int, shape ...int) *tensor.Tensor { return randInts(r, dt, hi, shape...) }
	bools := func(shape ...int) *tensor.Tensor { return randBools(r, shape...) }
	// probs are rows of probabilities (dense labels): one-hot, or spread.
	probs := func(oneHot bool, rows, cols int) *tensor.Tensor {
		t := tensor.New(tensor.Float32, rows, cols)
		p := t.Float32s()
		for i := range rows {
			if oneHot {
				p[i*cols+r.IntN(cols)] = 1
				continue
			}
			var sum float32
			for j := range cols {
				p[i*cols+j] = r.Float32()
				sum += p[i*cols+j]
			}
			for j := range cols {
				p[i*cols+j] /= sum
			}
		}
		return t
	}
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	edge := func() *tensor.Tensor {
		return vals(negZero, 0, nan, inf, -inf, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
			math.MaxFloat32, -math.MaxFloat32, 1, -1, 2.5, -0.75, 30, -30)
	}
	// huge holds magnitudes where exp overflows float32 (above 88.72) or
	// underflows to subnormals and zero (below -87.3), and tanh is ±1.
	huge := func() *tensor.Tensor {
		return vals(-1e30, -1000, -200, -104, -103.9, -100, -87.4, -87.3, -20, -9.01, -1e-7, 1e-7, 9.01, 20,
			88, 88.7, 88.73, 89, 100, 200, 1000, 1e30)
	}
	intEdge := tensor.MustFromSlice([]int32{math.MinInt32, math.MinInt32 + 1, -46341, -7, -1, 0, 1, 7, 46340, 46341, math.MaxInt32}, 11)
	int64Edge := tensor.MustFromSlice([]int64{math.MinInt64, -3037000500, -1 << 40, -1, 0, 1, 3037000499, 3037000500, math.MaxInt64}, 9)
	// rows of logits [4, 5] far from zero: all very negative, all very
	// positive, far apart, and the CPU's infinities and NaNs (a row of
	// -Inf, +Inf among finite ones, a NaN first and after).
	farRows := tensor.MustFromSlice([]float32{
		-1e30, -1e30, -1e30, -1e30, -1e30,
		-1000, -1001, -999, -1000.5, -1200,
		1000, 1001, 999, 1000.5, 1200,
		1e30, 0, -1e30, 3e38, -3e38,
		100, -100, 87, 89, 0,
		-inf, -inf, -inf, -inf, -inf,
		-inf, 1, 2, -inf, 3,
		inf, 1, 2, 3, 4,
		nan, 1, 2, 3, 4,
		1, 2, nan, 3, 4,
	}, 10, 5)
	split := func(axis, num int) map[string]any { return map[string]any{"axis": axis, "num_split": num} }
	pool := func(k, s int, padding string) map[string]any {
		return map[string]any{"ksize": []int{k, k}, "strides": []int{s, s}, "padding": padding}
	}
	i32 := func(v ...int32) *tensor.Tensor { return tensor.MustFromSlice(v, len(v)) }
	const batch, units = 37, 13
	var cases []Case
	for _, op := range []string{"Tanh", "Exp", "Softmax", "LogSoftmax"} {
		cases = append(cases,
			Case{Op: op, Inputs: []*tensor.Tensor{f(batch, units)}},
			Case{Op: op, Inputs: []*tensor.Tensor{scaled(30, 300, 257)}},
			Case{Op: op, Inputs: []*tensor.Tensor{edge()}},
			Case{Op: op, Inputs: []*tensor.Tensor{huge()}},
			Case{Op: op, Inputs: []*tensor.Tensor{f(0, 4)}})
	}
	for _, op := range []string{"Softmax", "LogSoftmax"} {
		cases = append(cases,
			Case{Op: op, Inputs: []*tensor.Tensor{farRows}},
			Case{Op: op, Inputs: []*tensor.Tensor{f(2, 3, 7)}},
			Case{Op: op, Inputs: []*tensor.Tensor{f(5, 1)}},
			Case{Op: op, Inputs: []*tensor.Tensor{scaled(50, 7, 1000)}},
			Case{Op: op, Inputs: []*tensor.Tensor{f(3, 0)}})
	}
	cases = append(cases,
		Case{Op: "Tanh", Inputs: []*tensor.Tensor{f()}},
		Case{Op: "Exp", Inputs: []*tensor.Tensor{f()}},
		// TanhGrad(y, dy) of a tanh's outputs, and of edge values.
		Case{Op: "TanhGrad", Inputs: []*tensor.Tensor{tanh(f(batch, units)), f(batch, units)}, Gradient: true},
		Case{Op: "TanhGrad", Inputs: []*tensor.Tensor{tanh(scaled(3, 300, 257)), f(300, 257)}, Gradient: true},
		Case{Op: "TanhGrad", Inputs: []*tensor.Tensor{edge(), edge()}, Gradient: true},
		Case{Op: "TanhGrad", Inputs: []*tensor.Tensor{f(0, 3), f(0, 3)}, Gradient: true},
		Case{Op: "Log", Inputs: []*tensor.Tensor{pos(batch, units)}},
		Case{Op: "Log", Inputs: []*tensor.Tensor{pos(300, 257)}},
		Case{Op: "Log", Inputs: []*tensor.Tensor{edge()}},
		Case{Op: "Log", Inputs: []*tensor.Tensor{vals(1e-38, 1e-30, 1e-7, 1, 1e7, 1e30, 3e38)}},
		Case{Op: "Rsqrt", Inputs: []*tensor.Tensor{pos(batch, units)}},
		Case{Op: "Rsqrt", Inputs: []*tensor.Tensor{pos(300, 257)}},
		Case{Op: "Rsqrt", Inputs: []*tensor.Tensor{edge()}},
		Case{Op: "Rsqrt", Inputs: []*tensor.Tensor{vals(1e-38, 1e-30, 1e-3, 1e-3+1e-9, 1e7, 1e30, 3e38)}},
		Case{Op: "Square", Inputs: []*tensor.Tensor{f(batch, units)}, Exact: true},
		Case{Op: "Square", Inputs: []*tensor.Tensor{f(300, 257)}, Exact: true},
		Case{Op: "Square", Inputs: []*tensor.Tensor{edge()}, Exact: true},
		Case{Op: "Square", Inputs: []*tensor.Tensor{intEdge}, Exact: true},
		Case{Op: "Square", Inputs: []*tensor.Tensor{int64Edge}, Exact: true},
		Case{Op: "Square", Inputs: []*tensor.Tensor{ints(tensor.Int32, 1000, 7, 9)}, Exact: true},
		Case{Op: "Square", Inputs: []*tensor.Tensor{f(0, 5)}, Exact: true},
		// The softmax cross-entropy against one-hot and spread labels,
		// on logits far from zero, and on many classes.
		Case{Op: "SoftmaxCrossEntropyWithLogits", Inputs: []*tensor.Tensor{f(batch, 10), probs(true, batch, 10)}},
		Case{Op: "SoftmaxCrossEntropyWithLogits", Inputs: []*tensor.Tensor{f(batch, 3), probs(false, batch, 3)}},
		Case{Op: "SoftmaxCrossEntropyWithLogits", Inputs: []*tensor.Tensor{farRows, probs(false, 10, 5)}},
		Case{Op: "SoftmaxCrossEntropyWithLogits", Inputs: []*tensor.Tensor{scaled(50, 7, 1000), probs(true, 7, 1000)}},
		Case{Op: "SoftmaxCrossEntropyWithLogits", Inputs: []*tensor.Tensor{f(5, 1), probs(true, 5, 1)}},
		Case{Op: "SoftmaxCrossEntropyWithLogits", Inputs: []*tensor.Tensor{f(0, 4), f(0, 4)}},
		// Average pooling and its gradient: overlapping windows, SAME
		// windows clipped at the edges (padding not counted), strides
		// that skip input rows.
		Case{Op: "AvgPool", Attrs: pool(2, 2, "SAME"), Inputs: []*tensor.Tensor{f(2, 7, 7, 3)}},
		Case{Op: "AvgPool", Attrs: pool(2, 2, "VALID"), Inputs: []*tensor.Tensor{f(2, 8, 6, 3)}},
		Case{Op: "AvgPool", Attrs: pool(3, 1, "SAME"), Inputs: []*tensor.Tensor{f(3, 5, 6, 4)}},
		Case{Op: "AvgPool", Attrs: pool(3, 2, "VALID"), Inputs: []*tensor.Tensor{f(1, 9, 11, 2)}},
		Case{Op: "AvgPool", Attrs: pool(2, 3, "VALID"), Inputs: []*tensor.Tensor{f(2, 8, 8, 1)}},
		Case{Op: "AvgPoolGrad", Attrs: pool(2, 2, "SAME"), Inputs: []*tensor.Tensor{i32(2, 7, 7, 3), f(2, 4, 4, 3)}, Gradient: true},
		Case{Op: "AvgPoolGrad", Attrs: pool(2, 2, "VALID"), Inputs: []*tensor.Tensor{i32(2, 8, 6, 3), f(2, 4, 3, 3)}, Gradient: true},
		Case{Op: "AvgPoolGrad", Attrs: pool(3, 1, "SAME"), Inputs: []*tensor.Tensor{i32(3, 5, 6, 4), f(3, 5, 6, 4)}, Gradient: true},
		Case{Op: "AvgPoolGrad", Attrs: pool(3, 2, "VALID"), Inputs: []*tensor.Tensor{i32(1, 9, 11, 2), f(1, 4, 5, 2)}, Gradient: true},
		Case{Op: "AvgPoolGrad", Attrs: pool(2, 3, "VALID"), Inputs: []*tensor.Tensor{i32(2, 8, 8, 1), f(2, 3, 3, 1)}, Gradient: true},
		// Split as the recurrent cells use it: the gates [batch, 4 units]
		// on axis 1, the time steps of [batch, time, features]; and on the
		// first and last axis, other element sizes, one part, nothing.
		Case{Op: "Split", Attrs: split(1, 4), Inputs: []*tensor.Tensor{f(batch, 4*units)}, Exact: true},
		Case{Op: "Split", Attrs: split(1, 5), Inputs: []*tensor.Tensor{f(8, 5, 4)}, Exact: true},
		Case{Op: "Split", Attrs: split(0, 2), Inputs: []*tensor.Tensor{f(6, 3)}, Exact: true},
		Case{Op: "Split", Attrs: split(-1, 3), Inputs: []*tensor.Tensor{f(2, 3, 9)}, Exact: true},
		Case{Op: "Split", Attrs: split(1, 1), Inputs: []*tensor.Tensor{f(4, 3)}, Exact: true},
		Case{Op: "Split", Attrs: split(1, 3), Inputs: []*tensor.Tensor{ints(tensor.Int64, 1<<40, 2, 6)}, Exact: true},
		Case{Op: "Split", Attrs: split(0, 2), Inputs: []*tensor.Tensor{bools(4, 3)}, Exact: true},
		Case{Op: "Split", Attrs: split(1, 2), Inputs: []*tensor.Tensor{f(0, 4)}, Exact: true},
		Case{Op: "Split", Attrs: split(1, 30), Inputs: []*tensor.Tensor{f(300, 60)}, Exact: true},
		Case{Op: "Squeeze", Attrs: map[string]any{"axes": []int{1}}, Inputs: []*tensor.Tensor{f(8, 1, 4)}, Exact: true},
		Case{Op: "Squeeze", Inputs: []*tensor.Tensor{f(1, 3, 1)}, Exact: true},
		Case{Op: "Squeeze", Attrs: map[string]any{"axes": []int{-1}}, Inputs: []*tensor.Tensor{ints(tensor.Int32, 100, 5, 1)}, Exact: true},
		Case{Op: "StopGradient", Inputs: []*tensor.Tensor{f(3, 4)}, Exact: true},
		Case{Op: "StopGradient", Inputs: []*tensor.Tensor{ints(tensor.Int64, 1<<40, 5)}, Exact: true},
	)
	// Minimum (Huber's), Less and LessEqual (its gradient's mask): every
	// pair of edge values, broadcasting, the integer types.
	col, row := edge(), edge()
	ne := col.NumElements()
	col, _ = col.Reshaped(ne, 1)
	for _, op := range []string{"Minimum", "Less", "LessEqual"} {
		cases = append(cases,
			Case{Op: op, Inputs: []*tensor.Tensor{f(batch, units), f(batch, units)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f(batch, units), tensor.Scalar(float32(1))}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f(2, 1, 3), f(4, 1)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{col, row}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{row, col}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{intEdge, intEdge}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{ints(tensor.Int32, 4, 9, 11), ints(tensor.Int32, 4, 11)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{ints(tensor.Int64, 1<<40, 3, 1, 5), ints(tensor.Int64, 1<<40, 4, 1)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f(0, 3), f(3)}, Exact: true},
			Case{Op: op, Inputs: []*tensor.Tensor{f(300, 257), f(257)}, Exact: true})
	}
	return cases
}

// tanh is x's tanh on the CPU, for TanhGrad's y.
func tanh(x *tensor.Tensor) *tensor.Tensor {
	y := x.Clone()
	for i, v := range y.Float32s() {
		y.Float32s()[i] = float32(math.Tanh(float64(v)))
	}
	return y
}
