package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// The neural-network family: activations, softmax and its losses,
// convolution and pooling (NHWC images, HWIO filters), and their gradient
// ops. The *Grad ops exist for the gradient functions; users rarely build
// them directly.

// Padding schemes of convolution and pooling windows.
const (
	PaddingSame  = "SAME"
	PaddingValid = "VALID"
)

// WindowedOutputSize returns the output size of a window of size k moved with
// the given stride along an input dimension of size in, and how many padding
// elements go before the input, with TensorFlow's rules: SAME gives
// ceil(in/stride) with the padding split evenly (the odd one after); VALID
// gives ceil((in-k+1)/stride) with no padding and needs k <= in. An unknown
// input size (-1) gives an unknown output size.
func WindowedOutputSize(in, k, stride int, padding string) (out, padBefore int, err error) {
	if k < 1 || stride < 1 {
		return 0, 0, fmt.Errorf("window size %d and stride %d must be positive", k, stride)
	}
	switch padding {
	case PaddingSame:
		if in < 0 {
			return -1, 0, nil
		}
		out = (in + stride - 1) / stride
		return out, max((out-1)*stride+k-in, 0) / 2, nil
	case PaddingValid:
		if in < 0 {
			return -1, 0, nil
		}
		if k > in {
			return 0, 0, fmt.Errorf("VALID window of size %d is larger than the input size %d", k, in)
		}
		return (in-k)/stride + 1, 0, nil
	}
	return 0, 0, fmt.Errorf("padding %q must be %q or %q", padding, PaddingSame, PaddingValid)
}

// nnWindowAttrs are the attributes of pooling ops.
var nnWindowAttrs = []Attr{
	{Name: "ksize", Type: AttrInts},
	{Name: "strides", Type: AttrInts},
	{Name: "padding", Type: AttrString},
}

// nnConvAttrs are the attributes of the convolution ops.
var nnConvAttrs = []Attr{
	{Name: "strides", Type: AttrInts, Default: []int{1, 1}},
	{Name: "padding", Type: AttrString},
}

