//go:build ignore

// gen writes the Fashion-MNIST subset that package data embeds: the first
// 8000 training examples and the first 2000 test examples, as gzip-compressed
// IDX files named like the originals. Run it through `go generate ./data`;
// Debian's dataset-fashion-mnist package provides the source files.
//
// It works on the raw bytes and imports nothing from package data, so that it
// runs even when the embedded files are missing (package data would not build).
package main

import (
	"compress/gzip"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
)

func main() {
	src := flag.String("src", "/usr/share/datasets/fashion-mnist", "directory with the full Fashion-MNIST IDX files")
	out := flag.String("out", ".", "output directory")
	nTrain := flag.Int("train", 8000, "number of leading training examples to keep")
	nTest := flag.Int("test", 2000, "number of leading test examples to keep")
	flag.Parse()
	for _, f := range []struct {
		stem string
		n    int
	}{
		{"train-images-idx3-ubyte", *nTrain},
		{"train-labels-idx1-ubyte", *nTrain},
		{"t10k-images-idx3-ubyte", *nTest},
		{"t10k-labels-idx1-ubyte", *nTest},
	} {
		if err := subset(filepath.Join(*src, f.stem+".gz"), filepath.Join(*out, f.stem+".gz"), f.n); err != nil {
			log.Fatal(err)
		}
	}
}

// subset copies the first n entries (along dimension 0) of the gzip-compressed
// unsigned-byte IDX file in to out.
func subset(in, out string, n int) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if len(raw) < 8 || raw[0] != 0 || raw[1] != 0 || raw[2] != 0x08 || raw[3] == 0 {
		return fmt.Errorf("%s: not an unsigned-byte IDX file", in)
	}
	ndims := int(raw[3])
	header := append([]byte{}, raw[:4+4*ndims]...)
	row := 1
	for i := 1; i < ndims; i++ {
		row *= int(binary.BigEndian.Uint32(header[4+4*i:]))
	}
	if total := int(binary.BigEndian.Uint32(header[4:])); total < n || len(raw) != len(header)+total*row {
		return fmt.Errorf("%s: %d entries of %d bytes in %d bytes of data, want at least %d entries",
			in, total, row, len(raw)-len(header), n)
	}
	binary.BigEndian.PutUint32(header[4:], uint32(n))
	body := raw[len(header) : len(header)+n*row]
	if ndims == 1 {
		counts := make([]int, 10)
		for _, v := range body {
			if int(v) < len(counts) {
				counts[v]++
			}
		}
		log.Printf("%s: %d labels, per class %v", out, n, counts)
	}

	w, err := os.Create(out)
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	zw.Name = filepath.Base(in[:len(in)-len(".gz")])
	zw.Write(header)
	zw.Write(body)
	if err := zw.Close(); err != nil {
		w.Close()
		return fmt.Errorf("%s: %w", out, err)
	}
	return w.Close()
}
