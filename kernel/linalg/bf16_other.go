//go:build !amd64 || purego

package linalg

func bf16Missing() string { return "the bf16 GEMM needs amd64 assembly, which this build lacks" }

// sgemmBF16 is never called here: SetPrecision refuses BF16 and SgemmBF16
// takes its portable path.
func sgemmBF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	panic("linalg: bf16 GEMM called in a build without it")
}
