package grad_test

import (
	"context"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/grad/gradtest"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// arrayDynamic hides the static shape of x (its dims become unknown), so
// that gradients take their run-time shape paths.
func arrayDynamic(s *graph.Scope, x graph.Output) graph.Output {
	return ops.Reshape(s, x, ops.Shape(s, x))
}

func TestArrayGradients(t *testing.T) {
	type xs = []graph.Output
	idx := func(s *graph.Scope, v ...int32) graph.Output { return ops.Const(s, v) }
	cases := []gradtest.Case{
		{Name: "Identity", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Identity(s, x[0]) },
			Inputs: []*tensor.Tensor{gradtest.Random(1, 2, 3)}},
		{Name: "Reshape", Build: func(s *graph.Scope, x xs) graph.Output { return ops.ReshapeTo(s, x[0], 3, -1) },
			Inputs: []*tensor.Tensor{gradtest.Random(1, 2, 3)}},
		{Name: "ReshapeDynamic", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.ReshapeTo(s, arrayDynamic(s, x[0]), -1)
		}, Inputs: []*tensor.Tensor{gradtest.Random(1, 2, 3)}},
		{Name: "ExpandDims", Build: func(s *graph.Scope, x xs) graph.Output { return ops.ExpandDims(s, x[0], 1) },
			Inputs: []*tensor.Tensor{gradtest.Random(2, 2, 3)}},
		{Name: "Squeeze", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Squeeze(s, x[0]) },
			Inputs: []*tensor.Tensor{gradtest.Random(3, 2, 1, 3)}},
		{Name: "Transpose", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Transpose(s, x[0], []int{2, 0, 1}) },
			Inputs: []*tensor.Tensor{gradtest.Random(4, 2, 3, 4)}},
		{Name: "TransposeReverse", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Transpose(s, x[0], nil) },
			Inputs: []*tensor.Tensor{gradtest.Random(5, 2, 3, 4)}},
		{Name: "Concat", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Concat(s, -1, x[0], x[1], x[2]) },
			Inputs: []*tensor.Tensor{gradtest.Random(6, 2, 3), gradtest.Random(7, 2, 1), gradtest.Random(8, 2, 2)}},
		{Name: "ConcatLastUnknown", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.Concat(s, 0, x[0], arrayDynamic(s, x[1]))
		}, Inputs: []*tensor.Tensor{gradtest.Random(9, 1, 3), gradtest.Random(10, 2, 3)}},
		{Name: "Slice", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Slice(s, x[0], []int{1, 0, 2}, []int{2, -1, 1}) },
			Inputs: []*tensor.Tensor{gradtest.Random(11, 4, 2, 3)}},
		{Name: "SliceDynamic", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.Slice(s, arrayDynamic(s, x[0]), []int{1, 1}, []int{-1, -1})
		}, Inputs: []*tensor.Tensor{gradtest.Random(12, 3, 3)}},
		// StridedSlice: x[1:, ::-2, 1] on [3, 4, 2]; x[..., newaxis, -1];
		// the dynamic-shape path; and the gradient of the gradient.
		{Name: "StridedSlice", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.Index(s, x[0], ops.From(1), ops.All().Step(-2), ops.At(1))
		}, Inputs: []*tensor.Tensor{gradtest.Random(41, 3, 4, 2)}},
		{Name: "StridedSliceEllipsis", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.Index(s, x[0], ops.Ellipsis(), ops.NewAxis(), ops.At(-1))
		}, Inputs: []*tensor.Tensor{gradtest.Random(42, 2, 3, 4)}},
		{Name: "StridedSliceDynamic", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.Index(s, arrayDynamic(s, x[0]), ops.Span(-1, 0).Step(-1), ops.Span(1, 100))
		}, Inputs: []*tensor.Tensor{gradtest.Random(43, 3, 3)}},
		{Name: "StridedSliceGrad", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.StridedSliceGrad(s, ops.Const(s, []int{4, 3}), ops.Const(s, []int{3, 0}), ops.Const(s, []int{0, 3}),
				ops.Const(s, []int{-1, 2}), x[0])
		}, Inputs: []*tensor.Tensor{gradtest.Random(44, 3, 2)}},
		{Name: "Split", Build: func(s *graph.Scope, x xs) graph.Output {
			p := ops.Split(s, x[0], 1, 2)
			return ops.Mul(s, p[0], p[1])
		}, Inputs: []*tensor.Tensor{gradtest.Random(13, 2, 4)}},
		{Name: "Gather", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Gather(s, x[0], idx(s, 2, 0, 2, 3), 0) },
			Inputs: []*tensor.Tensor{gradtest.Random(14, 4, 3)}},
		{Name: "GatherAxis1", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.Gather(s, x[0], ops.Const(s, tensor.MustFromSlice([]int64{1, 1, 0, 2}, 2, 2)), 1)
		}, Inputs: []*tensor.Tensor{gradtest.Random(15, 2, 3, 2)}},
		{Name: "GatherDynamic", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.Gather(s, arrayDynamic(s, x[0]), idx(s, 1, 1), -1)
		}, Inputs: []*tensor.Tensor{gradtest.Random(16, 3, 2)}},
		{Name: "GatherGrad", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.GatherGrad(s, x[0], idx(s, 1, 1, 0), idx(s, 3, 2), 0)
		}, Inputs: []*tensor.Tensor{gradtest.Random(17, 3, 2)}},
		{Name: "Tile", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Tile(s, x[0], []int{2, 1, 3}) },
			Inputs: []*tensor.Tensor{gradtest.Random(18, 2, 3, 2)}},
		{Name: "TileDynamic", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.Tile(s, arrayDynamic(s, x[0]), []int{3, 2})
		}, Inputs: []*tensor.Tensor{gradtest.Random(19, 2, 3)}},
		{Name: "Pad", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Pad(s, x[0], [][2]int{{1, 0}, {2, 1}}) },
			Inputs: []*tensor.Tensor{gradtest.Random(20, 2, 3)}},
		{Name: "Fill", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Fill(s, idx(s, 2, 3), x[0]) },
			Inputs: []*tensor.Tensor{tensor.Scalar(0.5)}},
		{Name: "Float32Transpose", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Transpose(s, x[0], []int{1, 0}) },
			Inputs: []*tensor.Tensor{gradtest.Random32(21, 3, 2)}},
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) { gradtest.Check(t, c) })
	}
}

