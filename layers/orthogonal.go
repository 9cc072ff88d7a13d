package layers

import (
	"math"
	"math/rand"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// OrthogonalInit fills a weight with a random orthogonal matrix times
// gain, as Keras' Orthogonal initializer (Saxe et al. 2014): the weight is
// viewed as a matrix [prod(shape[:-1]), shape[-1]] whose rows (if fewer)
// or columns are orthonormal. It is the default for recurrent kernels,
// whose repeated products then neither explode nor vanish at the start.
//
// The matrix is computed when the graph is built (Gram-Schmidt on a
// normal draw from seed; seed 0 draws a fresh one) and held as a constant,
// so it suits the small square-ish kernels of recurrent layers rather than
// large weights, whose constants would travel with the graph.
func OrthogonalInit(gain float64, seed int) ops.Initializer {
	return func(s *graph.Scope, dt tensor.DType, shape []int) graph.Output {
		if len(shape) < 2 {
			return ops.GlorotUniformInit(seed)(s, dt, shape) // Keras requires rank 2 or more
		}
		rows := tensor.NumElements(shape[:len(shape)-1])
		cols := shape[len(shape)-1]
		src := rand.Int63()
		if seed != 0 {
			src = int64(seed)
		}
		q := orthonormal(rand.New(rand.NewSource(src)), max(rows, cols), min(rows, cols))
		t := tensor.New(dt, shape...)
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				v := 0.0
				if rows >= cols {
					v = q[i][j]
				} else {
					v = q[j][i] // the transpose: orthonormal rows
				}
				t.SetFloat64At(i*cols+j, gain*v)
			}
		}
		return ops.Const(s, t)
	}
}

// orthonormal returns an n×k matrix (n >= k) with orthonormal columns: the
// Q of the QR decomposition of a standard normal draw with R's diagonal
// made positive, which is what Gram-Schmidt gives. Each column is
// orthogonalised twice, which keeps it orthogonal to working precision.
func orthonormal(r *rand.Rand, n, k int) [][]float64 {
	a := make([][]float64, k) // column-major: a[j] is column j
	for j := range a {
		a[j] = make([]float64, n)
		for i := range a[j] {
			a[j][i] = r.NormFloat64()
		}
	}
	for j := range a {
		for pass := 0; pass < 2; pass++ {
			for p := 0; p < j; p++ {
				dot := 0.0
				for i := range a[j] {
					dot += a[p][i] * a[j][i]
				}
				for i := range a[j] {
					a[j][i] -= dot * a[p][i]
				}
			}
		}
		norm := 0.0
		for _, v := range a[j] {
			norm += v * v
		}
		norm = math.Sqrt(norm)
		for i := range a[j] {
			a[j][i] /= norm
		}
	}
	q := make([][]float64, n) // row-major
	for i := range q {
		q[i] = make([]float64, k)
		for j := range q[i] {
			q[i][j] = a[j][i]
		}
	}
	return q
}
