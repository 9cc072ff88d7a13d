package layers

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
)

// Conv2D is a 2-D convolution of NHWC images, activation(conv(x, kernel) +
// bias), as tf.layers.conv2d(x, filters, kernel_size, strides, padding,
// activation, use_bias, kernel_initializer, bias_initializer,
// kernel_regularizer, name) with data_format "channels_last". Its
// variables are "<name>/kernel" [kh, kw, in, Filters] and "<name>/bias"
// [Filters].
type Conv2D struct {
	// Filters is the number of output channels (required).
	Filters int
	// KernelSize is [height, width] of the window (required).
	KernelSize [2]int
	// Strides moves the window (zero: [1, 1]).
	Strides [2]int
	// Padding is "VALID" (the default, as tf.layers) or "SAME".
	Padding string
	// Activation is applied last (nil: linear).
	Activation Activation
	// NoBias leaves the bias out.
	NoBias bool
	// KernelInit and BiasInit are as Dense's (Glorot uniform over the
	// kernel's receptive fields; zeros).
	KernelInit, BiasInit ops.Initializer
	// KernelRegularizer is as Dense's.
	KernelRegularizer Regularizer
	// Partitioner splits the kernel into shards along its height (nil:
	// whole), as Dense's.
	Partitioner Partitioner
	// Name names the layer's scope (default "conv2d", made unique).
	Name string
	// KernelName and BiasName are as Dense's.
	KernelName, BiasName string
}

// Apply implements Layer.
func (c Conv2D) Apply(s *graph.Scope, x graph.Output, _ bool) graph.Output {
	dt, in, ok := inputCheck(s, "Conv2D", x, 4)
	if !ok {
		return graph.Output{}
	}
	strides, padding, err := window("Conv2D", x, c.KernelSize, c.Strides, c.Padding)
	if err == nil && c.Filters <= 0 {
		err = fmt.Errorf("layers: Conv2D: Filters %d must be positive", c.Filters)
	}
	if err != nil {
		s.SetErr(err)
		return graph.Output{}
	}
	ls := layerScope(s, c.Name, "conv2d")
	kernel := weight(ls, or(c.KernelName, "kernel"), dt, []int{c.KernelSize[0], c.KernelSize[1], in, c.Filters}, c.KernelInit, c.KernelRegularizer, c.Partitioner)
	y := ops.Conv2D(ls, x, kernel, strides, padding)
	if !c.NoBias {
		bias := variable(ls, or(c.BiasName, "bias"), dt, []int{c.Filters}, orZeros(c.BiasInit), nil)
		y = ops.BiasAdd(ls, y, bias.Value())
	}
	return activate(ls, c.Activation, y)
}

// MaxPool2D is the maximum over windows of NHWC images, as
// tf.layers.max_pooling2d(x, pool_size, strides, padding, name).
type MaxPool2D struct {
	// PoolSize is [height, width] of the window (required).
	PoolSize [2]int
	// Strides moves the window (zero: PoolSize, as Keras).
	Strides [2]int
	// Padding is "VALID" (the default) or "SAME".
	Padding string
	// Name names the layer's scope (default "max_pooling2d", made unique).
	Name string
}

// Apply implements Layer.
func (p MaxPool2D) Apply(s *graph.Scope, x graph.Output, _ bool) graph.Output {
	return pool(s, "MaxPool2D", p.Name, "max_pooling2d", x, p.PoolSize, p.Strides, p.Padding, ops.MaxPool)
}

// AvgPool2D is the mean over windows of NHWC images (padded positions of
// SAME windows not counted), as tf.layers.average_pooling2d(x, pool_size,
// strides, padding, name).
type AvgPool2D struct {
	// PoolSize, Strides and Padding are as MaxPool2D's.
	PoolSize [2]int
	Strides  [2]int
	Padding  string
	// Name names the layer's scope (default "average_pooling2d", made unique).
	Name string
}

// Apply implements Layer.
func (p AvgPool2D) Apply(s *graph.Scope, x graph.Output, _ bool) graph.Output {
	return pool(s, "AvgPool2D", p.Name, "average_pooling2d", x, p.PoolSize, p.Strides, p.Padding, ops.AvgPool)
}

func pool(s *graph.Scope, layer, name, def string, x graph.Output, size, strides [2]int, padding string,
	op func(*graph.Scope, graph.Output, [2]int, [2]int, string) graph.Output) graph.Output {
	if _, _, ok := inputCheck(s, layer, x, 4); !ok {
		return graph.Output{}
	}
	if strides == [2]int{} {
		strides = size
	}
	strides, padding, err := window(layer, x, size, strides, padding)
	if err != nil {
		s.SetErr(err)
		return graph.Output{}
	}
	return op(layerScope(s, name, def), x, size, strides, padding)
}

// window checks a window's size, strides and padding, with their defaults
// (strides [1, 1], padding VALID), for NHWC input x.
func window(layer string, x graph.Output, size, strides [2]int, padding string) ([2]int, string, error) {
	if strides == [2]int{} {
		strides = [2]int{1, 1}
	}
	if padding == "" {
		padding = "VALID"
	}
	switch {
	case x.Shape().Rank() != 4:
		return strides, padding, fmt.Errorf("layers: %s: input %s has shape %v; want NHWC images [batch, height, width, channels]", layer, x, x.Shape())
	case size[0] <= 0 || size[1] <= 0:
		return strides, padding, fmt.Errorf("layers: %s: window %v must be positive", layer, size)
	case strides[0] <= 0 || strides[1] <= 0:
		return strides, padding, fmt.Errorf("layers: %s: strides %v must be positive", layer, strides)
	case padding != "VALID" && padding != "SAME":
		return strides, padding, fmt.Errorf("layers: %s: padding %q: want VALID or SAME", layer, padding)
	}
	return strides, padding, nil
}

// Flatten reshapes [batch, d1, d2, ...] to [batch, d1*d2*...], as
// tf.layers.flatten. The dimensions after the batch must be known.
type Flatten struct {
	// Name names the layer's scope (default "flatten", made unique).
	Name string
}

// Apply implements Layer.
func (f Flatten) Apply(s *graph.Scope, x graph.Output, _ bool) graph.Output {
	if s.Err() != nil {
		return graph.Output{}
	}
	if !x.Valid() {
		s.SetErr(fmt.Errorf("layers: Flatten: the input is missing"))
		return graph.Output{}
	}
	sh := x.Shape()
	if !sh.KnownRank() || sh.Rank() < 1 {
		s.SetErr(fmt.Errorf("layers: Flatten: input %s has shape %v; want a batch", x, sh))
		return graph.Output{}
	}
	n := 1
	for i := 1; i < sh.Rank(); i++ {
		if sh.Dim(i) < 0 {
			s.SetErr(fmt.Errorf("layers: Flatten: input %s has shape %v; the dimensions after the batch must be known", x, sh))
			return graph.Output{}
		}
		n *= sh.Dim(i)
	}
	return ops.ReshapeTo(layerScope(s, f.Name, "flatten"), x, -1, n)
}