func init() {
	Register(Def{
		Name:    "BiasAdd",
		Remote:  true,
		Inputs:  []Arg{{Name: "value"}, {Name: "bias"}},
		Summary: "Adds bias [C] to every row of value [..., C].",
		Infer:   nnInferBiasAdd,
	})
	Register(Def{
		Name:    "BiasAddGrad",
		Remote:  true,
		Inputs:  []Arg{{Name: "out_backprop"}},
		Summary: "Sums out_backprop [..., C] over all but the last axis: the gradient of BiasAdd's bias.",
		Infer: func(c *InferContext) error {
			s := c.InputShape(0)
			if err := nnRequireNumeric(c, 0); err != nil {
				return err
			}
			if s.KnownRank() && s.Rank() < 1 {
				return fmt.Errorf("out_backprop must have rank >= 1, got shape %v", s)
			}
			out := tensor.UnknownRankShape(1)
			if s.KnownRank() {
				out = tensor.MakeShape(s.Dim(-1))
			}
			c.SetOutput(0, c.InputDType(0), out)
			return nil
		},
	})

	for _, name := range []string{"Sigmoid", "Tanh", "Softplus"} {
		Register(Def{
			Name:    name,
			Remote:  true,
			Inputs:  []Arg{{Name: "x"}},
			Summary: name + " of x, element-wise.",
			Infer:   nnInferUnaryFloat,
		})
	}
	Register(Def{
		Name:    "Relu",
		Remote:  true,
		Inputs:  []Arg{{Name: "x"}},
		Summary: "max(x, 0), element-wise.",
		Infer: func(c *InferContext) error {
			if err := nnRequireNumeric(c, 0); err != nil {
				return err
			}
			return passThrough(c)
		},
	})
	Register(Def{
		Name:    "ReluGrad",
		Remote:  true,
		Inputs:  []Arg{{Name: "dy"}, {Name: "y"}},
		Summary: "dy where y > 0, else 0: the gradient of Relu given its output y.",
		Infer:   nnInferSameShape(false),
	})
	Register(Def{
		Name:    "SigmoidGrad",
		Remote:  true,
		Inputs:  []Arg{{Name: "y"}, {Name: "dy"}},
		Summary: "dy * y * (1 - y): the gradient of Sigmoid given its output y.",
		Infer:   nnInferSameShape(true),
	})
	Register(Def{
		Name:    "TanhGrad",
		Remote:  true,
		Inputs:  []Arg{{Name: "y"}, {Name: "dy"}},
		Summary: "dy * (1 - y^2): the gradient of Tanh given its output y.",
		Infer:   nnInferSameShape(true),
	})

	Register(Def{
		Name:    "Softmax",
		Remote:  true,
		Inputs:  []Arg{{Name: "logits"}},
		Summary: "exp(x) / sum(exp(x)) over the last axis.",
		Infer:   nnInferSoftmax,
	})
	Register(Def{
		Name:    "LogSoftmax",
		Remote:  true,
		Inputs:  []Arg{{Name: "logits"}},
		Summary: "x - log(sum(exp(x))) over the last axis.",
		Infer:   nnInferSoftmax,
	})
	Register(Def{
		Name:    "SoftmaxCrossEntropyWithLogits",
		Remote:  true,
		Inputs:  []Arg{{Name: "logits"}, {Name: "labels"}},
		Summary: "Per-row cross-entropy of softmax(logits [N,C]) against label distributions [N,C]; outputs loss [N] and backprop [N,C].",
		Infer:   nnInferSoftmaxXent,
	})
	Register(Def{
		Name:    "SparseSoftmaxCrossEntropyWithLogits",
		Remote:  true,
		Inputs:  []Arg{{Name: "logits"}, {Name: "labels"}},
		Summary: "Per-row cross-entropy of softmax(logits [N,C]) against class indices [N] (int32 or int64); outputs loss [N] and backprop [N,C].",
		Infer:   nnInferSparseXent,
	})

	Register(Def{
		Name:    "Conv2D",
		Remote:  true,
		Inputs:  []Arg{{Name: "input"}, {Name: "filter"}},
		Attrs:   nnConvAttrs,
		Summary: "2-D convolution of input [N,H,W,C] with filter [KH,KW,C,Cout] (float32).",
		Infer:   nnInferConv2D,
	})
	Register(Def{
		Name:    "Conv2DBackpropInput",
		Remote:  true,
		Inputs:  []Arg{{Name: "input_sizes"}, {Name: "filter"}, {Name: "out_backprop"}},
		Attrs:   nnConvAttrs,
		Summary: "Gradient of Conv2D with respect to its input, whose shape is input_sizes (int32 [4]).",
		Infer:   nnInferConv2DBackpropInput,
	})
	Register(Def{
		Name:    "Conv2DBackpropFilter",
		Remote:  true,
		Inputs:  []Arg{{Name: "input"}, {Name: "filter_sizes"}, {Name: "out_backprop"}},
		Attrs:   nnConvAttrs,
		Summary: "Gradient of Conv2D with respect to its filter, whose shape is filter_sizes (int32 [4]).",
		Infer:   nnInferConv2DBackpropFilter,
	})

	Register(Def{
		Name:    "MaxPool",
		Remote:  true,
		Inputs:  []Arg{{Name: "input"}},
		Attrs:   nnWindowAttrs,
		Summary: "Maximum over windows of input [N,H,W,C].",
		Infer:   nnInferPool,
	})
	Register(Def{
		Name:    "AvgPool",
		Remote:  true,
		Inputs:  []Arg{{Name: "value"}},
		Attrs:   nnWindowAttrs,
		Summary: "Mean over windows of value [N,H,W,C]; padding is not counted.",
		Infer:   nnInferPool,
	})
	Register(Def{
		Name:    "MaxPoolGrad",
		Remote:  true,
		Inputs:  []Arg{{Name: "orig_input"}, {Name: "orig_output"}, {Name: "grad"}},
		Attrs:   nnWindowAttrs,
		Summary: "Gradient of MaxPool: grad routed to the first maximum of each window.",
		Infer:   nnInferMaxPoolGrad,
	})
	Register(Def{
		Name:    "AvgPoolGrad",
		Remote:  true,
		Inputs:  []Arg{{Name: "orig_input_shape"}, {Name: "grad"}},
		Attrs:   nnWindowAttrs,
		Summary: "Gradient of AvgPool: grad spread evenly over each window.",
		Infer:   nnInferAvgPoolGrad,
	})

	Register(Def{
		Name:    "L2Loss",
		Remote:  true,
		Inputs:  []Arg{{Name: "t"}},
		Summary: "sum(t^2) / 2, a scalar.",
		Infer: func(c *InferContext) error {
			if err := c.RequireFloat(0); err != nil {
				return err
			}
			c.SetOutput(0, c.InputDType(0), tensor.ScalarShape())
			return nil
		},
	})
}

