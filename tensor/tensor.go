package tensor

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Tensor is a dense, row-major, n-dimensional array with a concrete shape.
//
// The data slice is owned by the tensor; accessors such as Float32s return it
// without copying so kernels can read and write in place. A tensor handed to a
// Session (as a feed) or returned by it (as a fetch) belongs to the caller.
// Tensors are not safe for concurrent mutation.
type Tensor struct {
	dtype DType
	shape []int
	data  any    // []float32 | []float64 | []int32 | []int64 | []bool | []uint8 | []uint16 (Float16, BFloat16 bits)
	dims  [4]int // shape's storage up to rank 4: one allocation less per tensor, and every op makes one
}

// newTensor returns a tensor of dt and data with a copy of shape.
func newTensor(dt DType, shape []int, data any) *Tensor {
	t := &Tensor{dtype: dt, data: data}
	t.setShape(shape)
	return t
}

// setShape makes t's shape a copy of shape.
func (t *Tensor) setShape(shape []int) {
	if len(shape) <= len(t.dims) {
		t.shape = t.dims[:len(shape):len(shape)]
	} else {
		t.shape = make([]int, len(shape))
	}
	copy(t.shape, shape)
}

// New returns a zero-filled tensor of the given type and shape.
// It panics if dt is invalid, a dimension is negative or the element count
// overflows int (programmer errors: check shapes from users with
// CheckNumElements first).
func New(dt DType, shape ...int) *Tensor {
	n := checkedNumElements(shape)
	var data any
	switch dt {
	case Float32:
		data = make([]float32, n)
	case Float64:
		data = make([]float64, n)
	case Int32:
		data = make([]int32, n)
	case Int64:
		data = make([]int64, n)
	case Bool:
		data = make([]bool, n)
	case Uint8:
		data = make([]uint8, n)
	case Float16, BFloat16:
		data = make([]uint16, n)
	default:
		panic(fmt.Sprintf("tensor.New: invalid dtype %v", dt))
	}
	return newTensor(dt, shape, data)
}

func checkedNumElements(shape []int) int {
	n, err := CheckNumElements(shape)
	if err != nil {
		panic(err.Error())
	}
	return n
}

// FromSlice wraps data (one of the supported slice types) without copying.
// The product of shape must equal len(data).
func FromSlice(data any, shape ...int) (*Tensor, error) {
	var dt DType
	var n int
	switch d := data.(type) {
	case []float32:
		dt, n = Float32, len(d)
	case []float64:
		dt, n = Float64, len(d)
	case []int32:
		dt, n = Int32, len(d)
	case []int64:
		dt, n = Int64, len(d)
	case []bool:
		dt, n = Bool, len(d)
	case []uint8:
		dt, n = Uint8, len(d)
	default:
		return nil, fmt.Errorf("tensor: unsupported data type %T", data)
	}
	want, err := CheckNumElements(shape)
	if err != nil {
		return nil, err
	}
	if want != n {
		return nil, fmt.Errorf("tensor: %d elements do not fill shape %v (%d elements)", n, shape, want)
	}
	return newTensor(dt, shape, data), nil
}

// MustFromSlice is FromSlice for literals in tests and examples; it panics on error.
func MustFromSlice(data any, shape ...int) *Tensor {
	t, err := FromSlice(data, shape...)
	if err != nil {
		panic(err)
	}
	return t
}

// Scalar returns a rank-0 tensor holding v (float32, float64, int32, int64, int, bool, uint8).
func Scalar(v any) *Tensor {
	switch x := v.(type) {
	case float32:
		return &Tensor{dtype: Float32, shape: []int{}, data: []float32{x}}
	case float64:
		return &Tensor{dtype: Float64, shape: []int{}, data: []float64{x}}
	case int32:
		return &Tensor{dtype: Int32, shape: []int{}, data: []int32{x}}
	case int:
		return &Tensor{dtype: Int32, shape: []int{}, data: []int32{int32(x)}}
	case int64:
		return &Tensor{dtype: Int64, shape: []int{}, data: []int64{x}}
	case bool:
		return &Tensor{dtype: Bool, shape: []int{}, data: []bool{x}}
	case uint8:
		return &Tensor{dtype: Uint8, shape: []int{}, data: []uint8{x}}
	}
	panic(fmt.Sprintf("tensor.Scalar: unsupported type %T", v))
}

// DType returns the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape returns the dimensions. The slice must not be modified.
func (t *Tensor) Shape() []int { return t.shape }

// StaticShape returns the dimensions as a (fully defined) Shape.
func (t *Tensor) StaticShape() Shape { return MakeShape(t.shape...) }

// Rank returns the number of dimensions.
func (t *Tensor) Rank() int { return len(t.shape) }

// NumElements returns the number of elements.
func (t *Tensor) NumElements() int { return NumElements(t.shape) }

// Data returns the underlying typed slice without copying.
func (t *Tensor) Data() any { return t.data }

// Float32s returns the data of a float32 tensor (nil for other types).
func (t *Tensor) Float32s() []float32 { d, _ := t.data.([]float32); return d }

// Float64s returns the data of a float64 tensor (nil for other types).
func (t *Tensor) Float64s() []float64 { d, _ := t.data.([]float64); return d }

