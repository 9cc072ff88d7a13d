package cpu

import (
	"fmt"
	"slices"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/kernel/linalg"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// Convolution (through kernel/linalg's im2col + Sgemm, float32 only) and
// pooling (direct loops, float32 and float64) over NHWC images.

func init() {
	kernel.Register("Conv2D", kernel.CPU, nnConvFactory(nnConv2D))
	kernel.Register("Conv2DBackpropInput", kernel.CPU, nnConvFactory(nnConv2DBackpropInput))
	kernel.Register("Conv2DBackpropFilter", kernel.CPU, nnConvFactory(nnConv2DBackpropFilter))
	kernel.Register("MaxPool", kernel.CPU, nnPoolFactory(nnMaxPool))
	kernel.Register("AvgPool", kernel.CPU, nnPoolFactory(nnAvgPool))
	kernel.Register("MaxPoolGrad", kernel.CPU, nnPoolFactory(nnMaxPoolGrad))
	kernel.Register("AvgPoolGrad", kernel.CPU, nnPoolFactory(nnAvgPoolGrad))
}

// nnWindow holds the window attributes of a convolution or pooling node,
// read once when its kernel is built.
type nnWindow struct {
	kh, kw  int // pooling only; convolutions take them from the filter
	sh, sw  int
	padding string
}

func nnReadWindow(n *graph.Node, pool bool) (nnWindow, error) {
	var w nnWindow
	s := n.AttrInts("strides")
	if len(s) != 2 || s[0] < 1 || s[1] < 1 {
		return w, fmt.Errorf("kernel: node %s: attribute strides must be two positive integers, got %v", n, s)
	}
	w.sh, w.sw = s[0], s[1]
	if pool {
		k := n.AttrInts("ksize")
		if len(k) != 2 || k[0] < 1 || k[1] < 1 {
			return w, fmt.Errorf("kernel: node %s: attribute ksize must be two positive integers, got %v", n, k)
		}
		w.kh, w.kw = k[0], k[1]
	}
	w.padding = n.AttrString("padding")
	if w.padding != op.PaddingSame && w.padding != op.PaddingValid {
		return w, fmt.Errorf("kernel: node %s: padding %q must be SAME or VALID", n, w.padding)
	}
	return w, nil
}

func nnConvFactory(f func(c *kernel.Context, w nnWindow) error) kernel.Factory {
	return func(n *graph.Node) (kernel.Kernel, error) {
		w, err := nnReadWindow(n, false)
		if err != nil {
			return nil, err
		}
		return kernel.Func(func(c *kernel.Context) error { return f(c, w) }), nil
	}
}

func nnPoolFactory(f func(c *kernel.Context, w nnWindow) error) kernel.Factory {
	return func(n *graph.Node) (kernel.Kernel, error) {
		w, err := nnReadWindow(n, true)
		if err != nil {
			return nil, err
		}
		return kernel.Func(func(c *kernel.Context) error { return f(c, w) }), nil
	}
}

// nnShapeArg reads an int32 [4] shape input (input_sizes, filter_sizes,
// orig_input_shape).
func nnShapeArg(c *kernel.Context, i int, name string) ([]int, error) {
	t := c.Input(i)
	if t.DType() != tensor.Int32 || !slices.Equal(t.Shape(), []int{4}) {
		return nil, c.Errorf("%s must be int32 [4], got %v%v", name, t.DType(), t.Shape())
	}
	d := make([]int, 4)
	for j, v := range t.Int32s() {
		if v < 0 {
			return nil, c.Errorf("%s %v has a negative dimension", name, t.Int32s())
		}
		d[j] = int(v)
	}
	return d, nil
}

// nnConvParams checks the shapes of a convolution of an input of shape in
// by a filter of shape filter and returns its parameters (zero-sized
// dimensions allowed: ok is false when there is nothing to compute) and
// output shape.
func nnConvParams(c *kernel.Context, w nnWindow, in, filter []int) (p linalg.ConvParams, out []int, ok bool, err error) {
	if len(in) != 4 || len(filter) != 4 {
		return p, nil, false, c.Errorf("input %v must be [batch, height, width, channels] and filter %v [height, width, in_channels, out_channels]", in, filter)
	}
	if in[3] != filter[2] {
		return p, nil, false, c.Errorf("input %v and filter %v have different input channels: %d vs %d", in, filter, in[3], filter[2])
	}
	oh, _, err := op.WindowedOutputSize(in[1], filter[0], w.sh, w.padding)
	if err != nil {
		return p, nil, false, c.Errorf("input %v, filter %v: %w", in, filter, err)
	}
	ow, _, err := op.WindowedOutputSize(in[2], filter[1], w.sw, w.padding)
	if err != nil {
		return p, nil, false, c.Errorf("input %v, filter %v: %w", in, filter, err)
	}
	out = []int{in[0], oh, ow, filter[3]}
	if tensor.NumElements(in) == 0 || tensor.NumElements(filter) == 0 || tensor.NumElements(out) == 0 {
		return p, out, false, nil
	}
	p, err = linalg.NewConvParams(in[0], in[1], in[2], in[3], filter[0], filter[1], filter[3], w.sh, w.sw, w.padding == op.PaddingSame)
	if err != nil {
		return p, nil, false, c.Errorf("input %v, filter %v: %w", in, filter, err)
	}
	return p, out, true, nil
}

func nnRequireF32(c *kernel.Context, idx ...int) error {
	for _, i := range idx {
		if dt := c.Input(i).DType(); dt != tensor.Float32 {
			return c.Errorf("input %d has dtype %v: convolutions support float32 only", i, dt)
		}
	}
	return nil
}

func nnConv2D(c *kernel.Context, w nnWindow) error {
	if err := nnRequireF32(c, 0, 1); err != nil {
		return err
	}
	in, filter := c.Input(0), c.Input(1)
	p, out, ok, err := nnConvParams(c, w, in.Shape(), filter.Shape())
	if err != nil {
		return err
	}
	y := c.Alloc(0, tensor.Float32, out...)
	if ok {
		linalg.Conv2D(p, in.Float32s(), filter.Float32s(), y.Float32s())
	}
	return nil
}

func nnConv2DBackpropInput(c *kernel.Context, w nnWindow) error {
	if err := nnRequireF32(c, 1, 2); err != nil {
		return err
	}
	sizes, err := nnShapeArg(c, 0, "input_sizes")
	if err != nil {
		return err
	}
	filter, dy := c.Input(1), c.Input(2)
	p, out, ok, err := nnConvParams(c, w, sizes, filter.Shape())
	if err != nil {
		return err
	}
	if !slices.Equal(dy.Shape(), out) {
		return c.Errorf("out_backprop %v does not match the output shape %v of input %v and filter %v", dy.Shape(), out, sizes, filter.Shape())
	}
	dx := c.Alloc(0, tensor.Float32, sizes...)
	if ok {
		linalg.Conv2DBackpropInput(p, filter.Float32s(), dy.Float32s(), dx.Float32s())
	}
	return nil
}

func nnConv2DBackpropFilter(c *kernel.Context, w nnWindow) error {
	if err := nnRequireF32(c, 0, 2); err != nil {
		return err
	}
	sizes, err := nnShapeArg(c, 1, "filter_sizes")
	if err != nil {
		return err
	}
	in, dy := c.Input(0), c.Input(2)
	p, out, ok, err := nnConvParams(c, w, in.Shape(), sizes)
	if err != nil {
		return err
	}
	if !slices.Equal(dy.Shape(), out) {
		return c.Errorf("out_backprop %v does not match the output shape %v of input %v and filter %v", dy.Shape(), out, in.Shape(), sizes)
	}
	df := c.Alloc(0, tensor.Float32, sizes...)
	if ok {
		linalg.Conv2DBackpropFilter(p, in.Float32s(), dy.Float32s(), df.Float32s())
	}
	return nil
}

// ---- Pooling ----

// nnPool is the geometry of one pooling: input [N,H,W,C], output
// [N,OH,OW,C], window KH x KW moved by SH, SW after PadTop/PadLeft implicit
// rows/columns that never take part (max ignores them, mean does not count
// them).
type nnPool struct {
	N, H, W, C      int
	KH, KW, SH, SW  int
	OH, OW          int
	PadTop, PadLeft int
}

func nnPoolSetup(c *kernel.Context, w nnWindow, in []int) (nnPool, error) {
	if len(in) != 4 {
		return nnPool{}, c.Errorf("input %v must be [batch, height, width, channels]", in)
	}
	p := nnPool{N: in[0], H: in[1], W: in[2], C: in[3], KH: w.kh, KW: w.kw, SH: w.sh, SW: w.sw}
	var err error
	if p.OH, p.PadTop, err = op.WindowedOutputSize(p.H, p.KH, p.SH, w.padding); err != nil {
		return p, c.Errorf("input %v, window %dx%d: %w", in, p.KH, p.KW, err)
	}
	if p.OW, p.PadLeft, err = op.WindowedOutputSize(p.W, p.KW, p.SW, w.padding); err != nil {
		return p, c.Errorf("input %v, window %dx%d: %w", in, p.KH, p.KW, err)
	}
	return p, nil
}

func (p nnPool) outShape() []int { return []int{p.N, p.OH, p.OW, p.C} }

// rows returns the input rows [h0, h1) of output row oh, clipped to the
// image. The range is never empty: SAME padding is smaller than the window.
func (p nnPool) rows(oh int) (h0, h1 int) {
	h0 = oh*p.SH - p.PadTop
	return max(h0, 0), min(h0+p.KH, p.H)
}

// cols is rows for output column ow.
func (p nnPool) cols(ow int) (w0, w1 int) {
	w0 = ow*p.SW - p.PadLeft
	return max(w0, 0), min(w0+p.KW, p.W)
}

// nnPoolFloat dispatches a pooling loop on the dtype of input i.
func nnPoolFloat(c *kernel.Context, i int, f32, f64 func()) error {
	switch dt := c.Input(i).DType(); dt {
	case tensor.Float32:
		f32()
	case tensor.Float64:
		f64()
	default:
		return c.Errorf("unsupported dtype %v: want float32 or float64", dt)
	}
	return nil
}

func nnMaxPool(c *kernel.Context, w nnWindow) error {
	x := c.Input(0)
	p, err := nnPoolSetup(c, w, x.Shape())
	if err != nil {
		return err
	}
	// Every output element is written.
	y := c.AllocUninit(0, x.DType(), p.outShape()...)
	return nnPoolFloat(c, 0,
		func() {
			if p.tiles2x2() {
				nnMaxPool2x2(p, x.Float32s(), y.Float32s())
				return
			}
			nnMaxPoolT(p, x.Float32s(), y.Float32s())
		},
		func() { nnMaxPoolT(p, x.Float64s(), y.Float64s()) })
}

// tiles2x2 reports whether p is a 2x2, stride-2 pooling whose windows tile
// the input exactly (no padding, no clipped edge) over a multiple of 8
// channels, as in the reference CNN: the vectorised float32 path.
func (p nnPool) tiles2x2() bool {
	return poolHasAVX && p.KH == 2 && p.KW == 2 && p.SH == 2 && p.SW == 2 && p.PadTop == 0 && p.PadLeft == 0 &&
		p.H == 2*p.OH && p.W == 2*p.OW && p.OW > 0 && p.C > 0 && p.C%8 == 0
}

// nnMaxPool2x2 is nnMaxPoolT for tiles2x2 poolings, one output row at a
// time. Output row r reads input rows 2r and 2r+1 (H is 2*OH).
func nnMaxPool2x2(p nnPool, x, y []float32) {
	in, out := p.W*p.C, p.OW*p.C
	kernel.ParallelFor(p.N*p.OH, 2*in, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			x0 := x[2*r*in : (2*r+2)*in]
			poolMax2x2Row(x0, x0[in:], y[r*out:(r+1)*out], p.OW, p.C)
		}
	})
}