// nnRequireNumeric accepts the dtypes the arithmetic kernels support.
func nnRequireNumeric(c *InferContext, i int) error {
	switch dt := c.InputDType(i); dt {
	case tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64:
		return nil
	default:
		return fmt.Errorf("input %d must be float32, float64, int32 or int64, got %v", i, dt)
	}
}

func nnInferUnaryFloat(c *InferContext) error {
	if err := c.RequireFloat(0); err != nil {
		return err
	}
	return passThrough(c)
}

// nnInferSameShape is the Infer of the two-input activation gradients: both
// inputs share dtype and shape, which the output takes.
func nnInferSameShape(float bool) func(c *InferContext) error {
	return func(c *InferContext) error {
		dt, err := c.SameDTypes()
		if err != nil {
			return err
		}
		if float {
			err = c.RequireFloat(0)
		} else {
			err = nnRequireNumeric(c, 0)
		}
		if err != nil {
			return err
		}
		s, err := c.InputShape(0).Merge(c.InputShape(1))
		if err != nil {
			return fmt.Errorf("inputs must have the same shape: %v and %v", c.InputShape(0), c.InputShape(1))
		}
		c.SetOutput(0, dt, s)
		return nil
	}
}

func nnInferBiasAdd(c *InferContext) error {
	dt, err := c.SameDTypes()
	if err != nil {
		return err
	}
	if err := nnRequireNumeric(c, 0); err != nil {
		return err
	}
	x, b := c.InputShape(0), c.InputShape(1)
	if x.KnownRank() && x.Rank() < 1 {
		return fmt.Errorf("value must have rank >= 1, got shape %v", x)
	}
	if b.KnownRank() && b.Rank() != 1 {
		return fmt.Errorf("bias must be 1-D, got shape %v", b)
	}
	out := x
	if x.KnownRank() && b.KnownRank() {
		xc, bc := x.Dim(-1), b.Dim(0)
		if xc >= 0 && bc >= 0 && xc != bc {
			return fmt.Errorf("bias %v does not match the last dimension of value %v", b, x)
		}
		if xc < 0 && bc >= 0 {
			d := x.Dims()
			d[len(d)-1] = bc
			out = tensor.MakeShape(d...)
		}
	}
	c.SetOutput(0, dt, out)
	return nil
}

func nnInferSoftmax(c *InferContext) error {
	if err := c.RequireFloat(0); err != nil {
		return err
	}
	if s := c.InputShape(0); s.KnownRank() && s.Rank() < 1 {
		return fmt.Errorf("logits must have rank >= 1, got shape %v", s)
	}
	return passThrough(c)
}

