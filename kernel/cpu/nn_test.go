package cpu

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

func nnRun(t *testing.T, opName string, attrs map[string]any, inputs ...*tensor.Tensor) ([]*tensor.Tensor, error) {
	t.Helper()
	return runKernel(t, opName, attrs, inputs...)
}

// nnClose checks got against want element-wise within tol (relative to max(1,|want|)).
func nnClose(t *testing.T, name string, got *tensor.Tensor, wantShape []int, want []float64, tol float64) {
	t.Helper()
	if !slices.Equal(got.Shape(), wantShape) {
		t.Fatalf("%s: shape %v, want %v", name, got.Shape(), wantShape)
	}
	if got.NumElements() != len(want) {
		t.Fatalf("%s: %d elements, want %d", name, got.NumElements(), len(want))
	}
	for i, w := range want {
		g := got.Float64At(i)
		if math.Abs(g-w) > tol*max(1, math.Abs(w)) || math.IsNaN(g) != math.IsNaN(w) {
			t.Fatalf("%s: element %d = %v, want %v (all: %v)", name, i, g, w, got)
		}
	}
}

func nnF32(v []float64, shape ...int) *tensor.Tensor {
	d := make([]float32, len(v))
	for i, x := range v {
		d[i] = float32(x)
	}
	return tensor.MustFromSlice(d, shape...)
}

func nnF64(v []float64, shape ...int) *tensor.Tensor {
	return tensor.MustFromSlice(append([]float64{}, v...), shape...)
}

// nnSeq returns n deterministic, distinct pseudo-random values in (-1, 1).
func nnSeq(n int, seed uint32) []float64 {
	v := make([]float64, n)
	x := seed*2654435761 + 1
	for i := range v {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		v[i] = float64(x%20000)/10000 - 1 + float64(i)*1e-6
	}
	return v
}

func TestNNElementwise(t *testing.T) {
	x := []float64{-3, -0.5, 0, 0.5, 2, 40}
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	mapf := func(f func(float64) float64) []float64 {
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = f(v)
		}
		return out
	}
	tests := []struct {
		op   string
		want []float64
	}{
		{"Relu", mapf(func(v float64) float64 { return math.Max(v, 0) })},
		{"Sigmoid", mapf(sig)},
		{"Tanh", mapf(math.Tanh)},
		{"Softplus", mapf(func(v float64) float64 { return math.Log(1 + math.Exp(v)) })},
	}
	for _, tc := range tests {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
			in := nnF64(x, 2, 3)
			tol := 1e-12
			if dt == tensor.Float32 {
				in, tol = nnF32(x, 2, 3), 1e-6
			}
			out, err := nnRun(t, tc.op, nil, in)
			if err != nil {
				t.Fatalf("%s %v: %v", tc.op, dt, err)
			}
			nnClose(t, tc.op+" "+dt.String(), out[0], []int{2, 3}, tc.want, tol)
		}
	}
	// Relu works on integers too.
	out, err := nnRun(t, "Relu", nil, tensor.MustFromSlice([]int32{-2, 0, 3}, 3))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "Relu int32", out[0], []int{3}, []float64{0, 0, 3}, 0)
	// Softplus stays finite for large |x|.
	out, err = nnRun(t, "Softplus", nil, nnF32([]float64{-1000, 1000}, 2))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "Softplus extreme", out[0], []int{2}, []float64{0, 1000}, 1e-6)
}

func TestNNActivationGrads(t *testing.T) {
	y := []float64{-1, 0.2, 0.5, 0.9}
	dy := []float64{1, 2, 3, 4}
	tests := []struct {
		op     string
		inputs func(mk func([]float64, ...int) *tensor.Tensor) []*tensor.Tensor
		want   []float64
	}{
		{"ReluGrad", func(mk func([]float64, ...int) *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{mk(dy, 4), mk(y, 4)}
		}, []float64{0, 2, 3, 4}},
		{"SigmoidGrad", func(mk func([]float64, ...int) *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{mk(y, 4), mk(dy, 4)}
		}, []float64{1 * -1 * 2, 2 * 0.2 * 0.8, 3 * 0.25, 4 * 0.9 * 0.1}},
		{"TanhGrad", func(mk func([]float64, ...int) *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{mk(y, 4), mk(dy, 4)}
		}, []float64{0, 2 * 0.96, 3 * 0.75, 4 * 0.19}},
	}
	for _, tc := range tests {
		for _, mk := range []func([]float64, ...int) *tensor.Tensor{nnF32, nnF64} {
			out, err := nnRun(t, tc.op, nil, tc.inputs(mk)...)
			if err != nil {
				t.Fatalf("%s: %v", tc.op, err)
			}
			nnClose(t, tc.op, out[0], []int{4}, tc.want, 1e-6)
		}
	}
}

