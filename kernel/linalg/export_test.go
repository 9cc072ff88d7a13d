package linalg

// Internals the external tests hold to their references.
var (
	SgemmBF16Emulated = sgemmBF16Emulated
	BF16Bits          = bf16Bits
	// CvtBF16 is the assembly rounding of the bf16 GEMM's packing (nil in
	// builds without it): src rounded to bf16 as ceil(len(src)/2) pairs.
	CvtBF16 func(dst []uint32, src []float32)
)
