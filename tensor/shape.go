package tensor

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// ErrShapeOverflow is wrapped by the errors of shapes whose element count
// does not fit an int ([65536, 65536, 65536, 65536] has 2^64 elements).
var ErrShapeOverflow = errors.New("tensor: element count overflows int")

// Shape is a possibly partial shape, as known while a graph is built.
// A nil dims slice means the rank is unknown; a dimension of -1 is unknown.
// The zero Shape is the unknown shape; ScalarShape() is the known rank-0 shape.
// Shapes are values: methods never modify the receiver.
type Shape struct {
	dims []int
}

// UnknownShape returns a shape of unknown rank.
func UnknownShape() Shape { return Shape{} }

// ScalarShape returns the rank-0 shape.
func ScalarShape() Shape { return Shape{dims: []int{}} }

// MakeShape returns a shape with the given dimensions (-1 for unknown).
func MakeShape(dims ...int) Shape {
	d := make([]int, len(dims))
	for i, v := range dims {
		if v < 0 {
			v = -1
		}
		d[i] = v
	}
	return Shape{dims: d}
}

// UnknownRankShape returns a known-rank shape whose dimensions are all unknown.
func UnknownRankShape(rank int) Shape {
	d := make([]int, rank)
	for i := range d {
		d[i] = -1
	}
	return Shape{dims: d}
}

// KnownRank reports whether the number of dimensions is known.
func (s Shape) KnownRank() bool { return s.dims != nil }

// Rank returns the number of dimensions, or -1 if unknown.
func (s Shape) Rank() int {
	if s.dims == nil {
		return -1
	}
	return len(s.dims)
}

// Dim returns dimension i (negative i counts from the end), -1 if unknown.
// It panics if the rank is unknown or i is out of range.
func (s Shape) Dim(i int) int {
	if i < 0 {
		i += len(s.dims)
	}
	return s.dims[i]
}

// Dims returns a copy of the dimensions (nil if the rank is unknown).
func (s Shape) Dims() []int {
	if s.dims == nil {
		return nil
	}
	return append([]int{}, s.dims...)
}

// FullyDefined reports whether the rank and every dimension are known.
func (s Shape) FullyDefined() bool {
	if s.dims == nil {
		return false
	}
	for _, d := range s.dims {
		if d < 0 {
			return false
		}
	}
	return true
}

// NumElements returns the product of the dimensions, or -1 if any is
// unknown or the product overflows int (Check tells the two apart).
func (s Shape) NumElements() int {
	if !s.FullyDefined() {
		return -1
	}
	return NumElements(s.dims)
}

// Check reports an error wrapping ErrShapeOverflow if s is fully defined
// and its element count does not fit an int. Shapes with unknown
// dimensions pass: their count is checked when the tensor exists.
func (s Shape) Check() error {
	if !s.FullyDefined() {
		return nil
	}
	_, err := CheckNumElements(s.dims)
	return err
}

// IsCompatibleWith reports whether a concrete shape could be an instance of s.
func (s Shape) IsCompatibleWith(o Shape) bool {
	if s.dims == nil || o.dims == nil {
		return true
	}
	if len(s.dims) != len(o.dims) {
		return false
	}
	for i := range s.dims {
		if s.dims[i] >= 0 && o.dims[i] >= 0 && s.dims[i] != o.dims[i] {
			return false
		}
	}
	return true
}

// Merge returns the most specific shape compatible with both, or an error.
func (s Shape) Merge(o Shape) (Shape, error) {
	if !s.IsCompatibleWith(o) {
		return Shape{}, fmt.Errorf("shapes %v and %v are incompatible", s, o)
	}
	if s.dims == nil {
		return o, nil
	}
	if o.dims == nil {
		return s, nil
	}
	d := make([]int, len(s.dims))
	for i := range d {
		d[i] = s.dims[i]
		if d[i] < 0 {
			d[i] = o.dims[i]
		}
	}
	return Shape{dims: d}, nil
}

// Equal reports whether both shapes have the same rank knowledge and dims.
func (s Shape) Equal(o Shape) bool {
	if (s.dims == nil) != (o.dims == nil) || len(s.dims) != len(o.dims) {
		return false
	}
	for i := range s.dims {
		if s.dims[i] != o.dims[i] {
			return false
		}
	}
	return true
}

// String renders the shape compactly: "[?,784]", "[]" for scalars, "<unknown>".
func (s Shape) String() string {
	if s.dims == nil {
		return "<unknown>"
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s.dims {
		if i > 0 {
			b.WriteByte(',')
		}
		if d < 0 {
			b.WriteByte('?')
		} else {
			b.WriteString(strconv.Itoa(d))
		}
	}
	b.WriteByte(']')
	return b.String()
}

// ParseShape parses the String form ("[?,784]", "[]", "<unknown>").
func ParseShape(str string) (Shape, error) {
	str = strings.TrimSpace(str)
	if str == "<unknown>" || str == "?" {
		return UnknownShape(), nil
	}
	if len(str) < 2 || str[0] != '[' || str[len(str)-1] != ']' {
		return Shape{}, fmt.Errorf("tensor: bad shape %q: want e.g. [?,784]", str)
	}
	inner := strings.TrimSpace(str[1 : len(str)-1])
	if inner == "" {
		return ScalarShape(), nil
	}
	parts := strings.Split(inner, ",")
	d := make([]int, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "?" || p == "-1" {
			d[i] = -1
			continue
		}
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Shape{}, fmt.Errorf("tensor: bad dimension %q in shape %q", p, str)
		}
		d[i] = v
	}
	return Shape{dims: d}, nil
}

// NumElements returns the product of concrete dims (1 for a scalar), or -1
// if it overflows int: a count that wrapped around (to 0 for
// [65536, 65536, 65536, 65536]) is never returned. Tensors never have such
// shapes (New and FromSlice refuse them); CheckNumElements says why a
// shape from elsewhere is refused.
func NumElements(dims []int) int {
	n, err := CheckNumElements(dims)
	if err != nil {
		return -1
	}
	return n
}

// CheckNumElements returns the product of dims, or an error naming them if
// a dimension is negative or the product overflows int (wrapping
// ErrShapeOverflow).
func CheckNumElements(dims []int) (int, error) {
	zero := false
	for _, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("tensor: negative dimension in shape %v", slices.Clone(dims))
		}
		zero = zero || d == 0
	}
	if zero {
		return 0, nil // however large the other dimensions
	}
	n := 1
	overflow := false
	for _, d := range dims {
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > uint64(maxInt) {
			overflow = true
		}
		n = int(lo)
	}
	if overflow {
		return 0, fmt.Errorf("%w: shape %v", ErrShapeOverflow, slices.Clone(dims))
	}
	return n, nil
}

const maxInt = int(^uint(0) >> 1)

// AcceptsDims reports whether a tensor with the concrete dims could have
// shape s (unknown rank or dimensions accept anything). It does not allocate,
// so executors can check every feed and output with it.
func (s Shape) AcceptsDims(dims []int) bool {
	if s.dims == nil {
		return true
	}
	if len(s.dims) != len(dims) {
		return false
	}
	for i, d := range dims {
		if want := s.dims[i]; want >= 0 && want != d {
			return false
		}
	}
	return true
}