func TestNNBiasAdd(t *testing.T) {
	x := []float64{1, 2, 3, 4, 5, 6}
	b := []float64{10, 20, 30}
	out, err := nnRun(t, "BiasAdd", nil, nnF32(x, 2, 3), nnF32(b, 3))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "BiasAdd", out[0], []int{2, 3}, []float64{11, 22, 33, 14, 25, 36}, 0)
	out, err = nnRun(t, "BiasAdd", nil, tensor.MustFromSlice([]int64{1, 2}, 1, 1, 2), tensor.MustFromSlice([]int64{5, 7}, 2))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "BiasAdd int64", out[0], []int{1, 1, 2}, []float64{6, 9}, 0)

	out, err = nnRun(t, "BiasAddGrad", nil, nnF64(x, 2, 1, 3))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "BiasAddGrad", out[0], []int{3}, []float64{5, 7, 9}, 0)
	out, err = nnRun(t, "BiasAddGrad", nil, tensor.New(tensor.Float32, 0, 4))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "BiasAddGrad empty", out[0], []int{4}, []float64{0, 0, 0, 0}, 0)
}

// TestNNBiasAddGradLarge exercises the parallel, blocked path against a
// naive sum: more columns than one accumulator block, many rows.
func TestNNBiasAddGradLarge(t *testing.T) {
	const rows, cols = 1000, 150
	v := nnSeq(rows*cols, 7)
	want := make([]float64, cols)
	for i, x := range v {
		want[i%cols] += float64(float32(x))
	}
	out, err := nnRun(t, "BiasAddGrad", nil, nnF32(v, rows, cols))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "BiasAddGrad large", out[0], []int{cols}, want, 1e-6)
}

func nnSoftmaxRef(x []float64, cols int) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x); r += cols {
		var sum float64
		for _, v := range x[r : r+cols] {
			sum += math.Exp(v)
		}
		for i, v := range x[r : r+cols] {
			out[r+i] = math.Exp(v) / sum
		}
	}
	return out
}

