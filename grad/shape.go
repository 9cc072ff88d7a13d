package grad

import (
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
)

// shapeOf returns the shape of x as a 1-D int32 tensor: a constant when it
// is fully known at build time (so that the shapes of what is built from it
// are inferred exactly), else a Shape node evaluated at run time.
func shapeOf(s *graph.Scope, x graph.Output) graph.Output {
	if sh := x.Shape(); sh.FullyDefined() {
		return ops.Const(s, sh.Dims())
	}
	return ops.Shape(s, x)
}
