package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distflow/distflow/tensor"
)

// idxBytes builds an IDX file: type code, dims, then the payload as given.
func idxBytes(code byte, dims []int, payload []byte) []byte {
	b := []byte{0, 0, code, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
	}
	return append(b, payload...)
}

func be16(vs ...int16) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.BigEndian.AppendUint16(b, uint16(v))
	}
	return b
}

func be32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadIDX(t *testing.T) {
	f32 := func(vs ...float32) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.BigEndian.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
	f64 := func(vs ...float64) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(v))
		}
		return b
	}
	tests := []struct {
		name string
		in   []byte
		want *tensor.Tensor
	}{
		{"uint8 2x3", idxBytes(0x08, []int{2, 3}, []byte{0, 1, 2, 253, 254, 255}),
			tensor.MustFromSlice([]uint8{0, 1, 2, 253, 254, 255}, 2, 3)},
		{"uint8 labels", idxBytes(0x08, []int{4}, []byte{9, 0, 3, 7}),
			tensor.MustFromSlice([]uint8{9, 0, 3, 7}, 4)},
		{"int8 widens to int32", idxBytes(0x09, []int{3}, []byte{0x80, 0xff, 0x7f}),
			tensor.MustFromSlice([]int32{-128, -1, 127}, 3)},
		{"int16", idxBytes(0x0B, []int{3}, be16(-32768, -2, 300)),
			tensor.MustFromSlice([]int32{-32768, -2, 300}, 3)},
		{"int32", idxBytes(0x0C, []int{2}, be32(0x80000000, 7)),
			tensor.MustFromSlice([]int32{math.MinInt32, 7}, 2)},
		{"float32", idxBytes(0x0D, []int{1, 2}, f32(1.5, -0.25)),
			tensor.MustFromSlice([]float32{1.5, -0.25}, 1, 2)},
		{"float64", idxBytes(0x0E, []int{2}, f64(math.Pi, -1e300)),
			tensor.MustFromSlice([]float64{math.Pi, -1e300}, 2)},
		{"scalar", idxBytes(0x08, nil, []byte{42}), tensor.Scalar(uint8(42))},
		{"empty", idxBytes(0x0D, []int{0, 784}, nil), tensor.New(tensor.Float32, 0, 784)},
	}
	for _, tc := range tests {
		for _, compressed := range []bool{false, true} {
			in := tc.in
			name := tc.name
			if compressed {
				in, name = gz(t, in), name+"/gzip"
			}
			t.Run(name, func(t *testing.T) {
				got, err := ReadIDX(bytes.NewReader(in))
				if err != nil {
					t.Fatal(err)
				}
				if !tensor.Equal(got, tc.want) {
					t.Errorf("got %v, want %v", got, tc.want)
				}
			})
		}
	}
}

func TestReadIDXErrors(t *testing.T) {
	good := idxBytes(0x08, []int{2, 3}, []byte{1, 2, 3, 4, 5, 6})
	corruptGzip := gz(t, good)
	corruptGzip[len(corruptGzip)-6] ^= 0xff // the CRC-32 trailer
	tests := []struct {
		name string
		in   []byte
		want string // substring of the error
	}{
		{"empty input", nil, "truncated magic number: got 0 of 4 bytes"},
		{"short magic", []byte{0, 0, 8}, "truncated magic number: got 3 of 4 bytes"},
		{"bad magic", []byte{1, 2, 8, 1, 0, 0, 0, 0}, "bad magic number 01 02 08 01"},
		{"unknown type", idxBytes(0x0A, []int{1}, []byte{0}), "unknown element type 0x0a"},
		{"truncated header", good[:9], "truncated header: 2 dimensions need 8 bytes, got 5"},
		{"truncated data", good[:len(good)-2], "truncated data for shape [2,3]: expected 6 bytes, got 4"},
		{"truncated int32 data", idxBytes(0x0C, []int{3}, be32(1, 2)), "expected 12 bytes, got 8"},
		{"trailing data", append(append([]byte{}, good...), 0), "trailing data after the 6 bytes"},
		{"huge shape", idxBytes(0x0E, []int{1 << 20, 1 << 20, 1 << 20}, nil), "declares more than"},
		{"truncated gzip", gz(t, good)[:20], ""},
		{"gzip of truncated data", gz(t, good[:len(good)-1]), "expected 6 bytes, got 5"},
		{"corrupt gzip checksum", corruptGzip, "checksum"},
		{"bad gzip header", []byte{0x1f, 0x8b, 0, 0}, "bad gzip header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadIDX(bytes.NewReader(tc.in))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrBadIDX) {
				t.Errorf("error %q does not wrap ErrBadIDX", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "data: IDX input: ") {
				t.Errorf("error %q, want it to start with %q and contain %q", err, "data: IDX input: ", tc.want)
			}
		})
	}
}

