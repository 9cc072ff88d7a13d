package tensor_test

import (
	"math"
	"testing"

	"github.com/distflow/distflow/tensor"
)

// Known encodings (IEEE 754-2008 binary16 tables; bfloat16 as TensorFlow's
// bfloat16.h rounds).
func TestFloat16KnownBits(t *testing.T) {
	cases := []struct {
		f    float32
		bits uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{65504, 0x7bff},                   // largest finite
		{65519.99, 0x7bff},                // below the halfway point to 65536
		{65520, 0x7c00},                   // halfway: ties to even, which is infinity
		{float32(math.Inf(1)), 0x7c00},    // infinity
		{float32(math.Inf(-1)), 0xfc00},   // -infinity
		{6.103515625e-05, 0x0400},         // smallest normal, 2^-14
		{5.960464477539063e-08, 0x0001},   // smallest subnormal, 2^-24
		{2.98023223876953125e-08, 0x0000}, // 2^-25, halfway to it: ties to even (0)
		{2.98023224e-08 * 1.0000001, 0x0001},
		{8.940696716308594e-08, 0x0002}, // 1.5 * 2^-24: ties to even (2)
		{6.097555160522461e-05, 0x03ff}, // largest subnormal
		{1.00048828125, 0x3c00},         // 1 + 2^-11: halfway, ties to even (1)
		{1.00146484375, 0x3c02},         // 1 + 3*2^-11: halfway, ties to even (1+2^-9)
		{0.333333343, 0x3555},
		{1e-10, 0x0000}, // underflow
		{1e10, 0x7c00},  // overflow
	}
	for _, c := range cases {
		if got := tensor.Float16Bits(c.f); got != c.bits {
			t.Errorf("Float16Bits(%g) = %#04x, want %#04x", c.f, got, c.bits)
		}
	}
	nan := tensor.Float16Bits(float32(math.NaN()))
	if nan&0x7c00 != 0x7c00 || nan&0x3ff == 0 || nan&0x200 == 0 {
		t.Errorf("Float16Bits(NaN) = %#04x, want a quiet NaN", nan)
	}
	if f := tensor.Float16From(0x7e00); !math.IsNaN(float64(f)) {
		t.Errorf("Float16From(0x7e00) = %g, want NaN", f)
	}
}

func TestBFloat16KnownBits(t *testing.T) {
	cases := []struct {
		f    float32
		bits uint16
	}{
		{0, 0x0000},
		{1, 0x3f80},
		{-2, 0xc000},
		{math.Float32frombits(0x3f808000), 0x3f80}, // halfway: ties to even (down)
		{math.Float32frombits(0x3f818000), 0x3f82}, // halfway: ties to even (up)
		{math.Float32frombits(0x3f808001), 0x3f81}, // above halfway
		{math.MaxFloat32, 0x7f80},                  // rounds past the largest bfloat16
		{float32(math.Inf(-1)), 0xff80},
		{math.Float32frombits(0x00000001), 0x0000}, // float32 subnormals round as any value
		{math.Float32frombits(0x00018000), 0x0002},
	}
	for _, c := range cases {
		if got := tensor.BFloat16Bits(c.f); got != c.bits {
			t.Errorf("BFloat16Bits(%g) = %#04x, want %#04x", c.f, got, c.bits)
		}
	}
	// A NaN whose payload lies in the low bits must not round to infinity.
	if got := tensor.BFloat16Bits(math.Float32frombits(0x7f800001)); got&0x7f != 0x40 && got&0x7f80 == 0x7f80 {
		t.Errorf("BFloat16Bits(NaN 0x7f800001) = %#04x, want a quiet NaN", got)
	}
}

