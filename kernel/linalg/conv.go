package linalg

import (
	"errors"
	"fmt"
	"runtime"
)

// ConvParams describes a 2-D convolution with NHWC input [N,H,W,C], HWIO
// filter [KH,KW,C,Cout] and NHWC output [N,OH,OW,Cout]. Build it with
// NewConvParams; a hand-built value must satisfy the same invariants.
type ConvParams struct {
	N, H, W, C       int // batch, input height, width, channels
	KH, KW, Cout     int // filter height, width, output channels
	StrideH, StrideW int
	PadTop, PadLeft  int // implicit zero rows/columns before the input
	OH, OW           int // output height and width
}

// ErrConvParams is wrapped by every error NewConvParams returns.
var ErrConvParams = errors.New("linalg: invalid convolution parameters")

// NewConvParams computes output size and padding with TensorFlow semantics.
// SAME: OH = ceil(H/strideH), pad_total = max((OH-1)*strideH+KH-H, 0) and
// PadTop = pad_total/2 (the extra row, if any, goes at the bottom); likewise
// for width. VALID: no padding, OH = ceil((H-KH+1)/strideH).
func NewConvParams(n, h, w, c, kh, kw, cout, strideH, strideW int, same bool) (ConvParams, error) {
	p := ConvParams{N: n, H: h, W: w, C: c, KH: kh, KW: kw, Cout: cout, StrideH: strideH, StrideW: strideW}
	if n < 1 || h < 1 || w < 1 || c < 1 || kh < 1 || kw < 1 || cout < 1 || strideH < 1 || strideW < 1 {
		return p, fmt.Errorf("%w: all sizes and strides must be positive: %+v", ErrConvParams, p)
	}
	if same {
		p.OH, p.PadTop = samePad(h, kh, strideH)
		p.OW, p.PadLeft = samePad(w, kw, strideW)
		return p, nil
	}
	if kh > h || kw > w {
		return p, fmt.Errorf("%w: VALID filter %dx%d larger than input %dx%d", ErrConvParams, kh, kw, h, w)
	}
	p.OH = (h-kh)/strideH + 1
	p.OW = (w-kw)/strideW + 1
	return p, nil
}

func samePad(in, k, stride int) (out, before int) {
	out = ceilDiv(in, stride)
	return out, max((out-1)*stride+k-in, 0) / 2
}

// FLOPs returns the multiply-add count times two of one forward pass (the
// backward passes cost the same).
func (p ConvParams) FLOPs() float64 {
	return 2 * float64(p.N) * float64(p.OH*p.OW) * float64(p.KH*p.KW*p.C) * float64(p.Cout)
}

func (p ConvParams) check(name string, in, filter, out int) {
	if p.N < 1 || p.OH < 1 || p.OW < 1 || p.C < 1 || p.Cout < 1 || p.KH < 1 || p.KW < 1 || p.StrideH < 1 || p.StrideW < 1 {
		panic(fmt.Sprintf("linalg: %s: invalid params %+v", name, p))
	}
	if in < p.N*p.H*p.W*p.C || filter < p.KH*p.KW*p.C*p.Cout || out < p.N*p.OH*p.OW*p.Cout {
		panic(fmt.Sprintf("linalg: %s: slices too short for %+v: input %d, filter %d, output %d", name, p, in, filter, out))
	}
}

// Conv2D computes output = conv(input, filter); output is overwritten.
// It is the product of the patch matrix [images*OH*OW, KH*KW*C] and the
// filter seen as [KH*KW*C, Cout], which is exactly the HWIO layout: an
// implicit GEMM on the avx2 and avx512 backends, else one Sgemm per chunk
// of images (im2col). Slices are borrowed for the call only; safe for
// concurrent use on distinct outputs.
func Conv2D(p ConvParams, input, filter, output []float32) {
	conv2D(Default(), p, input, filter, output)
}

// Conv2DBackpropInput computes dInput, the gradient of the loss with respect
// to the input, from dOut (shaped like the output); dInput is overwritten.
func Conv2DBackpropInput(p ConvParams, filter, dOut, dInput []float32) {
	conv2DBackpropInput(Default(), p, filter, dOut, dInput)
}

