//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

//go:noescape
func nnSigmoidAVX2(x, y *float32, n int)

//go:noescape
func nnExpAVX2(x, y *float32, n int)

//go:noescape
func nnSigmoidGradAVX(y, dy, dx *float32, n int)

//go:noescape
func nnAddAVX(a, b, y *float32, n int)

//go:noescape
func nnColSums16AVX(dy *float32, stride, rows int, db *float32)

//go:noescape
func nnReluAVX(x, y *float32, n int)

//go:noescape
func nnReluGradAVX(dy, y, dx *float32, n int)

//go:noescape
func nnSubScaledAVX(v, grad *float32, n int, alpha float32)

// nnHasAVX and nnHasAVX2 gate the vectorised loops of nn_amd64.s.
var (
	nnHasAVX  = cpu.X86.HasAVX
	nnHasAVX2 = cpu.X86.HasAVX2
)

// nnSigmoidF32 is the float32 sigmoid, eight lanes at a time where the CPU
// has AVX2, bit for bit the same as nnSigmoidF32Scalar.
func nnSigmoidF32(x, y []float32) {
	y = y[:len(x)]
	n := 0
	if nnHasAVX2 {
		n = len(x) &^ 7
	}
	if n > 0 {
		nnSigmoidAVX2(&x[0], &y[0], n)
	}
	nnSigmoidF32Scalar(x[n:], y[n:])
}

// nnSigmoidGradF32 is nnSigmoidGrad for float32, vectorised with AVX.
func nnSigmoidGradF32(y, dy, dx []float32) {
	dy, dx = dy[:len(y)], dx[:len(y)]
	n := 0
	if nnHasAVX {
		n = len(y) &^ 7
	}
	if n > 0 {
		nnSigmoidGradAVX(&y[0], &dy[0], &dx[0], n)
	}
	nnSigmoidGrad(y[n:], dy[n:], dx[n:])
}

// nnAddF32 sets y = a + b element-wise (BiasAdd's row loop), vectorised
// with AVX.
func nnAddF32(a, b, y []float32) {
	b, y = b[:len(a)], y[:len(a)]
	n := 0
	if nnHasAVX {
		n = len(a) &^ 7
	}
	if n > 0 {
		nnAddAVX(&a[0], &b[0], &y[0], n)
	}
	for i := n; i < len(a); i++ {
		y[i] = a[i] + b[i]
	}
}

// nnSubScaledF32 sets v[i] -= alpha*g[i] (the gradient descent update),
// vectorised with AVX, bit for bit the same as the scalar loop.
func nnSubScaledF32(v, g []float32, alpha float32) {
	g = g[:len(v)]
	n := 0
	if nnHasAVX {
		n = len(v) &^ 7
	}
	if n > 0 {
		nnSubScaledAVX(&v[0], &g[0], n, alpha)
	}
	for i := n; i < len(v); i++ {
		v[i] -= alpha * g[i]
	}
}

// nnExpF32 sets y[i] = nnExp32(x[i]), eight lanes at a time where the CPU
// has AVX2; x and y may be the same slice.
func nnExpF32(x, y []float32) {
	y = y[:len(x)]
	n := 0
	if nnHasAVX2 {
		n = len(x) &^ 7
	}
	if n > 0 {
		nnExpAVX2(&x[0], &y[0], n)
	}
	for i := n; i < len(x); i++ {
		y[i] = nnExp32(x[i])
	}
}

// nnBiasGradF32 sums the columns lo..hi of dy [rows, len(db)] into db,
// sixteen columns at a time with AVX, bit for bit as nnBiasGradCols does.
func nnBiasGradF32(dy, db []float32, rows, lo, hi int) {
	C := len(db)
	if nnHasAVX && rows > 0 {
		_ = dy[(rows-1)*C+hi-1] // every column block below is in range
		for ; lo+16 <= hi; lo += 16 {
			nnColSums16AVX(&dy[lo], C, rows, &db[lo])
		}
	}
	nnBiasGradCols(dy, db, rows, lo, hi)
}

// nnReluF32 is nnReluT for float32, eight lanes at a time with AVX.
func nnReluF32(x, y []float32) {
	y = y[:len(x)]
	n := 0
	if nnHasAVX {
		n = len(x) &^ 7
	}
	if n > 0 {
		nnReluAVX(&x[0], &y[0], n)
	}
	nnReluT(x[n:], y[n:])
}

// nnReluGradF32 is nnReluGradT for float32, eight lanes at a time with AVX.
func nnReluGradF32(dy, y, dx []float32) {
	dy, dx = dy[:len(y)], dx[:len(y)]
	n := 0
	if nnHasAVX {
		n = len(y) &^ 7
	}
	if n > 0 {
		nnReluGradAVX(&dy[0], &y[0], &dx[0], n)
	}
	nnReluGradT(dy[n:], y[n:], dx[n:])
}
