//go:build !purego

package linalg

//go:noescape
func sgemm6x16conv(a *float32, rows *[6]int, csa, seglen, nseg, segstride int, b *float32, c *float32, ldc int, beta float32)

// microConvAVX2 checks that every element sgemm6x16conv reads or writes is
// inside its slice, then calls it.
func microConvAVX2(g *convGather, b, c []float32, ldc int, beta float32) {
	last := (g.nseg-1)*g.segstride + (g.seglen-1)*g.csa
	for _, r := range g.rows {
		if r < 0 || r+last >= len(g.a) {
			panic("linalg: conv micro-kernel: row out of range")
		}
	}
	_ = b[16*g.nseg*g.seglen-1]
	_ = c[5*ldc+15]
	sgemm6x16conv(&g.a[0], &g.rows, g.csa, g.seglen, g.nseg, g.segstride, &b[0], &c[0], ldc, beta)
}

func init() {
	convMicro = microConvAVX2
	// Every AVX-512 CPU has AVX2 and FMA too.
	convBackends = []Backend{avx2Backend{}, avx512Backend{}}
}
