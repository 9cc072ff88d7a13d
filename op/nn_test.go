package op_test

import (
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// nnIn builds one input of a shape-inference case (see infer_test.go).
type nnIn = inferIn

// nnPH is a placeholder written "float32[?,3]" or "int32<unknown>" (see ph).
func nnPH(spec string) nnIn { return ph(spec) }

// nnSizes is a constant int32 [4] shape input.
func nnSizes(d ...int32) nnIn {
	return func(s *graph.Scope) graph.Output {
		return s.Out("Const", "c", nil, map[string]any{"value": tensor.MustFromSlice(d, len(d))})
	}
}

func nnConv(strides []int, padding string) map[string]any {
	return map[string]any{"strides": strides, "padding": padding}
}

func nnWin(k, strides []int, padding string) map[string]any {
	return map[string]any{"ksize": k, "strides": strides, "padding": padding}
}

// TestNNInfer checks shape inference in the compact form "dtype[dims]" per
// output (joined by ";"), or "error: " and substrings (joined by "|") that
// the error must contain besides the op name.
func TestNNInfer(t *testing.T) {
	same, valid := "SAME", "VALID"
	cases := []inferCase{
		{"BiasAdd", []nnIn{nnPH("float32[?,3]"), nnPH("float32[3]")}, nil, "float32[?,3]"},
		{"BiasAdd", []nnIn{nnPH("float32[2,?]"), nnPH("float32[5]")}, nil, "float32[2,5]"},
		{"BiasAdd", []nnIn{nnPH("int64[2,4,3]"), nnPH("int64[3]")}, nil, "int64[2,4,3]"},
		{"BiasAdd", []nnIn{nnPH("float32[2,3]"), nnPH("float32[4]")}, nil, "error: bias [4]|value [2,3]"},
		{"BiasAdd", []nnIn{nnPH("float32[2,3]"), nnPH("float64[3]")}, nil, "error: float32 and float64"},
		{"BiasAdd", []nnIn{nnPH("float32[2,3]"), nnPH("float32[1,3]")}, nil, "error: bias must be 1-D"},
		{"BiasAddGrad", []nnIn{nnPH("float32[?,7,7,32]")}, nil, "float32[32]"},
		{"BiasAddGrad", []nnIn{nnPH("float32<unknown>")}, nil, "float32[?]"},
		{"Relu", []nnIn{nnPH("float32[?,100]")}, nil, "float32[?,100]"},
		{"Relu", []nnIn{nnPH("bool[2]")}, nil, "error: bool"},
		{"Sigmoid", []nnIn{nnPH("float64[2,3]")}, nil, "float64[2,3]"},
		{"Tanh", []nnIn{nnPH("int32[2]")}, nil, "error: float32 or float64"},
		{"Softplus", []nnIn{nnPH("float32<unknown>")}, nil, "float32<unknown>"},
		{"ReluGrad", []nnIn{nnPH("float32[?,3]"), nnPH("float32[2,?]")}, nil, "float32[2,3]"},
		{"SigmoidGrad", []nnIn{nnPH("float32[2,3]"), nnPH("float32[3,2]")}, nil, "error: [2,3] and [3,2]"},
		{"TanhGrad", []nnIn{nnPH("float32[2]"), nnPH("float64[2]")}, nil, "error: different dtypes"},
		{"Softmax", []nnIn{nnPH("float32[?,10]")}, nil, "float32[?,10]"},
		{"LogSoftmax", []nnIn{nnPH("float32[]")}, nil, "error: rank >= 1"},
		{"SoftmaxCrossEntropyWithLogits", []nnIn{nnPH("float32[?,10]"), nnPH("float32[100,?]")}, nil,
			"float32[100];float32[100,10]"},
		{"SoftmaxCrossEntropyWithLogits", []nnIn{nnPH("float32<unknown>"), nnPH("float32<unknown>")}, nil,
			"float32[?];float32[?,?]"},
		{"SoftmaxCrossEntropyWithLogits", []nnIn{nnPH("float32[4,10]"), nnPH("float32[4,9]")}, nil,
			"error: logits [4,10] and labels [4,9]"},
		{"SoftmaxCrossEntropyWithLogits", []nnIn{nnPH("float32[4]"), nnPH("float32[4]")}, nil, "error: rank 2"},
		{"SparseSoftmaxCrossEntropyWithLogits", []nnIn{nnPH("float32[?,10]"), nnPH("int64[32]")}, nil,
			"float32[32];float32[32,10]"},
		{"SparseSoftmaxCrossEntropyWithLogits", []nnIn{nnPH("float32[5,10]"), nnPH("int32[4]")}, nil,
			"error: logits [5,10] and labels [4]"},
		{"SparseSoftmaxCrossEntropyWithLogits", []nnIn{nnPH("float32[5,10]"), nnPH("float32[5]")}, nil,
			"error: int32 or int64"},

		// Conv2D: SAME gives ceil(in/stride); VALID ceil((in-k+1)/stride).
		{"Conv2D", []nnIn{nnPH("float32[?,28,28,1]"), nnPH("float32[5,5,1,32]")}, nnConv([]int{1, 1}, same), "float32[?,28,28,32]"},
		{"Conv2D", []nnIn{nnPH("float32[2,7,8,3]"), nnPH("float32[3,3,3,4]")}, nnConv([]int{2, 2}, same), "float32[2,4,4,4]"},
		{"Conv2D", []nnIn{nnPH("float32[2,7,8,3]"), nnPH("float32[3,2,3,4]")}, nnConv([]int{2, 3}, valid), "float32[2,3,3,4]"},
		{"Conv2D", []nnIn{nnPH("float32[2,?,8,3]"), nnPH("float32[?,?,3,4]")}, nnConv([]int{1, 1}, valid), "float32[2,?,?,4]"},
		{"Conv2D", []nnIn{nnPH("float32[2,7,8,3]"), nnPH("float32[3,3,2,4]")}, nnConv([]int{1, 1}, same),
			"error: input [2,7,8,3] and filter [3,3,2,4]|3 vs 2"},
		{"Conv2D", []nnIn{nnPH("float32[2,2,8,3]"), nnPH("float32[3,3,3,4]")}, nnConv([]int{1, 1}, valid),
			"error: larger than the input size 2"},
		{"Conv2D", []nnIn{nnPH("float32[2,7,8,3]"), nnPH("float32[3,3,3,4]")}, nnConv([]int{1, 1}, "FULL"), "error: padding \"FULL\""},
		{"Conv2D", []nnIn{nnPH("float32[2,7,8,3]"), nnPH("float32[3,3,3,4]")}, nnConv([]int{1}, same), "error: strides"},
		{"Conv2D", []nnIn{nnPH("float32[7,8,3]"), nnPH("float32[3,3,3,4]")}, nnConv([]int{1, 1}, same), "error: rank 4"},
		{"Conv2D", []nnIn{nnPH("float64[2,7,8,3]"), nnPH("float64[3,3,3,4]")}, nnConv([]int{1, 1}, same), "error: float32 only"},
		{"Conv2DBackpropInput", []nnIn{nnSizes(2, 7, 8, 3), nnPH("float32[3,3,3,4]"), nnPH("float32[2,4,4,4]")},
			nnConv([]int{2, 2}, same), "float32[2,7,8,3]"},
		{"Conv2DBackpropInput", []nnIn{nnPH("int32[4]"), nnPH("float32[3,3,3,4]"), nnPH("float32[?,?,?,4]")},
			nnConv([]int{2, 2}, same), "float32[?,?,?,3]"},
		{"Conv2DBackpropInput", []nnIn{nnSizes(2, 7, 8, 3), nnPH("float32[3,3,3,4]"), nnPH("float32[2,3,3,4]")},
			nnConv([]int{2, 2}, same), "error: out_backprop [2,3,3,4]|[2,4,4,4]"},
		{"Conv2DBackpropFilter", []nnIn{nnPH("float32[2,7,8,3]"), nnSizes(3, 2, 3, 4), nnPH("float32[2,3,3,4]")},
			nnConv([]int{2, 3}, valid), "float32[3,2,3,4]"},
		{"Conv2DBackpropFilter", []nnIn{nnPH("float32[2,7,8,3]"), nnPH("int64[4]"), nnPH("float32[2,3,3,4]")},
			nnConv([]int{2, 3}, valid), "error: filter_sizes must be int32"},

		{"MaxPool", []nnIn{nnPH("float32[?,28,28,32]")}, nnWin([]int{2, 2}, []int{2, 2}, same), "float32[?,14,14,32]"},
		{"MaxPool", []nnIn{nnPH("float64[1,5,5,2]")}, nnWin([]int{3, 3}, []int{2, 2}, valid), "float64[1,2,2,2]"},
		{"AvgPool", []nnIn{nnPH("float32[1,5,7,2]")}, nnWin([]int{2, 3}, []int{2, 2}, same), "float32[1,3,4,2]"},
		{"AvgPool", []nnIn{nnPH("float32[1,5,7,2]")}, nnWin([]int{6, 3}, []int{1, 1}, valid), "error: window of size 6|input size 5"},
		{"MaxPool", []nnIn{nnPH("float32[1,5,7,2]")}, nnWin([]int{0, 3}, []int{1, 1}, valid), "error: ksize"},
		{"MaxPoolGrad", []nnIn{nnPH("float32[1,5,5,2]"), nnPH("float32[1,2,2,2]"), nnPH("float32[1,2,2,2]")},
			nnWin([]int{3, 3}, []int{2, 2}, valid), "float32[1,5,5,2]"},
		{"MaxPoolGrad", []nnIn{nnPH("float32[1,5,5,2]"), nnPH("float32[1,2,2,2]"), nnPH("float32[1,3,3,2]")},
			nnWin([]int{3, 3}, []int{2, 2}, valid), "error: out_backprop [1,3,3,2]"},
		{"AvgPoolGrad", []nnIn{nnSizes(1, 5, 7, 2), nnPH("float32[1,3,4,2]")}, nnWin([]int{2, 3}, []int{2, 2}, same), "float32[1,5,7,2]"},
		{"AvgPoolGrad", []nnIn{nnPH("int32[4]"), nnPH("float32[1,3,4,2]")}, nnWin([]int{2, 3}, []int{2, 2}, same), "float32[?,?,?,2]"},

		{"L2Loss", []nnIn{nnPH("float32[5,3]")}, nil, "float32[]"},
		{"L2Loss", []nnIn{nnPH("int32[5,3]")}, nil, "error: float32 or float64"},
	}
	checkInfer(t, cases)
}

func TestWindowedOutputSize(t *testing.T) {
	cases := []struct {
		in, k, stride  int
		padding        string
		out, padBefore int
		err            string
	}{
		{28, 5, 1, op.PaddingSame, 28, 2, ""},
		{7, 3, 2, op.PaddingSame, 4, 1, ""},
		{8, 3, 2, op.PaddingSame, 4, 0, ""}, // pad total 1 goes after
		{28, 2, 2, op.PaddingSame, 14, 0, ""},
		{7, 3, 2, op.PaddingValid, 3, 0, ""},
		{8, 3, 3, op.PaddingValid, 2, 0, ""},
		{-1, 3, 2, op.PaddingSame, -1, 0, ""},
		{0, 3, 1, op.PaddingSame, 0, 1, ""},
		{2, 3, 1, op.PaddingValid, 0, 0, "larger than the input"},
		{5, 0, 1, op.PaddingValid, 0, 0, "must be positive"},
		{5, 1, 1, "same", 0, 0, "padding \"same\""},
	}
	for _, c := range cases {
		out, pad, err := op.WindowedOutputSize(c.in, c.k, c.stride, c.padding)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: error %v, want %q", c, err, c.err)
			}
			continue
		}
		if err != nil || out != c.out || pad != c.padBefore {
			t.Errorf("%+v: got %d, %d, %v", c, out, pad, err)
		}
	}
}