// nnMaxPoolGrad2x2 is nnMaxPoolGradT for tiles2x2 poolings. The windows do
// not overlap and cover the input, so every dx element is written once.
func nnMaxPoolGrad2x2(p nnPool, x, dy, dx []float32) {
	in, out := p.W*p.C, p.OW*p.C
	kernel.ParallelFor(p.N*p.OH, 4*in, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			x0, dx0 := x[2*r*in:(2*r+2)*in], dx[2*r*in:(2*r+2)*in]
			poolMaxGrad2x2Row(x0, x0[in:], dy[r*out:(r+1)*out], dx0, dx0[in:], p.OW, p.C)
		}
	})
}

// nnMaxPoolT computes MaxPool with the channel loop innermost, so that every
// window element is one contiguous sweep over C values. Output rows are
// independent, so cores split the N*OH rows.
func nnMaxPoolT[T nnFloat](p nnPool, x, y []T) {
	C := p.C
	kernel.ParallelFor(p.N*p.OH, p.OW*p.KH*p.KW*C, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			n, oh := r/p.OH, r%p.OH
			h0, h1 := p.rows(oh)
			for ow := range p.OW {
				w0, w1 := p.cols(ow)
				out := y[(r*p.OW+ow)*C : (r*p.OW+ow+1)*C]
				copy(out, x[((n*p.H+h0)*p.W+w0)*C:][:C])
				for ih := h0; ih < h1; ih++ {
					for iw := w0; iw < w1; iw++ {
						src := x[((n*p.H+ih)*p.W+iw)*C:][:C]
						for i, v := range src {
							if v > out[i] {
								out[i] = v
							}
						}
					}
				}
			}
		}
	})
}

