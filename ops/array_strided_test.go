package ops_test

import (
	"context"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// stridedX is numpy's arange(24).reshape(2, 3, 4): x[i, j, k] = 12i + 4j + k,
// so that every expected value below can be read off its indices.
func stridedX() *tensor.Tensor {
	v := make([]float32, 24)
	for i := range v {
		v[i] = float32(i)
	}
	return tensor.MustFromSlice(v, 2, 3, 4)
}

func stridedRange(lo, hi int) []float32 {
	var v []float32
	for i := lo; i < hi; i++ {
		v = append(v, float32(i))
	}
	return v
}

// TestStridedSliceTable checks Python-style subscripts of x against the
// values numpy and TensorFlow give for them (worked out in the comments
// from x[i, j, k] = 12i + 4j + k), through Index and StridedSlice: shapes
// at build time and values at run time.
func TestStridedSliceTable(t *testing.T) {
	na, el := ops.NewAxis(), ops.Ellipsis()
	cases := []struct {
		name  string
		subs  []ops.Subscript
		shape []int
		want  []float32
	}{
		{"x[1]", []ops.Subscript{ops.At(1)}, []int{3, 4}, stridedRange(12, 24)},
		// end 3 is clamped to 2.
		{"x[1:3]", []ops.Subscript{ops.Span(1, 3)}, []int{1, 3, 4}, stridedRange(12, 24)},
		// j = 0, 2.
		{"x[:, ::2]", []ops.Subscript{ops.All(), ops.All().Step(2)}, []int{2, 2, 4},
			[]float32{0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23}},
		{"x[..., 0]", []ops.Subscript{el, ops.At(0)}, []int{2, 3}, []float32{0, 4, 8, 12, 16, 20}},
		{"x[:, newaxis]", []ops.Subscript{ops.All(), na}, []int{2, 1, 3, 4}, stridedRange(0, 24)},
		{"x[-1, -1, -1]", []ops.Subscript{ops.At(-1), ops.At(-1), ops.At(-1)}, []int{}, []float32{23}},
		{"x[::-1]", []ops.Subscript{ops.All().Step(-1)}, []int{2, 3, 4}, append(stridedRange(12, 24), stridedRange(0, 12)...)},
		// k = 3, 1.
		{"x[0, :, ::-2]", []ops.Subscript{ops.At(0), ops.All(), ops.All().Step(-2)}, []int{3, 2}, []float32{3, 1, 7, 5, 11, 9}},
		// begin 5 and end 10 both clamp to 3: empty.
		{"x[0, 5:10]", []ops.Subscript{ops.At(0), ops.Span(5, 10)}, []int{0, 4}, nil},
		// -100 clamps to 0, 100 to 3.
		{"x[0, -100:100]", []ops.Subscript{ops.At(0), ops.Span(-100, 100)}, []int{3, 4}, stridedRange(0, 12)},
		// j = 2, 1: 12+8+1, 12+4+1.
		{"x[1, 2:0:-1, 1]", []ops.Subscript{ops.At(1), ops.Span(2, 0).Step(-1), ops.At(1)}, []int{2}, []float32{21, 17}},
		{"x[newaxis, ..., newaxis]", []ops.Subscript{na, el, na}, []int{1, 2, 3, 4, 1}, stridedRange(0, 24)},
		// k = 1, 2 for each (i, j).
		{"x[..., 1:3]", []ops.Subscript{el, ops.Span(1, 3)}, []int{2, 3, 2},
			[]float32{1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22}},
		{"x[0, ..., 0]", []ops.Subscript{ops.At(0), el, ops.At(0)}, []int{3}, []float32{0, 4, 8}},
		// j = 1, 2 and k = 1, 3.
		{"x[:, -2:, 1::2]", []ops.Subscript{ops.All(), ops.From(-2), ops.From(1).Step(2)}, []int{2, 2, 2},
			[]float32{5, 7, 9, 11, 17, 19, 21, 23}},
		{"x[1, -1]", []ops.Subscript{ops.At(1), ops.At(-1)}, []int{4}, []float32{20, 21, 22, 23}},
		// end -5 is -5+4 = -1, before the first element: k = 3, 2, 1, 0.
		{"x[0, 0, -1:-5:-1]", []ops.Subscript{ops.At(0), ops.At(0), ops.Span(-1, -5).Step(-1)}, []int{4}, []float32{3, 2, 1, 0}},
		{"x[0, 0, 2::-1]", []ops.Subscript{ops.At(0), ops.At(0), ops.From(2).Step(-1)}, []int{3}, []float32{2, 1, 0}},
		{"x[0, 0, :2:-1]", []ops.Subscript{ops.At(0), ops.At(0), ops.Until(2).Step(-1)}, []int{1}, []float32{3}},
		// The ellipsis covers i and j; the new axis comes before k = 0.
		{"x[..., newaxis, 0]", []ops.Subscript{el, na, ops.At(0)}, []int{2, 3, 1}, []float32{0, 4, 8, 12, 16, 20}},
		// A step larger than the dimension takes the first index only.
		{"x[:, ::5, 3]", []ops.Subscript{ops.All(), ops.All().Step(5), ops.At(3)}, []int{2, 1}, []float32{3, 15}},
		{"x[1:1]", []ops.Subscript{ops.Span(1, 1)}, []int{0, 3, 4}, nil},
		{"x[:2:-1]", []ops.Subscript{ops.Until(2).Step(-1)}, []int{0, 3, 4}, nil},
		{"x[]", nil, []int{2, 3, 4}, stridedRange(0, 24)},
	}
	s := graph.NewScope()
	x := ops.Const(s, stridedX())
	var outs []graph.Output
	for _, tc := range cases {
		outs = append(outs, ops.Index(s, x, tc.subs...))
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		if got := outs[i].Shape(); !got.Equal(tensor.MakeShape(tc.shape...)) {
			t.Errorf("%s: build-time shape %v, want %v", tc.name, got, tc.shape)
		}
	}
	got, err := stateSession(t, s.Graph()).Run(context.Background(), nil, outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		want := tensor.MustFromSlice(append([]float32{}, tc.want...), tc.shape...)
		if !tensor.Equal(got[i], want) {
			t.Errorf("%s = %v, want %v", tc.name, got[i], want)
		}
	}
}

// TestStridedSliceDTypesAndDynamic checks other dtypes, and begin, end and
// strides known only at run time (the shape is then unknown at build time).
func TestStridedSliceDTypesAndDynamic(t *testing.T) {
	s := graph.NewScope()
	x := ops.Const(s, stridedX())
	i64 := ops.Index(s, ops.Cast(s, x, tensor.Int64), ops.At(1), ops.All().Step(-1), ops.At(0)) // j = 2, 1, 0: 20, 16, 12
	b := ops.Index(s, ops.Greater(s, x, ops.Scalar(s, tensor.Float32, 10)), ops.Ellipsis(), ops.At(3))
	u8 := ops.Index(s, ops.Cast(s, x, tensor.Uint8), ops.Span(-1, 2), ops.Span(1, 2), ops.From(2))
	bp := ops.Placeholder(s, "begin", tensor.Int32, tensor.MakeShape(2))
	ep := ops.Placeholder(s, "end", tensor.Int64, tensor.MakeShape(2))
	sp := ops.Placeholder(s, "strides", tensor.Int32, tensor.MakeShape(2))
	dyn := ops.StridedSliceOf(s, x, bp, ep, sp, ops.StridedShrinkAxisMask(1))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := dyn.Shape(); !got.Equal(tensor.MakeShape(-1, 4)) {
		t.Errorf("dynamic slice: build-time shape %v, want [?,4]", got)
	}
	feeds := map[graph.Output]*tensor.Tensor{
		bp: tensor.MustFromSlice([]int32{1, 2}, 2),
		ep: tensor.MustFromSlice([]int64{2, -4}, 2),
		sp: tensor.MustFromSlice([]int32{1, -1}, 2),
	}
	got, err := stateSession(t, s.Graph()).Run(context.Background(), feeds, []graph.Output{i64, b, u8, dyn}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []*tensor.Tensor{
		tensor.MustFromSlice([]int64{20, 16, 12}, 3),
		// x[..., 3] = 3, 7, 11, 15, 19, 23, compared with 10.
		tensor.MustFromSlice([]bool{false, false, true, true, true, true}, 2, 3),
		// x[1:2, 1:2, 2:] = 12+4+2, 12+4+3.
		tensor.MustFromSlice([]uint8{18, 19}, 1, 1, 2),
		// x[1, 2:-4:-1]: end -4 is -1, before the first: j = 2, 1, 0.
		tensor.MustFromSlice([]float32{20, 21, 22, 23, 16, 17, 18, 19, 12, 13, 14, 15}, 3, 4),
	} {
		if !tensor.Equal(got[i], want) {
			t.Errorf("output %d = %v, want %v", i, got[i], want)
		}
	}
}

// TestStridedSliceErrors checks that bad subscripts are build errors that
// name the node, the shape and the subscripts.
func TestStridedSliceErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(s *graph.Scope, x graph.Output)
		want  string
	}{
		{"index out of range", func(s *graph.Scope, x graph.Output) { ops.Index(s, x, ops.At(2)) },
			"index 2 of subscript 0 is out of range for dimension 0 of size 2"},
		{"negative index out of range", func(s *graph.Scope, x graph.Output) { ops.Index(s, x, ops.All(), ops.At(-4)) },
			"index -4 of subscript 1 is out of range"},
		{"too many subscripts", func(s *graph.Scope, x graph.Output) {
			ops.Index(s, x, ops.At(0), ops.At(0), ops.At(0), ops.At(0))
		}, "subscript 3 is out of range for an input of rank 3"},
		{"zero step", func(s *graph.Scope, x graph.Output) { ops.Index(s, x, ops.All().Step(0)) }, "strides[0] must be non-zero"},
		{"two ellipses", func(s *graph.Scope, x graph.Output) { ops.Index(s, x, ops.Ellipsis(), ops.Ellipsis()) }, "more than one ellipsis"},
		{"lengths differ", func(s *graph.Scope, x graph.Output) {
			ops.StridedSlice(s, x, []int{0}, []int{1, 2}, []int{1})
		}, "begin, end and strides must have one length"},
	} {
		s := graph.NewScope()
		tc.build(s, ops.Const(s, stridedX()))
		err := s.Err()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "StridedSlice") ||
			!strings.Contains(err.Error(), "[2,3,4]") {
			t.Errorf("%s: error %v, want one naming the node, the shape [2,3,4] and %q", tc.name, err, tc.want)
		}
	}
}
