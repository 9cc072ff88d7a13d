package cpu

import (
	"math"
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
