package summary

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// TFRecord framing, the container of event files. Each record is
//
//	uint64 length            little-endian
//	uint32 masked CRC32C     of the 8 length bytes
//	byte   data[length]
//	uint32 masked CRC32C     of data
//
// where CRC32C is the Castagnoli CRC and mask(c) = ((c>>15)|(c<<17)) + 0xa282ead8.
// Masking keeps the CRC of data that itself holds CRCs from being trivially
// related to it.

// Sentinel errors of the record reader; errors wrap them with the file and offset.
var (
	// ErrTruncated reports a record cut short by the end of the input: what a
	// reader sees when a writer died mid-record (or is still writing).
	ErrTruncated = errors.New("truncated record")
	// ErrCorrupt reports a record whose length or data fails its checksum.
	ErrCorrupt = errors.New("corrupt record")
)

// maxRecordLen bounds the length a reader accepts, so that a corrupt length
// that happens to pass its CRC cannot make it allocate without limit.
const maxRecordLen = 1 << 30

const (
	recordHeaderLen = 12 // length + its CRC
	recordFooterLen = 4  // data CRC
	crcMaskDelta    = 0xa282ead8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC returns the masked CRC32C of b, as TFRecord framing stores it.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + crcMaskDelta
}

// AppendRecord appends data framed as one TFRecord to buf and returns the
// extended buffer.
func AppendRecord(buf, data []byte) []byte {
	var hdr [recordHeaderLen]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], MaskedCRC(hdr[:8]))
	buf = append(buf, hdr[:]...)
	buf = append(buf, data...)
	return binary.LittleEndian.AppendUint32(buf, MaskedCRC(data))
}

// RecordReader reads TFRecords one at a time. It is not safe for concurrent use.
type RecordReader struct {
	r   *bufio.Reader
	off int64
}

// NewRecordReader returns a reader of the records in r.
func NewRecordReader(r io.Reader) *RecordReader {
	return &RecordReader{r: bufio.NewReader(r)}
}

// Offset returns the byte offset of the next record.
func (rr *RecordReader) Offset() int64 { return rr.off }

// Next returns the data of the next record. It returns io.EOF at a clean end
// of input (between records), an error wrapping ErrTruncated when the input
// ends inside a record and one wrapping ErrCorrupt on a checksum mismatch.
// The returned slice is the caller's.
func (rr *RecordReader) Next() ([]byte, error) {
	var hdr [recordHeaderLen]byte
	n, err := io.ReadFull(rr.r, hdr[:])
	switch {
	case err == io.EOF:
		return nil, io.EOF
	case err != nil:
		return nil, rr.fail(ErrTruncated, "header: %d of %d bytes", n, recordHeaderLen)
	}
	if got, want := binary.LittleEndian.Uint32(hdr[8:]), MaskedCRC(hdr[:8]); got != want {
		return nil, rr.fail(ErrCorrupt, "length checksum %#08x, want %#08x", got, want)
	}
	length := binary.LittleEndian.Uint64(hdr[:8])
	if length > maxRecordLen {
		return nil, rr.fail(ErrCorrupt, "length %d exceeds the limit %d", length, maxRecordLen)
	}
	body, err := readN(rr.r, int(length)+recordFooterLen)
	if err != nil {
		return nil, rr.fail(ErrTruncated, "%d of %d data and checksum bytes", len(body), int(length)+recordFooterLen)
	}
	data, crc := body[:length], binary.LittleEndian.Uint32(body[length:])
	if want := MaskedCRC(data); crc != want {
		return nil, rr.fail(ErrCorrupt, "data checksum %#08x, want %#08x", crc, want)
	}
	rr.off += int64(recordHeaderLen) + int64(len(body))
	return data, nil
}

// readN reads exactly n bytes from r. Beyond the first MiB the buffer grows
// with the bytes actually read, so that a corrupt length (up to
// maxRecordLen) in a short file costs no more memory than the file holds.
// On error it returns what it read.
func readN(r io.Reader, n int) ([]byte, error) {
	const prealloc = 1 << 20
	if n <= prealloc {
		b := make([]byte, n)
		k, err := io.ReadFull(r, b)
		return b[:k], err
	}
	var buf bytes.Buffer
	buf.Grow(prealloc)
	k, err := io.CopyN(&buf, r, int64(n))
	if err == io.EOF && k < int64(n) {
		err = io.ErrUnexpectedEOF
	}
	return buf.Bytes(), err
}

func (rr *RecordReader) fail(sentinel error, format string, args ...any) error {
	return fmt.Errorf("summary: record at offset %d: %w: %s", rr.off, sentinel, fmt.Sprintf(format, args...))
}