func nnAvgPool(c *kernel.Context, w nnWindow) error {
	x := c.Input(0)
	p, err := nnPoolSetup(c, w, x.Shape())
	if err != nil {
		return err
	}
	y := c.Alloc(0, x.DType(), p.outShape()...)
	return nnPoolFloat(c, 0,
		func() { nnAvgPoolT(p, x.Float32s(), y.Float32s()) },
		func() { nnAvgPoolT(p, x.Float64s(), y.Float64s()) })
}

func nnAvgPoolT[T nnFloat](p nnPool, x, y []T) {
	C := p.C
	kernel.ParallelFor(p.N*p.OH, p.OW*p.KH*p.KW*C, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			n, oh := r/p.OH, r%p.OH
			h0, h1 := p.rows(oh)
			for ow := range p.OW {
				w0, w1 := p.cols(ow)
				out := y[(r*p.OW+ow)*C : (r*p.OW+ow+1)*C]
				for ih := h0; ih < h1; ih++ {
					for iw := w0; iw < w1; iw++ {
						src := x[((n*p.H+ih)*p.W+iw)*C:][:C]
						for i, v := range src {
							out[i] += v
						}
					}
				}
				inv := 1 / T((h1-h0)*(w1-w0))
				for i := range out {
					out[i] *= inv
				}
			}
		}
	})
}

