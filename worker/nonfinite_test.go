package worker_test

import (
	"math"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// TestRemoteNonFiniteWritesRefused: whatever the shape of the graph a peer
// sends, a write that would leave a NaN or an infinity in a variable of the
// task is refused, naming the variable, and the variable (and its slots)
// keep their values: a value fed through an Identity, a Const, 0/0, an
// AssignAdd or AssignSub, an optimizer's update with a fed gradient or
// learning rate, an update whose finite inputs overflow, a sparse update.
func TestRemoteNonFiniteWritesRefused(t *testing.T) {
	_, open := serveVictim(t, worker.Config{})
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	f32 := func(v ...float32) *tensor.Tensor { return tensor.MustFromSlice(v, len(v)) }
	for _, tc := range []struct {
		name  string
		init  float64
		build func(s *graph.Scope, v graph.Output, x graph.Output) *graph.Node
		feed  *tensor.Tensor // fed as x, a [2] float32 placeholder
		want  string         // in the error, beside the variable's name
	}{
		{"Assign of a fed NaN through an Identity", 1, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			return ops.Assign(s, v, ops.Identity(s, x)).Node
		}, f32(0, nan), "NaN at element 1"},
		{"Assign of a Const", 1, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			return ops.Assign(s, v, ops.Const(s, []float32{inf, 0})).Node
		}, nil, "+Inf at element 0"},
		{"Assign of 0/0", 1, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			return ops.Assign(s, v, ops.Div(s, ops.Const(s, []float32{1, 0}), ops.Const(s, []float32{1, 0}))).Node
		}, nil, "NaN at element 1"},
		{"AssignAdd through an Identity", 1, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			return ops.AssignAdd(s, v, ops.Identity(s, x)).Node
		}, f32(nan, 0), "NaN at element 0"},
		{"AssignSub of a Const", 1, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			return ops.AssignSub(s, v, ops.Const(s, []float32{0, float32(math.Inf(-1))})).Node
		}, nil, "-Inf at element 1"},
		{"AssignAdd that overflows", 3e38, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			return ops.AssignAdd(s, v, ops.Const(s, []float32{1, 3e38})).Node
		}, nil, "element 1 +Inf from finite inputs"},
		{"ApplyGradientDescent of a fed NaN gradient", 1, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			return ops.ApplyGradientDescent(s, v, ops.Const(s, float32(0.1)), x)
		}, f32(0, nan), "NaN at element 1"},
		{"ApplyGradientDescent of a NaN learning rate", 1, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			lr := ops.Div(s, ops.Const(s, float32(0)), ops.Const(s, float32(0)))
			return ops.ApplyGradientDescent(s, v, lr, ops.Const(s, []float32{1, 1}))
		}, nil, "NaN at element 0"},
		{"ApplyGradientDescent that overflows", 1, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			return ops.ApplyGradientDescent(s, v, ops.Const(s, float32(1e30)), x)
		}, f32(1, -1e30), "element 1 +Inf from finite inputs"},
		{"ApplyAdam of zeros with no epsilon (0/0)", 1, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			m := ops.NewVariable(s, "m", tensor.Float32, []int{2}, ops.ConstantInit(0))
			vv := ops.NewVariable(s, "vv", tensor.Float32, []int{2}, ops.ConstantInit(0))
			c := func(f float32) graph.Output { return ops.Const(s, f) }
			return ops.ApplyAdam(s, v, m.Node().Output(0), vv.Node().Output(0), c(0.9), c(0.999), c(0.1), c(0.9), c(0.999), c(0), x)
		}, f32(0, 0), "element 0 NaN from finite inputs"},
		{"SparseApplyGradientDescent of a fed NaN gradient", 1, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			return ops.SparseApplyGradientDescent(s, v, ops.Const(s, float32(0.1)), x, ops.Const(s, []int32{1, 0}))
		}, f32(1, inf), "+Inf at element 1"},
		{"SparseApplyGradientDescent that overflows", 1, func(s *graph.Scope, v, x graph.Output) *graph.Node {
			return ops.SparseApplyGradientDescent(s, v, ops.Const(s, float32(1e30)), x, ops.Const(s, []int32{1, 0}))
		}, f32(1, -1e30), "row 0 element 0 +Inf from finite inputs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := graph.NewScope()
			v := ops.NewVariable(s, "w", tensor.Float32, []int{2}, ops.ConstantInit(tc.init))
			x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(2))
			write := tc.build(s.SubScope("write"), v.Node().Output(0), x)
			init := ops.GlobalVariablesInitializer(s)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			sess := open(s.Graph())
			ctx := ctxT(t)
			if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
				t.Fatal(err)
			}
			feeds := map[graph.Output]*tensor.Tensor{x: f32(0, 0)}
			if tc.feed != nil {
				feeds[x] = tc.feed
			}
			_, err := sess.Run(ctx, feeds, nil, []*graph.Node{write})
			for _, want := range []string{"non-finite value written into a variable", `"w"`, tc.want, "keeps its value"} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("the write: %v; want an error with %q", err, want)
				}
			}
			out, err := sess.Run(ctx, nil, []graph.Output{v.Value()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := out[0].Float32s(); got[0] != float32(tc.init) || got[1] != float32(tc.init) {
				t.Errorf("the variable after the refused write: %v; want its value, %v twice", got, tc.init)
			}
		})
	}
}
