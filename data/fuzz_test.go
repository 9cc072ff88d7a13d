package data_test

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/internal/fuzztest"
	"github.com/distflow/distflow/tensor"
)

func idxEncode(t *tensor.Tensor) []byte {
	var b bytes.Buffer
	if err := data.WriteIDX(&b, t); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// FuzzReadIDXBounded reads arbitrary bytes as an IDX file, plain or
// gzip-compressed, as the Fashion-MNIST loader does with files on disk. It
// adds to FuzzReadIDX a bound on memory: a header may claim up to 16 GiB,
// but the reader reserves at most 1 MiB before the data arrives, so it
// allocates no more than a multiple of the decompressed input (DEFLATE
// expands at most 1032 times) plus that MiB. The tensors returned re-encode
// with WriteIDX to an IDX file that reads back the same (int8 and int16
// files come back as int32).
func FuzzReadIDXBounded(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzReadIDXBounded", func() map[string][]any {
		img := tensor.MustFromSlice([]uint8{0, 1, 2, 3, 250, 255}, 1, 2, 3)
		hugeClaim := []byte{0, 0, 0x08, 2, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3}
		return map[string][]any{
			"uint8":      {idxEncode(img)},
			"int32":      {idxEncode(tensor.MustFromSlice([]int32{-1, 0, 1 << 30}, 3))},
			"float32":    {idxEncode(tensor.MustFromSlice([]float32{0.5, -2}, 2, 1))},
			"float64":    {idxEncode(tensor.MustFromSlice([]float64{1e300}, 1))},
			"empty":      {idxEncode(tensor.New(tensor.Uint8, 0, 28, 28))},
			"gzip":       {gzipped(idxEncode(img))},
			"gzip_bomb":  {gzipped(append([]byte{0, 0, 0x08, 1, 0, 0x10, 0, 0}, make([]byte, 1<<20)...))},
			"huge_claim": {hugeClaim},
			"gzip_claim": {gzipped(hugeClaim)},
			"trailing":   {append(idxEncode(img), 0)},
			"truncated":  {idxEncode(img)[:12]},
			"bad_magic":  {[]byte{1, 0, 0x08, 1, 0, 0, 0, 0}},
			"bad_gzip":   {[]byte{0x1f, 0x8b, 8, 0, 0, 0}},
		}
	})
	f.Fuzz(func(t *testing.T, in []byte) {
		var got *tensor.Tensor
		var err error
		fuzztest.CheckAlloc(t, uint64(8*1032*len(in))+4<<20, func() { got, err = data.ReadIDX(bytes.NewReader(in)) })
		if err != nil {
			if got != nil {
				t.Fatal("a tensor returned with an error")
			}
			return
		}
		var b bytes.Buffer
		if err := data.WriteIDX(&b, got); err != nil {
			return // a dtype WriteIDX does not write
		}
		back, err := data.ReadIDX(&b)
		if err != nil || !tensor.Equal(back, got) {
			t.Fatalf("%v%v does not read back: %v", got.DType(), got.Shape(), err)
		}
	})
}
