//go:build !purego

package linalg

//go:noescape
func sgemmZ32conv(a *float32, rows *[avx512ConvMR]int, csa, seglen, nseg, segstride int, b *float32, c *float32, ldc int, beta float32, mm int, mlo, mhi uint16)

// convAVX512 is the avx512 path's convolution tile: the GEMM tile's k step
// (avx512ConvMR x 32) with A gathered in place, edges stored under masks.
var convAVX512 = convKernel{mr: avx512ConvMR, nr: 32, micro: microConvAVX512}

// The row offsets of a tile must fit the gather's array.
var _ [convMaxMR - avx512ConvMR]struct{}

func microConvAVX512(g *convGather, b, c []float32, ldc int, beta float32, mm, nn int) {
	checkGather(g, avx512ConvMR)
	_ = b[32*g.nseg*g.seglen-1]
	if mm < 1 || mm > avx512ConvMR || nn < 1 || nn > 32 {
		panic("linalg: avx512 conv tile out of range")
	}
	_ = c[(mm-1)*ldc+nn-1]
	lo, hi := edgeMasks(nn)
	sgemmZ32conv(&g.a[0], (*[avx512ConvMR]int)(g.rows[:avx512ConvMR]), g.csa, g.seglen, g.nseg, g.segstride,
		&b[0], &c[0], ldc, beta, mm, lo, hi)
}

func init() {
	convKernels = append(convKernels, struct {
		be Backend
		k  *convKernel
	}{avx512Backend{}, &convAVX512})
}
