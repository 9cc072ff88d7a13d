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

// nnAddF32 sets y = a + b element-wise (vectorised on amd64).
func nnAddF32(a, b, y []float32) {
	b, y = b[:len(a)], y[:len(a)]
	for i, v := range a {
		y[i] = v + b[i]
	}
}

// nnSubScaledF32 sets v[i] -= alpha*g[i] (vectorised on amd64).
func nnSubScaledF32(v, g []float32, alpha float32) {
	g = g[:len(v)]
	for i := range v {
		v[i] -= alpha * g[i]
	}
}

// nnExpF32 sets y[i] = nnExp32(x[i]) (vectorised on amd64).
func nnExpF32(x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = nnExp32(v)
	}
}

// nnBiasGradF32 sums the columns lo..hi of dy into db (vectorised on amd64).
func nnBiasGradF32(dy, db []float32, rows, lo, hi int) { nnBiasGradCols(dy, db, rows, lo, hi) }