func TestNNSoftmax(t *testing.T) {
	x := []float64{1, 2, 3, -1, 0, 1000}
	want := nnSoftmaxRef([]float64{1, 2, 3, -1, 0, 0}, 3)
	want[5], want[3], want[4] = 1, 0, 0 // the 1000 row: exp(1000) overflows without the max shift
	out, err := nnRun(t, "Softmax", nil, nnF32(x, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "Softmax", out[0], []int{2, 3}, want, 1e-6)

	out, err = nnRun(t, "LogSoftmax", nil, nnF64(x, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	lse0 := math.Log(math.Exp(1) + math.Exp(2) + math.Exp(3))
	nnClose(t, "LogSoftmax", out[0], []int{2, 3}, []float64{1 - lse0, 2 - lse0, 3 - lse0, -1001, -1000, 0}, 1e-12)
}

func TestNNSoftmaxCrossEntropy(t *testing.T) {
	logits := []float64{1, 2, 3, 0.5, 0.5, -2}
	labels := []float64{0, 0, 1, 0.25, 0.75, 0}
	sm := nnSoftmaxRef(logits, 3)
	var wantLoss []float64
	wantBP := make([]float64, 6)
	for r := 0; r < 2; r++ {
		var l float64
		for j := 0; j < 3; j++ {
			l -= labels[r*3+j] * math.Log(sm[r*3+j])
			wantBP[r*3+j] = sm[r*3+j] - labels[r*3+j]
		}
		wantLoss = append(wantLoss, l)
	}
	for _, mk := range []func([]float64, ...int) *tensor.Tensor{nnF32, nnF64} {
		out, err := nnRun(t, "SoftmaxCrossEntropyWithLogits", nil, mk(logits, 2, 3), mk(labels, 2, 3))
		if err != nil {
			t.Fatal(err)
		}
		nnClose(t, "loss", out[0], []int{2}, wantLoss, 1e-6)
		nnClose(t, "backprop", out[1], []int{2, 3}, wantBP, 1e-6)
	}

	// Sparse: labels 2 and 0 are the one-hot rows {0,0,1} and {1,0,0}.
	for _, labels := range []*tensor.Tensor{
		tensor.MustFromSlice([]int32{2, 0}, 2), tensor.MustFromSlice([]int64{2, 0}, 2),
	} {
		out, err := nnRun(t, "SparseSoftmaxCrossEntropyWithLogits", nil, nnF32(logits, 2, 3), labels)
		if err != nil {
			t.Fatal(err)
		}
		nnClose(t, "sparse loss", out[0], []int{2}, []float64{-math.Log(sm[2]), -math.Log(sm[3])}, 1e-6)
		nnClose(t, "sparse backprop", out[1], []int{2, 3},
			[]float64{sm[0], sm[1], sm[2] - 1, sm[3] - 1, sm[4], sm[5]}, 1e-6)
	}
	_, err := nnRun(t, "SparseSoftmaxCrossEntropyWithLogits", nil, nnF32(logits, 2, 3), tensor.MustFromSlice([]int32{2, 3}, 2))
	if err == nil || !strings.Contains(err.Error(), "label 3") || !strings.Contains(err.Error(), "[0, 3)") {
		t.Fatalf("out-of-range label: got error %v", err)
	}
}

func TestNNL2Loss(t *testing.T) {
	out, err := nnRun(t, "L2Loss", nil, nnF32([]float64{1, 2, 3, 4, 5}, 5))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "L2Loss", out[0], []int{}, []float64{27.5}, 0)
	out, err = nnRun(t, "L2Loss", nil, tensor.New(tensor.Float64, 0))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "L2Loss empty", out[0], []int{}, []float64{0}, 0)
}

// nnConvRef is a direct NHWC/HWIO convolution in float64.
func nnConvRef(in []float64, n, h, w, c int, f []float64, kh, kw, co, sh, sw int, same bool) ([]float64, []int) {
	oh, ow, pt, pl := (h-kh)/sh+1, (w-kw)/sw+1, 0, 0
	if same {
		oh, ow = (h+sh-1)/sh, (w+sw-1)/sw
		pt, pl = max((oh-1)*sh+kh-h, 0)/2, max((ow-1)*sw+kw-w, 0)/2
	}
	out := make([]float64, n*oh*ow*co)
	for b := 0; b < n; b++ {
		for y := 0; y < oh; y++ {
			for x := 0; x < ow; x++ {
				for o := 0; o < co; o++ {
					var s float64
					for i := 0; i < kh; i++ {
						for j := 0; j < kw; j++ {
							iy, ix := y*sh-pt+i, x*sw-pl+j
							if iy < 0 || iy >= h || ix < 0 || ix >= w {
								continue
							}
							for ch := 0; ch < c; ch++ {
								s += in[((b*h+iy)*w+ix)*c+ch] * f[((i*kw+j)*c+ch)*co+o]
							}
						}
					}
					out[((b*oh+y)*ow+x)*co+o] = s
				}
			}
		}
	}
	return out, []int{n, oh, ow, co}
}

func TestNNConv2D(t *testing.T) {
	tests := []struct {
		n, h, w, c, kh, kw, co, sh, sw int
		padding                        string
	}{
		{1, 5, 5, 1, 3, 3, 1, 1, 1, "SAME"},
		{2, 5, 4, 3, 3, 2, 4, 2, 2, "SAME"},
		{2, 6, 5, 2, 3, 3, 3, 2, 1, "VALID"},
		{1, 4, 4, 2, 1, 1, 2, 1, 1, "VALID"},
	}
	for _, tc := range tests {
		in := nnSeq(tc.n*tc.h*tc.w*tc.c, 1)
		f := nnSeq(tc.kh*tc.kw*tc.c*tc.co, 2)
		want, shape := nnConvRef(in, tc.n, tc.h, tc.w, tc.c, f, tc.kh, tc.kw, tc.co, tc.sh, tc.sw, tc.padding == "SAME")
		attrs := map[string]any{"strides": []int{tc.sh, tc.sw}, "padding": tc.padding}
		out, err := nnRun(t, "Conv2D", attrs, nnF32(in, tc.n, tc.h, tc.w, tc.c), nnF32(f, tc.kh, tc.kw, tc.c, tc.co))
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		nnClose(t, "Conv2D", out[0], shape, want, 1e-5)

		// The backprops are adjoints of the forward map: for a random dOut,
		// <conv(x, f), dOut> = <x, dX> = <f, dF>.
		dOut := nnSeq(len(want), 3)
		var dot float64
		for i := range want {
			dot += want[i] * dOut[i]
		}
		dx, err := nnRun(t, "Conv2DBackpropInput", attrs,
			tensor.MustFromSlice([]int32{int32(tc.n), int32(tc.h), int32(tc.w), int32(tc.c)}, 4),
			nnF32(f, tc.kh, tc.kw, tc.c, tc.co), nnF32(dOut, shape...))
		if err != nil {
			t.Fatalf("%+v: BackpropInput: %v", tc, err)
		}
		df, err := nnRun(t, "Conv2DBackpropFilter", attrs, nnF32(in, tc.n, tc.h, tc.w, tc.c),
			tensor.MustFromSlice([]int32{int32(tc.kh), int32(tc.kw), int32(tc.c), int32(tc.co)}, 4), nnF32(dOut, shape...))
		if err != nil {
			t.Fatalf("%+v: BackpropFilter: %v", tc, err)
		}
		var dotX, dotF float64
		for i, v := range in {
			dotX += v * dx[0].Float64At(i)
		}
		for i, v := range f {
			dotF += v * df[0].Float64At(i)
		}
		if math.Abs(dotX-dot) > 1e-4*max(1, math.Abs(dot)) || math.Abs(dotF-dot) > 1e-4*max(1, math.Abs(dot)) {
			t.Fatalf("%+v: adjoint mismatch: <y,dy>=%v <x,dx>=%v <f,df>=%v", tc, dot, dotX, dotF)
		}
	}
}

func TestNNConv2DErrors(t *testing.T) {
	attrs := map[string]any{"strides": []int{1, 1}, "padding": "VALID"}
	// An empty batch gives an empty output, not an error.
	out, err := nnRun(t, "Conv2D", attrs, tensor.New(tensor.Float32, 0, 3, 3, 2), tensor.New(tensor.Float32, 2, 2, 2, 4))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "Conv2D empty", out[0], []int{0, 2, 2, 4}, nil, 0)
	_, err = nnRun(t, "Conv2DBackpropInput", attrs, tensor.MustFromSlice([]int32{1, 3, 3, 2}, 4),
		tensor.New(tensor.Float32, 2, 2, 2, 4), tensor.New(tensor.Float32, 1, 3, 3, 4))
	if err == nil || !strings.Contains(err.Error(), "out_backprop [1 3 3 4]") {
		t.Fatalf("mismatched out_backprop: got error %v", err)
	}
}

