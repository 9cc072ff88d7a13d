package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExp32Accuracy sweeps nnExp32 against math.Exp over its whole range.
func TestExp32Accuracy(t *testing.T) {
	worst := 0.0
	for x := float32(-87.2); x < 88.2; x += 0.00137 {
		got := float64(nnExp32(x))
		want := math.Exp(float64(x))
		if e := math.Abs(got-want) / want; e > worst {
			worst = e
		}
	}
	t.Logf("worst rel err %g", worst)
	if worst > 3e-7 {
		t.Fatal(worst)
	}
}

// TestNNVectorLoopsMatchScalar checks that the vectorised float32 loops
// (eight lanes, then a scalar tail) give bit for bit the scalar results,
// including at the edges of exp's range, for infinities and NaN, and for
// every length of tail.
func TestNNVectorLoopsMatchScalar(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 87.2, 87.3, 87.31, 88.2, 88.3, 88.31, -87.2, -87.3, -87.31, -88.3, -88.31,
		100, -100, 1e-30, -1e-30, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 3.4e38, -3.4e38}
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 23, 100, 1000} {
		x := make([]float32, n)
		dy := make([]float32, n)
		for i := range x {
			if i < len(special) && n >= 100 {
				x[i] = special[i]
			} else {
				x[i] = float32(rnd.NormFloat64() * 30)
			}
			dy[i] = float32(rnd.NormFloat64())
		}
		same := func(name string, got, want []float32) {
			t.Helper()
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("%s, n=%d: element %d (x=%g): got %g, want %g", name, n, i, x[i], got[i], want[i])
				}
			}
		}
		got, want := make([]float32, n), make([]float32, n)
		nnExpF32(x, got)
		for i, v := range x {
			want[i] = nnExp32(v)
		}
		same("exp", got, want)

		nnSigmoidF32(x, got)
		nnSigmoidF32Scalar(x, want)
		same("sigmoid", got, want)

		y := append([]float32(nil), want...) // sigmoid outputs
		nnSigmoidGradF32(y, dy, got)
		nnSigmoidGrad(y, dy, want)
		same("sigmoid gradient", got, want)

		nnReluF32(x, got)
		nnReluT(x, want)
		same("relu", got, want)

		nnReluGradF32(dy, x, got)
		nnReluGradT(dy, x, want)
		same("relu gradient", got, want)

		nnAddF32(x, dy, got)
		for i := range want {
			want[i] = x[i] + dy[i]
		}
		same("add", got, want)

		copy(got, y)
		copy(want, y)
		nnSubScaledF32(got, dy, 0.37)
		for i := range want {
			want[i] -= 0.37 * dy[i]
		}
		same("gradient descent", got, want)
	}
}

// TestNNSparseXentF32 checks the float32 path of the sparse softmax
// cross-entropy (float32 exponentials over the whole batch) against the
// float64 one, on a batch of the MLP's shape with logits far apart.
func TestNNSparseXentF32(t *testing.T) {
	const rows, cols = 100, 10
	rnd := rand.New(rand.NewPCG(3, 4))
	x32 := make([]float32, rows*cols)
	x64 := make([]float64, rows*cols)
	labels := make([]int32, rows)
	for i := range x32 {
		x32[i] = float32(rnd.NormFloat64() * 20)
		x64[i] = float64(x32[i])
	}
	for r := range labels {
		labels[r] = int32(rnd.IntN(cols))
	}
	loss32, bp32 := make([]float32, rows), make([]float32, rows*cols)
	loss64, bp64 := make([]float64, rows), make([]float64, rows*cols)
	nnSparseXentF32(x32, labels, nil, loss32, bp32, cols)
	nnSparseXentRows(x64, labels, nil, loss64, bp64, cols)
	for r := range loss64 {
		if d := math.Abs(float64(loss32[r]) - loss64[r]); d > 1e-5*max(1, math.Abs(loss64[r])) {
			t.Errorf("row %d: loss %g, want %g", r, loss32[r], loss64[r])
		}
	}
	for i := range bp64 {
		if d := math.Abs(float64(bp32[i]) - bp64[i]); d > 1e-6 {
			t.Errorf("element %d: gradient %g, want %g", i, bp32[i], bp64[i])
		}
	}
}

// TestNNBiasGradF32MatchesScalar checks the vectorised column sums against
// nnBiasGradCols bit for bit, for column ranges with and without a tail.
func TestNNBiasGradF32MatchesScalar(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ rows, cols, lo, hi int }{
		{100, 100, 0, 100}, {100, 100, 3, 71}, {1, 16, 0, 16}, {7, 40, 16, 40}, {0, 32, 0, 32}, {5, 3, 0, 3},
	} {
		dy := make([]float32, tc.rows*tc.cols)
		for i := range dy {
			dy[i] = float32(rnd.NormFloat64() * 1e3)
		}
		got, want := make([]float32, tc.cols), make([]float32, tc.cols)
		nnBiasGradF32(dy, got, tc.rows, tc.lo, tc.hi)
		nnBiasGradCols(dy, want, tc.rows, tc.lo, tc.hi)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: column %d: got %g, want %g", tc, i, got[i], want[i])
			}
		}
	}
}
