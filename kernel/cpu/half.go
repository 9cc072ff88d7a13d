package cpu

import (
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// castHalf is Cast to or from float16 and bfloat16, which exist to carry
// float32 gradients in half the bytes: they convert to and from float32
// only (rounding to nearest even; see tensor.Float16Bits).
func castHalf(c *kernel.Context, x *tensor.Tensor, dt tensor.DType) error {
	switch {
	case x.DType() == tensor.Float32 && dt.IsHalf():
		o := c.Alloc(0, dt, x.Shape()...)
		if dt == tensor.Float16 {
			tensor.EncodeFloat16(o.HalfBits(), x.Float32s())
		} else {
			tensor.EncodeBFloat16(o.HalfBits(), x.Float32s())
		}
		return nil
	case x.DType().IsHalf() && dt == tensor.Float32:
		o := c.Alloc(0, dt, x.Shape()...)
		if x.DType() == tensor.Float16 {
			tensor.DecodeFloat16(o.Float32s(), x.HalfBits())
		} else {
			tensor.DecodeBFloat16(o.Float32s(), x.HalfBits())
		}
		return nil
	}
	return c.Errorf("Cast: %v to %v: %v converts to and from float32 only", x.DType(), dt, map[bool]tensor.DType{true: x.DType(), false: dt}[x.DType().IsHalf()])
}
