package cpu

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/distflow/distflow/tensor"
)

// mathRun runs a single-output math kernel (see runKernel).
func mathRun(t testing.TB, op string, attrs map[string]any, inputs ...*tensor.Tensor) (*tensor.Tensor, error) {
	t.Helper()
	out, err := runKernel(t, op, attrs, inputs...)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

func mathF32(shape []int, v ...float32) *tensor.Tensor { return tensor.MustFromSlice(v, shape...) }
func mathF64(shape []int, v ...float64) *tensor.Tensor { return tensor.MustFromSlice(v, shape...) }
func mathI32(shape []int, v ...int32) *tensor.Tensor   { return tensor.MustFromSlice(v, shape...) }
func mathI64(shape []int, v ...int64) *tensor.Tensor   { return tensor.MustFromSlice(v, shape...) }
func mathB(shape []int, v ...bool) *tensor.Tensor      { return tensor.MustFromSlice(v, shape...) }
func mathSh(d ...int) []int                            { return d }

// mathClose reports whether got and want have the same dtype, shape and
// (within tol, relative for large values) elements; NaNs and infinities must match.
func mathClose(got, want *tensor.Tensor, tol float64) bool {
	if got.DType() != want.DType() || !got.StaticShape().Equal(want.StaticShape()) {
		return false
	}
	for i := 0; i < got.NumElements(); i++ {
		g, w := got.Float64At(i), want.Float64At(i)
		switch {
		case math.IsNaN(w) || math.IsInf(w, 0):
			if !(math.IsNaN(w) && math.IsNaN(g)) && g != w {
				return false
			}
		case math.Abs(g-w) > tol*math.Max(1, math.Abs(w)):
			return false
		}
	}
	return true
}

func TestMathKernels(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		op      string
		attrs   map[string]any
		inputs  []*tensor.Tensor
		want    *tensor.Tensor
		wantErr string
	}{
		// Binary arithmetic, every broadcasting pattern.
		{"add same", "Add", nil, []*tensor.Tensor{mathF32(mathSh(2, 2), 1, 2, 3, 4), mathF32(mathSh(2, 2), 10, 20, 30, 40)},
			mathF32(mathSh(2, 2), 11, 22, 33, 44), ""},
		{"add scalar left", "Add", nil, []*tensor.Tensor{mathF32(nil, 1), mathF32(mathSh(3), 1, 2, 3)}, mathF32(mathSh(3), 2, 3, 4), ""},
		{"sub scalar right", "Sub", nil, []*tensor.Tensor{mathF32(mathSh(3), 1, 2, 3), mathF32(nil, 1)}, mathF32(mathSh(3), 0, 1, 2), ""},
		{"sub scalar left", "Sub", nil, []*tensor.Tensor{mathF32(nil, 1), mathF32(mathSh(3), 1, 2, 3)}, mathF32(mathSh(3), 0, -1, -2), ""},
		{"add row", "Add", nil, []*tensor.Tensor{mathF32(mathSh(2, 3), 1, 2, 3, 4, 5, 6), mathF32(mathSh(3), 10, 20, 30)},
			mathF32(mathSh(2, 3), 11, 22, 33, 14, 25, 36), ""},
		{"sub column", "Sub", nil, []*tensor.Tensor{mathF32(mathSh(2, 3), 1, 2, 3, 4, 5, 6), mathF32(mathSh(2, 1), 1, 2)},
			mathF32(mathSh(2, 3), 0, 1, 2, 2, 3, 4), ""},
		{"mul outer", "Mul", nil, []*tensor.Tensor{mathF32(mathSh(2, 1), 1, 2), mathF32(mathSh(1, 3), 1, 2, 3)},
			mathF32(mathSh(2, 3), 1, 2, 3, 2, 4, 6), ""},
		{"mul float64", "Mul", nil, []*tensor.Tensor{mathF64(mathSh(2), 1.5, 2), mathF64(mathSh(2), 2, 0.25)}, mathF64(mathSh(2), 3, 0.5), ""},
		{"add int32", "Add", nil, []*tensor.Tensor{mathI32(mathSh(2), 1, 2), mathI32(nil, 5)}, mathI32(mathSh(2), 6, 7), ""},
		{"add empty", "Add", nil, []*tensor.Tensor{mathF32(mathSh(0, 3)), mathF32(mathSh(3), 1, 2, 3)}, mathF32(mathSh(0, 3)), ""},
		{"add bad shapes", "Add", nil, []*tensor.Tensor{mathF32(mathSh(2, 3), 1, 2, 3, 4, 5, 6), mathF32(mathSh(2), 1, 2)}, nil,
			"[2,3] and [2] cannot be broadcast"},
		{"div", "Div", nil, []*tensor.Tensor{mathF32(mathSh(2), 1, 3), mathF32(nil, 2)}, mathF32(mathSh(2), 0.5, 1.5), ""},
		{"div int truncates", "Div", nil, []*tensor.Tensor{mathI64(mathSh(2), 7, -7), mathI64(nil, 2)}, mathI64(mathSh(2), 3, -3), ""},
		{"div int by zero", "Div", nil, []*tensor.Tensor{mathI32(mathSh(2), 1, 2), mathI32(mathSh(2), 1, 0)}, nil, "division by zero"},
		{"pow", "Pow", nil, []*tensor.Tensor{mathF32(mathSh(3), 2, 3, 4), mathF32(nil, 2)}, mathF32(mathSh(3), 4, 9, 16), ""},
		{"maximum", "Maximum", nil, []*tensor.Tensor{mathF32(mathSh(3), 1, 5, 3), mathF32(nil, 2)}, mathF32(mathSh(3), 2, 5, 3), ""},
		{"minimum int", "Minimum", nil, []*tensor.Tensor{mathI32(mathSh(3), 1, 5, 3), mathI32(nil, 2)}, mathI32(mathSh(3), 1, 2, 2), ""},
		{"squared difference", "SquaredDifference", nil, []*tensor.Tensor{mathF32(mathSh(2), 1, 5), mathF32(mathSh(2), 3, 1)},
			mathF32(mathSh(2), 4, 16), ""},
		// Comparisons and logic.
		{"greater", "Greater", nil, []*tensor.Tensor{mathF32(mathSh(3), 1, 2, 3), mathF32(nil, 2)}, mathB(mathSh(3), false, false, true), ""},
		{"greater equal", "GreaterEqual", nil, []*tensor.Tensor{mathI64(mathSh(3), 1, 2, 3), mathI64(nil, 2)}, mathB(mathSh(3), false, true, true), ""},
		{"less", "Less", nil, []*tensor.Tensor{mathF64(mathSh(3), 1, 2, 3), mathF64(nil, 2)}, mathB(mathSh(3), true, false, false), ""},
		{"less equal", "LessEqual", nil, []*tensor.Tensor{mathI32(mathSh(3), 1, 2, 3), mathI32(nil, 2)}, mathB(mathSh(3), true, true, false), ""},
		{"equal", "Equal", nil, []*tensor.Tensor{mathI64(mathSh(2, 2), 1, 2, 3, 4), mathI64(mathSh(2), 1, 4)},
			mathB(mathSh(2, 2), true, false, false, true), ""},
		{"not equal bool", "NotEqual", nil, []*tensor.Tensor{mathB(mathSh(2), true, false), mathB(nil, true)}, mathB(mathSh(2), false, true), ""},
		{"and", "LogicalAnd", nil, []*tensor.Tensor{mathB(mathSh(2), true, false), mathB(mathSh(2), true, true)}, mathB(mathSh(2), true, false), ""},
		{"or", "LogicalOr", nil, []*tensor.Tensor{mathB(mathSh(2), true, false), mathB(mathSh(2), false, false)}, mathB(mathSh(2), true, false), ""},
		{"not", "LogicalNot", nil, []*tensor.Tensor{mathB(mathSh(2), true, false)}, mathB(mathSh(2), false, true), ""},
		// Unary.
		{"neg", "Neg", nil, []*tensor.Tensor{mathF32(mathSh(2), 1, -2)}, mathF32(mathSh(2), -1, 2), ""},
		{"abs int", "Abs", nil, []*tensor.Tensor{mathI32(mathSh(3), 1, -2, 0)}, mathI32(mathSh(3), 1, 2, 0), ""},
		{"sign", "Sign", nil, []*tensor.Tensor{mathF64(mathSh(3), 3, -2, 0)}, mathF64(mathSh(3), 1, -1, 0), ""},
		{"sign int64", "Sign", nil, []*tensor.Tensor{mathI64(mathSh(3), 3, -2, 0)}, mathI64(mathSh(3), 1, -1, 0), ""},
		{"exp", "Exp", nil, []*tensor.Tensor{mathF32(mathSh(2), 0, 1)}, mathF32(mathSh(2), 1, float32(math.E)), ""},
		{"log", "Log", nil, []*tensor.Tensor{mathF64(mathSh(3), 1, math.E, 0)}, mathF64(mathSh(3), 0, 1, -inf), ""},
		{"square", "Square", nil, []*tensor.Tensor{mathI64(mathSh(2), -3, 4)}, mathI64(mathSh(2), 9, 16), ""},
		{"sqrt", "Sqrt", nil, []*tensor.Tensor{mathF32(mathSh(2), 4, 9)}, mathF32(mathSh(2), 2, 3), ""},
		{"rsqrt", "Rsqrt", nil, []*tensor.Tensor{mathF32(mathSh(2), 4, 0.25)}, mathF32(mathSh(2), 0.5, 2), ""},
		{"reciprocal", "Reciprocal", nil, []*tensor.Tensor{mathF64(mathSh(2), 4, -0.5)}, mathF64(mathSh(2), 0.25, -2), ""},
		// Cast, Select, AddN.
		{"cast f32 to i32", "Cast", map[string]any{"dtype": tensor.Int32}, []*tensor.Tensor{mathF32(mathSh(3), 1.7, -1.7, 0)},
			mathI32(mathSh(3), 1, -1, 0), ""},
		{"cast bool to f32", "Cast", map[string]any{"dtype": tensor.Float32}, []*tensor.Tensor{mathB(mathSh(2), true, false)},
			mathF32(mathSh(2), 1, 0), ""},
		{"cast f64 to bool", "Cast", map[string]any{"dtype": tensor.Bool}, []*tensor.Tensor{mathF64(mathSh(2), 0.5, 0)},
			mathB(mathSh(2), true, false), ""},
		{"cast i64 to f64", "Cast", map[string]any{"dtype": tensor.Float64}, []*tensor.Tensor{mathI64(mathSh(2), 3, -4)},
			mathF64(mathSh(2), 3, -4), ""},
		{"select", "Select", nil, []*tensor.Tensor{mathB(mathSh(3), true, false, true), mathF32(mathSh(3), 1, 2, 3), mathF32(mathSh(3), 4, 5, 6)},
			mathF32(mathSh(3), 1, 5, 3), ""},
		// TF1's Select: a vector cond picks rows. With a square t,
		// broadcasting cond [2] against [2,2] would pick columns instead:
		// rows give [[1,2],[7,8]], columns would give [[1,6],[3,8]].
		{"select rows square", "Select", nil, []*tensor.Tensor{mathB(mathSh(2), true, false),
			mathF32(mathSh(2, 2), 1, 2, 3, 4), mathF32(mathSh(2, 2), 5, 6, 7, 8)}, mathF32(mathSh(2, 2), 1, 2, 7, 8), ""},
		{"select rows rank 3", "Select", nil, []*tensor.Tensor{mathB(mathSh(2), false, true),
			mathI64(mathSh(2, 1, 2), 1, 2, 3, 4), mathI64(mathSh(2, 1, 2), 5, 6, 7, 8)}, mathI64(mathSh(2, 1, 2), 5, 6, 3, 4), ""},
		{"select scalar true", "Select", nil, []*tensor.Tensor{mathB(nil, true),
			mathI32(mathSh(2, 2), 1, 2, 3, 4), mathI32(mathSh(2, 2), 5, 6, 7, 8)}, mathI32(mathSh(2, 2), 1, 2, 3, 4), ""},
		{"select scalar false", "Select", nil, []*tensor.Tensor{mathB(nil, false),
			mathB(mathSh(2), true, true), mathB(mathSh(2), false, true)}, mathB(mathSh(2), false, true), ""},
		{"select elements", "Select", nil, []*tensor.Tensor{mathB(mathSh(2, 2), true, false, false, true),
			mathF64(mathSh(2, 2), 1, 2, 3, 4), mathF64(mathSh(2, 2), 5, 6, 7, 8)}, mathF64(mathSh(2, 2), 1, 6, 7, 4), ""},
		{"select no broadcast", "Select", nil, []*tensor.Tensor{mathB(mathSh(2, 1), true, false), mathF32(mathSh(2, 2), 1, 2, 3, 4),
			mathF32(mathSh(2, 2), 0, 0, 0, 0)}, nil, "cond has shape [2,1], t and e have shape [2,2]"},
		{"select rows mismatch", "Select", nil, []*tensor.Tensor{mathB(mathSh(3), true, false, true), mathF32(mathSh(2, 2), 1, 2, 3, 4),
			mathF32(mathSh(2, 2), 0, 0, 0, 0)}, nil, "a vector cond [3] picks rows of t and e"},
		{"select t e differ", "Select", nil, []*tensor.Tensor{mathB(nil, true), mathF32(mathSh(2), 1, 2), mathF32(nil, 0)},
			nil, "t and e must have the same shape, got [2] and []"},
		// SelectV2 broadcasts: the same cond [2] picks columns of a square t.
		{"selectv2 broadcast", "SelectV2", nil, []*tensor.Tensor{mathB(mathSh(2, 1), true, false), mathF32(mathSh(2, 2), 1, 2, 3, 4), mathF32(nil, 0)},
			mathF32(mathSh(2, 2), 1, 2, 0, 0), ""},
		{"selectv2 columns", "SelectV2", nil, []*tensor.Tensor{mathB(mathSh(2), true, false),
			mathF32(mathSh(2, 2), 1, 2, 3, 4), mathF32(mathSh(2, 2), 5, 6, 7, 8)}, mathF32(mathSh(2, 2), 1, 6, 3, 8), ""},
		{"addn", "AddN", nil, []*tensor.Tensor{mathF32(mathSh(2), 1, 2), mathF32(mathSh(2), 3, 4), mathF32(mathSh(2), 5, 6)},
			mathF32(mathSh(2), 9, 12), ""},
		{"addn shapes differ", "AddN", nil, []*tensor.Tensor{mathF32(mathSh(2), 1, 2), mathF32(mathSh(1), 3)}, nil, "input 1 is float32[1]"},
		// Reductions.
		{"sum all", "Sum", nil, []*tensor.Tensor{mathF32(mathSh(2, 3), 1, 2, 3, 4, 5, 6)}, mathF32(nil, 21), ""},
		{"sum last", "Sum", map[string]any{"axis": []int{-1}}, []*tensor.Tensor{mathF32(mathSh(2, 3), 1, 2, 3, 4, 5, 6)},
			mathF32(mathSh(2), 6, 15), ""},
		{"sum first keep", "Sum", map[string]any{"axis": []int{0}, "keep_dims": true}, []*tensor.Tensor{mathF32(mathSh(2, 3), 1, 2, 3, 4, 5, 6)},
			mathF32(mathSh(1, 3), 5, 7, 9), ""},
		{"sum middle", "Sum", map[string]any{"axis": []int{1}}, []*tensor.Tensor{mathI32(mathSh(2, 2, 2), 1, 2, 3, 4, 5, 6, 7, 8)},
			mathI32(mathSh(2, 2), 4, 6, 12, 14), ""},
		{"sum outer axes", "Sum", map[string]any{"axis": []int{0, 2}}, []*tensor.Tensor{mathI64(mathSh(2, 2, 2), 1, 2, 3, 4, 5, 6, 7, 8)},
			mathI64(mathSh(2), 14, 22), ""},
		{"sum empty axis", "Sum", map[string]any{"axis": []int{0}}, []*tensor.Tensor{mathF32(mathSh(0, 2))}, mathF32(mathSh(2), 0, 0), ""},
		{"sum bad axis", "Sum", map[string]any{"axis": []int{2}}, []*tensor.Tensor{mathF32(mathSh(2), 1, 2)}, nil, "axis 2 out of range for rank 1"},
		{"mean", "Mean", map[string]any{"axis": []int{1}}, []*tensor.Tensor{mathF32(mathSh(2, 2), 1, 2, 3, 5)}, mathF32(mathSh(2), 1.5, 4), ""},
		{"mean int", "Mean", nil, []*tensor.Tensor{mathI32(mathSh(3), 1, 2, 4)}, mathI32(nil, 2), ""},
		{"max", "Max", map[string]any{"axis": []int{0}}, []*tensor.Tensor{mathF64(mathSh(2, 2), 1, 4, 3, 2)}, mathF64(mathSh(2), 3, 4), ""},
		{"max empty", "Max", nil, []*tensor.Tensor{mathF32(mathSh(0))}, mathF32(nil, float32(math.Inf(-1))), ""},
		{"min int", "Min", map[string]any{"axis": []int{1}}, []*tensor.Tensor{mathI32(mathSh(2, 2), 1, 4, 3, 2)}, mathI32(mathSh(2), 1, 2), ""},
		{"prod", "Prod", map[string]any{"axis": []int{1}}, []*tensor.Tensor{mathF32(mathSh(2, 3), 1, 2, 3, 4, 5, 6)},
			mathF32(mathSh(2), 6, 120), ""},
		{"argmax", "ArgMax", map[string]any{"axis": 1}, []*tensor.Tensor{mathF32(mathSh(2, 3), 1, 3, 3, 9, 2, 5)},
			mathI64(mathSh(2), 1, 0), ""},
		{"argmin axis 0 int32", "ArgMin", map[string]any{"axis": 0, "output_type": tensor.Int32},
			[]*tensor.Tensor{mathF32(mathSh(2, 3), 1, 3, 3, 0, 2, 5)}, mathI32(mathSh(3), 1, 1, 0), ""},
		{"argmax empty axis", "ArgMax", map[string]any{"axis": 0}, []*tensor.Tensor{mathF32(mathSh(0, 2))}, nil, "empty axis"},
		// Matrices.
		{"matmul", "MatMul", nil, []*tensor.Tensor{mathF32(mathSh(2, 3), 1, 2, 3, 4, 5, 6), mathF32(mathSh(3, 1), 1, 0, -1)},
			mathF32(mathSh(2, 1), -2, -2), ""},
		{"matmul ta", "MatMul", map[string]any{"transpose_a": true}, []*tensor.Tensor{mathF32(mathSh(3, 2), 1, 4, 2, 5, 3, 6), mathF32(mathSh(3, 1), 1, 0, -1)},
			mathF32(mathSh(2, 1), -2, -2), ""},
		{"matmul tb", "MatMul", map[string]any{"transpose_b": true}, []*tensor.Tensor{mathF64(mathSh(2, 3), 1, 2, 3, 4, 5, 6), mathF64(mathSh(1, 3), 1, 0, -1)},
			mathF64(mathSh(2, 1), -2, -2), ""},
		{"matmul ta tb", "MatMul", map[string]any{"transpose_a": true, "transpose_b": true},
			[]*tensor.Tensor{mathF32(mathSh(3, 2), 1, 4, 2, 5, 3, 6), mathF32(mathSh(1, 3), 1, 0, -1)}, mathF32(mathSh(2, 1), -2, -2), ""},
		{"matmul batch", "MatMul", nil, []*tensor.Tensor{mathF32(mathSh(2, 1, 2), 1, 2, 3, 4), mathF32(mathSh(2, 2, 1), 1, 1, 2, 0)},
			mathF32(mathSh(2, 1, 1), 3, 6), ""},
		{"matmul empty inner", "MatMul", nil, []*tensor.Tensor{mathF32(mathSh(2, 0)), mathF32(mathSh(0, 2))}, mathF32(mathSh(2, 2), 0, 0, 0, 0), ""},
		{"matmul inner differ", "MatMul", nil, []*tensor.Tensor{mathF32(mathSh(2, 3), 1, 2, 3, 4, 5, 6), mathF32(mathSh(2, 1), 1, 2)}, nil,
			"inner dimensions differ: [2,3] x [2,1]"},
		{"inverse", "MatrixInverse", nil, []*tensor.Tensor{mathF64(mathSh(2, 2), 4, 7, 2, 6)}, mathF64(mathSh(2, 2), 0.6, -0.7, -0.2, 0.4), ""},
		{"inverse pivoting", "MatrixInverse", nil, []*tensor.Tensor{mathF32(mathSh(2, 2), 0, 1, 1, 0)}, mathF32(mathSh(2, 2), 0, 1, 1, 0), ""},
		{"inverse singular", "MatrixInverse", nil, []*tensor.Tensor{mathF64(mathSh(2, 2, 2), 1, 0, 0, 1, 1, 2, 2, 4)}, nil, "matrix 1 of [2,2,2] is singular"},
		{"inverse not square", "MatrixInverse", nil, []*tensor.Tensor{mathF64(mathSh(1, 2), 1, 2)}, nil, "square"},
		{"determinant batch", "MatrixDeterminant", nil, []*tensor.Tensor{mathF32(mathSh(3, 2, 2), 4, 7, 2, 6, 0, 1, 1, 0, 1, 2, 2, 4)},
			mathF32(mathSh(3), 10, -1, 0), ""},
		{"determinant 3x3", "MatrixDeterminant", nil, []*tensor.Tensor{mathF64(mathSh(3, 3), 2, 0, 1, 1, 3, 2, 1, 1, 2)}, mathF64(nil, 6), ""},
		{"determinant 0x0", "MatrixDeterminant", nil, []*tensor.Tensor{mathF64(mathSh(0, 0))}, mathF64(nil, 1), ""},
		// Broadcasting primitives.
		{"broadcast to", "BroadcastTo", nil, []*tensor.Tensor{mathF32(mathSh(2, 1), 1, 2), mathI32(mathSh(3), 2, 2, 3)},
			mathF32(mathSh(2, 2, 3), 1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2), ""},
		{"broadcast to bad", "BroadcastTo", nil, []*tensor.Tensor{mathF32(mathSh(2), 1, 2), mathI64(mathSh(1), 3)}, nil, "cannot broadcast [2] to [3]"},
		{"sum to shape", "SumToShape", nil, []*tensor.Tensor{mathF32(mathSh(2, 2, 3), 1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2), mathI32(mathSh(2), 2, 1)},
			mathF32(mathSh(2, 1), 6, 12), ""},
		{"sum to scalar", "SumToShape", nil, []*tensor.Tensor{mathF64(mathSh(2, 2), 1, 2, 3, 4), mathI32(mathSh(0))}, mathF64(nil, 10), ""},
		{"sum to bad", "SumToShape", nil, []*tensor.Tensor{tensor.New(tensor.Float32, 2, 3), mathI32(mathSh(2), 2, 2)}, nil, "cannot sum [2,3] to [2,2]"},
	}
	for _, tc := range tests {
		got, err := mathRun(t, tc.op, tc.attrs, tc.inputs...)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: got error %v, want one containing %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !mathClose(got, tc.want, 1e-6) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// mathRandom returns a float32 tensor of shape with values in [-1, 1).
func mathRandom(r *rand.Rand, shape ...int) *tensor.Tensor {
	t := tensor.New(tensor.Float32, shape...)
	for i := range t.Float32s() {
		t.Float32s()[i] = float32(2*r.Float64() - 1)
	}
	return t
}

// mathUnravel returns the multi-index of flat index i in shape.
func mathUnravel(i int, shape []int) []int {
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		idx[d] = i % shape[d]
		i /= shape[d]
	}
	return idx
}

// mathNaiveAt returns the element of x that broadcasting maps to the output
// multi-index idx.
func mathNaiveAt(x *tensor.Tensor, idx []int) float64 {
	off, shape := 0, x.Shape()
	for d := range shape {
		i := idx[len(idx)-len(shape)+d]
		if shape[d] == 1 {
			i = 0
		}
		off = off*shape[d] + i
	}
	return x.Float64At(off)
}

// TestMathBroadcastReference checks the run-based broadcasting against a
// per-element reference, including sizes that take the parallel paths.
func TestMathBroadcastReference(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	pairs := [][2][]int{
		{{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{3, 4}, {3, 1}}, {{1}, {5, 2}}, {{2, 1, 4}, {3, 1}},
		{{2, 3, 4, 5}, {3, 1, 5}}, {{4, 1, 3, 1}, {1, 2, 1, 6}}, {{300, 200}, {200}}, {{70000}, {1}},
		{{2, 40000}, {2, 1}}, {{1, 1}, {1}}, {{}, {}}, {{5, 1, 1}, {1, 1, 7}},
	}
	for _, p := range pairs {
		a, b := mathRandom(r, p[0]...), mathRandom(r, p[1]...)
		for _, op := range []struct {
			name string
			f    func(x, y float64) float64
		}{
			{"Add", func(x, y float64) float64 { return x + y }},
			{"Sub", func(x, y float64) float64 { return x - y }},
			{"Maximum", math.Max},
			{"Greater", func(x, y float64) float64 { return map[bool]float64{true: 1}[x > y] }},
		} {
			got, err := mathRun(t, op.name, nil, a, b)
			if err != nil {
				t.Fatalf("%s %v %v: %v", op.name, p[0], p[1], err)
			}
			n := got.NumElements()
			for i := 0; i < n; i++ {
				idx := mathUnravel(i, got.Shape())
				want := float64(float32(op.f(mathNaiveAt(a, idx), mathNaiveAt(b, idx))))
				if got.Float64At(i) != want {
					t.Fatalf("%s %v %v: element %v = %g, want %g", op.name, p[0], p[1], idx, got.Float64At(i), want)
				}
			}
		}
	}
}

// TestMathReduceReference checks reductions over every axis subset against a
// per-element reference, including sizes that take the parallel paths.
func TestMathReduceReference(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for _, shape := range [][]int{{2, 3, 4}, {1, 5, 1, 3}, {300, 200}, {70000}, {3, 0, 2}, {2, 33000}} {
		x := tensor.New(tensor.Float64, shape...)
		for i := range x.Float64s() {
			x.Float64s()[i] = 2*r.Float64() - 1
		}
		rank := len(shape)
		for mask := 0; mask < 1<<rank; mask++ {
			var axes []int
			for d := 0; d < rank; d++ {
				if mask&(1<<d) != 0 {
					axes = append(axes, d)
				}
			}
			if len(axes) == 0 {
				continue // an empty list means all axes, covered by the full mask
			}
			for _, op := range []string{"Sum", "Max", "Mean"} {
				got, err := mathRun(t, op, map[string]any{"axis": axes, "keep_dims": true}, x)
				if err != nil {
					t.Fatalf("%s %v over %v: %v", op, shape, axes, err)
				}
				want := tensor.New(tensor.Float64, got.Shape()...)
				count := tensor.NumElements(shape) / max(1, got.NumElements())
				init := map[string]float64{"Sum": 0, "Mean": 0, "Max": math.Inf(-1)}[op]
				for i := range want.Float64s() {
					want.Float64s()[i] = init
				}
				for i := 0; i < x.NumElements(); i++ {
					idx := mathUnravel(i, shape)
					o := 0
					for d := range shape {
						if mask&(1<<d) != 0 {
							idx[d] = 0
						}
						o = o*got.Shape()[d] + idx[d]
					}
					v := x.Float64At(i)
					switch op {
					case "Max":
						want.Float64s()[o] = math.Max(want.Float64s()[o], v)
					case "Mean":
						want.Float64s()[o] += v / float64(count)
					default:
						want.Float64s()[o] += v
					}
				}
				if op == "Mean" && count == 0 {
					continue // 0/0
				}
				if !mathClose(got, want, 1e-9) {
					t.Fatalf("%s %v over %v: got %v, want %v", op, shape, axes, got, want)
				}
			}
		}
	}
}

// TestMathMatrixReference checks inverses and determinants of random
// matrices: A A^-1 = I, and det(A B) = det(A) det(B).
func TestMathMatrixReference(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	const n = 6
	a, b := tensor.New(tensor.Float64, n, n), tensor.New(tensor.Float64, n, n)
	for i := range a.Float64s() {
		a.Float64s()[i], b.Float64s()[i] = r.NormFloat64(), r.NormFloat64()
	}
	inv, err := mathRun(t, "MatrixInverse", nil, a)
	if err != nil {
		t.Fatal(err)
	}
	prod, err := mathRun(t, "MatMul", nil, a, inv)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			want := map[bool]float64{true: 1}[i == j]
			if got := prod.Float64s()[i*n+j]; math.Abs(got-want) > 1e-9 {
				t.Fatalf("A A^-1 [%d,%d] = %g, want %g", i, j, got, want)
			}
		}
	}
	ab, err := mathRun(t, "MatMul", nil, a, b)
	if err != nil {
		t.Fatal(err)
	}
	var dets [3]float64
	for i, m := range []*tensor.Tensor{a, b, ab} {
		d, err := mathRun(t, "MatrixDeterminant", nil, m)
		if err != nil {
			t.Fatal(err)
		}
		dets[i] = d.Float64At(0)
	}
	if math.Abs(dets[0]*dets[1]-dets[2]) > 1e-9*math.Abs(dets[2]) {
		t.Errorf("det(A) det(B) = %g, det(AB) = %g", dets[0]*dets[1], dets[2])
	}
}

func BenchmarkMathAddRow(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	x, y := mathRandom(r, 256, 1024), mathRandom(r, 1024)
	for b.Loop() {
		if _, err := mathRun(b, "Add", nil, x, y); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(256 * 1024 * 4)
}

func BenchmarkMathMulSame(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	x, y := mathRandom(r, 256, 1024), mathRandom(r, 256, 1024)
	for b.Loop() {
		if _, err := mathRun(b, "Mul", nil, x, y); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(256 * 1024 * 4)
}

func BenchmarkMathSumFirstAxis(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	x := mathRandom(r, 256, 1024)
	for b.Loop() {
		if _, err := mathRun(b, "Sum", map[string]any{"axis": []int{0}}, x); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(256 * 1024 * 4)
}

func BenchmarkMathMeanLastAxis(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	x := mathRandom(r, 256, 1024)
	for b.Loop() {
		if _, err := mathRun(b, "Mean", map[string]any{"axis": []int{1}}, x); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(256 * 1024 * 4)
}
