package data

import (
	"math"
	"slices"
	"testing"

	"github.com/distflow/distflow/tensor"
)

func TestLinear(t *testing.T) {
	const n = 20000
	x, y := Linear(n, 1, 2, 10, 0.33)
	if !slices.Equal(x.Shape(), []int{n, 1}) || !slices.Equal(y.Shape(), []int{n, 1}) ||
		x.DType() != tensor.Float32 || y.DType() != tensor.Float32 {
		t.Fatalf("shapes %v %v %v %v", x.DType(), x.Shape(), y.DType(), y.Shape())
	}
	// Least squares recovers w and b; the residuals have the noise's spread.
	var sx, sy, sxx, sxy float64
	for i := range n {
		a, b := float64(x.Float32s()[i]), float64(y.Float32s()[i])
		if a < -1 || a >= 1 {
			t.Fatalf("x[%d] = %v outside [-1, 1)", i, a)
		}
		sx, sy, sxx, sxy = sx+a, sy+b, sxx+a*a, sxy+a*b
	}
	w := (n*sxy - sx*sy) / (n*sxx - sx*sx)
	b := (sy - w*sx) / n
	var ss float64
	for i := range n {
		r := float64(y.Float32s()[i]) - w*float64(x.Float32s()[i]) - b
		ss += r * r
	}
	sd := math.Sqrt(ss / n)
	if math.Abs(w-2) > 0.03 || math.Abs(b-10) > 0.02 || math.Abs(sd-0.33) > 0.01 {
		t.Errorf("fit w=%.4f b=%.4f noise=%.4f, want 2, 10, 0.33", w, b, sd)
	}

	x2, y2 := Linear(n, 1, 2, 10, 0.33)
	x3, _ := Linear(n, 2, 2, 10, 0.33)
	if !tensor.Equal(x, x2) || !tensor.Equal(y, y2) {
		t.Error("same seed, different data")
	}
	if tensor.Equal(x, x3) {
		t.Error("different seeds, same data")
	}
	if x0, _ := Linear(-1, 1, 2, 10, 0); x0.NumElements() != 0 {
		t.Errorf("Linear(-1) has %d elements", x0.NumElements())
	}
}
