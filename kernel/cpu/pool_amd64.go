//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

//go:noescape
func maxPool2x2(x0, x1, y *float32, ow, c int)

//go:noescape
func maxPoolGrad2x2(x0, x1, dy, dx0, dx1 *float32, ow, c int)

// poolHasAVX gates the vectorised 2x2 max pooling.
var poolHasAVX = cpu.X86.HasAVX

// poolMax2x2Row pools one output row (see maxPool2x2); c is a positive
// multiple of 8 and ow is positive.
func poolMax2x2Row(x0, x1, y []float32, ow, c int) {
	_, _, _ = x0[2*ow*c-1], x1[2*ow*c-1], y[ow*c-1]
	maxPool2x2(&x0[0], &x1[0], &y[0], ow, c)
}

// poolMaxGrad2x2Row is poolMax2x2Row's gradient (see maxPoolGrad2x2).
func poolMaxGrad2x2Row(x0, x1, dy, dx0, dx1 []float32, ow, c int) {
	_, _, _ = x0[2*ow*c-1], x1[2*ow*c-1], dy[ow*c-1]
	_, _ = dx0[2*ow*c-1], dx1[2*ow*c-1]
	maxPoolGrad2x2(&x0[0], &x1[0], &dy[0], &dx0[0], &dx1[0], ow, c)
}
