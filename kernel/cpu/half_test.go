package cpu

import (
	"math"
	"strings"
	"testing"

	"github.com/distflow/distflow/tensor"
)

// Cast carries float32 to float16 and bfloat16 and back, rounding to
// nearest even, and refuses the other pairs by name.
func TestCastHalf(t *testing.T) {
	x := tensor.MustFromSlice([]float32{1, 1.00048828125, 65504, 70000, -0.1, float32(math.Inf(-1))}, 2, 3)
	for _, tc := range []struct {
		dt   tensor.DType
		bits []uint16
	}{
		{tensor.Float16, []uint16{0x3c00, 0x3c00, 0x7bff, 0x7c00, 0xae66, 0xfc00}},
		{tensor.BFloat16, []uint16{0x3f80, 0x3f80, 0x4780, 0x4789, 0xbdcd, 0xff80}},
	} {
		out, err := runKernel(t, "Cast", map[string]any{"dtype": tc.dt}, x)
		if err != nil {
			t.Fatalf("Cast to %v: %v", tc.dt, err)
		}
		h := out[0]
		if h.DType() != tc.dt || len(h.Shape()) != 2 || h.Shape()[1] != 3 {
			t.Fatalf("Cast to %v gave %v", tc.dt, h)
		}
		for i, b := range tc.bits {
			if h.HalfBits()[i] != b {
				t.Errorf("Cast to %v: element %d (%v) is %#04x, want %#04x", tc.dt, i, x.Float32s()[i], h.HalfBits()[i], b)
			}
		}
		back, err := runKernel(t, "Cast", map[string]any{"dtype": tensor.Float32}, h)
		if err != nil {
			t.Fatalf("Cast from %v: %v", tc.dt, err)
		}
		for i, v := range back[0].Float32s() {
			if want := float32(h.Float64At(i)); v != want {
				t.Errorf("Cast from %v: element %d is %v, want %v", tc.dt, i, v, want)
			}
		}
		if _, err := runKernel(t, "Cast", map[string]any{"dtype": tensor.Int32}, h); err == nil || !strings.Contains(err.Error(), "to and from float32 only") {
			t.Errorf("Cast %v to int32: %v; want it refused", tc.dt, err)
		}
	}
}
