package op_test

import (
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

func TestStateInfer(t *testing.T) {
	type in struct {
		variable bool // a Variable node, else a Placeholder
		dt       tensor.DType
		shape    string
	}
	v := func(dt tensor.DType, shape string) in { return in{true, dt, shape} }
	p := func(dt tensor.DType, shape string) in { return in{false, dt, shape} }
	f32, f64, i64 := tensor.Float32, tensor.Float64, tensor.Int64
	cases := []struct {
		op      string
		attrs   map[string]any
		inputs  []in
		want    string // outputs as "dtype shape;..."
		wantErr []string
	}{
		{op: "Assign", inputs: []in{v(f32, "[2,3]"), p(f32, "[2,3]")}, want: "float32[2,3]"},
		{op: "Assign", inputs: []in{v(f32, "[2,3]"), p(f32, "[?,3]")}, want: "float32[2,3]"},
		{op: "Assign", inputs: []in{v(f32, "[2,3]"), p(f32, "[3,2]")}, wantErr: []string{"[3,2]", "[2,3]"}},
		{op: "Assign", inputs: []in{v(f32, "[2]"), p(f64, "[2]")}, wantErr: []string{"float64", "float32"}},
		{op: "Assign", inputs: []in{p(f32, "[2]"), p(f32, "[2]")}, wantErr: []string{"must be a variable"}},
		{op: "AssignAdd", inputs: []in{v(i64, "[]"), p(i64, "[]")}, want: "int64[]"},
		{op: "AssignSub", inputs: []in{v(f64, "[4]"), p(f64, "[5]")}, wantErr: []string{"[5]", "[4]"}},
		{op: "IsVariableInitialized", inputs: []in{v(f32, "[2]")}, want: "bool[]"},
		{op: "ApplyGradientDescent", inputs: []in{v(f32, "[2]"), p(f32, "[]"), p(f32, "[2]")}, want: ""},
		{op: "ApplyGradientDescent", inputs: []in{v(f32, "[2]"), p(f32, "[]"), p(f32, "[3]")}, wantErr: []string{"delta", "[3]", "[2]"}},
		{op: "ApplyGradientDescent", inputs: []in{v(f32, "[2]"), p(f32, "[1]"), p(f32, "[2]")}, wantErr: []string{"alpha", "scalar"}},
		{op: "ApplyGradientDescent", inputs: []in{v(i64, "[2]"), p(i64, "[]"), p(i64, "[2]")}, wantErr: []string{"float32 or float64"}},
		{op: "ApplyGradientDescent", inputs: []in{v(f32, "[2]"), p(f64, "[]"), p(f32, "[2]")}, wantErr: []string{"different dtypes"}},
		{op: "ApplyMomentum", attrs: map[string]any{"use_nesterov": true},
			inputs: []in{v(f32, "[2]"), v(f32, "[2]"), p(f32, "[]"), p(f32, "[2]"), p(f32, "[]")}, want: ""},
		{op: "ApplyMomentum", inputs: []in{v(f32, "[2]"), v(f32, "[3]"), p(f32, "[]"), p(f32, "[2]"), p(f32, "[]")},
			wantErr: []string{"accum", "[3]", "[2]"}},
		{op: "ApplyAdagrad", inputs: []in{v(f64, "[2]"), v(f64, "[2]"), p(f64, "[]"), p(f64, "[2]")}, want: ""},
		{op: "ApplyRMSProp", inputs: []in{v(f32, "[2]"), v(f32, "[2]"), v(f32, "[2]"),
			p(f32, "[]"), p(f32, "[]"), p(f32, "[]"), p(f32, "[]"), p(f32, "[2]")}, want: ""},
		{op: "ApplyAdam", inputs: []in{v(f32, "[2]"), v(f32, "[2]"), p(f32, "[2]"),
			p(f32, "[]"), p(f32, "[]"), p(f32, "[]"), p(f32, "[]"), p(f32, "[]"), p(f32, "[]"), p(f32, "[2]")},
			wantErr: []string{"must be a variable"}},
		{op: "ApplyAdam", inputs: []in{v(f32, "[2]"), v(f32, "[2]"), v(f32, "[2]"),
			p(f32, "[]"), p(f32, "[]"), p(f32, "[]"), p(f32, "[]"), p(f32, "[]"), p(f32, "[]"), p(f32, "[2]")}, want: ""},
	}
	for _, tc := range cases {
		s := graph.NewScope()
		var inputs []graph.Output
		for i, x := range tc.inputs {
			shape, err := tensor.ParseShape(x.shape)
			if err != nil {
				t.Fatal(err)
			}
			name := "in" + string(rune('a'+i))
			if x.variable {
				inputs = append(inputs, s.Out("Variable", name, nil, map[string]any{"dtype": x.dt, "shape": shape}))
			} else {
				inputs = append(inputs, s.Out("Placeholder", name, nil, map[string]any{"dtype": x.dt, "shape": shape}))
			}
		}
		n := s.AddNode(tc.op, "node", inputs, tc.attrs)
		err := s.Err()
		if tc.wantErr != nil {
			if err == nil {
				t.Errorf("%s%v: no error, want one mentioning %q", tc.op, tc.inputs, tc.wantErr)
				continue
			}
			for _, w := range append(tc.wantErr, `"node"`) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s%v: error %q does not mention %s", tc.op, tc.inputs, err, w)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s%v: %v", tc.op, tc.inputs, err)
			continue
		}
		var outs []string
		for i := range n.NumOutputs() {
			outs = append(outs, n.Output(i).DType().String()+n.Output(i).Shape().String())
		}
		if got := strings.Join(outs, ";"); got != tc.want {
			t.Errorf("%s%v: outputs %q, want %q", tc.op, tc.inputs, got, tc.want)
		}
		if !n.Def().Stateful {
			t.Errorf("%s is not stateful", tc.op)
		}
	}
}