// Conv2DBackpropFilter computes dFilter, the gradient of the loss with respect
// to the filter, from input and dOut; dFilter is overwritten.
func Conv2DBackpropFilter(p ConvParams, input, dOut, dFilter []float32) {
	conv2DBackpropFilter(Default(), p, input, dOut, dFilter)
}

// maxColElems bounds the im2col buffer (8 MiB): large enough that each Sgemm
// has thousands of rows, small enough to stay out of memory pressure for
// big batches.
const maxColElems = 1 << 21

// pointwise reports whether the patch matrix is the input itself (1x1
// filter, stride 1, no padding), so no im2col copy is needed.
func (p ConvParams) pointwise() bool {
	return p.KH == 1 && p.KW == 1 && p.StrideH == 1 && p.StrideW == 1 && p.OH == p.H && p.OW == p.W && p.PadTop == 0 && p.PadLeft == 0
}

// chunk returns how many images go into one im2col buffer.
func (p ConvParams) chunk() int {
	per := p.OH * p.OW * p.KH * p.KW * p.C
	return max(1, min(p.N, maxColElems/per))
}

func conv2D(be Backend, p ConvParams, input, filter, output []float32) {
	p.check("Conv2D", len(input), len(filter), len(output))
	kkc, rowsPer := p.KH*p.KW*p.C, p.OH*p.OW
	if p.pointwise() {
		be.Sgemm(false, false, p.N*rowsPer, p.Cout, kkc, 1, input, kkc, filter, p.Cout, 0, output, p.Cout)
		return
	}
	if kn := p.direct(be, false); kn != nil {
		convForwardDirect(kn, p, input, filter, output)
		return
	}
	chunk := p.chunk()
	col := getScratch(chunk * rowsPer * kkc)
	defer putScratch(col)
	for n0 := 0; n0 < p.N; n0 += chunk {
		nb := min(chunk, p.N-n0)
		parallelFor(nb, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				p.im2col(input, n0+i, (*col)[i*rowsPer*kkc:(i+1)*rowsPer*kkc])
			}
		})
		be.Sgemm(false, false, nb*rowsPer, p.Cout, kkc, 1, *col, kkc, filter, p.Cout, 0, output[n0*rowsPer*p.Cout:], p.Cout)
	}
}

func conv2DBackpropInput(be Backend, p ConvParams, filter, dOut, dInput []float32) {
	p.check("Conv2DBackpropInput", len(dInput), len(filter), len(dOut))
	kkc, rowsPer := p.KH*p.KW*p.C, p.OH*p.OW
	if p.pointwise() {
		be.Sgemm(false, true, p.N*rowsPer, kkc, p.Cout, 1, dOut, p.Cout, filter, p.Cout, 0, dInput, kkc)
		return
	}
	if kn := p.direct(be, true); kn != nil {
		convBackpropInputDirect(kn, p, filter, dOut, dInput)
		return
	}
	chunk := p.chunk()
	col := getScratch(chunk * rowsPer * kkc)
	defer putScratch(col)
	img := p.H * p.W * p.C
	for n0 := 0; n0 < p.N; n0 += chunk {
		nb := min(chunk, p.N-n0)
		// dCol = dOut * filter^T, then scatter-add the patches back (col2im).
		be.Sgemm(false, true, nb*rowsPer, kkc, p.Cout, 1, dOut[n0*rowsPer*p.Cout:], p.Cout, filter, p.Cout, 0, *col, kkc)
		parallelFor(nb, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				dst := dInput[(n0+i)*img : (n0+i+1)*img]
				clear(dst)
				p.col2im((*col)[i*rowsPer*kkc:(i+1)*rowsPer*kkc], dst)
			}
		})
	}
}