// Int32s returns the data of an int32 tensor (nil for other types).
func (t *Tensor) Int32s() []int32 { d, _ := t.data.([]int32); return d }

// Int64s returns the data of an int64 tensor (nil for other types).
func (t *Tensor) Int64s() []int64 { d, _ := t.data.([]int64); return d }

// HalfBits returns the element bits of a Float16 or BFloat16 tensor (nil
// for other types), for conversion with EncodeFloat16 and its kin.
func (t *Tensor) HalfBits() []uint16 { d, _ := t.data.([]uint16); return d }

// Bools returns the data of a bool tensor (nil for other types).
func (t *Tensor) Bools() []bool { d, _ := t.data.([]bool); return d }

// Uint8s returns the data of a uint8 tensor (nil for other types).
func (t *Tensor) Uint8s() []uint8 { d, _ := t.data.([]uint8); return d }

// Reshaped returns a tensor sharing t's data with a new shape of equal size.
func (t *Tensor) Reshaped(shape ...int) (*Tensor, error) {
	n, err := CheckNumElements(shape)
	if err != nil {
		return nil, err
	}
	if n != t.NumElements() {
		return nil, fmt.Errorf("tensor: cannot reshape %v (%d elements) to %v (%d elements)",
			t.shape, t.NumElements(), shape, n)
	}
	return newTensor(t.dtype, shape, t.data), nil
}

// Clone returns a deep copy.
func (t *Tensor) Clone() *Tensor {
	c := New(t.dtype, t.shape...)
	copyData(c.data, t.data)
	return c
}

// SwapData exchanges the elements of t and u, which must have the same
// dtype and shape, by exchanging their storage: nothing is copied, and
// whoever holds either tensor sees the other's elements from then on. It
// is for a caller that owns both (a variable taking a step's own tensor).
func (t *Tensor) SwapData(u *Tensor) error {
	if t.dtype != u.dtype || !slices.Equal(t.shape, u.shape) {
		return fmt.Errorf("tensor: cannot swap the data of %v%v and %v%v", t.dtype, t.shape, u.dtype, u.shape)
	}
	t.data, u.data = u.data, t.data
	return nil
}

// CopyFrom copies src's elements into t; types and element counts must match.
func (t *Tensor) CopyFrom(src *Tensor) error {
	if t.dtype != src.dtype || t.NumElements() != src.NumElements() {
		return fmt.Errorf("tensor: cannot copy %v%v into %v%v", src.dtype, src.shape, t.dtype, t.shape)
	}
	copyData(t.data, src.data)
	return nil
}

func copyData(dst, src any) {
	switch d := dst.(type) {
	case []float32:
		copy(d, src.([]float32))
	case []float64:
		copy(d, src.([]float64))
	case []int32:
		copy(d, src.([]int32))
	case []int64:
		copy(d, src.([]int64))
	case []bool:
		copy(d, src.([]bool))
	case []uint8:
		copy(d, src.([]uint8))
	case []uint16:
		copy(d, src.([]uint16))
	}
}

// Float64At returns element i converted to float64 (bools as 0/1).
func (t *Tensor) Float64At(i int) float64 {
	switch d := t.data.(type) {
	case []float32:
		return float64(d[i])
	case []float64:
		return d[i]
	case []int32:
		return float64(d[i])
	case []int64:
		return float64(d[i])
	case []uint8:
		return float64(d[i])
	case []uint16:
		if t.dtype == Float16 {
			return float64(Float16From(d[i]))
		}
		return float64(BFloat16From(d[i]))
	case []bool:
		if d[i] {
			return 1
		}
	}
	return 0
}

// SetFloat64At stores v (converted to t's type) at element i.
func (t *Tensor) SetFloat64At(i int, v float64) {
	switch d := t.data.(type) {
	case []float32:
		d[i] = float32(v)
	case []float64:
		d[i] = v
	case []int32:
		d[i] = int32(v)
	case []int64:
		d[i] = int64(v)
	case []uint8:
		d[i] = uint8(v)
	case []uint16:
		if t.dtype == Float16 {
			d[i] = Float16Bits(float32(v))
		} else {
			d[i] = BFloat16Bits(float32(v))
		}
	case []bool:
		d[i] = v != 0
	}
}

// Equal reports whether a and b have the same type, shape and elements
// (NaNs compare equal to NaNs so that round-trip tests can use it).
func Equal(a, b *Tensor) bool {
	if a.dtype != b.dtype || len(a.shape) != len(b.shape) {
		return false
	}
	for i := range a.shape {
		if a.shape[i] != b.shape[i] {
			return false
		}
	}
	for i := 0; i < a.NumElements(); i++ {
		x, y := a.Float64At(i), b.Float64At(i)
		if x != y && !(math.IsNaN(x) && math.IsNaN(y)) {
			return false
		}
	}
	return true
}

// String renders the type, shape and up to 8 leading elements.
func (t *Tensor) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v%v{", t.dtype, MakeShape(t.shape...))
	n := t.NumElements()
	for i := 0; i < n && i < 8; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%g", t.Float64At(i))
	}
	if n > 8 {
		b.WriteString(" ...")
	}
	b.WriteByte('}')
	return b.String()
}
