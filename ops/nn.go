package ops

import (
	"fmt"

	"github.com/distflow/distflow/graph"
)

// Builders of the neural-network family. Images are NHWC [batch, height,
// width, channels]; filters are HWIO [height, width, in, out]; padding is
// "SAME" or "VALID" (op.PaddingSame, op.PaddingValid) with TensorFlow's
// output sizes.

// BiasAdd returns x + b with b [C] added along the last axis of x [..., C].
func BiasAdd(s *graph.Scope, x, b graph.Output) graph.Output {
	return s.Out("BiasAdd", "BiasAdd", []graph.Output{x, b}, nil)
}

// BiasAddGrad sums dy [..., C] over all but its last axis, giving [C].
func BiasAddGrad(s *graph.Scope, dy graph.Output) graph.Output {
	return s.Out("BiasAddGrad", "BiasAddGrad", []graph.Output{dy}, nil)
}

// Relu returns max(x, 0).
func Relu(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("Relu", "Relu", []graph.Output{x}, nil)
}

// ReluGrad returns dy where y (Relu's output) is positive, else 0.
func ReluGrad(s *graph.Scope, dy, y graph.Output) graph.Output {
	return s.Out("ReluGrad", "ReluGrad", []graph.Output{dy, y}, nil)
}

// Sigmoid returns 1 / (1 + exp(-x)).
func Sigmoid(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("Sigmoid", "Sigmoid", []graph.Output{x}, nil)
}

// SigmoidGrad returns dy * y * (1 - y) for y = Sigmoid(x).
func SigmoidGrad(s *graph.Scope, y, dy graph.Output) graph.Output {
	return s.Out("SigmoidGrad", "SigmoidGrad", []graph.Output{y, dy}, nil)
}

// Tanh returns the hyperbolic tangent of x.
func Tanh(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("Tanh", "Tanh", []graph.Output{x}, nil)
}

// TanhGrad returns dy * (1 - y^2) for y = Tanh(x).
func TanhGrad(s *graph.Scope, y, dy graph.Output) graph.Output {
	return s.Out("TanhGrad", "TanhGrad", []graph.Output{y, dy}, nil)
}

// Softplus returns log(1 + exp(x)).
func Softplus(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("Softplus", "Softplus", []graph.Output{x}, nil)
}

// Softmax returns exp(x) / sum(exp(x)) over the last axis.
func Softmax(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("Softmax", "Softmax", []graph.Output{x}, nil)
}

// LogSoftmax returns x - log(sum(exp(x))) over the last axis.
func LogSoftmax(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("LogSoftmax", "LogSoftmax", []graph.Output{x}, nil)
}

// nnOut2 adds a two-output node and returns both outputs (zero Outputs after
// an error).
func nnOut2(s *graph.Scope, opName string, inputs []graph.Output) (graph.Output, graph.Output) {
	n := s.AddNode(opName, opName, inputs, nil)
	if n == nil {
		return graph.Output{}, graph.Output{}
	}
	return n.Output(0), n.Output(1)
}

// SoftmaxCrossEntropyWithLogits returns, for logits [N,C] and label
// distributions labels [N,C], the per-example cross-entropy loss [N] of
// softmax(logits) and its gradient with respect to the logits, backprop
// [N,C] = softmax(logits) - labels. Average loss over the batch with Mean.
func SoftmaxCrossEntropyWithLogits(s *graph.Scope, logits, labels graph.Output) (loss, backprop graph.Output) {
	return nnOut2(s, "SoftmaxCrossEntropyWithLogits", []graph.Output{logits, labels})
}

// SparseSoftmaxCrossEntropyWithLogits is SoftmaxCrossEntropyWithLogits with
// labels given as class indices [N] (int32 or int64) in [0, C).
func SparseSoftmaxCrossEntropyWithLogits(s *graph.Scope, logits, labels graph.Output) (loss, backprop graph.Output) {
	return nnOut2(s, "SparseSoftmaxCrossEntropyWithLogits", []graph.Output{logits, labels})
}

func nnConvAttrs(strides [2]int, padding string) map[string]any {
	return map[string]any{"strides": strides[:], "padding": padding}
}

func nnPoolAttrs(ksize, strides [2]int, padding string) map[string]any {
	return map[string]any{"ksize": ksize[:], "strides": strides[:], "padding": padding}
}