// TestArrayGradientsUnknownBatch checks the gradients of Concat, Slice and
// Pad when the placeholders' batch dimension is unknown at build time, so
// that the gradients are built from run-time shapes.
func TestArrayGradientsUnknownBatch(t *testing.T) {
	type xs = []graph.Output
	batch := tensor.MakeShape(-1, 3)
	cases := []gradtest.Case{
		{Name: "ConcatAxis0", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Concat(s, 0, x[0], x[1], x[2]) },
			Inputs: []*tensor.Tensor{gradtest.Random(51, 2, 3), gradtest.Random(52, 1, 3), gradtest.Random(53, 3, 3)},
			Shapes: []tensor.Shape{batch, tensor.MakeShape(1, 3), batch}},
		{Name: "ConcatAxis0NegativeAxis", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Concat(s, -2, x[0], x[1]) },
			Inputs: []*tensor.Tensor{gradtest.Random(54, 2, 3), gradtest.Random(55, 2, 3)},
			Shapes: []tensor.Shape{batch, batch}},
		{Name: "ConcatAxis1", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Concat(s, 1, x[0], x[1]) },
			Inputs: []*tensor.Tensor{gradtest.Random(56, 2, 3), gradtest.Random(57, 2, 2)},
			Shapes: []tensor.Shape{batch, tensor.MakeShape(-1, 2)}},
		{Name: "ConcatUnknownRank", Build: func(s *graph.Scope, x xs) graph.Output {
			return ops.Concat(s, 1, x[0], ops.Reshape(s, x[1], ops.Shape(s, x[1])))
		}, Inputs: []*tensor.Tensor{gradtest.Random(58, 2, 1), gradtest.Random(59, 2, 3)},
			Shapes: []tensor.Shape{tensor.MakeShape(-1, -1), tensor.UnknownShape()}},
		{Name: "Slice", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Slice(s, x[0], []int{1, 1}, []int{2, 1}) },
			Inputs: []*tensor.Tensor{gradtest.Random(60, 4, 3)}, Shapes: []tensor.Shape{batch}},
		{Name: "SliceToEnd", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Slice(s, x[0], []int{1, 0}, []int{-1, 2}) },
			Inputs: []*tensor.Tensor{gradtest.Random(61, 3, 3)}, Shapes: []tensor.Shape{batch}},
		{Name: "Pad", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Pad(s, x[0], [][2]int{{1, 2}, {0, 1}}) },
			Inputs: []*tensor.Tensor{gradtest.Random(62, 2, 3)}, Shapes: []tensor.Shape{batch}},
		{Name: "PadBeforeOnly", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Pad(s, x[0], [][2]int{{2, 0}, {1, 1}}) },
			Inputs: []*tensor.Tensor{gradtest.Random(63, 2, 3)}, Shapes: []tensor.Shape{batch}},
		{Name: "Float32Concat", Build: func(s *graph.Scope, x xs) graph.Output { return ops.Concat(s, 0, x[0], x[1]) },
			Inputs: []*tensor.Tensor{gradtest.Random32(64, 2, 3), gradtest.Random32(65, 1, 3)},
			Shapes: []tensor.Shape{batch, batch}},
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) { gradtest.Check(t, c) })
	}
}

