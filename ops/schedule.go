package ops

import (
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
)

// LearningRateFactor returns the factor of schedule sch at step (the int64
// global step): a float32 scalar (see op.Schedule).
func LearningRateFactor(s *graph.Scope, step graph.Output, sch op.Schedule) graph.Output {
	return s.Out("LearningRateFactor", "LearningRateFactor", []graph.Output{step}, sch.Attrs())
}
