//go:build !purego

package linalg

//go:generate go run avx512_gen.go -mr 10

// The AVX-512 kernel: an avx512MR x 32 float32 tile in 2*avx512MR zmm
// accumulators, two registers for B and two for broadcasts of A. Each k
// step issues 20 FMAs (10x32) against 2 loads of B and 10 broadcasts.
//
// The height was measured (BenchmarkSgemm's n=1024, MLP and CNN fc1
// shapes, one core, A B A B over heights 10, 12 and 14 on a Zen 4): every
// height keeps the FMA pipes fed (about 110 GFLOP/s in L1, as the avx2
// tile: Zen 4 runs a 512-bit FMA as two 256-bit halves), so what differs is
// the waste of edge tiles. 10 divides the batches of the reference models
// (100, 50): the MLP's three products took 4% less time than at 12, the
// CNN's fc1 products 19% less (at 12 and 14 fc1 was no faster than avx2),
// and n=1024 ran within a few percent at all three.
//
// Blocking, for a 32-48 KiB L1 and a 1-2 MiB L2: kc=256 (the 32 KiB B
// sliver streams from L2 beside the A slivers; kc=128 halves the work per
// call without being faster, and the other loop order, an A sliver in L1
// and the kc x nc B panel in L2, was slower on the fc1 and MLP shapes);
// the mc x kc A block (160 KiB) in L2; the kc x nc B panel (4 MiB) in L3.
var (
	avx512F32 = kernel[float32]{mr: avx512MR, nr: 32, mc: 16 * avx512MR, kc: 256, nc: 4096,
		micro: microAVX512, microDA: microDAAVX512, microHalf: microHalfAVX512, microHalfDA: microHalfDAAVX512,
		microEdge: microEdgeAVX512, microEdgeDA: microEdgeDAAVX512}

	poolF32AVX512 wsPool[float32]
)

//go:noescape
func sgemmZ32(kc int, a *float32, b *float32, c *float32, ldc int, beta float32, mm int, mlo, mhi uint16)

//go:noescape
func sgemmZ32da(kc int, a *float32, rsa, csa int, b *float32, c *float32, ldc int, beta float32, mm int, mlo, mhi uint16)

//go:noescape
func sgemmZ16(kc int, a *float32, b *float32, c *float32, ldc int, beta float32, mm int, mlo, mhi uint16)

//go:noescape
func sgemmZ16da(kc int, a *float32, rsa, csa int, b *float32, c *float32, ldc int, beta float32, mm int, mlo, mhi uint16)

// The wrappers check bounds, which keeps the assembly memory-safe, and
// turn a width into the kernels' column masks.

func microAVX512(kc int, ap, bp, c []float32, ldc int, beta float32) {
	_ = ap[avx512MR*kc-1]
	_ = bp[32*kc-1]
	_ = c[(avx512MR-1)*ldc+31]
	sgemmZ32(kc, &ap[0], &bp[0], &c[0], ldc, beta, avx512MR, 0xffff, 0xffff)
}

func microDAAVX512(kc int, a []float32, rsa, csa int, bp, c []float32, ldc int, beta float32) {
	_ = a[(avx512MR-1)*rsa+(kc-1)*csa]
	_ = bp[32*kc-1]
	_ = c[(avx512MR-1)*ldc+31]
	sgemmZ32da(kc, &a[0], rsa, csa, &bp[0], &c[0], ldc, beta, avx512MR, 0xffff, 0xffff)
}

func microHalfAVX512(kc int, ap, bp, c []float32, ldc int, beta float32) {
	_ = ap[avx512MR*kc-1]
	_ = bp[32*kc-1]
	_ = c[(avx512MR-1)*ldc+15]
	sgemmZ16(kc, &ap[0], &bp[0], &c[0], ldc, beta, avx512MR, 0xffff, 0)
}

func microHalfDAAVX512(kc int, a []float32, rsa, csa int, bp, c []float32, ldc int, beta float32) {
	_ = a[(avx512MR-1)*rsa+(kc-1)*csa]
	_ = bp[32*kc-1]
	_ = c[(avx512MR-1)*ldc+15]
	sgemmZ16da(kc, &a[0], rsa, csa, &bp[0], &c[0], ldc, beta, avx512MR, 0xffff, 0)
}

// edgeMasks returns the column masks of the first nn (1..32) columns.
func edgeMasks(nn int) (lo, hi uint16) {
	return 1<<min(nn, 16) - 1, 1<<max(nn-16, 0) - 1
}

func microEdgeAVX512(kc int, ap, bp, c []float32, ldc int, beta float32, mm, nn int) {
	_ = ap[avx512MR*kc-1]
	_ = bp[32*kc-1]
	if mm < 1 || mm > avx512MR || nn < 1 || nn > 32 {
		panic("linalg: avx512 edge tile out of range")
	}
	_ = c[(mm-1)*ldc+nn-1]
	lo, hi := edgeMasks(nn)
	if nn <= 16 {
		sgemmZ16(kc, &ap[0], &bp[0], &c[0], ldc, beta, mm, lo, 0)
		return
	}
	sgemmZ32(kc, &ap[0], &bp[0], &c[0], ldc, beta, mm, lo, hi)
}

func microEdgeDAAVX512(kc int, a []float32, rsa, csa int, bp, c []float32, ldc int, beta float32, mm, nn int) {
	_ = a[(avx512MR-1)*rsa+(kc-1)*csa]
	_ = bp[32*kc-1]
	if mm < 1 || mm > avx512MR || nn < 1 || nn > 32 {
		panic("linalg: avx512 edge tile out of range")
	}
	_ = c[(mm-1)*ldc+nn-1]
	lo, hi := edgeMasks(nn)
	if nn <= 16 {
		sgemmZ16da(kc, &a[0], rsa, csa, &bp[0], &c[0], ldc, beta, mm, lo, 0)
		return
	}
	sgemmZ32da(kc, &a[0], rsa, csa, &bp[0], &c[0], ldc, beta, mm, lo, hi)
}

type avx512Backend struct{}

func (avx512Backend) Name() string { return "avx512" }

func (avx512Backend) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemm(&avx512F32, &poolF32AVX512, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