// Conv2D convolves input [N,H,W,C] with filter [KH,KW,C,Cout] (float32),
// moving the filter by strides [sh, sw]; the result is [N,OH,OW,Cout].
func Conv2D(s *graph.Scope, input, filter graph.Output, strides [2]int, padding string) graph.Output {
	return s.Out("Conv2D", "Conv2D", []graph.Output{input, filter}, nnConvAttrs(strides, padding))
}

// Conv2DBackpropInput returns the gradient of Conv2D with respect to its
// input, of shape inputSizes (int32 [4]), given the filter and the output
// gradient dy.
func Conv2DBackpropInput(s *graph.Scope, inputSizes, filter, dy graph.Output, strides [2]int, padding string) graph.Output {
	return s.Out("Conv2DBackpropInput", "Conv2DBackpropInput", []graph.Output{inputSizes, filter, dy}, nnConvAttrs(strides, padding))
}

// Conv2DBackpropFilter returns the gradient of Conv2D with respect to its
// filter, of shape filterSizes (int32 [4]), given the input and the output
// gradient dy.
func Conv2DBackpropFilter(s *graph.Scope, input, filterSizes, dy graph.Output, strides [2]int, padding string) graph.Output {
	return s.Out("Conv2DBackpropFilter", "Conv2DBackpropFilter", []graph.Output{input, filterSizes, dy}, nnConvAttrs(strides, padding))
}

// MaxPool returns the maximum of each ksize [kh, kw] window of x [N,H,W,C],
// windows moved by strides [sh, sw].
func MaxPool(s *graph.Scope, x graph.Output, ksize, strides [2]int, padding string) graph.Output {
	return s.Out("MaxPool", "MaxPool", []graph.Output{x}, nnPoolAttrs(ksize, strides, padding))
}

// MaxPoolGrad returns the gradient of MaxPool with respect to its input x,
// given its output y and the output gradient dy.
func MaxPoolGrad(s *graph.Scope, x, y, dy graph.Output, ksize, strides [2]int, padding string) graph.Output {
	return s.Out("MaxPoolGrad", "MaxPoolGrad", []graph.Output{x, y, dy}, nnPoolAttrs(ksize, strides, padding))
}

// AvgPool returns the mean of each window of x, like MaxPool; padded
// positions of SAME windows are not counted.
func AvgPool(s *graph.Scope, x graph.Output, ksize, strides [2]int, padding string) graph.Output {
	return s.Out("AvgPool", "AvgPool", []graph.Output{x}, nnPoolAttrs(ksize, strides, padding))
}

// AvgPoolGrad returns the gradient of AvgPool with respect to its input,
// whose shape is inputShape (int32 [4]), given the output gradient dy.
func AvgPoolGrad(s *graph.Scope, inputShape, dy graph.Output, ksize, strides [2]int, padding string) graph.Output {
	return s.Out("AvgPoolGrad", "AvgPoolGrad", []graph.Output{inputShape, dy}, nnPoolAttrs(ksize, strides, padding))
}

// L2Loss returns sum(x^2) / 2, a scalar (weight decay).
func L2Loss(s *graph.Scope, x graph.Output) graph.Output {
	return s.Out("L2Loss", "L2Loss", []graph.Output{x}, nil)
}

// Dropout zeroes each element of x with probability rate and scales the
// others by 1/(1-rate), so that the expected value is unchanged. A fresh mask
// is drawn at every run (seed makes the sequence reproducible). rate 0
// returns x itself; rate must be in [0, 1). Apply it only when training:
// build the evaluation graph without it (or feed rate through a separate
// graph).
func Dropout(s *graph.Scope, x graph.Output, rate float32, seed int) graph.Output {
	if rate < 0 || rate >= 1 {
		s.SetErr(fmt.Errorf("ops: Dropout in scope %q: rate %v must be in [0, 1)", s.Prefix(), rate))
		return graph.Output{}
	}
	if rate == 0 {
		return x
	}
	if !x.Valid() {
		s.SetErr(fmt.Errorf("ops: Dropout in scope %q: input is missing", s.Prefix()))
		return graph.Output{}
	}
	s = s.SubScope("Dropout")
	dt := x.DType()
	if !dt.IsFloat() {
		s.SetErr(fmt.Errorf("ops: Dropout %q: x must be float32 or float64, got %v", s.Prefix(), dt))
		return graph.Output{}
	}
	// u in [0, 1) is >= rate with probability 1 - rate: keep those.
	u := RandomUniform(s, Shape(s, x), dt, seed)
	mask := Cast(s, GreaterEqual(s, u, Scalar(s, dt, float64(rate))), dt)
	return Div(s, Mul(s, x, mask), Scalar(s, dt, 1-float64(rate)))
}