func nnInferSoftmaxXent(c *InferContext) error {
	dt, err := c.SameDTypes()
	if err != nil {
		return err
	}
	if err := c.RequireFloat(0); err != nil {
		return err
	}
	for i, name := range []string{"logits", "labels"} {
		if err := c.RequireRank(i, 2); err != nil {
			return fmt.Errorf("%s must be [batch, classes]: %w", name, err)
		}
	}
	s, err := c.InputShape(0).Merge(c.InputShape(1))
	if err != nil {
		return fmt.Errorf("logits %v and labels %v must have the same shape", c.InputShape(0), c.InputShape(1))
	}
	if !s.KnownRank() {
		s = tensor.UnknownRankShape(2)
	}
	c.SetOutput(0, dt, tensor.MakeShape(s.Dim(0)))
	c.SetOutput(1, dt, s)
	return nil
}

func nnInferSparseXent(c *InferContext) error {
	if err := c.RequireFloat(0); err != nil {
		return err
	}
	if dt := c.InputDType(1); dt != tensor.Int32 && dt != tensor.Int64 {
		return fmt.Errorf("labels must be int32 or int64, got %v", dt)
	}
	if err := c.RequireRank(0, 2); err != nil {
		return fmt.Errorf("logits must be [batch, classes]: %w", err)
	}
	if err := c.RequireRank(1, 1); err != nil {
		return fmt.Errorf("labels must be [batch]: %w", err)
	}
	logits, labels := c.InputShape(0), c.InputShape(1)
	if !logits.KnownRank() {
		logits = tensor.UnknownRankShape(2)
	}
	if !labels.KnownRank() {
		labels = tensor.UnknownRankShape(1)
	}
	n, err := tensor.MakeShape(logits.Dim(0)).Merge(labels)
	if err != nil {
		return fmt.Errorf("logits %v and labels %v have different batch sizes", c.InputShape(0), c.InputShape(1))
	}
	c.SetOutput(0, c.InputDType(0), n)
	c.SetOutput(1, c.InputDType(0), tensor.MakeShape(n.Dim(0), logits.Dim(1)))
	return nil
}

// nnPair reads a two-element positive integer list attribute.
func nnPair(c *InferContext, name string) (int, int, error) {
	v := c.Ints(name)
	if len(v) != 2 || v[0] < 1 || v[1] < 1 {
		return 0, 0, fmt.Errorf("attribute %s must be two positive integers [h, w], got %v", name, v)
	}
	return v[0], v[1], nil
}

// nnImageShape checks that input i is an NHWC image batch and returns its
// shape as a known-rank shape (dimensions possibly unknown).
func nnImageShape(c *InferContext, i int, name string) (tensor.Shape, error) {
	if err := c.RequireRank(i, 4); err != nil {
		return tensor.Shape{}, fmt.Errorf("%s must be [batch, height, width, channels]: %w", name, err)
	}
	s := c.InputShape(i)
	if !s.KnownRank() {
		s = tensor.UnknownRankShape(4)
	}
	return s, nil
}

// nnWindowOutput returns the output shape [N, OH, OW, ch] of a kh x kw window
// moved over the NHWC shape in with strides sh, sw.
func nnWindowOutput(in tensor.Shape, kh, kw, sh, sw, ch int, padding string) (tensor.Shape, error) {
	oh, _, err := WindowedOutputSize(in.Dim(1), kh, sh, padding)
	if err != nil {
		return tensor.Shape{}, fmt.Errorf("input %v, window %dx%d: %w", in, kh, kw, err)
	}
	ow, _, err := WindowedOutputSize(in.Dim(2), kw, sw, padding)
	if err != nil {
		return tensor.Shape{}, fmt.Errorf("input %v, window %dx%d: %w", in, kh, kw, err)
	}
	return tensor.MakeShape(in.Dim(0), oh, ow, ch), nil
}

