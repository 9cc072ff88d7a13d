package op_test

import (
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

func TestRandomInfer(t *testing.T) {
	cases := []struct {
		shape   *tensor.Tensor // nil: a placeholder of shape [3]
		dt      tensor.DType
		want    string
		wantErr string
	}{
		{tensor.MustFromSlice([]int32{2, 3}, 2), tensor.Float32, "float32[2,3]", ""},
		{tensor.MustFromSlice([]int64{4}, 1), tensor.Float64, "float64[4]", ""},
		{nil, tensor.Float32, "float32[?,?,?]", ""},
		{tensor.MustFromSlice([]int32{2, -3}, 2), tensor.Float32, "", "negative"},
		{tensor.MustFromSlice([]float32{2}, 1), tensor.Float32, "", "int32 or int64"},
		{tensor.Scalar(int32(2)), tensor.Float32, "", "vector"},
		{tensor.MustFromSlice([]int32{2}, 1), tensor.Int32, "", "float32 or float64"},
	}
	for _, tc := range cases {
		s := graph.NewScope()
		var shape graph.Output
		if tc.shape == nil {
			shape = s.Out("Placeholder", "p", nil, map[string]any{"dtype": tensor.Int32, "shape": tensor.MakeShape(3)})
		} else {
			shape = s.Out("Const", "c", nil, map[string]any{"value": tc.shape})
		}
		out := s.Out("RandomNormal", "r", []graph.Output{shape}, map[string]any{"dtype": tc.dt})
		if tc.wantErr != "" {
			if err := s.Err(); err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `"r"`) {
				t.Errorf("%v: got error %v, want %q naming the node", tc.shape, err, tc.wantErr)
			}
			continue
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if got := out.DType().String() + out.Shape().String(); got != tc.want {
			t.Errorf("%v: got %s, want %s", tc.shape, got, tc.want)
		}
	}
}
