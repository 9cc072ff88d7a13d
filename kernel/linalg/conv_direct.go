package linalg

import (
	"runtime"
	"sync"
)

// Implicit-GEMM convolution: the patch matrix of im2col is never written.
// A micro-kernel that gathers its A operand in place (convKernel) reads the
// patches straight from a zero-padded copy of the input, in which every
// filter row of a patch is one contiguous run of KW*C values and the
// padding needs no special case. On the reference CNN's second layer the
// im2col buffer is 31 MB per pass, written and read back again; the padded
// copy is 2 MB.
//
// The three passes map onto the same kernel:
//   - forward: rows are output positions, k runs over (kh, kw*C+c) as KH
//     segments of KW*C contiguous values, B is the packed filter;
//   - input gradient (stride 1): the forward pass of the output gradient,
//     padded the other way, by the filter flipped in space with its channel
//     axes swapped;
//   - filter gradient: rows are the filter taps (kh, kw, c), k runs over the
//     output positions of an image as OH segments of OW steps, B is the
//     packed output gradient; images are split across cores into private
//     accumulators that are summed at the end.

// convOffsPool holds the tap offsets of the filter gradient (a few hundred
// ints; scratch.go keeps the float buffers).
var convOffsPool sync.Pool

func getOffs(n int) *[]int {
	bp, _ := convOffsPool.Get().(*[]int)
	if bp == nil {
		bp = new([]int)
	}
	if cap(*bp) < n {
		*bp = make([]int, n)
	}
	*bp = (*bp)[:n]
	return bp
}

// convGather describes the A operand of one micro-tile: element (r, s, l)
// of the mr x nseg*seglen sliver is a[rows[r] + s*segstride + l*csa].
type convGather struct {
	a                            []float32
	rows                         [convMaxMR]int
	csa, seglen, nseg, segstride int
}

// convKernel is a micro-kernel that gathers its A operand in place, and
// the tile it computes.
type convKernel struct {
	mr, nr int
	// micro computes the mr x nr tile C = A*B + beta*C with A gathered as
	// g says (its first mr rows) and B packed nr wide (nr values per k
	// step); beta == 0 overwrites C. It writes only the first mm rows and
	// nn columns of C, and c need hold no more.
	micro func(g *convGather, b, c []float32, ldc int, beta float32, mm, nn int)
}

// convKernels pairs the Backends whose convolutions run as implicit GEMMs
// with their kernel; set at init by the SIMD paths (avx2: 6x16, avx512:
// 10x32), so that DISTFLOW_SIMD picks the convolutions' kernel with the
// GEMM's.
var convKernels []struct {
	be Backend
	k  *convKernel
}

// convKernelOf returns the implicit-GEMM kernel of be, or nil.
func convKernelOf(be Backend) *convKernel {
	for _, e := range convKernels {
		if e.be == be {
			return e.k
		}
	}
	return nil
}

// convPadElems bounds the padded copy of the input, as maxColElems bounds
// the im2col buffer; a variable so that tests can force several chunks.
var convPadElems = maxColElems

const (
	// convMaxMR bounds the height of every convolution tile.
	convMaxMR = 10
	// convMinC is the fewest input channels for which the input gradient
	// is computed directly: it computes them in tiles 16 or 32 wide (the
	// first layer's C=1 ran at a tenth of the im2col path's speed).
	convMinC = 16
	// convKC bounds the k steps of one micro-kernel call, so that the
	// B sliver it streams (16 KiB 16 wide, 32 KiB 32 wide) stays in L1
	// or L2 across row tiles.
	convKC = 256
	// convTiles is how many row tiles share one pass over the B slivers.
	convTiles = 16
)

// direct returns the kernel with which the convolutions of p on backend be
// run as an implicit GEMM, or nil when they lower to Sgemm. The input
// gradient needs stride 1 (a strided one would gather from a dilated
// gradient) and at least convMinC input channels.
func (p ConvParams) direct(be Backend, backpropInput bool) *convKernel {
	if backpropInput && (p.StrideH != 1 || p.StrideW != 1 || p.C < convMinC) {
		return nil
	}
	return convKernelOf(be)
}

// paddedDims returns the height and width of an image of p with its
// padding made explicit: exactly the rows and columns some window reads.
func (p ConvParams) paddedDims() (hp, wp int) {
	return (p.OH-1)*p.StrideH + p.KH, (p.OW-1)*p.StrideW + p.KW
}

