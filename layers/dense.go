package layers

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
)

// Dense is a fully connected layer, activation(x·kernel + bias), as
// tf.layers.dense(x, units, activation, use_bias, kernel_initializer,
// bias_initializer, kernel_regularizer, name). Its variables are
// "<name>/kernel" [in, Units] and "<name>/bias" [Units]. An input of rank
// above 2 is multiplied along its last axis, as tf.layers.dense does.
type Dense struct {
	// Units is the output size (required).
	Units int
	// Activation is applied last (nil: linear).
	Activation Activation
	// NoBias leaves the bias out (use_bias=False).
	NoBias bool
	// KernelInit initialises the kernel (nil: Glorot uniform, seeded from
	// the scope's seed and the kernel's full name); BiasInit the bias
	// (nil: zeros).
	KernelInit, BiasInit ops.Initializer
	// KernelRegularizer adds a penalty of the kernel to the regularization
	// losses (nil: none), for instance L2(1e-4).
	KernelRegularizer Regularizer
	// Partitioner splits the kernel by rows into shards (nil: whole), for
	// instance MinMaxPartitioner(psTasks, 64<<10).
	Partitioner Partitioner
	// Name names the layer's scope (default "dense", made unique).
	Name string
	// KernelName and BiasName name its variables within the scope
	// (default "kernel" and "bias"): a model whose checkpoints already
	// name them otherwise ("W", "b") keeps its names.
	KernelName, BiasName string
}

// Apply implements Layer.
func (d Dense) Apply(s *graph.Scope, x graph.Output, _ bool) graph.Output {
	dt, in, ok := inputCheck(s, "Dense", x, 2)
	if !ok {
		return graph.Output{}
	}
	if d.Units <= 0 {
		s.SetErr(fmt.Errorf("layers: Dense: Units %d must be positive", d.Units))
		return graph.Output{}
	}
	ls := layerScope(s, d.Name, "dense")
	kernel := weight(ls, or(d.KernelName, "kernel"), dt, []int{in, d.Units}, d.KernelInit, d.KernelRegularizer, d.Partitioner)
	rank := x.Shape().Rank()
	flat := x
	if rank > 2 {
		flat = ops.ReshapeTo(ls, x, -1, in)
	}
	y := ops.MatMul(ls, flat, kernel, false, false)
	if !d.NoBias {
		y = ops.BiasAdd(ls, y, variable(ls, or(d.BiasName, "bias"), dt, []int{d.Units}, orZeros(d.BiasInit), nil).Value())
	}
	if rank > 2 {
		// The leading dimensions of x, then Units: known or not at build time.
		lead := ops.Slice(ls, ops.Shape(ls, x), []int{0}, []int{rank - 1})
		y = ops.Reshape(ls, y, ops.Concat(ls, 0, lead, ops.Const(ls, []int32{int32(d.Units)})))
	}
	return activate(ls, d.Activation, y)
}

// orZeros is init, or zeros when nil.
func orZeros(init ops.Initializer) ops.Initializer {
	if init == nil {
		return ops.ZerosInit()
	}
	return init
}