func conv2DBackpropFilter(be Backend, p ConvParams, input, dOut, dFilter []float32) {
	p.check("Conv2DBackpropFilter", len(input), len(dFilter), len(dOut))
	kkc, rowsPer := p.KH*p.KW*p.C, p.OH*p.OW
	if p.pointwise() {
		be.Sgemm(true, false, kkc, p.Cout, p.N*rowsPer, 1, input, kkc, dOut, p.Cout, 0, dFilter, p.Cout)
		return
	}
	if kn := p.direct(be, false); kn != nil {
		convBackpropFilterDirect(kn, p, input, dOut, dFilter)
		return
	}
	chunk := p.chunk()
	col := getScratch(chunk * rowsPer * kkc)
	defer putScratch(col)
	for n0 := 0; n0 < p.N; n0 += chunk {
		nb := min(chunk, p.N-n0)
		parallelFor(nb, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				p.im2col(input, n0+i, (*col)[i*rowsPer*kkc:(i+1)*rowsPer*kkc])
			}
		})
		// dFilter (+)= col^T * dOut; the first chunk overwrites.
		var beta float32
		if n0 > 0 {
			beta = 1
		}
		be.Sgemm(true, false, kkc, p.Cout, nb*rowsPer, 1, *col, kkc, dOut[n0*rowsPer*p.Cout:], p.Cout, beta, dFilter, p.Cout)
	}
}

// kwSpan returns, for output column ow, the first filter column whose input
// column is inside the image, the end of that range, and the input column
// of filter column 0 (possibly negative).
func (p ConvParams) kwSpan(ow int) (k0, k1, iw0 int) {
	iw0 = ow*p.StrideW - p.PadLeft
	return max(0, -iw0), min(p.KW, p.W-iw0), iw0
}

// im2col writes the OH*OW x KH*KW*C patch matrix of image n into col. For a
// fixed filter row the KW*C patch values are contiguous in NHWC input, so
// each (oh, ow, kh) is one copy clipped at the image border.
func (p ConvParams) im2col(input []float32, n int, col []float32) {
	c, kwc := p.C, p.KW*p.C
	kkc := p.KH * kwc
	img := input[n*p.H*p.W*c : (n+1)*p.H*p.W*c]
	r := 0
	for oh := range p.OH {
		ih0 := oh*p.StrideH - p.PadTop
		for ow := range p.OW {
			row := col[r*kkc : (r+1)*kkc]
			r++
			k0, k1, iw0 := p.kwSpan(ow)
			for kh := range p.KH {
				dst := row[kh*kwc : (kh+1)*kwc]
				ih := ih0 + kh
				if ih < 0 || ih >= p.H || k0 >= k1 {
					for j := range dst {
						dst[j] = 0
					}
					continue
				}
				src := img[(ih*p.W+iw0+k0)*c : (ih*p.W+iw0+k1)*c]
				if kwc > 32 {
					clear(dst[:k0*c])
					copy(dst[k0*c:k1*c], src)
					clear(dst[k1*c:])
					continue
				}
				// Few channels (the first layer has C=1): element loops beat
				// three runtime calls per span.
				for j := range k0 * c {
					dst[j] = 0
				}
				for j, v := range src {
					dst[k0*c+j] = v
				}
				for j := k1 * c; j < kwc; j++ {
					dst[j] = 0
				}
			}
		}
	}
}

// col2im adds the patch matrix col back into one image's gradient dst
// (the adjoint of im2col).
func (p ConvParams) col2im(col, dst []float32) {
	c, kwc := p.C, p.KW*p.C
	kkc := p.KH * kwc
	r := 0
	for oh := range p.OH {
		ih0 := oh*p.StrideH - p.PadTop
		for ow := range p.OW {
			row := col[r*kkc : (r+1)*kkc]
			r++
			k0, k1, iw0 := p.kwSpan(ow)
			if k0 >= k1 {
				continue
			}
			for kh := range p.KH {
				ih := ih0 + kh
				if ih < 0 || ih >= p.H {
					continue
				}
				src := row[kh*kwc+k0*c : kh*kwc+k1*c]
				d := dst[(ih*p.W+iw0+k0)*c : (ih*p.W+iw0+k1)*c]
				for j, v := range src {
					d[j] += v
				}
			}
		}
	}
}

// parallelFor runs f over [0, n) split into contiguous ranges, one per
// processor, on the pool; with one processor or n == 1 it runs inline.
func parallelFor(n int, f func(lo, hi int)) {
	Parallel(n, runtime.GOMAXPROCS(0), RangeFunc(f))
}