// TestArrayGradientsBatchSizes builds the gradients of Concat, Slice and
// Pad once for an unknown batch dimension and runs them at two batch
// sizes: the run-time shapes, not the first feed, size them.
func TestArrayGradientsBatchSizes(t *testing.T) {
	ctx := context.Background()
	s := graph.NewScope()
	a := ops.Placeholder(s, "a", tensor.Float64, tensor.MakeShape(-1, 2))
	b := ops.Placeholder(s, "b", tensor.Float64, tensor.MakeShape(-1, 2))
	sq := func(y graph.Output) graph.Output { return ops.Sum(s, ops.Square(s, y), nil, false) }
	// d/da of sum(concat(a, b)^2) + sum(slice(a)^2) + sum(pad(b)^2) is 2a
	// plus 2a on row 1; d/db is 2b + 2b.
	loss := ops.AddN(s,
		sq(ops.Concat(s, 0, a, b)),
		sq(ops.Slice(s, a, []int{1, 0}, []int{1, 2})),
		sq(ops.Pad(s, b, [][2]int{{1, 2}, {0, 1}})))
	g, err := grad.Gradients(s, []graph.Output{loss}, []graph.Output{a, b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	for _, rows := range [][2]int{{2, 3}, {4, 1}} {
		av, bv := gradtest.Random(70, rows[0], 2), gradtest.Random(71, rows[1], 2)
		out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{a: av, b: bv}, g, nil)
		if err != nil {
			t.Fatalf("batches %v: %v", rows, err)
		}
		wantA, wantB := av.Clone(), bv.Clone()
		for i := range wantA.Float64s() {
			k := 2.0
			if i/2 == 1 {
				k = 4
			}
			wantA.Float64s()[i] *= k
		}
		for i := range wantB.Float64s() {
			wantB.Float64s()[i] *= 4
		}
		for j, want := range []*tensor.Tensor{wantA, wantB} {
			if !tensor.Equal(out[j], want) {
				t.Errorf("batches %v: gradient %d is %v, want %v", rows, j, out[j], want)
			}
		}
	}
}

// TestArrayNoGradient checks that the ops without a gradient say why.
func TestArrayNoGradient(t *testing.T) {
	for _, op := range []string{"StopGradient", "Const", "Placeholder", "NoOp", "Variable",
		"Shape", "Rank", "Size", "ZerosLike", "OnesLike", "OneHot"} {
		if fn, ok := grad.Lookup(op); !ok || fn != nil || grad.NoneReason(op) == "" {
			t.Errorf("%s: want a registered reason for having no gradient", op)
		}
	}
}

// TestArrayBuilders runs the composed builders end to end in a session.
func TestArrayBuilders(t *testing.T) {
	s := graph.NewScope()
	x := ops.Const(s, tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 6))
	parts := ops.Split(s, ops.ReshapeTo(s, x, 2, -1), 0, 2)
	cases := []struct {
		y    graph.Output
		want *tensor.Tensor
	}{
		{ops.Zeros(s, tensor.Int64, 2, 1), tensor.New(tensor.Int64, 2, 1)},
		{parts[1], tensor.MustFromSlice([]float32{4, 5, 6}, 1, 3)},
		{ops.OneHot(s, ops.Const(s, []int32{1}), 2, 1, 0, tensor.Bool), tensor.MustFromSlice([]bool{false, true}, 1, 2)},
		{ops.Size(s, parts[0]), tensor.Scalar(int32(3))},
		{ops.Rank(s, parts[0]), tensor.Scalar(int32(2))},
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	for i, c := range cases {
		if !c.y.Shape().IsCompatibleWith(c.want.StaticShape()) {
			t.Errorf("case %d: static shape %v, value shape %v", i, c.y.Shape(), c.want.Shape())
		}
		got, err := sess.Run(context.Background(), nil, []graph.Output{c.y}, nil)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !tensor.Equal(got[0], c.want) {
			t.Errorf("case %d (%s): got %v, want %v", i, c.y.Node, got[0], c.want)
		}
	}
}