// padImage writes image n of input, zero-padded, into dst (hp*wp*C values).
func (p ConvParams) padImage(input []float32, n int, dst []float32) {
	hp, wp := p.paddedDims()
	c := p.C
	x0, x1 := min(p.PadLeft, wp), min(wp, p.PadLeft+p.W)
	for y := range hp {
		row := dst[y*wp*c : (y+1)*wp*c]
		iy := y - p.PadTop
		if iy < 0 || iy >= p.H || x0 >= x1 {
			clear(row)
			continue
		}
		clear(row[:x0*c])
		copy(row[x0*c:x1*c], input[((n*p.H+iy)*p.W)*c:])
		clear(row[x1*c:])
	}
}

// mergeTile writes the valid mm x nn part of the tile t (row stride nr) to
// c (row stride ldc): C = T + beta*C, for beta 0 or 1.
func mergeTile(t []float32, nr int, c []float32, ldc, mm, nn int, beta float32) {
	for i := range mm {
		dst, src := c[i*ldc:i*ldc+nn], t[i*nr:i*nr+nn]
		if beta == 0 {
			copy(dst, src)
			continue
		}
		for j, v := range src {
			dst[j] += v
		}
	}
}

// tile runs the micro-kernel on the tile of c at row r0 and column s0 of
// an m x n result with row stride ldc.
func (k *convKernel) tile(g *convGather, b, c []float32, ldc, r0, s0, m, n int, beta float32) {
	k.micro(g, b, c[r0*ldc+s0:], ldc, beta, min(k.mr, m-r0), min(k.nr, n-s0))
}

// convForwardDirect is Conv2D as an implicit GEMM with kernel kn: output
// (M x Cout, M = N*OH*OW) = patches (M x KH*KW*C) times filter (KH*KW*C x
// Cout).
func convForwardDirect(kn *convKernel, p ConvParams, input, filter, output []float32) {
	hp, wp := p.paddedDims()
	img, kwc, kkc := hp*wp*p.C, p.KW*p.C, p.KH*p.KW*p.C
	mr, nr := kn.mr, kn.nr
	// The padded copy is bounded like im2col's buffer: a chunk of images at
	// a time (the whole batch of the reference CNN).
	chunk := max(1, min(p.N, convPadElems/img))
	pad := getScratch(chunk * img)
	defer putScratch(pad)
	slivers := ceilDiv(p.Cout, nr)
	packed := getScratch(slivers * nr * kkc)
	defer putScratch(packed)
	packB(nr, false, filter, p.Cout, 0, kkc, 0, p.Cout, *packed)
	segs := max(1, convKC/kwc) // filter rows per micro-kernel call
	for n0 := 0; n0 < p.N; n0 += chunk {
		nb := min(chunk, p.N-n0)
		parallelFor(nb, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				p.padImage(input, n0+i, (*pad)[i*img:(i+1)*img])
			}
		})
		m := nb * p.OH * p.OW
		out := output[n0*p.OH*p.OW*p.Cout:]
		tiles := ceilDiv(m, mr)
		Parallel(ceilDiv(tiles, convTiles), 4*runtime.GOMAXPROCS(0), RangeFunc(func(lo, hi int) {
			var offs [convTiles * convMaxMR]int
			g := convGather{csa: 1, seglen: kwc, segstride: wp * p.C}
			for t0 := lo * convTiles; t0 < min(hi*convTiles, tiles); t0 += convTiles {
				t1 := min(t0+convTiles, tiles)
				// Where each row's patch starts in the padded input; rows
				// past the end repeat the last one (computed, not stored).
				// Counted, not divided out per row: three divisions a row
				// cost a fifth of the first layer's forward pass (k = 25).
				q := t0 * mr
				n, oh, ow := q/(p.OH*p.OW), q/p.OW%p.OH, q%p.OW
				for i := range (t1 - t0) * mr {
					if q+i >= m {
						offs[i] = offs[i-1]
						continue
					}
					offs[i] = n*img + (oh*p.StrideH*wp+ow*p.StrideW)*p.C
					if ow++; ow == p.OW {
						ow = 0
						if oh++; oh == p.OH {
							oh = 0
							n++
						}
					}
				}
				for s := range slivers {
					for kh := 0; kh < p.KH; kh += segs {
						g.a, g.nseg = (*pad)[kh*wp*p.C:nb*img], min(segs, p.KH-kh)
						b := (*packed)[(s*kkc+kh*kwc)*nr:]
						var beta float32
						if kh > 0 {
							beta = 1
						}
						for t := t0; t < t1; t++ {
							copy(g.rows[:mr], offs[(t-t0)*mr:])
							kn.tile(&g, b, out, p.Cout, t*mr, s*nr, m, p.Cout, beta)
						}
					}
				}
			}
		}))
	}
}

