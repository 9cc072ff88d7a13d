//go:build !amd64 || purego

package cpu

// nnSigmoidF32 is the float32 sigmoid (vectorised on amd64).
func nnSigmoidF32(x, y []float32) { nnSigmoidF32Scalar(x, y) }

// nnSigmoidGradF32 is nnSigmoidGrad for float32 (vectorised on amd64).
func nnSigmoidGradF32(y, dy, dx []float32) { nnSigmoidGrad(y, dy, dx) }

// nnReluF32 is nnReluT for float32 (vectorised on amd64).
func nnReluF32(x, y []float32) { nnReluT(x, y) }

// nnReluGradF32 is nnReluGradT for float32 (vectorised on amd64).
func nnReluGradF32(dy, y, dx []float32) { nnReluGradT(dy, y, dx) }

// nnAddF32 is nnAddF32Scalar (vectorised on amd64).
func nnAddF32(a, b, y []float32) { nnAddF32Scalar(a, b, y) }

// nnSubScaledF32 is nnSubScaledF32Scalar (vectorised on amd64).
func nnSubScaledF32(v, g []float32, alpha float32) { nnSubScaledF32Scalar(v, g, alpha) }

// nnExpF32 is nnExpF32Scalar (vectorised on amd64).
func nnExpF32(x, y []float32) { nnExpF32Scalar(x, y) }

// nnBiasGradF32 sums the columns lo..hi of dy into db (vectorised on amd64).
func nnBiasGradF32(dy, db []float32, rows, lo, hi int) { nnBiasGradCols(dy, db, rows, lo, hi) }
