//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

//go:noescape
func adamAVX(v, m, vv, grad *float32, n int, lrT, c1, c2, eps float32)

var adamHasAVX = cpu.X86.HasAVX

// stateAdamRangeF32 is stateAdamRange for float32, eight lanes at a time
// where the CPU has AVX (the loop is bound by its square root and division
// otherwise).
func stateAdamRangeF32(v, m, vv, g []float32, lrT, beta1, beta2, epsilon float32) {
	m, vv, g = m[:len(v)], vv[:len(v)], g[:len(v)]
	if n := nnLanes(adamHasAVX, len(v)); n > 0 {
		adamAVX(&v[0], &m[0], &vv[0], &g[0], n, lrT, 1-beta1, 1-beta2, epsilon)
		v, m, vv, g = v[n:], m[n:], vv[n:], g[n:]
	}
	stateAdamRange(v, m, vv, g, lrT, beta1, beta2, epsilon)
}
