package linalg

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
)

// Precision is the arithmetic of the products Sgemm computes.
type Precision int32

const (
	// Float32 is the default: float32 products and sums.
	Float32 Precision = iota
	// BF16 rounds both operands of every product to bfloat16 (round to
	// nearest even, 8 significant bits) and accumulates the products in
	// float32; inputs and outputs stay float32, so a model's master
	// weights, gradients and optimizer state are float32 throughout. It
	// runs on the AVX512_BF16 instructions (VDPBF16PS, VCVTNE2PS2BF16) and
	// only where the CPU has them: see SetPrecision.
	BF16
)

// String returns "float32" or "bf16".
func (p Precision) String() string {
	switch p {
	case Float32:
		return "float32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("Precision(%d)", int32(p))
}

// ParsePrecision parses "float32" (or "fp32") and "bf16" (or "bfloat16").
func ParsePrecision(s string) (Precision, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "float32", "fp32":
		return Float32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	}
	return Float32, fmt.Errorf("linalg: precision %q: want float32 or bf16", s)
}

// ErrBF16Unavailable is wrapped by SetPrecision's error when this CPU or
// build cannot run the bf16 GEMM.
var ErrBF16Unavailable = errors.New("bf16 GEMM unavailable")

// precision is the process's Precision, read by every Sgemm call.
var precision atomic.Int32

// SetPrecision sets the Precision of Sgemm, and so of every MatMul kernel
// (the fully connected layers of a model and their gradients), for the
// whole process from the next call on. It is process-wide, as the SIMD
// path is, because it is a property of the machine's kernels, not of a
// graph. The convolutions' own kernels (the implicit GEMMs of the avx2
// and avx512 paths) stay float32.
//
// BF16 needs the avx512 path (see Path) and a CPU with AVX512_BF16. Where
// either is missing, SetPrecision(BF16) leaves the precision as it was and
// returns an error wrapping ErrBF16Unavailable that names what is missing:
// a user who asked for bf16 is told, rather than silently given float32.
// A caller that wants bf16 only where it is fast may ignore the error.
func SetPrecision(p Precision) error {
	switch p {
	case Float32:
	case BF16:
		if why := BF16Missing(); why != "" {
			return fmt.Errorf("linalg: %w: %s; keeping %v", ErrBF16Unavailable, why, CurrentPrecision())
		}
	default:
		return fmt.Errorf("linalg: unknown precision %v", p)
	}
	precision.Store(int32(p))
	return nil
}

// CurrentPrecision returns the Precision Sgemm uses now.
func CurrentPrecision() Precision { return Precision(precision.Load()) }

// BF16Missing returns what this CPU or build lacks for the bf16 GEMM
// ("" when it can run).
func BF16Missing() string {
	if path != "avx512" {
		return fmt.Sprintf("the bf16 GEMM runs on the avx512 path, and the path in use is %s", path)
	}
	return bf16Missing()
}

// RoundBF16 returns x rounded to the nearest bfloat16 (ties to even), as a
// float32: what VCVTNE2PS2BF16 does to each operand of the bf16 GEMM. NaNs
// stay NaNs (made quiet), infinities stay infinite, values that round past
// the largest bfloat16 become infinities, and subnormal inputs become zeros
// of their sign (the instruction treats them as zeros). It is the portable
// emulation of the hardware's rounding; the tests hold each to the other.
func RoundBF16(x float32) float32 {
	return math.Float32frombits(uint32(bf16Bits(x)) << 16)
}

// bf16Bits returns the bfloat16 nearest x (ties to even).
func bf16Bits(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep the sign and make it quiet
		return uint16(u>>16) | 0x40
	}
	if u&0x7f800000 == 0 { // zero or subnormal
		return uint16(u>>16) & 0x8000
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// SgemmBF16 computes C = alpha*op(A)*op(B) + beta*C, as Sgemm does (the
// same contract; see Backend), with the operands of every product rounded
// to bfloat16 (RoundBF16) and the products accumulated in float32. It uses
// the AVX512_BF16 kernels where BF16Missing is empty; elsewhere it computes
// the same rounding in portable code, with rounded copies of A and B
// multiplied by Sgemm's float32 path, which is slower than float32 itself
// and meant for tests and for comparing results across machines.
func SgemmBF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if BF16Missing() == "" {
		sgemmBF16(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	sgemmBF16Emulated(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmBF16Emulated is SgemmBF16's portable path.
func sgemmBF16Emulated(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	ra := make([]float32, len(a))
	for i, v := range a {
		ra[i] = RoundBF16(v)
	}
	rb := make([]float32, len(b))
	for i, v := range b {
		rb[i] = RoundBF16(v)
	}
	Default().Sgemm(transA, transB, m, n, k, alpha, ra, lda, rb, ldb, beta, c, ldc)
}