// nnRequireFloat32 rejects dtypes the convolution kernels do not implement.
func nnRequireFloat32(c *InferContext, idx ...int) error {
	for _, i := range idx {
		if dt := c.InputDType(i); dt != tensor.Float32 {
			return fmt.Errorf("input %d has dtype %v: convolutions support float32 only", i, dt)
		}
	}
	return nil
}

// nnConvCheck validates the attributes and the image and filter shapes of a
// convolution and returns its output shape.
func nnConvCheck(c *InferContext, in, filter tensor.Shape) (tensor.Shape, error) {
	sh, sw, err := nnPair(c, "strides")
	if err != nil {
		return tensor.Shape{}, err
	}
	if !filter.KnownRank() {
		filter = tensor.UnknownRankShape(4)
	}
	if filter.Rank() != 4 {
		return tensor.Shape{}, fmt.Errorf("filter must be [height, width, in_channels, out_channels], got shape %v", filter)
	}
	if ci, fi := in.Dim(3), filter.Dim(2); ci >= 0 && fi >= 0 && ci != fi {
		return tensor.Shape{}, fmt.Errorf("input %v and filter %v have different input channels: %d vs %d", in, filter, ci, fi)
	}
	kh, kw := filter.Dim(0), filter.Dim(1)
	padding := c.String("padding")
	if kh < 0 || kw < 0 {
		// Unknown filter size: only the padding can still be checked.
		if _, _, err := WindowedOutputSize(-1, 1, 1, padding); err != nil {
			return tensor.Shape{}, err
		}
		return tensor.MakeShape(in.Dim(0), -1, -1, filter.Dim(3)), nil
	}
	out, err := nnWindowOutput(in, kh, kw, sh, sw, filter.Dim(3), padding)
	if err != nil {
		return tensor.Shape{}, fmt.Errorf("filter %v: %w", filter, err)
	}
	return out, nil
}

func nnInferConv2D(c *InferContext) error {
	if err := nnRequireFloat32(c, 0, 1); err != nil {
		return err
	}
	in, err := nnImageShape(c, 0, "input")
	if err != nil {
		return err
	}
	out, err := nnConvCheck(c, in, c.InputShape(1))
	if err != nil {
		return err
	}
	c.SetOutput(0, tensor.Float32, out)
	return nil
}

// nnSizesInput returns the known value of the int32 [4] shape input i, an
// unknown-dimension shape when it is computed at run time.
func nnSizesInput(c *InferContext, i int, name string) (tensor.Shape, error) {
	if dt := c.InputDType(i); dt != tensor.Int32 {
		return tensor.Shape{}, fmt.Errorf("%s must be int32, got %v", name, dt)
	}
	if s := c.InputShape(i); !s.IsCompatibleWith(tensor.MakeShape(4)) {
		return tensor.Shape{}, fmt.Errorf("%s must have shape [4], got %v", name, s)
	}
	v := c.Consts[i]
	if v == nil {
		return tensor.UnknownRankShape(4), nil
	}
	d := v.Int32s()
	dims := make([]int, 4)
	for j := range dims {
		if d[j] < 0 {
			return tensor.Shape{}, fmt.Errorf("%s %v has a negative dimension", name, d)
		}
		dims[j] = int(d[j])
	}
	return tensor.MakeShape(dims...), nil
}

// nnCheckOutBackprop checks that out_backprop (input i) is what a
// convolution or pooling producing want would pass back.
func nnCheckOutBackprop(c *InferContext, i int, want tensor.Shape) error {
	got := c.InputShape(i)
	if !got.IsCompatibleWith(want) {
		return fmt.Errorf("out_backprop %v does not match the forward output shape %v", got, want)
	}
	return nil
}

