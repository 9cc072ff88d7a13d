package tensor

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestEncodingRoundTrip(t *testing.T) {
	cases := []*Tensor{
		MustFromSlice([]float32{1, -2.5, float32(math.NaN()), float32(math.Inf(1)), 0, 6}, 2, 3),
		MustFromSlice([]float64{math.Pi, -1e300}, 2),
		MustFromSlice([]int32{-7, 1 << 30}, 2, 1),
		MustFromSlice([]int64{-1 << 62, 3}, 1, 2),
		MustFromSlice([]bool{true, false, true}, 3),
		MustFromSlice([]uint8{0, 255}, 2),
		Scalar(float32(3)),
		New(Float32, 0, 5),
	}
	for _, want := range cases {
		b, err := want.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Tensor
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("%v: %v", want, err)
		}
		if !Equal(&got, want) {
			t.Errorf("round trip: got %v, want %v", &got, want)
		}
	}
}

func TestDecodeRejectsCorruptInput(t *testing.T) {
	good, _ := MustFromSlice([]float32{1, 2, 3, 4}, 2, 2).MarshalBinary()
	cases := map[string][]byte{
		"empty":     nil,
		"bad dtype": append([]byte{99}, good[1:]...),
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte{}, good...), 0),
		"bad rank":  {byte(Float32), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	}
	for name, b := range cases {
		var got Tensor
		if err := got.UnmarshalBinary(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: got error %v, want ErrCorrupt", name, err)
		}
	}
}

func TestBoolBytesNormalised(t *testing.T) {
	got, err := FromRawBytes(Bool, []int{3}, []byte{0, 1, 7})
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{false, true, true}
	for i, v := range got.Bools() {
		if v != want[i] {
			t.Errorf("element %d: got %v, want %v", i, v, want[i])
		}
	}
}

func TestShapes(t *testing.T) {
	cases := []struct {
		s     Shape
		str   string
		rank  int
		elems int
	}{
		{UnknownShape(), "<unknown>", -1, -1},
		{ScalarShape(), "[]", 0, 1},
		{MakeShape(-1, 784), "[?,784]", 2, -1},
		{MakeShape(2, 3), "[2,3]", 2, 6},
	}
	for _, c := range cases {
		if c.s.String() != c.str || c.s.Rank() != c.rank || c.s.NumElements() != c.elems {
			t.Errorf("%v: got %q rank %d elems %d", c.s, c.s.String(), c.s.Rank(), c.s.NumElements())
		}
		back, err := ParseShape(c.str)
		if err != nil || !back.Equal(c.s) {
			t.Errorf("ParseShape(%q) = %v, %v", c.str, back, err)
		}
	}
	if !MakeShape(-1, 784).IsCompatibleWith(MakeShape(100, 784)) || MakeShape(-1, 784).IsCompatibleWith(MakeShape(100, 10)) {
		t.Error("IsCompatibleWith")
	}
	m, err := MakeShape(-1, 3).Merge(MakeShape(5, -1))
	if err != nil || !m.Equal(MakeShape(5, 3)) {
		t.Errorf("Merge = %v, %v", m, err)
	}
	if _, err := ParseShape("[a]"); err == nil {
		t.Error("ParseShape accepted [a]")
	}
}

func TestFromSliceChecksSize(t *testing.T) {
	if _, err := FromSlice([]float32{1, 2, 3}, 2, 2); err == nil {
		t.Error("3 elements accepted for shape [2,2]")
	}
	if _, err := FromSlice([]string{"x"}, 1); err == nil {
		t.Error("[]string accepted")
	}
	x := MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	r, err := x.Reshaped(3, 2)
	if err != nil || r.Shape()[0] != 3 || &r.Float32s()[0] != &x.Float32s()[0] {
		t.Errorf("Reshaped must share data: %v %v", r, err)
	}
	if _, err := x.Reshaped(4, 2); err == nil {
		t.Error("Reshaped to a wrong size accepted")
	}
}

