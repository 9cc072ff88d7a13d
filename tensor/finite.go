package tensor

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// FirstNonFinite32 returns the index of the first NaN or infinity of data,
// or -1. It reads two values per 64-bit word without a branch per value
// (every chunk an all-reduce moves and every value a guarded variable
// write takes is checked): a float32 is not finite when its exponent bits
// are all ones, which is when adding one to the exponent carries into the
// sign bit.
func FirstNonFinite32(data []float32) int {
	const (
		exps  = 0x7f800000_7f800000 // the exponents of two values
		one   = 0x00800000_00800000 // one more in each exponent
		signs = 0x80000000_80000000 // where an all-ones exponent carries
		block = 1024                // values checked between tests of the flags
	)
	for start := 0; start < len(data); start += block {
		b := data[start:min(start+block, len(data))]
		var flags uint64
		if pairs := len(b) / 2; pairs > 0 {
			words := unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 8*pairs)
			var f0, f1, f2, f3 uint64
			for len(words) >= 32 {
				w := words[:32:32]
				f0 |= binary.NativeEndian.Uint64(w[0:])&exps + one
				f1 |= binary.NativeEndian.Uint64(w[8:])&exps + one
				f2 |= binary.NativeEndian.Uint64(w[16:])&exps + one
				f3 |= binary.NativeEndian.Uint64(w[24:])&exps + one
				words = words[32:]
			}
			for ; len(words) >= 8; words = words[8:] {
				f0 |= binary.NativeEndian.Uint64(words)&exps + one
			}
			flags = f0 | f1 | f2 | f3
		}
		if len(b)%2 == 1 {
			flags |= uint64(math.Float32bits(b[len(b)-1]))&exps + one
		}
		if flags&signs == 0 {
			continue
		}
		for i, v := range b {
			if v-v != 0 { // NaN or ±Inf
				return start + i
			}
		}
	}
	return -1
}

// FirstNonFinite64 is FirstNonFinite32 for float64: an all-ones exponent
// carries into bit 63 when one is added to it.
func FirstNonFinite64(data []float64) int {
	const (
		exp   = 0x7ff0000000000000
		one   = 0x0010000000000000
		block = 512
	)
	for start := 0; start < len(data); start += block {
		b := data[start:min(start+block, len(data))]
		var f0, f1, f2, f3 uint64
		i := 0
		for ; i+4 <= len(b); i += 4 {
			f0 |= math.Float64bits(b[i])&exp + one
			f1 |= math.Float64bits(b[i+1])&exp + one
			f2 |= math.Float64bits(b[i+2])&exp + one
			f3 |= math.Float64bits(b[i+3])&exp + one
		}
		for ; i < len(b); i++ {
			f0 |= math.Float64bits(b[i])&exp + one
		}
		if (f0|f1|f2|f3)>>63 == 0 {
			continue
		}
		for i, v := range b {
			if v-v != 0 {
				return start + i
			}
		}
	}
	return -1
}
