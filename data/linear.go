package data

import (
	"math/rand/v2"

	"github.com/distflow/distflow/tensor"
)

// Linear returns n examples of the line y = w*x + b + N(0, noise²), with x
// drawn uniformly from [-1, 1) (centred, so that W and b are learnt at
// independent rates, as in the reference workload): x and y are float32 [n, 1]. The same seed
// gives the same data. The first reference workload (SPEC section 6) uses
// Linear(n, seed, 2, 10, 0.33). A negative n is treated as 0.
func Linear(n int, seed int64, w, b, noise float64) (x, y *tensor.Tensor) {
	n = max(n, 0)
	x = tensor.New(tensor.Float32, n, 1)
	y = tensor.New(tensor.Float32, n, 1)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6c696e656172)) // "linear"
	xd, yd := x.Float32s(), y.Float32s()
	for i := range xd {
		v := 2*rng.Float64() - 1
		xd[i] = float32(v)
		yd[i] = float32(w*v + b + noise*rng.NormFloat64())
	}
	return x, y
}