func TestReadIDXFile(t *testing.T) {
	dir := t.TempDir()
	want := tensor.MustFromSlice([]float32{1, 2, 3, 4}, 2, 2)
	var raw bytes.Buffer
	if err := WriteIDX(&raw, want); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "x-idx2-float")
	zipped := plain + ".gz"
	bad := filepath.Join(dir, "bad")
	for p, b := range map[string][]byte{plain: raw.Bytes(), zipped: gz(t, raw.Bytes()), bad: raw.Bytes()[:10]} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{plain, zipped} {
		got, err := ReadIDXFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !tensor.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", p, got, want)
		}
	}
	for _, p := range []string{bad, filepath.Join(dir, "missing")} {
		if _, err := ReadIDXFile(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("ReadIDXFile(%s): error %v does not name the file", p, err)
		}
	}
}

func TestWriteIDXRoundTrip(t *testing.T) {
	for _, want := range []*tensor.Tensor{
		tensor.MustFromSlice([]uint8{1, 2, 3, 4, 5, 6}, 3, 2),
		tensor.MustFromSlice([]int32{-5, 1 << 30}, 2),
		tensor.MustFromSlice([]float32{float32(math.Inf(-1)), 0.5}, 1, 1, 2),
		tensor.MustFromSlice([]float64{1e-300}, 1),
		tensor.New(tensor.Uint8, 0, 28, 28),
	} {
		var buf bytes.Buffer
		if err := WriteIDX(&buf, want); err != nil {
			t.Fatal(err)
		}
		got, err := ReadIDX(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if !tensor.Equal(got, want) {
			t.Errorf("round trip: got %v, want %v", got, want)
		}
	}
	err := WriteIDX(&bytes.Buffer{}, tensor.New(tensor.Int64, 2))
	if err == nil || !strings.Contains(err.Error(), "int64") {
		t.Errorf("WriteIDX(int64): error %v, want one naming the dtype", err)
	}
}

// FuzzReadIDX checks that no input makes the reader panic or return a tensor
// that disagrees with its header.
func FuzzReadIDX(f *testing.F) {
	f.Add(idxBytes(0x08, []int{2, 3}, []byte{1, 2, 3, 4, 5, 6}))
	f.Add(idxBytes(0x0C, []int{2}, be32(1, 2)))
	f.Add(idxBytes(0x0B, []int{1, 1}, be16(-3)))
	f.Add(idxBytes(0x0E, []int{0}, nil))
	f.Add(gz(f, idxBytes(0x0D, []int{1}, be32(0x3f800000))))
	f.Add([]byte{0, 0, 8, 255})
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := ReadIDX(bytes.NewReader(in))
		if err != nil {
			if got != nil {
				t.Fatal("tensor returned with an error")
			}
			return
		}
		if got.NumElements() != tensor.NumElements(got.Shape()) {
			t.Fatalf("inconsistent tensor %v", got)
		}
	})
}
