package data

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/distflow/distflow/tensor"
)

// IDX element type codes (the third byte of the magic number).
const (
	idxUint8   = 0x08
	idxInt8    = 0x09
	idxInt16   = 0x0B
	idxInt32   = 0x0C
	idxFloat32 = 0x0D
	idxFloat64 = 0x0E
)

// idxMaxBytes bounds the payload a header may declare (16 GiB), so that a
// corrupt header is reported instead of overflowing the size computation.
const idxMaxBytes = 1 << 34

// idxPrealloc bounds the buffer reserved up front from the header's claim;
// beyond it the buffer grows with the data actually read, so a lying header
// cannot make the reader allocate memory the input does not back.
const idxPrealloc = 1 << 20

// ErrBadIDX is wrapped by every error about malformed IDX input (bad magic,
// unknown type, truncated or trailing data), as opposed to I/O errors.
var ErrBadIDX = errors.New("malformed IDX data")

// ReadIDX reads one IDX array from r and returns it as a tensor.
//
// The IDX format (used by MNIST and Fashion-MNIST) is a 4-byte magic number
// (two zero bytes, an element type code, the number of dimensions), one
// big-endian uint32 per dimension, then the elements in row-major order,
// big-endian. Element types map to tensor types as follows: 0x08 unsigned
// byte -> Uint8; 0x09 signed byte, 0x0B int16 and 0x0C int32 -> Int32;
// 0x0D float32 -> Float32; 0x0E float64 -> Float64.
//
// Gzip-compressed input (recognised by its magic bytes) is decompressed
// transparently. The input must end exactly after the last element. The
// returned tensor belongs to the caller.
func ReadIDX(r io.Reader) (*tensor.Tensor, error) {
	return readIDX(r, "IDX input")
}

// ReadIDXFile reads the IDX file at path (plain or gzip-compressed); errors
// name the file.
func ReadIDXFile(path string) (*tensor.Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	return readIDX(f, path)
}

func readIDX(r io.Reader, name string) (*tensor.Tensor, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("data: %s: %w: %s", name, ErrBadIDX, fmt.Sprintf(format, args...))
	}
	br := bufio.NewReaderSize(r, 64<<10)
	if m, _ := br.Peek(2); len(m) == 2 && m[0] == 0x1f && m[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, bad("bad gzip header: %v", err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 64<<10)
	}

	var magic [4]byte
	if n, err := io.ReadFull(br, magic[:]); err != nil {
		if isMalformed(err) {
			return nil, bad("truncated magic number: got %d of 4 bytes", n)
		}
		return nil, fmt.Errorf("data: %s: %w", name, err)
	}
	if magic[0] != 0 || magic[1] != 0 {
		return nil, bad("bad magic number % x: want 00 00 <type> <ndims>", magic[:])
	}
	code, ndims := magic[2], int(magic[3])
	elemSize := idxElemSize(code)
	if elemSize == 0 {
		return nil, bad("unknown element type 0x%02x (want 0x08, 0x09, 0x0b, 0x0c, 0x0d or 0x0e)", code)
	}

	header := make([]byte, 4*ndims)
	if n, err := io.ReadFull(br, header); err != nil {
		if isMalformed(err) {
			return nil, bad("truncated header: %d dimensions need %d bytes, got %d", ndims, len(header), n)
		}
		return nil, fmt.Errorf("data: %s: %w", name, err)
	}
	dims := make([]int, ndims)
	size := int64(elemSize)
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(header[4*i:]))
		if size != 0 && int64(dims[i]) > idxMaxBytes/size {
			return nil, bad("shape %v declares more than %d bytes", tensor.MakeShape(dims[:i+1]...), int64(idxMaxBytes))
		}
		size *= int64(dims[i])
	}

	shape := tensor.MakeShape(dims...) // for messages
	var buf bytes.Buffer
	buf.Grow(int(min(size, idxPrealloc)))
	if _, err := buf.ReadFrom(io.LimitReader(br, size)); err != nil {
		if isMalformed(err) {
			return nil, bad("reading data for shape %v: %v after %d of %d bytes", shape, err, buf.Len(), size)
		}
		return nil, fmt.Errorf("data: %s: %w", name, err)
	}
	if int64(buf.Len()) < size {
		return nil, bad("truncated data for shape %v: expected %d bytes, got %d", shape, size, buf.Len())
	}
	if _, err := br.ReadByte(); err == nil {
		return nil, bad("trailing data after the %d bytes of shape %v", size, shape)
	} else if err != io.EOF {
		if isMalformed(err) {
			return nil, bad("corrupt stream after the data: %v", err)
		}
		return nil, fmt.Errorf("data: %s: %w", name, err)
	}
	return idxDecode(code, buf.Bytes(), dims), nil
}