func FuzzUnmarshalBinary(f *testing.F) {
	good, _ := MustFromSlice([]float32{1, 2, 3, 4}, 2, 2).MarshalBinary()
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		var x Tensor
		if err := x.UnmarshalBinary(b); err == nil {
			again, _ := x.MarshalBinary()
			var y Tensor
			if err := y.UnmarshalBinary(again); err != nil || !Equal(&x, &y) {
				t.Fatalf("re-encoding differs")
			}
		}
	})
}

func TestAcceptsDims(t *testing.T) {
	cases := []struct {
		s    Shape
		dims []int
		want bool
	}{
		{UnknownShape(), []int{3, 4}, true},
		{ScalarShape(), nil, true},
		{ScalarShape(), []int{1}, false},
		{MakeShape(-1, 784), []int{100, 784}, true},
		{MakeShape(-1, 784), []int{100, 10}, false},
		{MakeShape(2), []int{2, 1}, false},
	}
	for _, c := range cases {
		if got := c.s.AcceptsDims(c.dims); got != c.want {
			t.Errorf("%v.AcceptsDims(%v) = %v, want %v", c.s, c.dims, got, c.want)
		}
	}
}

// TestShapeOverflow checks that an element count that does not fit an int
// is refused, never taken as the wrapped-around product (2^64 mod 2^64 = 0
// for [65536, 65536, 65536, 65536]).
func TestShapeOverflow(t *testing.T) {
	big := []int{65536, 65536, 65536, 65536}
	for _, tc := range []struct {
		dims     []int
		n        int
		overflow bool
	}{
		{big, 0, true},
		{[]int{1 << 32, 1 << 31}, 0, true},                            // 2^63 > MaxInt64
		{[]int{1 << 31, 1 << 31, 2}, 0, true},                         // 2^63
		{[]int{1 << 31, (1 << 31) - 1}, (1 << 62) - (1 << 31), false}, // fits
		{[]int{65536, 65536, 65536, 65536, 0}, 0, false},              // zero elements
		{[]int{}, 1, false},
	} {
		n, err := CheckNumElements(tc.dims)
		if tc.overflow {
			if !errors.Is(err, ErrShapeOverflow) {
				t.Errorf("CheckNumElements(%v) = %d, %v; want ErrShapeOverflow", tc.dims, n, err)
			}
			if got := NumElements(tc.dims); got != -1 {
				t.Errorf("NumElements(%v) = %d, want -1", tc.dims, got)
			}
			if err := MakeShape(tc.dims...).Check(); !errors.Is(err, ErrShapeOverflow) {
				t.Errorf("Shape%v.Check() = %v, want ErrShapeOverflow", tc.dims, err)
			}
			continue
		}
		if err != nil || n != tc.n {
			t.Errorf("CheckNumElements(%v) = %d, %v; want %d", tc.dims, n, err, tc.n)
		}
	}
	if _, err := CheckNumElements([]int{0, -1}); err == nil {
		t.Error("CheckNumElements([0 -1]) accepted a negative dimension")
	}
	if err := MakeShape(-1, 65536, 65536, 65536).Check(); err != nil {
		t.Errorf("a partial shape is checked when the tensor exists, got %v", err)
	}
	if _, err := FromSlice([]float32{}, big...); !errors.Is(err, ErrShapeOverflow) {
		t.Errorf("FromSlice(empty, %v) = %v, want ErrShapeOverflow", big, err)
	}
	if _, err := New(Float32, 0).Reshaped(big...); !errors.Is(err, ErrShapeOverflow) {
		t.Errorf("Reshaped(%v) = %v, want ErrShapeOverflow", big, err)
	}
	if _, err := FromRawBytes(Float32, big, nil); !errors.Is(err, ErrShapeOverflow) {
		t.Errorf("FromRawBytes(%v) = %v, want ErrShapeOverflow", big, err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("New(%v) did not panic", big)
			}
		}()
		New(Float32, big...)
	}()
}

