package ops_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// TestConstNested: nested Go slices make constants of their rank, as
// TensorFlow's Go API (op.Const) and tf.constant take them: a user wrote
// ops.Const(s, [][]float32{{1, 2, 0.5}}) for a [1, 3] weight and was told
// "unsupported constant type [][]float32". Ragged slices are refused,
// naming where.
func TestConstNested(t *testing.T) {
	for _, c := range []struct {
		value any
		dt    tensor.DType
		shape []int
		want  []float64
	}{
		{[][]float32{{1, 2, 0.5}}, tensor.Float32, []int{1, 3}, []float64{1, 2, 0.5}},
		{[][]float64{{1}, {2}}, tensor.Float64, []int{2, 1}, []float64{1, 2}},
		{[][]int{{1, 2}, {3, 4}}, tensor.Int32, []int{2, 2}, []float64{1, 2, 3, 4}},
		{[][]int{{1 << 40}, {2}}, tensor.Int64, []int{2, 1}, []float64{1 << 40, 2}},
		{[][][]int64{{{1, 2}}, {{3, 4}}, {{5, 6}}}, tensor.Int64, []int{3, 1, 2}, []float64{1, 2, 3, 4, 5, 6}},
		{[][]bool{{true, false}}, tensor.Bool, []int{1, 2}, []float64{1, 0}},
		{[][]float32{}, tensor.Float32, []int{0, 0}, nil},
		{[][]int32{{}, {}}, tensor.Int32, []int{2, 0}, nil},
	} {
		s := graph.NewScope()
		out := ops.Const(s, c.value)
		if err := s.Err(); err != nil {
			t.Errorf("Const(%v): %v", c.value, err)
			continue
		}
		v := out.Node.AttrTensor("value")
		var got []float64
		for i := range v.NumElements() {
			got = append(got, v.Float64At(i))
		}
		if v.DType() != c.dt || !slices.Equal(v.Shape(), c.shape) || !slices.Equal(got, c.want) {
			t.Errorf("Const(%v) = %v %v %v; want %v %v %v", c.value, v.DType(), v.Shape(), got, c.dt, c.shape, c.want)
		}
	}
	for _, c := range []struct {
		value any
		want  string
	}{
		{[][]float32{{1, 2}, {3}}, "ragged"},
		{[][]string{{"a"}}, "unsupported constant type [][]string"},
		{[]int16{1}, "unsupported constant type []int16"},
		{nil, "unsupported constant type <nil>"},
	} {
		s := graph.NewScope()
		ops.Const(s, c.value)
		if err := s.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Const(%v): error %v, want one saying %q", c.value, err, c.want)
		}
	}
}
