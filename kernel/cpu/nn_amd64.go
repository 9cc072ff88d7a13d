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

// nnLanes returns how many of n elements a loop eight lanes wide takes
// (the rest is the scalar loop's): none when the CPU lacks what it needs.
func nnLanes(has bool, n int) int {
	if !has {
		return 0
	}
	return n &^ 7
}

// nnSigmoidF32 is the float32 sigmoid, eight lanes at a time where the CPU
// has AVX2, bit for bit the same as nnSigmoidF32Scalar.
func nnSigmoidF32(x, y []float32) {
	y = y[:len(x)]
	if n := nnLanes(nnHasAVX2, len(x)); n > 0 {
		nnSigmoidAVX2(&x[0], &y[0], n)
		x, y = x[n:], y[n:]
	}
	nnSigmoidF32Scalar(x, y)
}

// nnSigmoidGradF32 is nnSigmoidGrad for float32, vectorised with AVX.
func nnSigmoidGradF32(y, dy, dx []float32) {
	dy, dx = dy[:len(y)], dx[:len(y)]
	if n := nnLanes(nnHasAVX, len(y)); n > 0 {
		nnSigmoidGradAVX(&y[0], &dy[0], &dx[0], n)
		y, dy, dx = y[n:], dy[n:], dx[n:]
	}
	nnSigmoidGrad(y, dy, dx)
}

// nnAddF32 is nnAddF32Scalar (BiasAdd's row loop), vectorised with AVX.
func nnAddF32(a, b, y []float32) {
	b, y = b[:len(a)], y[:len(a)]
	if n := nnLanes(nnHasAVX, len(a)); n > 0 {
		nnAddAVX(&a[0], &b[0], &y[0], n)
		a, b, y = a[n:], b[n:], y[n:]
	}
	nnAddF32Scalar(a, b, y)
}

// nnSubScaledF32 is nnSubScaledF32Scalar (the gradient descent update),
// vectorised with AVX, bit for bit the same.
func nnSubScaledF32(v, g []float32, alpha float32) {
	g = g[:len(v)]
	if n := nnLanes(nnHasAVX, len(v)); n > 0 {
		nnSubScaledAVX(&v[0], &g[0], n, alpha)
		v, g = v[n:], g[n:]
	}
	nnSubScaledF32Scalar(v, g, alpha)
}

// nnExpF32 is nnExpF32Scalar, eight lanes at a time where the CPU has
// AVX2; x and y may be the same slice.
func nnExpF32(x, y []float32) {
	y = y[:len(x)]
	if n := nnLanes(nnHasAVX2, len(x)); n > 0 {
		nnExpAVX2(&x[0], &y[0], n)
		x, y = x[n:], y[n:]
	}
	nnExpF32Scalar(x, y)
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
	if n := nnLanes(nnHasAVX, len(x)); n > 0 {
		nnReluAVX(&x[0], &y[0], n)
		x, y = x[n:], y[n:]
	}
	nnReluT(x, y)
}

// nnReluGradF32 is nnReluGradT for float32, eight lanes at a time with AVX.
func nnReluGradF32(dy, y, dx []float32) {
	dy, dx = dy[:len(y)], dx[:len(y)]
	if n := nnLanes(nnHasAVX, len(y)); n > 0 {
		nnReluGradAVX(&dy[0], &y[0], &dx[0], n)
		dy, y, dx = dy[n:], y[n:], dx[n:]
	}
	nnReluGradT(dy, y, dx)
}
