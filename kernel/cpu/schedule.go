package cpu

import (
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

func init() {
	kernel.Register("LearningRateFactor", kernel.CPU, kernel.Simple(learningRateFactor))
}

// learningRateFactor computes a learning-rate schedule's factor at the
// global step, with op.Schedule's own Factor, the function package train
// gives its users.
func learningRateFactor(c *kernel.Context) error {
	step := c.Input(0).Int64s()
	if len(step) != 1 {
		return c.Errorf("step has %d elements, want the global step", len(step))
	}
	c.Alloc(0, tensor.Float32).Float32s()[0] = float32(op.ScheduleOf(c.Node).Factor(step[0]))
	return nil
}
