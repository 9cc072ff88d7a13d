package tensor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// The binary encoding is the one the wire and checkpoints reuse:
//
//	byte     dtype
//	uvarint  rank
//	uvarint  dims[rank]
//	bytes    elements, little-endian, row-major (bools as 0/1 bytes)
//
// It carries no framing: callers that concatenate tensors must length-prefix them.

// ErrCorrupt is returned (wrapped) when encoded bytes cannot be decoded.
var ErrCorrupt = errors.New("tensor: corrupt encoding")

// MarshalBinary encodes t. It implements encoding.BinaryMarshaler.
func (t *Tensor) MarshalBinary() ([]byte, error) {
	buf := make([]byte, 0, 1+binary.MaxVarintLen64*(1+len(t.shape))+t.NumElements()*t.dtype.Size())
	return t.AppendBinary(buf)
}

// AppendBinary appends the encoding of t to buf.
func (t *Tensor) AppendBinary(buf []byte) ([]byte, error) {
	buf = append(buf, byte(t.dtype))
	buf = binary.AppendUvarint(buf, uint64(len(t.shape)))
	for _, d := range t.shape {
		buf = binary.AppendUvarint(buf, uint64(d))
	}
	return append(buf, t.RawBytes()...), nil
}

// UnmarshalBinary decodes an encoding produced by MarshalBinary into t.
func (t *Tensor) UnmarshalBinary(b []byte) error {
	if len(b) < 2 {
		return fmt.Errorf("%w: %d bytes is too short", ErrCorrupt, len(b))
	}
	dt := DType(b[0])
	if !dt.Valid() {
		return fmt.Errorf("%w: unknown dtype %d", ErrCorrupt, b[0])
	}
	b = b[1:]
	rank, n := binary.Uvarint(b)
	if n <= 0 || rank > 64 {
		return fmt.Errorf("%w: bad rank", ErrCorrupt)
	}
	b = b[n:]
	shape := make([]int, rank)
	elems := uint64(1)
	for i := range shape {
		d, n := binary.Uvarint(b)
		if n <= 0 || d > math.MaxInt32 {
			return fmt.Errorf("%w: bad dimension %d", ErrCorrupt, i)
		}
		shape[i] = int(d)
		elems *= d
		if elems > math.MaxInt64/8 {
			return fmt.Errorf("%w: shape too large", ErrCorrupt)
		}
		b = b[n:]
	}
	out, err := FromRawBytes(dt, shape, b)
	if err != nil {
		return err
	}
	t.dtype, t.data = out.dtype, out.data
	t.setShape(out.shape)
	return nil
}

// RawBytes returns the element bytes of t without copying (little-endian
// hosts; the engine targets amd64 and arm64). The slice aliases t's data.
func (t *Tensor) RawBytes() []byte {
	n := t.NumElements() * t.dtype.Size()
	if n == 0 {
		return nil
	}
	var p unsafe.Pointer
	switch d := t.data.(type) {
	case []float32:
		p = unsafe.Pointer(&d[0])
	case []float64:
		p = unsafe.Pointer(&d[0])
	case []int32:
		p = unsafe.Pointer(&d[0])
	case []int64:
		p = unsafe.Pointer(&d[0])
	case []bool:
		p = unsafe.Pointer(&d[0])
	case []uint8:
		p = unsafe.Pointer(&d[0])
	case []uint16:
		p = unsafe.Pointer(&d[0])
	}
	return unsafe.Slice((*byte)(p), n)
}

// SharesStorage reports whether t and u have elements in the same memory
// (one is a view of the other, or both of a third).
func (t *Tensor) SharesStorage(u *Tensor) bool {
	a, b := t.RawBytes(), u.RawBytes()
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// FromRawBytes builds a tensor of type dt and shape from little-endian element
// bytes, copying them. len(raw) must be exactly the size of the tensor.
func FromRawBytes(dt DType, shape []int, raw []byte) (*Tensor, error) {
	if err := checkRawBytes(dt, shape, raw); err != nil {
		return nil, err
	}
	return fromRawBytes(dt, shape, raw), nil
}

// ViewRawBytes is FromRawBytes without the copy when it can: the tensor's
// data is raw itself when raw is aligned for dt, and a copy otherwise (and
// always for Bool, whose bytes may hold values other than 0 and 1). The
// tensor may alias raw: raw must not change while the tensor is in use.
func ViewRawBytes(dt DType, shape []int, raw []byte) (*Tensor, error) {
	if err := checkRawBytes(dt, shape, raw); err != nil {
		return nil, err
	}
	if len(raw) == 0 || dt == Bool || uintptr(unsafe.Pointer(&raw[0]))%uintptr(dt.Size()) != 0 {
		return fromRawBytes(dt, shape, raw), nil
	}
	p, n := unsafe.Pointer(&raw[0]), len(raw)/dt.Size()
	var data any
	switch dt {
	case Float32:
		data = unsafe.Slice((*float32)(p), n)
	case Float64:
		data = unsafe.Slice((*float64)(p), n)
	case Int32:
		data = unsafe.Slice((*int32)(p), n)
	case Int64:
		data = unsafe.Slice((*int64)(p), n)
	case Uint8:
		data = unsafe.Slice((*uint8)(p), n)
	case Float16, BFloat16:
		data = unsafe.Slice((*uint16)(p), n)
	default:
		return fromRawBytes(dt, shape, raw), nil
	}
	return newTensor(dt, shape, data), nil
}

// checkRawBytes checks that raw holds exactly a tensor of dt and shape.
func checkRawBytes(dt DType, shape []int, raw []byte) error {
	if !dt.Valid() {
		return fmt.Errorf("%w: invalid dtype %v", ErrCorrupt, dt)
	}
	n, err := CheckNumElements(shape)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	want := n * dt.Size()
	if n > maxInt/dt.Size() || len(raw) != want {
		return fmt.Errorf("%w: %v%v needs %d bytes, got %d", ErrCorrupt, dt, slices.Clone(shape), want, len(raw)) // a clone: shape stays the caller's, on its stack
	}
	return nil
}

// fromRawBytes is FromRawBytes once raw is checked.
func fromRawBytes(dt DType, shape []int, raw []byte) *Tensor {
	t := New(dt, shape...)
	if dt == Bool {
		// Copying bytes into a []bool could create bools other than 0/1.
		for i, c := range raw {
			t.Bools()[i] = c != 0
		}
		return t
	}
	copy(t.RawBytes(), raw)
	return t
}
