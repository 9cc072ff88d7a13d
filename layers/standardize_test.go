package layers_test

import (
	"math"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// The training set's statistics standardise it: every feature of the
// output has mean 0 and variance 1.
func TestNormalization(t *testing.T) {
	examples := tensor.MustFromSlice([]float32{1, 10, 2, 20, 3, 60, 6, 30}, 4, 2)
	norm, err := layers.NormalizationOf(examples)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{3, 30}; norm.Mean[0] != want[0] || norm.Mean[1] != want[1] {
		t.Fatalf("means %v, want %v", norm.Mean, want)
	}
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 2))
	y := run(t, s, map[graph.Output]*tensor.Tensor{x: examples}, []graph.Output{norm.Apply(s, x, false)})[0].Float32s()
	for f := range 2 {
		var sum, sumSq float64
		for i := f; i < len(y); i += 2 {
			sum, sumSq = sum+float64(y[i]), sumSq+float64(y[i])*float64(y[i])
		}
		if mean, variance := sum/4, sumSq/4-sum*sum/16; math.Abs(mean) > 1e-6 || math.Abs(variance-1) > 1e-5 {
			t.Errorf("feature %d standardised: mean %g, variance %g", f, mean, variance)
		}
	}

	layers.Normalization{Mean: []float32{0}, Variance: []float32{1}}.Apply(s, x, false)
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "1 means and 1 variances") {
		t.Errorf("statistics of 1 feature for 2: err %v", err)
	}
	if _, err := layers.NormalizationOf(nil); err == nil { // a file that could not be read
		t.Error("NormalizationOf(nil): no error")
	}
	if _, err := layers.NormalizationOf(tensor.New(tensor.Float32, 0, 3)); err == nil {
		t.Error("the statistics of no example")
	}
}
