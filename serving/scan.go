package serving

import (
	"math"
	"strconv"
)

// The float32 conversion of the request decoder's hot loop (decode.go).

// float64pow10 holds the powers of ten that float64 represents exactly.
var float64pow10 = [...]float64{
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
}

// scanFloat32 reads the JSON number at b[i:] and converts it to the
// float32 that strconv.ParseFloat(literal, 32) returns; it returns the
// index after the literal, and ok false for a malformed literal or one out
// of float32's range (where ParseFloat fails). Literals whose decimal
// mantissa has at most 15 significant digits and whose decimal exponent is
// at most 22 in size take an exact path: the mantissa and the power of ten
// are exact float64s, so their product or quotient is the correctly
// rounded float64 r of the literal, and float32(r) is the correctly rounded
// float32 unless r lies exactly halfway between two float32s (the double
// rounding case) or outside float32's normal range; those, and all other
// literals up to maxHotLiteral bytes, go to strconv; longer ones fail
// here, for parseFloat32 to convert once.
func scanFloat32(b []byte, i int) (f float32, next int, ok bool) {
	start := i
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	var mant uint64
	nd, exp := 0, 0 // significant digits (mant is exact while nd <= 19); decimal exponent
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			mant = mant*10 + uint64(b[i]-'0')
			nd++
		}
	default:
		return 0, i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		from := i
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if nd > 0 || b[i] != '0' {
				mant = mant*10 + uint64(b[i]-'0')
				nd++
			}
			exp--
		}
		if i == from {
			return 0, i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		from, e := i, 0
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if e < 10000 {
				e = e*10 + int(b[i]-'0')
			}
		}
		if i == from {
			return 0, i, false
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	if mant == 0 && nd == 0 {
		if neg {
			return float32(math.Copysign(0, -1)), i, true
		}
		return 0, i, true
	}
	if nd > 15 || exp < -22 || exp > 22 {
		if i-start > maxHotLiteral {
			return 0, i, false
		}
		f, ok := slowFloat32(b[start:i])
		return f, i, ok
	}
	r := float64(mant)
	if exp < 0 {
		r /= float64pow10[-exp]
	} else {
		r *= float64pow10[exp]
	}
	// Outside float32's normal range, or exactly halfway between two
	// float32s (the 29 low mantissa bits are 1 followed by zeros).
	if r < 0x1p-126 || r > math.MaxFloat32 || math.Float64bits(r)&(1<<29-1) == 1<<28 {
		if i-start > maxHotLiteral {
			return 0, i, false
		}
		f, ok := slowFloat32(b[start:i])
		return f, i, ok
	}
	f = float32(r)
	if neg {
		f = -f
	}
	return f, i, true
}

// maxHotLiteral is the longest literal scanFloat32 hands to strconv: a
// longer one costs a copy for strconv, and another when strconv fails.
const maxHotLiteral = 64

// parseFloat32 converts a whole JSON number literal as strconv does.
func parseFloat32(lit []byte) (float32, bool) {
	f, next, ok := scanFloat32(lit, 0)
	if !ok && next == len(lit) && len(lit) > maxHotLiteral {
		return slowFloat32(lit)
	}
	return f, ok && next == len(lit)
}

func slowFloat32(lit []byte) (float32, bool) {
	f, err := strconv.ParseFloat(string(lit), 32)
	return float32(f), err == nil
}
