package ops_test

import (
	"context"
	"errors"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// big has 2^64 elements: as an int product it wraps around to 0.
var big = []int{65536, 65536, 65536, 65536}

// TestShapeOverflowRefused checks that every way of asking for a tensor of
// the shape big fails with an error wrapping tensor.ErrShapeOverflow (at
// build time when the shape is known then, else when the step runs), and
// never makes an empty tensor.
func TestShapeOverflowRefused(t *testing.T) {
	build := map[string]func(s *graph.Scope){
		"NewVariable": func(s *graph.Scope) { ops.NewVariable(s, "v", tensor.Float32, big, ops.ZerosInit()) },
		"Placeholder": func(s *graph.Scope) { ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(big...)) },
		"Zeros":       func(s *graph.Scope) { ops.Zeros(s, tensor.Float32, big...) },
		"ReshapeTo": func(s *graph.Scope) {
			ops.ReshapeTo(s, ops.Const(s, []float32{}), big...)
		},
		"Tile": func(s *graph.Scope) {
			ops.Tile(s, ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(65536, 65536)), []int{65536, 65536})
		},
	}
	for name, f := range build {
		s := graph.NewScope()
		f(s)
		if err := s.Err(); !errors.Is(err, tensor.ErrShapeOverflow) {
			t.Errorf("%s: scope error = %v, want tensor.ErrShapeOverflow", name, err)
		}
	}

	// Dims known only at run time: the kernel refuses them.
	s := graph.NewScope()
	dims := ops.Placeholder(s, "dims", tensor.Int32, tensor.MakeShape(4))
	fill := ops.Fill(s, dims, ops.Scalar(s, tensor.Float32, 1))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess := stateSession(t, s.Graph())
	feed := tensor.MustFromSlice([]int32{65536, 65536, 65536, 65536}, 4)
	_, err := sess.Run(context.Background(), map[graph.Output]*tensor.Tensor{dims: feed}, []graph.Output{fill}, nil)
	if !errors.Is(err, tensor.ErrShapeOverflow) {
		t.Errorf("Fill of %v: err = %v, want tensor.ErrShapeOverflow", big, err)
	}
}