// Every binary16 round-trips through float32, and each float32 rounds to
// the nearer of the two binary16 values around it (ties to the even one),
// checked on every float32 midpoint between binary16 neighbours and a
// sample of all float32s.
func TestFloat16RoundsToNearestEven(t *testing.T) {
	for h := range 1 << 16 {
		f := tensor.Float16From(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if got := tensor.Float16Bits(f); got != uint16(h) {
			t.Fatalf("round trip of %#04x (%g) gave %#04x", h, f, got)
		}
	}
	check := func(f float32) {
		got := tensor.Float16Bits(f)
		want := nearestHalf(f, tensor.Float16From, 0x7c00)
		if got != want {
			t.Fatalf("Float16Bits(%g = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	}
	for h := range 0x7c00 {
		lo, hi := float64(tensor.Float16From(uint16(h))), float64(tensor.Float16From(uint16(h+1)))
		mid := float32((lo + hi) / 2)
		check(mid)
		check(math.Nextafter32(mid, 0))
		check(math.Nextafter32(mid, float32(math.Inf(1))))
		check(-mid)
	}
	for b := uint32(0); b < 0x7f800000; b += 9973 {
		check(math.Float32frombits(b))
	}
	// The slice encoder's fast path agrees with Float16Bits everywhere.
	var src []float32
	for b := uint32(0); b < 0xff800000; b += 4099 {
		src = append(src, math.Float32frombits(b))
	}
	dst := make([]uint16, len(src))
	tensor.EncodeFloat16(dst, src)
	for i, f := range src {
		if want := tensor.Float16Bits(f); dst[i] != want {
			t.Fatalf("EncodeFloat16 of %g = %#04x, Float16Bits %#04x", f, dst[i], want)
		}
	}
}

func TestBFloat16RoundsToNearestEven(t *testing.T) {
	for b := uint32(0); b < 0x7f800000; b += 997 {
		f := math.Float32frombits(b)
		got := tensor.BFloat16Bits(f)
		if want := nearestHalf(f, tensor.BFloat16From, 0x7f80); got != want {
			t.Fatalf("BFloat16Bits(%g = %#08x) = %#04x, want %#04x", f, b, got, want)
		}
	}
}

// nearestHalf is the reference rounding, by search: the bits of the
// nearest value of the 16-bit format whose positive infinity is inf, with
// the format's rule for overflow (past the halfway point to the next
// power of two, infinity).
func nearestHalf(f float32, from func(uint16) float32, inf uint16) uint16 {
	sign := uint16(0)
	x := float64(f)
	if x < 0 || (x == 0 && math.Signbit(x)) {
		sign, x = 0x8000, -x
	}
	// The largest h with from(h) <= x, by binary search over [0, inf].
	lo, hi := uint16(0), inf
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if float64(from(mid)) <= x {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == inf {
		return sign | inf
	}
	below := float64(from(lo))
	above := float64(from(lo + 1))
	if lo+1 == inf { // the next "value" for rounding is one ulp past the largest finite
		above = below + (below - float64(from(lo-1)))
	}
	switch d1, d2 := x-below, above-x; {
	case d1 < d2, d1 == d2 && lo&1 == 0:
		return sign | lo
	}
	return sign | (lo + 1)
}

func TestEncodeFloat16ReportsOverflow(t *testing.T) {
	src := []float32{1, float32(math.Inf(1)), 65520, 2} // 65520 rounds up to an infinity
	dst := make([]uint16, len(src))
	if i := tensor.EncodeFloat16(dst, src); i != 2 {
		t.Errorf("EncodeFloat16 overflow at %d, want 2 (an infinity given is not an overflow)", i)
	}
	back := make([]float32, len(src))
	tensor.DecodeFloat16(back, dst)
	if back[0] != 1 || back[3] != 2 || !math.IsInf(float64(back[2]), 1) {
		t.Errorf("decoded %v", back)
	}
	if i := tensor.EncodeBFloat16(dst, []float32{1, 2, math.MaxFloat32, 3}); i != 2 {
		t.Errorf("EncodeBFloat16 overflow at %d, want 2", i)
	}
	tensor.DecodeBFloat16(back, dst)
	if back[0] != 1 || back[1] != 2 || back[3] != 3 {
		t.Errorf("decoded %v", back)
	}
}

func benchData(n int) []float32 {
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(math.Sin(float64(i))) * 1e-2
	}
	return src
}

func BenchmarkEncodeFloat16(b *testing.B) {
	src := benchData(1 << 16)
	dst := make([]uint16, len(src))
	b.SetBytes(int64(4 * len(src)))
	for b.Loop() {
		tensor.EncodeFloat16(dst, src)
	}
}

func BenchmarkDecodeFloat16(b *testing.B) {
	src := make([]uint16, 1<<16)
	tensor.EncodeFloat16(src, benchData(len(src)))
	dst := make([]float32, len(src))
	b.SetBytes(int64(4 * len(src)))
	for b.Loop() {
		tensor.DecodeFloat16(dst, src)
	}
}

func BenchmarkEncodeBFloat16(b *testing.B) {
	src := benchData(1 << 16)
	dst := make([]uint16, len(src))
	b.SetBytes(int64(4 * len(src)))
	for b.Loop() {
		tensor.EncodeBFloat16(dst, src)
	}
}

// A Float16 or BFloat16 tensor stores bits, reads them as float64, and
// survives the binary encoding (the wire's and checkpoints') bit for bit,
// in 2 bytes an element.
func TestHalfTensors(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
		x := tensor.New(dt, 2, 2)
		for i, v := range []float64{1, -2.5, 0.1, math.Inf(1)} {
			x.SetFloat64At(i, v)
		}
		if x.Float64At(0) != 1 || x.Float64At(1) != -2.5 || !math.IsInf(x.Float64At(3), 1) || math.Abs(x.Float64At(2)-0.1) > 0.001 {
			t.Errorf("%v: %v", dt, x)
		}
		b, err := x.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 1+1+2+8 {
			t.Errorf("%v: %d bytes encoded, want 12", dt, len(b))
		}
		var y tensor.Tensor
		if err := y.UnmarshalBinary(b); err != nil || !tensor.Equal(x, &y) || y.DType() != dt {
			t.Errorf("%v: decoded %v, %v", dt, &y, err)
		}
		if got, err := tensor.ParseDType(dt.String()); got != dt || err != nil {
			t.Errorf("ParseDType(%q) = %v, %v", dt.String(), got, err)
		}
		if !dt.IsHalf() || dt.IsFloat() || dt.Size() != 2 {
			t.Errorf("%v: IsHalf %v, IsFloat %v, Size %d", dt, dt.IsHalf(), dt.IsFloat(), dt.Size())
		}
	}
}
