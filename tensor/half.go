package tensor

import (
	"math"
	"sync"
)

// Half-precision storage: IEEE 754 binary16 (TensorFlow's DT_HALF) and
// bfloat16 (DT_BFLOAT16, the upper half of a float32). They exist to halve
// the bytes of gradients on the wire; arithmetic stays in float32. Every
// conversion from float32 rounds to nearest, ties to even; NaNs stay NaNs
// (quiet), infinities stay infinities, values past the largest finite half
// become infinities, and binary16's subnormals are produced and read exactly.

// Float16Bits returns f as binary16 bits, rounded to nearest even.
//
// Branch-light (after F. Giesen's float_to_half_fast3_rtne): normal
// results round by adding half an ulp less one plus the kept mantissa's
// low bit; subnormal results are rounded by the FPU itself, adding a magic
// number that aligns the binary16 subnormal grid with float32's last bit.
func Float16Bits(f float32) uint16 {
	const (
		f32Inf      = 255 << 23
		f16Max      = (127 + 16) << 23
		denormMagic = ((127 - 15) + (23 - 10) + 1) << 23
	)
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	b &^= 0x80000000
	switch {
	case b >= f16Max: // overflow, infinity or NaN
		if b > f32Inf {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case b < 113<<23: // a binary16 subnormal or zero
		r := math.Float32bits(math.Float32frombits(b)+math.Float32frombits(denormMagic)) - denormMagic
		return sign | uint16(r)
	}
	b = b - (127-15)<<23 + 0xfff + (b>>13)&1
	return sign | uint16(b>>13)
}

// Float16From returns the float32 value of binary16 bits h (exact).
func Float16From(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// BFloat16Bits returns f as bfloat16 bits, rounded to nearest even.
func BFloat16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // quiet NaN: rounding could make it an infinity
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BFloat16From returns the float32 value of bfloat16 bits h (exact).
func BFloat16From(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// float16Table holds Float16From of every binary16: decoding is a lookup
// (256 KiB, built on first use).
var float16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = Float16From(uint16(i))
	}
	return &t
})

// EncodeFloat16 writes src, rounded to binary16, into dst[:len(src)]. It
// returns the index of the first finite element that overflowed to an
// infinity (beyond ±65504), or -1.
func EncodeFloat16(dst []uint16, src []float32) (overflow int) {
	overflow = -1
	dst = dst[:len(src)]
	for i, f := range src {
		b := math.Float32bits(f)
		if a := b &^ (1 << 31); a-113<<23 < (142-113)<<23 {
			// A normal binary16 below 2^15 (the common case, which cannot
			// round up to an infinity), as in Float16Bits.
			a = a - (127-15)<<23 + 0xfff + (a>>13)&1
			dst[i] = uint16(b>>16)&0x8000 | uint16(a>>13)
			continue
		}
		h := Float16Bits(f)
		dst[i] = h
		if h&0x7fff == 0x7c00 && overflow < 0 && f-f == 0 {
			overflow = i
		}
	}
	return overflow
}

// DecodeFloat16 writes the float32 values of the binary16 bits src into
// dst[:len(src)].
func DecodeFloat16(dst []float32, src []uint16) {
	t := float16Table()
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = t[h]
	}
}

// EncodeBFloat16 writes src, rounded to bfloat16, into dst[:len(src)]; it
// returns the index of the first finite element that overflowed, or -1.
func EncodeBFloat16(dst []uint16, src []float32) (overflow int) {
	overflow = -1
	dst = dst[:len(src)]
	for i, f := range src {
		h := BFloat16Bits(f)
		dst[i] = h
		if h&0x7fff == 0x7f80 && overflow < 0 && f-f == 0 {
			overflow = i
		}
	}
	return overflow
}

// DecodeBFloat16 writes the float32 values of the bfloat16 bits src into
// dst[:len(src)].
func DecodeBFloat16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}
