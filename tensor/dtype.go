package tensor

import "fmt"

// DType is the element type of a tensor.
type DType uint8

// The supported element types. Float32 is the compute type of the engine;
// the others exist for labels, indices, masks and raw image bytes, and
// Float16 and BFloat16 (TensorFlow's DT_HALF and DT_BFLOAT16) to store
// and send gradients in half the bytes: only Cast (to and from float32),
// Send/Recv and the encoding handle them; IsFloat is false for them.
const (
	Invalid DType = iota
	Float32
	Float64
	Int32
	Int64
	Bool
	Uint8
	Float16
	BFloat16
)

var dtypeNames = [...]string{Invalid: "invalid", Float32: "float32", Float64: "float64",
	Int32: "int32", Int64: "int64", Bool: "bool", Uint8: "uint8", Float16: "float16", BFloat16: "bfloat16"}

var dtypeSizes = [...]int{Float32: 4, Float64: 8, Int32: 4, Int64: 8, Bool: 1, Uint8: 1, Float16: 2, BFloat16: 2}

// String returns the lower-case name used in errors and the CLI ("float32").
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the number of bytes of one element.
func (d DType) Size() int {
	if d.Valid() {
		return dtypeSizes[d]
	}
	return 0
}

// Valid reports whether d is one of the supported types.
func (d DType) Valid() bool { return d > Invalid && d <= BFloat16 }

// IsHalf reports whether d is a 16-bit float storage type.
func (d DType) IsHalf() bool { return d == Float16 || d == BFloat16 }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == Float32 || d == Float64 }

// IsInteger reports whether d is an integer type.
func (d DType) IsInteger() bool { return d == Int32 || d == Int64 || d == Uint8 }

// ParseDType returns the DType named s ("float32", ...).
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if i > 0 && n == s {
			return DType(i), nil
		}
	}
	return Invalid, fmt.Errorf("tensor: unknown dtype %q (want one of float32, float64, int32, int64, bool, uint8, float16, bfloat16)", s)
}
