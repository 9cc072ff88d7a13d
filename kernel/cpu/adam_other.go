//go:build !amd64 || purego

package cpu

// stateAdamRangeF32 is stateAdamRange for float32 (vectorised on amd64).
func stateAdamRangeF32(v, m, vv, g []float32, lrT, beta1, beta2, epsilon float32) {
	stateAdamRange(v, m, vv, g, lrT, beta1, beta2, epsilon)
}