func TestNNPool(t *testing.T) {
	// One 3x4 image, 2 channels: channel 0 is 0..11, channel 1 is its negation.
	var x []float64
	for i := 0; i < 12; i++ {
		x = append(x, float64(i), -float64(i))
	}
	tests := []struct {
		op, padding string
		k, s        [2]int
		shape       []int
		want        []float64
	}{
		{"MaxPool", "VALID", [2]int{2, 2}, [2]int{2, 2}, []int{1, 1, 2, 2},
			[]float64{5, 0, 7, -2}},
		{"MaxPool", "SAME", [2]int{2, 2}, [2]int{2, 2}, []int{1, 2, 2, 2},
			[]float64{5, 0, 7, -2, 9, -8, 11, -10}},
		{"AvgPool", "SAME", [2]int{2, 2}, [2]int{2, 2}, []int{1, 2, 2, 2},
			[]float64{2.5, -2.5, 4.5, -4.5, 8.5, -8.5, 10.5, -10.5}},
		{"AvgPool", "VALID", [2]int{3, 3}, [2]int{1, 1}, []int{1, 1, 2, 2},
			[]float64{5, -5, 6, -6}},
		{"MaxPool", "SAME", [2]int{3, 3}, [2]int{1, 2}, []int{1, 3, 2, 2},
			[]float64{6, 0, 7, -2, 10, 0, 11, -2, 10, -4, 11, -6}},
	}
	for _, tc := range tests {
		attrs := map[string]any{"ksize": tc.k[:], "strides": tc.s[:], "padding": tc.padding}
		for _, mk := range []func([]float64, ...int) *tensor.Tensor{nnF32, nnF64} {
			out, err := nnRun(t, tc.op, attrs, mk(x, 1, 3, 4, 2))
			if err != nil {
				t.Fatalf("%+v: %v", tc, err)
			}
			nnClose(t, tc.op+" "+tc.padding, out[0], tc.shape, tc.want, 1e-6)
		}
	}
}