func nnInferConv2DBackpropInput(c *InferContext) error {
	if err := nnRequireFloat32(c, 1, 2); err != nil {
		return err
	}
	in, err := nnSizesInput(c, 0, "input_sizes")
	if err != nil {
		return err
	}
	if err := c.RequireRank(2, 4); err != nil {
		return fmt.Errorf("out_backprop must be [batch, height, width, channels]: %w", err)
	}
	filter := c.InputShape(1)
	if filter.KnownRank() && filter.Rank() == 4 && in.Dim(3) < 0 {
		d := in.Dims()
		d[3] = filter.Dim(2)
		in = tensor.MakeShape(d...)
	}
	out, err := nnConvCheck(c, in, filter)
	if err != nil {
		return err
	}
	if err := nnCheckOutBackprop(c, 2, out); err != nil {
		return err
	}
	c.SetOutput(0, tensor.Float32, in)
	return nil
}

func nnInferConv2DBackpropFilter(c *InferContext) error {
	if err := nnRequireFloat32(c, 0, 2); err != nil {
		return err
	}
	in, err := nnImageShape(c, 0, "input")
	if err != nil {
		return err
	}
	filter, err := nnSizesInput(c, 1, "filter_sizes")
	if err != nil {
		return err
	}
	if err := c.RequireRank(2, 4); err != nil {
		return fmt.Errorf("out_backprop must be [batch, height, width, channels]: %w", err)
	}
	out, err := nnConvCheck(c, in, filter)
	if err != nil {
		return err
	}
	if err := nnCheckOutBackprop(c, 2, out); err != nil {
		return err
	}
	c.SetOutput(0, tensor.Float32, filter)
	return nil
}

// nnPoolOutput validates the pooling attributes and returns the output shape
// of pooling an input of shape in.
func nnPoolOutput(c *InferContext, in tensor.Shape) (tensor.Shape, error) {
	kh, kw, err := nnPair(c, "ksize")
	if err != nil {
		return tensor.Shape{}, err
	}
	sh, sw, err := nnPair(c, "strides")
	if err != nil {
		return tensor.Shape{}, err
	}
	return nnWindowOutput(in, kh, kw, sh, sw, in.Dim(3), c.String("padding"))
}

func nnInferPool(c *InferContext) error {
	if err := c.RequireFloat(0); err != nil {
		return err
	}
	in, err := nnImageShape(c, 0, "input")
	if err != nil {
		return err
	}
	out, err := nnPoolOutput(c, in)
	if err != nil {
		return err
	}
	c.SetOutput(0, c.InputDType(0), out)
	return nil
}

func nnInferMaxPoolGrad(c *InferContext) error {
	dt, err := c.SameDTypes()
	if err != nil {
		return err
	}
	if err := c.RequireFloat(0); err != nil {
		return err
	}
	in, err := nnImageShape(c, 0, "orig_input")
	if err != nil {
		return err
	}
	out, err := nnPoolOutput(c, in)
	if err != nil {
		return err
	}
	if !c.InputShape(1).IsCompatibleWith(out) {
		return fmt.Errorf("orig_output %v does not match the pooled shape %v of orig_input %v", c.InputShape(1), out, in)
	}
	if err := nnCheckOutBackprop(c, 2, out); err != nil {
		return err
	}
	c.SetOutput(0, dt, in)
	return nil
}

func nnInferAvgPoolGrad(c *InferContext) error {
	if err := c.RequireFloat(1); err != nil {
		return err
	}
	in, err := nnSizesInput(c, 0, "orig_input_shape")
	if err != nil {
		return err
	}
	if err := c.RequireRank(1, 4); err != nil {
		return fmt.Errorf("grad must be [batch, height, width, channels]: %w", err)
	}
	if g := c.InputShape(1); g.KnownRank() && in.Dim(3) < 0 {
		d := in.Dims()
		d[3] = g.Dim(3)
		in = tensor.MakeShape(d...)
	}
	out, err := nnPoolOutput(c, in)
	if err != nil {
		return err
	}
	if err := nnCheckOutBackprop(c, 1, out); err != nil {
		return err
	}
	c.SetOutput(0, c.InputDType(1), in)
	return nil
}
