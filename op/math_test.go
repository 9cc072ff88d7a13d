package op_test

import (
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// mathInput is a placeholder "float32[?,3]" or, for a *tensor.Tensor, a constant.
type mathInput any

func mathBuild(t *testing.T, opName string, inputs []mathInput, attrs map[string]any) (graph.Output, error) {
	t.Helper()
	s := graph.NewScope()
	var ins []graph.Output
	for _, in := range inputs {
		switch v := in.(type) {
		case string:
			i := strings.IndexAny(v, "[<")
			dt, err := tensor.ParseDType(v[:i])
			if err != nil {
				t.Fatal(err)
			}
			sh, err := tensor.ParseShape(v[i:])
			if err != nil {
				t.Fatal(err)
			}
			ins = append(ins, ops.Placeholder(s, "x", dt, sh))
		case *tensor.Tensor:
			ins = append(ins, ops.Const(s, v))
		}
	}
	out := s.Out(opName, "node", ins, attrs)
	return out, s.Err()
}

func TestMathInfer(t *testing.T) {
	shape := func(d ...int32) *tensor.Tensor { return tensor.MustFromSlice(d, len(d)) }
	tests := []struct {
		op     string
		inputs []mathInput
		attrs  map[string]any
		want   string // "dtype[shape]" or, for an error, "error: substring"
	}{
		{"Add", []mathInput{"float32[2,3]", "float32[3]"}, nil, "float32[2,3]"},
		{"Add", []mathInput{"float32[?,1]", "float32[1,5]"}, nil, "float32[?,5]"},
		{"Add", []mathInput{"float32[]", "float32[4,1,2]"}, nil, "float32[4,1,2]"},
		{"Add", []mathInput{"int32[2]", "int32[2]"}, nil, "int32[2]"},
		{"Add", []mathInput{"float32[2,3]", "float32[4]"}, nil, "error: [2,3] and [4] cannot be broadcast"},
		{"Add", []mathInput{"float32[2]", "float64[2]"}, nil, "error: different dtypes"},
		{"Add", []mathInput{"bool[2]", "bool[2]"}, nil, "error: dtype bool"},
		{"Mul", []mathInput{"float64<unknown>", "float64[3]"}, nil, "float64<unknown>"},
		{"Pow", []mathInput{"int32[2]", "int32[2]"}, nil, "error: dtype int32"},
		{"Greater", []mathInput{"float32[2,1]", "float32[3]"}, nil, "bool[2,3]"},
		{"Equal", []mathInput{"bool[2]", "bool[]"}, nil, "bool[2]"},
		{"LogicalAnd", []mathInput{"bool[2]", "bool[2]"}, nil, "bool[2]"},
		{"LogicalOr", []mathInput{"float32[2]", "float32[2]"}, nil, "error: dtype float32"},
		{"Neg", []mathInput{"int64[5]"}, nil, "int64[5]"},
		{"Exp", []mathInput{"float32[?,5]"}, nil, "float32[?,5]"},
		{"Log", []mathInput{"int32[5]"}, nil, "error: dtype int32"},
		{"LogicalNot", []mathInput{"bool[5]"}, nil, "bool[5]"},
		{"Cast", []mathInput{"float32[2,3]"}, map[string]any{"dtype": tensor.Int64}, "int64[2,3]"},
		// Select: TensorFlow 1's rules (array_ops.cc, "Select"): t and e
		// one shape; cond a scalar, a vector of t's first dimension, or t's shape.
		{"Select", []mathInput{"bool[]", "float32[2,3]", "float32[2,3]"}, nil, "float32[2,3]"},
		{"Select", []mathInput{"bool[2]", "float32[2,3]", "float32[?,3]"}, nil, "float32[2,3]"},
		{"Select", []mathInput{"bool[2]", "float32[?,3]", "float32[?,3]"}, nil, "float32[2,3]"},
		{"Select", []mathInput{"bool[3]", "float32[3,3]", "float32[3,3]"}, nil, "float32[3,3]"},
		{"Select", []mathInput{"bool[2,3]", "float32[?,3]", "float32[2,?]"}, nil, "float32[2,3]"},
		{"Select", []mathInput{"bool[?,3]", "float32[2,?]", "float32[2,?]"}, nil, "float32[2,3]"},
		{"Select", []mathInput{"bool[3]", "float32[3]", "float32[3]"}, nil, "float32[3]"},
		{"Select", []mathInput{"bool<unknown>", "float32[2,3]", "float32[2,3]"}, nil, "float32[2,3]"},
		{"Select", []mathInput{"bool[2]", "float32<unknown>", "float32<unknown>"}, nil, "float32<unknown>"},
		{"Select", []mathInput{"bool[2,1]", "float32[2,3]", "float32[2,3]"}, nil,
			"error: cond has shape [2,1], t and e have shape [2,3]: want cond a scalar, a vector of length 2 or of shape [2,3]"},
		{"Select", []mathInput{"bool[3]", "float32[2,3]", "float32[2,3]"}, nil,
			"error: a vector cond [3] picks rows of t and e, whose first dimension must be its length; t and e have shape [2,3]"},
		{"Select", []mathInput{"bool[2]", "float32[]", "float32[]"}, nil, "error: cond has shape [2], t and e have shape []"},
		{"Select", []mathInput{"bool[2]", "float32[2,3]", "float32[3]"}, nil, "error: t and e must have the same shape, got [2,3] and [3]"},
		{"Select", []mathInput{"float32[2]", "float32[2]", "float32[2]"}, nil, "error: cond must be bool"},
		{"Select", []mathInput{"bool[2]", "float32[2]", "int32[2]"}, nil, "error: different dtypes"},
		// SelectV2 broadcasts the three inputs.
		{"SelectV2", []mathInput{"bool[2,1]", "float32[2,3]", "float32[]"}, nil, "float32[2,3]"},
		{"SelectV2", []mathInput{"bool[3]", "float32[3,3]", "float32[3,3]"}, nil, "float32[3,3]"},
		{"SelectV2", []mathInput{"float32[2]", "float32[2]", "float32[2]"}, nil, "error: cond must be bool"},
		{"SelectV2", []mathInput{"bool[4]", "float32[2,3]", "float32[3]"}, nil, "error: cond"},
		{"AddN", []mathInput{"float32[?,3]", "float32[2,?]", "float32[2,3]"}, nil, "float32[2,3]"},
		{"AddN", []mathInput{"float32[2,3]", "float32[3,2]"}, nil, "error: incompatible"},
		{"Sum", []mathInput{"float32[2,3,4]"}, map[string]any{"axis": []int{1}}, "float32[2,4]"},
		{"Sum", []mathInput{"float32[2,3,4]"}, map[string]any{"axis": []int{-1, 0}, "keep_dims": true}, "float32[1,3,1]"},
		{"Mean", []mathInput{"float32[2,3]"}, nil, "float32[]"},
		{"Mean", []mathInput{"float32<unknown>"}, nil, "float32[]"},
		{"Max", []mathInput{"int32[?,3]"}, map[string]any{"axis": []int{0}}, "int32[3]"},
		{"Min", []mathInput{"float32[2,3]"}, map[string]any{"axis": []int{2}}, "error: axis 2 out of range for rank 2 (input shape [2,3])"},
		{"Prod", []mathInput{"float32[2,3]"}, map[string]any{"axis": []int{1, -1}}, "error: repeated"},
		{"ArgMax", []mathInput{"float32[?,10]"}, map[string]any{"axis": 1}, "int64[?]"},
		{"ArgMin", []mathInput{"float32[4,10]"}, map[string]any{"axis": 0, "output_type": tensor.Int32}, "int32[10]"},
		{"ArgMax", []mathInput{"float32[]"}, map[string]any{"axis": 0}, "error: rank >= 1"},
		{"ArgMax", []mathInput{"float32[4,10]"}, map[string]any{"axis": 1, "output_type": tensor.Float32}, "error: output_type must be int32 or int64"},
		{"MatMul", []mathInput{"float32[?,784]", "float32[784,100]"}, nil, "float32[?,100]"},
		{"MatMul", []mathInput{"float32[3,2]", "float32[4,3]"},
			map[string]any{"transpose_a": true, "transpose_b": true}, "float32[2,4]"},
		{"MatMul", []mathInput{"float32[5,2,3]", "float32[5,3,4]"}, nil, "float32[5,2,4]"},
		{"MatMul", []mathInput{"float32[2,3]", "float32[4,5]"}, nil, "error: inner dimensions differ: [2,3] x [4,5]"},
		{"MatMul", []mathInput{"float32[2,2,3]", "float32[3,3,4]"}, nil, "error: batch dimensions differ: [2,2,3] x [3,3,4]"},
		{"MatMul", []mathInput{"float32[3]", "float32[3,4]"}, nil, "error: [3] x [3,4]"},
		{"MatMul", []mathInput{"int32[2,2]", "int32[2,2]"}, nil, "error: dtype int32"},
		{"MatrixInverse", []mathInput{"float64[5,3,3]"}, nil, "float64[5,3,3]"},
		{"MatrixInverse", []mathInput{"float64[3,4]"}, nil, "error: square"},
		{"MatrixDeterminant", []mathInput{"float32[5,?,3]"}, nil, "float32[5]"},
		{"MatrixDeterminant", []mathInput{"float32[3,3]"}, nil, "float32[]"},
		{"BroadcastTo", []mathInput{"float32[3]", shape(2, 3)}, nil, "float32[2,3]"},
		{"BroadcastTo", []mathInput{"float32[?,1]", shape(2, 3)}, nil, "float32[2,3]"},
		{"BroadcastTo", []mathInput{"float32[3]", "int32[2]"}, nil, "float32[?,3]"},
		{"BroadcastTo", []mathInput{"float32[3]", shape(2, 1)}, nil, "error: cannot broadcast [3] to [2,1]"},
		{"BroadcastTo", []mathInput{"float32[2,3]", shape(3)}, nil, "error: cannot broadcast [2,3] to [3]"},
		{"SumToShape", []mathInput{"float32[4,2,3]", shape(1, 3)}, nil, "float32[1,3]"},
		{"SumToShape", []mathInput{"float32[4,2,3]", shape()}, nil, "float32[]"},
		{"SumToShape", []mathInput{"float32[2,3]", shape(2)}, nil, "error: cannot sum [2,3] to [2]"},
		{"SumToShape", []mathInput{"float32[2,3]", "float32[2]"}, nil, "error: shape must be int32 or int64"},
	}
	for _, tc := range tests {
		out, err := mathBuild(t, tc.op, tc.inputs, tc.attrs)
		if want, isErr := strings.CutPrefix(tc.want, "error: "); isErr {
			if err == nil {
				t.Errorf("%s%v: got %v%v, want error containing %q", tc.op, tc.inputs, out.DType(), out.Shape(), want)
			} else if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"node"`) {
				t.Errorf("%s%v: error %q does not name the node and %q", tc.op, tc.inputs, err, want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s%v: %v", tc.op, tc.inputs, err)
			continue
		}
		if got := out.DType().String() + out.Shape().String(); got != tc.want {
			t.Errorf("%s%v: got %s, want %s", tc.op, tc.inputs, got, tc.want)
		}
	}
}
