package estimator

import (
	"fmt"
	"math"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/tensor"
)

// The top-k segment: what one worker contributes to the all-gather of a
// top-k step, one 32-bit word per entry instead of an index word and a
// value word.
//
//	word 0     the scale: a float32 power of two, 2^-126 to 2^112
//	word 1...  one per entry, in increasing index order:
//	           bits 0-15  the gap: the entry's index less the previous
//	                      entry's index plus one (the first's: its index)
//	           bits 16-31 the value divided by the scale, as binary16
//
// A word whose value is ±0 carries no entry: with the gap 0xffff it skips
// 0xffff indices (a gap that does not fit 16 bits is sent as skips and a
// remainder), with any other gap it pads the segment to its fixed size.
// The values are finite binary16, so no word is a float32 NaN or infinity
// (its exponent bits are the value's exponent and the top mantissa bits),
// and the ring carries it as any chunk. The scale puts the largest value
// sent between 2^14 and 2^15, where binary16 keeps 11 significant bits, so
// the values keep their relative precision whatever their magnitude; what
// the rounding loses stays in the sender's residual (error feedback).
const (
	sparseSkip     = 0xffff
	sparseMinScale = -126 // exponents of the scale
	sparseMaxScale = 112
)

// sparseWords is the size in words of a top-k segment of k entries out of
// n: the scale, the entries, and the skips that the gaps need (their sum
// is less than n).
func sparseWords(n, k int) int { return 1 + k + n/sparseSkip }

// encodeSparse writes the entries sel (increasing indices into vals) into
// seg, which must hold sparseWords(len(vals), len(sel)) words, and pads
// the rest. It sends nothing for an entry that rounds to zero at the
// segment's scale. It reads vals only; decodeSparse with seg, vals and -1
// then leaves in vals what the receivers did not get. A NaN or an infinity
// among the entries fails with allreduce.ErrNonFinite.
func encodeSparse(seg []float32, sel []int32, vals []float32) error {
	var largest float32
	for _, i := range sel {
		v := vals[i]
		if v-v != 0 {
			return fmt.Errorf("%w: gradient element %d is %v", allreduce.ErrNonFinite, i, v)
		}
		largest = max(largest, abs32(v))
	}
	exp := 0
	if largest > 0 {
		_, e := math.Frexp(float64(largest)) // largest < 2^e
		exp = min(max(e-15, sparseMinScale), sparseMaxScale)
	}
	seg[0] = float32(math.Ldexp(1, exp))
	inv := float32(math.Ldexp(1, -exp))
	w, pos := 1, 0
	for _, i := range sel {
		h := tensor.Float16Bits(vals[i] * inv)
		if h&0x7fff == 0 {
			continue // below the scale's reach: left in the residual
		}
		if h&0x7fff == 0x7c00 { // past binary16: send the largest, keep the rest
			h--
		}
		gap := int(i) - pos
		for ; gap >= sparseSkip; gap -= sparseSkip {
			seg[w] = math.Float32frombits(sparseSkip)
			w++
		}
		seg[w] = math.Float32frombits(uint32(h)<<16 | uint32(gap))
		w++
		pos = int(i) + 1
	}
	clear(seg[w:])
	return nil
}

// decodeSparse adds mul times each entry of seg to dst. It fails, with
// allreduce.ErrMismatch, on a scale out of its range, a value that is not
// finite or an index past dst, having added the entries before it.
func decodeSparse(dst, seg []float32, mul float32) error {
	if len(seg) == 0 {
		return fmt.Errorf("%w: an empty top-k segment", allreduce.ErrMismatch)
	}
	scale := seg[0]
	if b := math.Float32bits(scale); b&0x7fffff != 0 || b>>23 < 127+sparseMinScale || b>>23 > 127+sparseMaxScale {
		return fmt.Errorf("%w: top-k segment scale %v: want a power of two from 2^%d to 2^%d", allreduce.ErrMismatch, scale, sparseMinScale, sparseMaxScale)
	}
	scale *= mul
	pos := 0
	for _, word := range seg[1:] {
		b := math.Float32bits(word)
		h, gap := uint16(b>>16), int(b&0xffff)
		if h&0x7fff == 0 {
			if gap == sparseSkip {
				pos += sparseSkip
			}
			continue
		}
		if h&0x7c00 == 0x7c00 {
			return fmt.Errorf("%w: top-k entry after index %d: binary16 bits %#04x are not a finite value", allreduce.ErrMismatch, pos, h)
		}
		i := pos + gap
		if i >= len(dst) {
			return fmt.Errorf("%w: top-k entry at index %d of a gradient of %d elements", allreduce.ErrMismatch, i, len(dst))
		}
		dst[i] += tensor.Float16From(h) * scale
		pos = i + 1
	}
	return nil
}