func nnMaxPoolGrad(c *kernel.Context, w nnWindow) error {
	x, y, dy := c.Input(0), c.Input(1), c.Input(2)
	if x.DType() != y.DType() || x.DType() != dy.DType() {
		return c.Errorf("orig_input, orig_output and grad must share one dtype, got %v, %v, %v", x.DType(), y.DType(), dy.DType())
	}
	p, err := nnPoolSetup(c, w, x.Shape())
	if err != nil {
		return err
	}
	if !slices.Equal(y.Shape(), p.outShape()) || !slices.Equal(dy.Shape(), p.outShape()) {
		return c.Errorf("orig_output %v and grad %v must have the pooled shape %v of orig_input %v", y.Shape(), dy.Shape(), p.outShape(), x.Shape())
	}
	if x.DType() == tensor.Float32 && p.tiles2x2() {
		dx := c.AllocUninit(0, x.DType(), x.Shape()...)
		nnMaxPoolGrad2x2(p, x.Float32s(), dy.Float32s(), dx.Float32s())
		return nil
	}
	dx := c.Alloc(0, x.DType(), x.Shape()...)
	return nnPoolFloat(c, 0,
		func() { nnMaxPoolGradT(p, x.Float32s(), dy.Float32s(), dx.Float32s()) },
		func() { nnMaxPoolGradT(p, x.Float64s(), dy.Float64s(), dx.Float64s()) })
}

