//go:build !amd64 || purego

package cpu

const poolHasAVX = false

func poolMax2x2Row(x0, x1, y []float32, ow, c int) { panic("unreachable") }

func poolMaxGrad2x2Row(x0, x1, dy, dx0, dx1 []float32, ow, c int) { panic("unreachable") }
