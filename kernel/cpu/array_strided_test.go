package cpu

import (
	"strings"
	"testing"

	"github.com/distflow/distflow/tensor"
)

// TestStridedSliceKernelChecks checks the kernels' own checks (the inputs
// are placeholders of unknown shape, so shape inference passes them) and
// the scatter of StridedSliceGrad.
func TestStridedSliceKernelChecks(t *testing.T) {
	x := arrayF32([]int{2, 3}, 1, 2, 3, 4, 5, 6)
	for _, tc := range []struct {
		name   string
		op     string
		attrs  map[string]any
		inputs []*tensor.Tensor
		want   *tensor.Tensor
		err    string
	}{
		// x[1, ::-2]: 6, 4.
		{"slice", "StridedSlice", map[string]any{"shrink_axis_mask": 1, "begin_mask": 2, "end_mask": 2},
			[]*tensor.Tensor{x, arrayI32(1, 0), arrayI32(2, 0), arrayI32(1, -2)}, arrayF32([]int{2}, 6, 4), ""},
		{"index out of range", "StridedSlice", map[string]any{"shrink_axis_mask": 1},
			[]*tensor.Tensor{x, arrayI32(-3), arrayI32(-2), arrayI32(1)}, nil,
			"slicing shape [2,3] with begin [-3], end [-2], strides [1]: index -3 of subscript 0 is out of range"},
		{"zero stride", "StridedSlice", nil, []*tensor.Tensor{x, arrayI32(0), arrayI32(1), arrayI32(0)}, nil, "strides[0] must be non-zero"},
		{"lengths", "StridedSlice", nil, []*tensor.Tensor{x, arrayI32(0), arrayI32(1, 1), arrayI32(1)}, nil, "one length"},
		// The adjoint of x[1, ::-2] for dy [10, 20]: row 1 gets 20, _, 10.
		{"grad", "StridedSliceGrad", map[string]any{"shrink_axis_mask": 1, "begin_mask": 2, "end_mask": 2},
			[]*tensor.Tensor{arrayI32(2, 3), arrayI32(1, 0), arrayI32(2, 0), arrayI32(1, -2), arrayF32([]int{2}, 10, 20)},
			arrayF32([]int{2, 3}, 0, 0, 0, 20, 0, 10), ""},
		{"grad dy shape", "StridedSliceGrad", map[string]any{"shrink_axis_mask": 1},
			[]*tensor.Tensor{arrayI32(2, 3), arrayI32(1), arrayI32(2), arrayI32(1), arrayF32([]int{2}, 10, 20)}, nil,
			"dy has shape [2], but slicing shape [2,3] gives [3]"},
	} {
		out, err := arrayRun(t, tc.op, tc.attrs, tc.inputs...)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.op) {
				t.Errorf("%s: err = %v, want one naming the node and %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !tensor.Equal(out[0], tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, out[0], tc.want)
		}
	}
}