// TestNewAllocations: a tensor of rank 4 or less keeps its shape in itself
// (its data, the data's interface value and the tensor are the rest).
func TestNewAllocations(t *testing.T) {
	for _, shape := range [][]int{{}, {3}, {2, 3, 4, 5}} {
		if n := testing.AllocsPerRun(100, func() { New(Float32, shape...) }); n > 3 {
			t.Errorf("New(Float32, %v) allocated %.0f times, want at most 3", shape, n)
		}
	}
	big := New(Float32, 1, 2, 1, 2, 1)
	r, err := big.Reshaped(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(big.Shape(), []int{1, 2, 1, 2, 1}) || !slices.Equal(r.Shape(), []int{2, 2}) {
		t.Errorf("shapes %v and %v, want [1 2 1 2 1] and [2 2]", big.Shape(), r.Shape())
	}
}

func TestViewRawBytes(t *testing.T) {
	src := MustFromSlice([]float32{1, 2, 3, 4}, 2, 2)
	raw := src.RawBytes() // aligned: the tensor's own memory
	v, err := ViewRawBytes(Float32, []int{2, 2}, raw)
	if err != nil {
		t.Fatal(err)
	}
	if !Equal(v, src) {
		t.Fatalf("view %v, want %v", v, src)
	}
	src.Float32s()[3] = 9
	if got := v.Float32s()[3]; got != 9 {
		t.Errorf("an aligned view did not alias its bytes: element 3 is %v after the source became 9", got)
	}
	// Misaligned bytes, and bools, are copied.
	buf := make([]byte, 17)
	copy(buf[1:], MustFromSlice([]float32{5, 6, 7, 8}, 4).RawBytes())
	m, err := ViewRawBytes(Float32, []int{4}, buf[1:])
	if err != nil {
		t.Fatal(err)
	}
	buf[1] ^= 0xff
	if !Equal(m, MustFromSlice([]float32{5, 6, 7, 8}, 4)) {
		t.Errorf("a misaligned view changed with its bytes: %v", m)
	}
	b, err := ViewRawBytes(Bool, []int{3}, []byte{0, 2, 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Bools(), []bool{false, true, true}) {
		t.Errorf("bools %v, want [false true true]", b.Bools())
	}
	// The checks are FromRawBytes's.
	if _, err := ViewRawBytes(Float32, []int{3}, raw); !errors.Is(err, ErrCorrupt) {
		t.Errorf("16 bytes as 3 float32s: %v, want ErrCorrupt", err)
	}
	if e, err := ViewRawBytes(Int64, []int{0, 5}, nil); err != nil || e.NumElements() != 0 {
		t.Errorf("empty: %v, %v", e, err)
	}
}

func TestSwapData(t *testing.T) {
	a := MustFromSlice([]float32{1, 2, 3, 4}, 2, 2)
	b := MustFromSlice([]float32{5, 6, 7, 8}, 2, 2)
	aData, bData := &a.Float32s()[0], &b.Float32s()[0]
	if err := a.SwapData(b); err != nil {
		t.Fatal(err)
	}
	if &a.Float32s()[0] != bData || &b.Float32s()[0] != aData {
		t.Error("SwapData copied instead of exchanging the storage")
	}
	if got := a.Float32s(); got[0] != 5 || got[3] != 8 {
		t.Errorf("a after the swap = %v, want b's elements", got)
	}
	for _, other := range []*Tensor{
		MustFromSlice([]float32{1, 2, 3, 4}, 4),          // another shape, same size
		MustFromSlice([]float64{1, 2, 3, 4}, 2, 2),       // another dtype
		MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3), // another size
	} {
		if err := a.SwapData(other); err == nil {
			t.Errorf("SwapData of %v%v with %v%v succeeded", a.DType(), a.Shape(), other.DType(), other.Shape())
		}
	}
	if got := a.Float32s(); got[0] != 5 {
		t.Errorf("a failed swap changed a: %v", got)
	}
}
