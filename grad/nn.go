package grad

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
)

// Gradients of the neural-network family. Activations differentiate through
// their outputs (ReluGrad(dy, y), SigmoidGrad(y, dy), TanhGrad(y, dy)) so the
// forward value is reused; convolution and pooling have dedicated backprop
// kernels; softmax and its log are composed from math ops.

const nnGradOnly = "gradient-only op; second derivatives not supported"

func init() {
	Register("BiasAdd", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		return []graph.Output{dys[0], ops.BiasAddGrad(s, dys[0])}, nil
	})
	Register("Relu", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		return []graph.Output{ops.ReluGrad(s, dys[0], n.Output(0))}, nil
	})
	Register("Sigmoid", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		return []graph.Output{ops.SigmoidGrad(s, n.Output(0), dys[0])}, nil
	})
	Register("Tanh", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		return []graph.Output{ops.TanhGrad(s, n.Output(0), dys[0])}, nil
	})
	Register("Softplus", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		return []graph.Output{ops.Mul(s, dys[0], ops.Sigmoid(s, n.Input(0)))}, nil
	})
	Register("Softmax", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		return []graph.Output{nnSoftmaxBack(s, n.Output(0), dys[0])}, nil
	})
	Register("LogSoftmax", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		// y = x - lse(x): dx = dy - softmax(x) * sum(dy), softmax(x) = exp(y).
		dy := dys[0]
		sm := ops.Exp(s, n.Output(0))
		return []graph.Output{ops.Sub(s, dy, ops.Mul(s, sm, ops.Sum(s, dy, []int{-1}, true)))}, nil
	})
	Register("SoftmaxCrossEntropyWithLogits", nnXentGrad(false))
	Register("SparseSoftmaxCrossEntropyWithLogits", nnXentGrad(true))

	Register("Conv2D", nnConv2DGrad)
	Register("MaxPool", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		k, st, pad, err := nnWindowAttrs(n)
		if err != nil {
			return nil, err
		}
		return []graph.Output{ops.MaxPoolGrad(s, n.Input(0), n.Output(0), dys[0], k, st, pad)}, nil
	})
	Register("AvgPool", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		k, st, pad, err := nnWindowAttrs(n)
		if err != nil {
			return nil, err
		}
		return []graph.Output{ops.AvgPoolGrad(s, shapeOf(s, n.Input(0)), dys[0], k, st, pad)}, nil
	})
	Register("L2Loss", func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		return []graph.Output{ops.Mul(s, n.Input(0), dys[0])}, nil
	})

	for _, op := range []string{"BiasAddGrad", "ReluGrad", "SigmoidGrad", "TanhGrad",
		"Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPoolGrad", "AvgPoolGrad"} {
		RegisterNone(op, nnGradOnly)
	}
}

// nnSoftmaxBack returns the gradient through y = softmax(x) over the last
// axis: (dy - sum(dy * y)) * y.
func nnSoftmaxBack(s *graph.Scope, y, dy graph.Output) graph.Output {
	return ops.Mul(s, ops.Sub(s, dy, ops.Sum(s, ops.Mul(s, dy, y), []int{-1}, true)), y)
}

// nnIsZero reports whether g is the zero gradient Gradients fills in for an
// output nothing depends on, so that terms it would multiply can be skipped.
func nnIsZero(g graph.Output) bool {
	return g.Valid() && g.Node.Op() == "ZerosLike"
}

// nnXentGrad differentiates the fused softmax cross-entropy ops. The loss
// output contributes dloss[:, None] * backprop to the logits and, for dense
// labels, -dloss[:, None] * log_softmax(logits) to the labels. The backprop
// output (softmax - labels) is rarely differentiated; when it is, its
// gradient g adds the softmax Jacobian term to the logits and -g to dense
// labels. Sparse labels are indices: they get no gradient.
func nnXentGrad(sparse bool) Func {
	return func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
		logits := n.Input(0)
		dloss := ops.ExpandDims(s, dys[0], 1)
		dLogits := ops.Mul(s, dloss, n.Output(1))
		var dLabels graph.Output
		if !sparse {
			dLabels = ops.Neg(s, ops.Mul(s, dloss, ops.LogSoftmax(s, logits)))
		}
		if g := dys[1]; !nnIsZero(g) {
			dLogits = ops.Add(s, dLogits, nnSoftmaxBack(s, ops.Softmax(s, logits), g))
			if !sparse {
				dLabels = ops.Sub(s, dLabels, g)
			}
		}
		return []graph.Output{dLogits, dLabels}, nil
	}
}

func nnConv2DGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	st, err := nnPairAttr(n, "strides")
	if err != nil {
		return nil, err
	}
	pad := n.AttrString("padding")
	input, filter, dy := n.Input(0), n.Input(1), dys[0]
	return []graph.Output{
		ops.Conv2DBackpropInput(s, shapeOf(s, input), filter, dy, st, pad),
		ops.Conv2DBackpropFilter(s, input, shapeOf(s, filter), dy, st, pad),
	}, nil
}

func nnPairAttr(n *graph.Node, name string) ([2]int, error) {
	v := n.AttrInts(name)
	if len(v) != 2 {
		return [2]int{}, fmt.Errorf("attribute %s must have 2 elements, got %v", name, v)
	}
	return [2]int{v[0], v[1]}, nil
}

func nnWindowAttrs(n *graph.Node) (ksize, strides [2]int, padding string, err error) {
	if ksize, err = nnPairAttr(n, "ksize"); err != nil {
		return
	}
	if strides, err = nnPairAttr(n, "strides"); err != nil {
		return
	}
	return ksize, strides, n.AttrString("padding"), nil
}