// nnPoolBlock is how many channels MaxPoolGrad tracks at once in arrays on
// the stack.
const nnPoolBlock = 64

// nnMaxPoolGradT routes each output gradient to the first maximum of its
// window (row-major scan, as TensorFlow's CPU kernel does). It sweeps each
// window element over a block of contiguous channels, keeping the running
// maxima and their positions on the stack. Windows of one image overlap when
// the stride is smaller than the window, so cores split the batch, whose
// images are disjoint.
func nnMaxPoolGradT[T nnFloat](p nnPool, x, dy, dx []T) {
	C := p.C
	img := p.H * p.W * C
	kernel.ParallelFor(p.N, p.OH*p.OW*p.KH*p.KW*C, func(lo, hi int) {
		var best [nnPoolBlock]T
		var at [nnPoolBlock]int
		for n := lo; n < hi; n++ {
			xi, dxi := x[n*img:(n+1)*img], dx[n*img:(n+1)*img]
			for oh := range p.OH {
				h0, h1 := p.rows(oh)
				for ow := range p.OW {
					w0, w1 := p.cols(ow)
					g := dy[((n*p.OH+oh)*p.OW+ow)*C:][:C]
					for c0 := 0; c0 < C; c0 += nnPoolBlock {
						w := min(nnPoolBlock, C-c0)
						bv, ba := best[:w], at[:w]
						first := (h0*p.W+w0)*C + c0
						copy(bv, xi[first:first+w])
						for i := range ba {
							ba[i] = first + i
						}
						for ih := h0; ih < h1; ih++ {
							for iw := w0; iw < w1; iw++ {
								base := (ih*p.W+iw)*C + c0
								for i, v := range xi[base : base+w] {
									if v > bv[i] {
										bv[i], ba[i] = v, base+i
									}
								}
							}
						}
						for i, j := range ba {
							dxi[j] += g[c0+i]
						}
					}
				}
			}
		}
	})
}

func nnAvgPoolGrad(c *kernel.Context, w nnWindow) error {
	sizes, err := nnShapeArg(c, 0, "orig_input_shape")
	if err != nil {
		return err
	}
	dy := c.Input(1)
	p, err := nnPoolSetup(c, w, sizes)
	if err != nil {
		return err
	}
	if !slices.Equal(dy.Shape(), p.outShape()) {
		return c.Errorf("grad %v must have the pooled shape %v of orig_input_shape %v", dy.Shape(), p.outShape(), sizes)
	}
	dx := c.Alloc(0, dy.DType(), sizes...)
	return nnPoolFloat(c, 1,
		func() { nnAvgPoolGradT(p, dy.Float32s(), dx.Float32s()) },
		func() { nnAvgPoolGradT(p, dy.Float64s(), dx.Float64s()) })
}

// nnAvgPoolGradT spreads each output gradient evenly over its window; cores
// split the batch because windows of one image may overlap.
func nnAvgPoolGradT[T nnFloat](p nnPool, dy, dx []T) {
	C := p.C
	img := p.H * p.W * C
	kernel.ParallelFor(p.N, p.OH*p.OW*p.KH*p.KW*C, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			dxi := dx[n*img : (n+1)*img]
			for oh := range p.OH {
				h0, h1 := p.rows(oh)
				for ow := range p.OW {
					w0, w1 := p.cols(ow)
					g := dy[((n*p.OH+oh)*p.OW+ow)*C:][:C]
					inv := 1 / T((h1-h0)*(w1-w0))
					for ih := h0; ih < h1; ih++ {
						for iw := w0; iw < w1; iw++ {
							d := dxi[(ih*p.W+iw)*C:][:C]
							for i, v := range g {
								d[i] += v * inv
							}
						}
					}
				}
			}
		}
	})
}
