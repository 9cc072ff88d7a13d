//go:build !purego

package linalg

//go:noescape
func sgemm6x16conv(a *float32, rows *[6]int, csa, seglen, nseg, segstride int, b *float32, c *float32, ldc int, beta float32)

// convAVX2 is the avx2 path's convolution tile, 6x16.
var convAVX2 = convKernel{mr: 6, nr: 16, micro: microConvAVX2}

// checkGather panics unless every element of A that a tile of mr rows
// gathered as g says reads is inside g.a, which keeps the assembly
// memory-safe.
func checkGather(g *convGather, mr int) {
	if g.nseg < 1 || g.seglen < 1 {
		panic("linalg: conv micro-kernel: empty segment")
	}
	last := (g.nseg-1)*g.segstride + (g.seglen-1)*g.csa
	for _, r := range g.rows[:mr] {
		if r < 0 || r+last >= len(g.a) {
			panic("linalg: conv micro-kernel: row out of range")
		}
	}
}

// microConvAVX2 runs sgemm6x16conv, through a scratch tile when the tile
// sticks out of C (the kernel stores whole tiles).
func microConvAVX2(g *convGather, b, c []float32, ldc int, beta float32, mm, nn int) {
	checkGather(g, 6)
	_ = b[16*g.nseg*g.seglen-1]
	rows := (*[6]int)(g.rows[:6])
	if mm == 6 && nn == 16 {
		_ = c[5*ldc+15]
		sgemm6x16conv(&g.a[0], rows, g.csa, g.seglen, g.nseg, g.segstride, &b[0], &c[0], ldc, beta)
		return
	}
	_ = c[(mm-1)*ldc+nn-1]
	var t [6 * 16]float32
	sgemm6x16conv(&g.a[0], rows, g.csa, g.seglen, g.nseg, g.segstride, &b[0], &t[0], 16, 0)
	mergeTile(t[:], 16, c, ldc, mm, nn, beta)
}

func init() {
	convKernels = append(convKernels, struct {
		be Backend
		k  *convKernel
	}{avx2Backend{}, &convAVX2})
}