func TestNNPoolGrads(t *testing.T) {
	// 1x3x3x1 image with its max at the centre; 2x2 windows, stride 1 VALID:
	// every window contains the centre, so its gradient collects all four.
	x := []float64{1, 2, 3, 4, 9, 5, 6, 7, 8}
	attrs := map[string]any{"ksize": []int{2, 2}, "strides": []int{1, 1}, "padding": "VALID"}
	dy := []float64{1, 2, 3, 4}
	out, err := nnRun(t, "MaxPoolGrad", attrs, nnF32(x, 1, 3, 3, 1), nnF32([]float64{9, 9, 9, 9}, 1, 2, 2, 1), nnF32(dy, 1, 2, 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "MaxPoolGrad", out[0], []int{1, 3, 3, 1}, []float64{0, 0, 0, 0, 10, 0, 0, 0, 0}, 0)

	// Ties go to the first maximum in row-major order.
	out, err = nnRun(t, "MaxPoolGrad", map[string]any{"ksize": []int{2, 2}, "strides": []int{2, 2}, "padding": "VALID"},
		nnF64([]float64{1, 3, 3, 0}, 1, 2, 2, 1), nnF64([]float64{3}, 1, 1, 1, 1), nnF64([]float64{5}, 1, 1, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "MaxPoolGrad tie", out[0], []int{1, 2, 2, 1}, []float64{0, 5, 0, 0}, 0)

	// AvgPoolGrad, SAME 2x2 stride 2 on 3x3: windows of 4, 2, 2 and 1 elements.
	attrs = map[string]any{"ksize": []int{2, 2}, "strides": []int{2, 2}, "padding": "SAME"}
	out, err = nnRun(t, "AvgPoolGrad", attrs, tensor.MustFromSlice([]int32{1, 3, 3, 1}, 4), nnF32([]float64{4, 2, 2, 1}, 1, 2, 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "AvgPoolGrad", out[0], []int{1, 3, 3, 1}, []float64{1, 1, 1, 1, 1, 1, 1, 1, 1}, 0)
}

// TestNNPoolAdjoint checks AvgPoolGrad against AvgPool, and MaxPoolGrad
// against MaxPool, through <pool(x), dy> = <x, grad(dy)> (exact for average
// pooling; for max pooling with distinct inputs the map is locally linear).
func TestNNPoolAdjoint(t *testing.T) {
	// 70 channels spans two of MaxPoolGrad's channel blocks.
	for _, shape := range [][]int{{3, 7, 6, 4}, {2, 5, 4, 70}} {
		for _, padding := range []string{"SAME", "VALID"} {
			for _, op := range []string{"MaxPool", "AvgPool"} {
				nnPoolAdjoint(t, op, padding, shape)
			}
		}
	}
}

func nnPoolAdjoint(t *testing.T, op, padding string, shape []int) {
	t.Helper()
	attrs := map[string]any{"ksize": []int{3, 2}, "strides": []int{2, 2}, "padding": padding}
	xv := nnSeq(tensor.NumElements(shape), 11)
	x := nnF64(xv, shape...)
	y, err := nnRun(t, op, attrs, x)
	if err != nil {
		t.Fatal(err)
	}
	dyv := nnSeq(y[0].NumElements(), 12)
	dy := nnF64(dyv, y[0].Shape()...)
	var dx []*tensor.Tensor
	if op == "MaxPool" {
		dx, err = nnRun(t, "MaxPoolGrad", attrs, x, y[0], dy)
	} else {
		sizes := []int32{int32(shape[0]), int32(shape[1]), int32(shape[2]), int32(shape[3])}
		dx, err = nnRun(t, "AvgPoolGrad", attrs, tensor.MustFromSlice(sizes, 4), dy)
	}
	if err != nil {
		t.Fatal(err)
	}
	var a, b float64
	for i, v := range dyv {
		a += v * y[0].Float64At(i)
	}
	for i, v := range xv {
		b += v * dx[0].Float64At(i)
	}
	if math.Abs(a-b) > 1e-9*max(1, math.Abs(a)) {
		t.Fatalf("%s %s %v: <pool(x),dy>=%v, <x,grad>=%v", op, padding, shape, a, b)
	}
}

// TestNNParallelPaths runs the row-parallel kernels on tensors large enough
// for kernel.ParallelFor to split them, against naive references.
func TestNNParallelPaths(t *testing.T) {
	const rows, cols = 600, 100
	x := nnSeq(rows*cols, 21)
	out, err := nnRun(t, "Softmax", nil, nnF32(x, rows, cols))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "Softmax large", out[0], []int{rows, cols}, nnSoftmaxRef(x, cols), 1e-5)

	// MaxPool 2x2/2 SAME on [8,15,15,16] against a direct loop.
	const n, h, w, c = 8, 15, 15, 16
	xv := nnSeq(n*h*w*c, 22)
	oh, ow := 8, 8
	want := make([]float64, n*oh*ow*c)
	for b := range n {
		for y := range oh {
			for z := range ow {
				for ch := range c {
					m := math.Inf(-1)
					for i := 2 * y; i < min(2*y+2, h); i++ {
						for j := 2 * z; j < min(2*z+2, w); j++ {
							m = math.Max(m, xv[((b*h+i)*w+j)*c+ch])
						}
					}
					want[((b*oh+y)*ow+z)*c+ch] = m
				}
			}
		}
	}
	out, err = nnRun(t, "MaxPool", map[string]any{"ksize": []int{2, 2}, "strides": []int{2, 2}, "padding": "SAME"}, nnF64(xv, n, h, w, c))
	if err != nil {
		t.Fatal(err)
	}
	nnClose(t, "MaxPool large", out[0], []int{n, oh, ow, c}, want, 0)
}

// nnBench runs the kernel of op on inputs b.N times (outputs are allocated
// on every call, as in a real step).
func nnBench(b *testing.B, opName string, attrs map[string]any, inputs ...*tensor.Tensor) {
	s := graph.NewScope()
	var ins []graph.Output
	for _, in := range inputs {
		ins = append(ins, s.Out("Placeholder", "x", nil, map[string]any{"dtype": in.DType()}))
	}
	n := s.AddNode(opName, "", ins, attrs)
	if err := s.Err(); err != nil {
		b.Fatal(err)
	}
	f, _ := kernel.Lookup(opName, kernel.CPU)
	k, err := f(n)
	if err != nil {
		b.Fatal(err)
	}
	c := &kernel.Context{Ctx: context.Background(), Node: n, Inputs: inputs, Outputs: make([]*tensor.Tensor, n.NumOutputs())}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := k.Compute(c); err != nil {
			b.Fatal(err)
		}
	}
}

// The shapes of the reference CNN's first layer (batch 50) and the MLP's
// output layer (batch 100).
func BenchmarkNNKernels(b *testing.B) {
	act := nnF32(nnSeq(50*28*28*32, 1), 50, 28, 28, 32)
	pooled := nnF32(nnSeq(50*14*14*32, 2), 50, 14, 14, 32)
	win := map[string]any{"ksize": []int{2, 2}, "strides": []int{2, 2}, "padding": "SAME"}
	b.Run("BiasAdd/50x28x28x32", func(b *testing.B) { nnBench(b, "BiasAdd", nil, act, nnF32(nnSeq(32, 3), 32)) })
	b.Run("BiasAddGrad/50x28x28x32", func(b *testing.B) { nnBench(b, "BiasAddGrad", nil, act) })
	b.Run("Relu/50x28x28x32", func(b *testing.B) { nnBench(b, "Relu", nil, act) })
	b.Run("ReluGrad/50x28x28x32", func(b *testing.B) { nnBench(b, "ReluGrad", nil, act, act) })
	b.Run("MaxPool/50x28x28x32", func(b *testing.B) { nnBench(b, "MaxPool", win, act) })
	b.Run("MaxPoolGrad/50x28x28x32", func(b *testing.B) { nnBench(b, "MaxPoolGrad", win, act, pooled, pooled) })
	b.Run("Sigmoid/100x100", func(b *testing.B) { nnBench(b, "Sigmoid", nil, nnF32(nnSeq(100*100, 4), 100, 100)) })
	b.Run("SoftmaxXent/100x10", func(b *testing.B) {
		nnBench(b, "SoftmaxCrossEntropyWithLogits", nil, nnF32(nnSeq(1000, 5), 100, 10), nnF32(nnSeq(1000, 6), 100, 10))
	})
}