// convBackpropInputDirect computes the input gradient of a stride-1
// convolution as the forward convolution of dOut, padded by KH-1-PadTop
// rows above (KW-1-PadLeft columns left), with the filter flipped in space
// and its channel axes swapped.
func convBackpropInputDirect(kn *convKernel, p ConvParams, filter, dOut, dInput []float32) {
	q := ConvParams{
		N: p.N, H: p.OH, W: p.OW, C: p.Cout, KH: p.KH, KW: p.KW, Cout: p.C,
		StrideH: 1, StrideW: 1, PadTop: p.KH - 1 - p.PadTop, PadLeft: p.KW - 1 - p.PadLeft,
		OH: p.H, OW: p.W,
	}
	flipped := getScratch(len(filter[:p.KH*p.KW*p.C*p.Cout]))
	defer putScratch(flipped)
	f := *flipped
	for kh := range p.KH {
		for kw := range p.KW {
			src := filter[((kh*p.KW+kw)*p.C)*p.Cout:][:p.C*p.Cout]
			dst := f[(((p.KH-1-kh)*p.KW+p.KW-1-kw)*p.Cout)*p.C:][:p.Cout*p.C]
			for c := range p.C {
				for o, v := range src[c*p.Cout : (c+1)*p.Cout] {
					dst[o*p.C+c] = v
				}
			}
		}
	}
	convForwardDirect(kn, q, dOut, f, dInput)
}

// convBackpropFilterDirect is Conv2DBackpropFilter as an implicit GEMM with
// kernel kn: dFilter (KH*KW*C x Cout) = patches^T times dOut, summed over
// images.
func convBackpropFilterDirect(kn *convKernel, p ConvParams, input, dOut, dFilter []float32) {
	hp, wp := p.paddedDims()
	img, kwc, kkc, k := hp*wp*p.C, p.KW*p.C, p.KH*p.KW*p.C, p.OH*p.OW
	mr, nr := kn.mr, kn.nr
	slivers, tiles := ceilDiv(p.Cout, nr), ceilDiv(kkc, mr)
	// Where tap r = (kh, kw, c) sits relative to a window's corner; rows
	// past the last tap repeat it.
	offsBuf := getOffs(tiles * mr)
	defer convOffsPool.Put(offsBuf)
	offs := *offsBuf
	for r := range offs {
		t := min(r, kkc-1)
		offs[r] = t/kwc*wp*p.C + t%kwc
	}
	parts := min(p.N, 2*runtime.GOMAXPROCS(0))
	size := kkc * p.Cout
	acc := getScratch((parts - 1) * size)
	defer putScratch(acc)
	rowsPer := max(1, convKC/p.OW) // output rows per micro-kernel call
	Parallel(parts, parts, RangeFunc(func(lo, hi int) {
		pad, packed := getScratch(img), getScratch(slivers*nr*k)
		defer putScratch(pad)
		defer putScratch(packed)
		g := convGather{csa: p.StrideW * p.C, seglen: p.OW, segstride: p.StrideH * wp * p.C}
		for part := lo; part < hi; part++ {
			dst := dFilter
			if part > 0 {
				dst = (*acc)[(part-1)*size : part*size]
			}
			n0, n1 := p.N*part/parts, p.N*(part+1)/parts
			for n := n0; n < n1; n++ {
				p.padImage(input, n, *pad)
				packB(nr, false, dOut[n*k*p.Cout:], p.Cout, 0, k, 0, p.Cout, *packed)
				for oh := 0; oh < p.OH; oh += rowsPer {
					g.a, g.nseg = (*pad)[oh*p.StrideH*wp*p.C:], min(rowsPer, p.OH-oh)
					var beta float32
					if n > n0 || oh > 0 {
						beta = 1
					}
					for s := range slivers {
						b := (*packed)[(s*k+oh*p.OW)*nr:]
						for t := range tiles {
							copy(g.rows[:mr], offs[t*mr:])
							kn.tile(&g, b, dst, p.Cout, t*mr, s*nr, kkc, p.Cout, beta)
						}
					}
				}
			}
		}
	}))
	for part := 1; part < parts; part++ {
		for i, v := range (*acc)[(part-1)*size : part*size] {
			dFilter[i] += v
		}
	}
}