// isMalformed reports whether err is about the content of the input (it
// ended early, or its gzip stream is corrupt) rather than an I/O failure.
func isMalformed(err error) bool {
	var corrupt flate.CorruptInputError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) ||
		errors.As(err, &corrupt)
}

func idxElemSize(code byte) int {
	switch code {
	case idxUint8, idxInt8:
		return 1
	case idxInt16:
		return 2
	case idxInt32, idxFloat32:
		return 4
	case idxFloat64:
		return 8
	}
	return 0
}

// idxDecode converts the big-endian payload b (of exactly the right length)
// into a tensor of the given shape.
func idxDecode(code byte, b []byte, dims []int) *tensor.Tensor {
	var data any
	switch code {
	case idxUint8:
		data = b // already owned by us, no copy needed
	case idxInt8:
		d := make([]int32, len(b))
		for i, v := range b {
			d[i] = int32(int8(v))
		}
		data = d
	case idxInt16:
		d := make([]int32, len(b)/2)
		for i := range d {
			d[i] = int32(int16(binary.BigEndian.Uint16(b[2*i:])))
		}
		data = d
	case idxInt32:
		d := make([]int32, len(b)/4)
		for i := range d {
			d[i] = int32(binary.BigEndian.Uint32(b[4*i:]))
		}
		data = d
	case idxFloat32:
		d := make([]float32, len(b)/4)
		for i := range d {
			d[i] = math.Float32frombits(binary.BigEndian.Uint32(b[4*i:]))
		}
		data = d
	case idxFloat64:
		d := make([]float64, len(b)/8)
		for i := range d {
			d[i] = math.Float64frombits(binary.BigEndian.Uint64(b[8*i:]))
		}
		data = d
	}
	// Cannot fail: the element count was checked against dims.
	return tensor.MustFromSlice(data, dims...)
}

// WriteIDX writes t to w in the IDX format (uncompressed; wrap w in a
// gzip.Writer for .gz files). Supported types: Uint8 (0x08), Int32 (0x0C),
// Float32 (0x0D) and Float64 (0x0E).
func WriteIDX(w io.Writer, t *tensor.Tensor) error {
	var code byte
	switch t.DType() {
	case tensor.Uint8:
		code = idxUint8
	case tensor.Int32:
		code = idxInt32
	case tensor.Float32:
		code = idxFloat32
	case tensor.Float64:
		code = idxFloat64
	default:
		return fmt.Errorf("data: WriteIDX: dtype %v has no IDX type code (want uint8, int32, float32 or float64)", t.DType())
	}
	if t.Rank() > 255 {
		return fmt.Errorf("data: WriteIDX: rank %d exceeds the IDX limit of 255", t.Rank())
	}
	header := make([]byte, 4, 4+4*t.Rank())
	header[2], header[3] = code, byte(t.Rank())
	for _, d := range t.Shape() {
		if d > math.MaxUint32 {
			return fmt.Errorf("data: WriteIDX: dimension %d of shape %v exceeds the IDX limit", d, t.Shape())
		}
		header = binary.BigEndian.AppendUint32(header, uint32(d))
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(header) // errors are sticky; reported by Flush
	var scratch [8]byte
	switch d := t.Data().(type) {
	case []uint8:
		bw.Write(d)
	case []int32:
		for _, v := range d {
			binary.BigEndian.PutUint32(scratch[:], uint32(v))
			bw.Write(scratch[:4])
		}
	case []float32:
		for _, v := range d {
			binary.BigEndian.PutUint32(scratch[:], math.Float32bits(v))
			bw.Write(scratch[:4])
		}
	case []float64:
		for _, v := range d {
			binary.BigEndian.PutUint64(scratch[:], math.Float64bits(v))
			bw.Write(scratch[:])
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("data: WriteIDX: %w", err)
	}
	return nil
}
