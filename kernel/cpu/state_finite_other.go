//go:build !amd64 || purego

package cpu

import "github.com/distflow/distflow/tensor"

// stateFinite32 reports whether data holds no NaN and no infinity.
func stateFinite32(data []float32) bool { return tensor.FirstNonFinite32(data) < 0 }

// stateFinite64 is stateFinite32 for float64.
func stateFinite64(data []float64) bool { return tensor.FirstNonFinite64(data) < 0 }

// stateSubScaledFinite32 cannot tell here whether a gradient descent
// update stays finite bit for bit as the update computes it: ok is false.
func stateSubScaledFinite32(v, g []float32, alpha float32) (at int, bad float32, ok bool) {
	return -1, 0, false
}

// stateAdamFinite32 cannot tell here bit for bit: ok is false.
func stateAdamFinite32(v, m, vv, g []float32, lrT, beta1, beta2, epsilon float32) (finite, ok bool) {
	return false, false
}
