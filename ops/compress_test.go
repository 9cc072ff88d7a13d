package ops_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// TestTopKCompress runs error-feedback top-k in a session over a few steps:
// the dense gradients rebuilt from what was sent, plus what the node kept,
// add up to the gradients fed.
func TestTopKCompress(t *testing.T) {
	s := graph.NewScope()
	g := ops.Placeholder(s, "g", tensor.Float32, tensor.MakeShape(3, 4))
	ratio := ops.Placeholder(s, "ratio", tensor.Float32, tensor.ScalarShape())
	idx, vals := ops.TopKCompress(s, g, ratio)
	// The rebuild for a shape known when the graph is built, and for one
	// known only when it runs.
	static := ops.ReshapeTo(s, ops.UnsortedSegmentSum(s, vals, idx, ops.Scalar(s, tensor.Int32, 12)), 3, 4)
	dense := ops.Reshape(s, ops.UnsortedSegmentSum(s, vals, idx, ops.Size(s, g)), ops.Shape(s, g))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := static.Shape(); !got.FullyDefined() || !slices.Equal(got.Dims(), []int{3, 4}) {
		t.Errorf("rebuilt gradient of static shape %v, want [3,4]", got)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	run := func(grad []float32, r float32) (sentIdx []int32, sentDense []float32) {
		t.Helper()
		out, err := sess.Run(context.Background(), map[graph.Output]*tensor.Tensor{
			g: tensor.MustFromSlice(grad, 3, 4), ratio: tensor.Scalar(r)}, []graph.Output{idx, dense, static}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out[1].Shape(), []int{3, 4}) || !slices.Equal(out[1].Float32s(), out[2].Float32s()) {
			t.Fatalf("rebuilt gradients %v and %v, want the same of shape [3 4]", out[1], out[2])
		}
		return out[0].Int32s(), out[1].Float32s()
	}
	grads := [][]float32{
		{1, -8, 0, 2, 0, 0, 5, 0, -3, 0, 0, 1},
		{0, 1, 4, 0, 0, -6, 0, 0, 2, 0, 1, 0},
		{-1, 0, 0, 0, 7, 0, 0, 3, 0, 0, 0, -2},
	}
	wantIdx := [][]int32{
		{1, 6, 8}, // -8, 5, -3
		{2, 3, 5}, // 4, -6 and, of the 2s at 3 (kept from step 0) and 8, the lower index
		{4, 7, 8}, // 7, 3, 2 (kept from step 1)
	}
	in, sent := make([]float32, 12), make([]float32, 12)
	for step, grad := range grads {
		i, d := run(grad, 0.25) // k = 3 of 12
		if !slices.Equal(i, wantIdx[step]) {
			t.Errorf("step %d: sent %v, want %v", step, i, wantIdx[step])
		}
		for j := range in {
			in[j] += grad[j]
			sent[j] += d[j]
		}
	}
	_, left := run(make([]float32, 12), 1) // sends, and so shows, the residual
	if want := []float32{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, -1}; !slices.Equal(left, want) {
		t.Errorf("residual after 3 steps: %v, want %v", left, want)
	}
	for j := range in {
		if sent[j]+left[j] != in[j] {
			t.Errorf("entry %d: sent %v + kept %v, want the sum of the gradients %v", j, sent[j], left[j], in[j])
		}
	}
	if _, again := run(make([]float32, 12), 1); slices.ContainsFunc(again, func(x float32) bool { return x != 0 }) {
		t.Errorf("after a step at ratio 1, the residual is %v, want zeros", again)
	}
}

func TestTopKCompressBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grad  tensor.DType
		ratio *tensor.Tensor // a constant
		want  string
	}{
		{"float64 gradient", tensor.Float64, tensor.Scalar(float32(0.5)), "gradient must be float32, got float64"},
		{"float64 ratio", tensor.Float32, tensor.Scalar(0.5), "ratio must be float32, got float64"},
		{"vector ratio", tensor.Float32, tensor.MustFromSlice([]float32{0.5}, 1), "ratio must be a scalar, got shape [1]"},
		{"zero ratio", tensor.Float32, tensor.Scalar(float32(0)), "ratio must be in (0, 1]"},
		{"ratio above 1", tensor.Float32, tensor.Scalar(float32(1.01)), "ratio must be in (0, 1]"},
	} {
		s := graph.NewScope()
		ops.TopKCompress(s, ops.Placeholder(s, "g", tc.grad, tensor.MakeShape(-1, 2)), ops.Const(s, tc.ratio))
		if err := s.Err(); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "TopKCompress") {
			t.Errorf("%s: error %v, want one naming the op and saying %q", tc.name, err, tc.want)
		}
	}
}
