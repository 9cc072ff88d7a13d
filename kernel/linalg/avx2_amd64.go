//go:build !purego

package linalg

// The AVX2+FMA kernel: a 6x16 float32 tile (12 ymm accumulators, 2 for B,
// 2 for broadcasts of A), the BLIS Zen choice. Each k step issues 12 FMAs
// against 2 loads and 6 broadcasts, so the two FMA pipes, not the load
// ports, bound it. Blocking:
//   - kc=256: the 16x256 B sliver (16 KiB) stays in the 32 KiB L1 while
//     A slivers stream past it;
//   - mc=144: the packed 144x256 A block (144 KiB) sits in the 512 KiB L2;
//   - nc=4080: the packed 256x4080 B panel (4 MiB) lives in the shared L3.
var (
	avx2F32 = kernel[float32]{mr: 6, nr: 16, mc: 144, kc: 256, nc: 4080, micro: microAVX2, microDA: microDAAVX2,
		microHalf: microHalfAVX2, microHalfDA: microHalfDAAVX2}

	poolF32AVX2 wsPool[float32]
)

//go:noescape
func sgemm6x16(kc int, a *float32, b *float32, c *float32, ldc int, beta float32)

func microAVX2(kc int, ap, bp, c []float32, ldc int, beta float32) {
	// Bounds checks here keep the assembly memory-safe.
	_ = ap[6*kc-1]
	_ = bp[16*kc-1]
	_ = c[5*ldc+15]
	sgemm6x16(kc, &ap[0], &bp[0], &c[0], ldc, beta)
}

//go:noescape
func sgemm6x16da(kc int, a *float32, rsa, csa int, b *float32, c *float32, ldc int, beta float32)

func microDAAVX2(kc int, a []float32, rsa, csa int, bp, c []float32, ldc int, beta float32) {
	_ = a[5*rsa+(kc-1)*csa]
	_ = bp[16*kc-1]
	_ = c[5*ldc+15]
	sgemm6x16da(kc, &a[0], rsa, csa, &bp[0], &c[0], ldc, beta)
}

//go:noescape
func sgemm6x8(kc int, a *float32, b *float32, c *float32, ldc int, beta float32)

func microHalfAVX2(kc int, ap, bp, c []float32, ldc int, beta float32) {
	_ = ap[6*kc-1]
	_ = bp[16*kc-1]
	_ = c[5*ldc+7]
	sgemm6x8(kc, &ap[0], &bp[0], &c[0], ldc, beta)
}

//go:noescape
func sgemm6x8da(kc int, a *float32, rsa, csa int, b *float32, c *float32, ldc int, beta float32)

func microHalfDAAVX2(kc int, a []float32, rsa, csa int, bp, c []float32, ldc int, beta float32) {
	_ = a[5*rsa+(kc-1)*csa]
	_ = bp[16*kc-1]
	_ = c[5*ldc+7]
	sgemm6x8da(kc, &a[0], rsa, csa, &bp[0], &c[0], ldc, beta)
}

type avx2Backend struct{}

func (avx2Backend) Name() string { return "avx2" }

func (avx2Backend) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemm(&avx2F32, &poolF32AVX2, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
