package tensor_test

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/distflow/distflow/internal/fuzztest"
	"github.com/distflow/distflow/tensor"
)

// The binary tensor encoding is what checkpoints, saved models and the wire
// carry, so both directions are fuzzed here; FuzzUnmarshalBinary (in
// tensor_test.go) checks the decoder's round trip without bounds.

func halfTensor(dt tensor.DType, vals ...float64) *tensor.Tensor {
	t := tensor.New(dt, len(vals))
	for i, v := range vals {
		t.SetFloat64At(i, v)
	}
	return t
}

func mustEncode(t *tensor.Tensor) []byte {
	b, err := t.MarshalBinary()
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzTensorDecode: any bytes decode into a tensor whose canonical
// encoding is no longer than them and decodes back to the same tensor, or
// fail with tensor.ErrCorrupt; the decoder never allocates much more than
// the input (the elements are copied once; the shape is at most 64 dims).
func FuzzTensorDecode(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzTensorDecode", func() map[string][]any {
		seeds := map[string][]any{
			"float32_2x2":  {mustEncode(tensor.MustFromSlice([]float32{1, 2, 3, 4}, 2, 2))},
			"float64_nan":  {mustEncode(tensor.MustFromSlice([]float64{math.NaN(), math.Inf(-1)}, 2))},
			"int32_scalar": {mustEncode(tensor.MustFromSlice([]int32{-7}))},
			"int64_1x3":    {mustEncode(tensor.MustFromSlice([]int64{1, -1, math.MaxInt64}, 1, 3))},
			"bool":         {mustEncode(tensor.MustFromSlice([]bool{true, false, true}, 3))},
			"uint8_3d":     {mustEncode(tensor.MustFromSlice([]uint8{1, 2, 3, 4, 5, 6}, 1, 2, 3))},
			"empty_0x5":    {mustEncode(tensor.New(tensor.Float32, 0, 5))},
			"float16_2":    {mustEncode(halfTensor(tensor.Float16, 1, math.Inf(-1)))},
			"bfloat16_3":   {mustEncode(halfTensor(tensor.BFloat16, 1, -2, math.NaN()))},
			// Edge cases: a bool byte other than 0/1, a non-minimal varint,
			// a lying shape, rank 65, a dimension over MaxInt32, an
			// element count that overflows, a truncated body, trailing
			// bytes, an unknown dtype.
			"bool_byte_2":       {[]byte{byte(tensor.Bool), 1, 2, 2, 0}},
			"nonminimal_varint": {[]byte{byte(tensor.Uint8), 0x81, 0x00, 0x01, 9}},
			"lying_shape":       {[]byte{byte(tensor.Float64), 2, 0xff, 0xff, 0xff, 0x07, 0xff, 0xff, 0xff, 0x07, 1, 2, 3}},
			"rank_65":           {append([]byte{byte(tensor.Uint8), 65}, make([]byte, 65)...)},
			"dim_over_int32":    {[]byte{byte(tensor.Uint8), 1, 0x80, 0x80, 0x80, 0x80, 0x08}},
			"overflow":          {[]byte{byte(tensor.Int64), 3, 0xff, 0xff, 0xff, 0xff, 0x07, 0xff, 0xff, 0xff, 0xff, 0x07, 0xff, 0xff, 0xff, 0xff, 0x07}},
			"truncated":         {mustEncode(tensor.MustFromSlice([]float32{1, 2, 3}, 3))[:10]},
			"trailing":          {append(mustEncode(tensor.MustFromSlice([]int32{1}, 1)), 0)},
			"bad_dtype":         {[]byte{0xee, 0}},
			"short":             {[]byte{1}},
		}
		return seeds
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		var x tensor.Tensor
		var err error
		fuzztest.CheckAlloc(t, uint64(2*len(b))+8<<10, func() { err = x.UnmarshalBinary(b) })
		if err != nil {
			if !errors.Is(err, tensor.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		enc, err := x.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) > len(b) {
			t.Fatalf("decoded %d bytes into %v%v whose encoding has %d", len(b), x.DType(), x.Shape(), len(enc))
		}
		var y tensor.Tensor
		if err := y.UnmarshalBinary(enc); err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if again, _ := y.MarshalBinary(); !bytes.Equal(again, enc) {
			t.Fatalf("re-encoding differs: %x, then %x", enc, again)
		}
	})
}

// FuzzTensorEncode builds a tensor from a fuzzed dtype, shape and element
// bytes (as a decoder of any format does with FromRawBytes), encodes it and
// decodes it back: the same dtype, shape and bytes (bools made 0/1).
func FuzzTensorEncode(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzTensorEncode", func() map[string][]any {
		return map[string][]any{
			"float32_2x2": {uint8(tensor.Float32), []byte{2, 2}, make([]byte, 16)},
			"bool":        {uint8(tensor.Bool), []byte{3}, []byte{0, 1, 7}},
			"scalar":      {uint8(tensor.Int64), []byte{}, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
			"empty":       {uint8(tensor.Float64), []byte{0, 200}, []byte{}},
			"wrong_size":  {uint8(tensor.Int32), []byte{2}, []byte{1, 2, 3}},
			"invalid":     {uint8(0), []byte{1}, []byte{1}},
		}
	})
	f.Fuzz(func(t *testing.T, dt uint8, dims, raw []byte) {
		if len(dims) > 8 {
			return
		}
		shape := make([]int, len(dims))
		for i, d := range dims {
			shape[i] = int(d)
		}
		x, err := tensor.FromRawBytes(tensor.DType(dt), shape, raw)
		if err != nil {
			if !errors.Is(err, tensor.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		prefix := []byte("prefix")
		enc, err := x.AppendBinary(slices.Clone(prefix))
		if err != nil || !bytes.HasPrefix(enc, prefix) {
			t.Fatalf("AppendBinary: %v, %q", err, enc)
		}
		var y tensor.Tensor
		if err := y.UnmarshalBinary(enc[len(prefix):]); err != nil {
			t.Fatalf("decoding %v%v: %v", x.DType(), x.Shape(), err)
		}
		want := raw
		if x.DType() == tensor.Bool {
			want = make([]byte, len(raw))
			for i, c := range raw {
				want[i] = min(c, 1)
			}
		}
		if y.DType() != x.DType() || !slices.Equal(y.Shape(), shape) || !bytes.Equal(y.RawBytes(), want) {
			t.Fatalf("round trip of %v%v gave %v%v", x.DType(), shape, y.DType(), y.Shape())
		}
	})
}
