package summary_test

// An event-file reader written from the public format alone, sharing no code
// with package summary: its own CRC32C masking and a protowire decoder of
// the Event, Summary and HistogramProto field numbers of TensorFlow's
// event.proto and summary.proto. The tests check the writer against it.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

var (
	errTBTruncated = errors.New("tb: truncated record")
	errTBChecksum  = errors.New("tb: checksum mismatch")
)

var tbTable = crc32.MakeTable(crc32.Castagnoli)

func tbMaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, tbTable)
	return (c>>15 | c<<17) + 0xa282ead8
}

// tbRecords splits b into TFRecords, verifying both checksums. It returns
// the records before the first fault with an error wrapping errTBTruncated
// or errTBChecksum.
func tbRecords(b []byte) ([][]byte, error) {
	var recs [][]byte
	for off := 0; off < len(b); {
		if len(b)-off < 12 {
			return recs, fmt.Errorf("offset %d: %w: %d header bytes", off, errTBTruncated, len(b)-off)
		}
		lenBytes := b[off : off+8]
		if got := binary.LittleEndian.Uint32(b[off+8:]); got != tbMaskedCRC(lenBytes) {
			return recs, fmt.Errorf("offset %d: length: %w", off, errTBChecksum)
		}
		n := binary.LittleEndian.Uint64(lenBytes)
		if n > uint64(len(b)-off-12) || uint64(len(b)-off-12)-n < 4 {
			return recs, fmt.Errorf("offset %d: %w: length %d", off, errTBTruncated, n)
		}
		data := b[off+12 : off+12+int(n)]
		if got := binary.LittleEndian.Uint32(b[off+12+int(n):]); got != tbMaskedCRC(data) {
			return recs, fmt.Errorf("offset %d: data: %w", off, errTBChecksum)
		}
		recs = append(recs, data)
		off += 12 + int(n) + 4
	}
	return recs, nil
}

type tbHisto struct {
	min, max, num, sum, sumSquares float64
	limits, counts                 []float64
}

type tbValue struct {
	tag      string
	isSimple bool
	simple   float32
	histo    *tbHisto
}

type tbEvent struct {
	wallTime      float64
	step          int64
	fileVersion   string
	hasSummary    bool
	values        []tbValue
	sessionStatus int64
}

// tbFields calls f for each field of the message b.
func tbFields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		if err := f(num, typ, b[:m]); err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
		b = b[m:]
	}
	return nil
}

func tbBytes(v []byte) []byte { b, _ := protowire.ConsumeBytes(v); return b }

func tbDouble(v []byte) float64 { x, _ := protowire.ConsumeFixed64(v); return math.Float64frombits(x) }

func tbVarint(v []byte) uint64 { x, _ := protowire.ConsumeVarint(v); return x }

func tbDecodeEvent(b []byte) (tbEvent, error) {
	var e tbEvent
	err := tbFields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			e.wallTime = tbDouble(v)
		case num == 2 && typ == protowire.VarintType:
			e.step = int64(tbVarint(v))
		case num == 3 && typ == protowire.BytesType:
			e.fileVersion = string(tbBytes(v))
		case num == 5 && typ == protowire.BytesType:
			e.hasSummary = true
			return tbFields(tbBytes(v), func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				val, err := tbDecodeValue(tbBytes(v))
				e.values = append(e.values, val)
				return err
			})
		case num == 7 && typ == protowire.BytesType:
			return tbFields(tbBytes(v), func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num == 1 && typ == protowire.VarintType {
					e.sessionStatus = int64(tbVarint(v))
				}
				return nil
			})
		}
		return nil
	})
	return e, err
}

func tbDecodeValue(b []byte) (tbValue, error) {
	var val tbValue
	err := tbFields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			val.tag = string(tbBytes(v))
		case num == 2 && typ == protowire.Fixed32Type:
			x, _ := protowire.ConsumeFixed32(v)
			val.isSimple, val.simple = true, math.Float32frombits(x)
		case num == 5 && typ == protowire.BytesType:
			h, err := tbDecodeHisto(tbBytes(v))
			val.histo = h
			return err
		}
		return nil
	})
	return val, err
}

func tbDecodeHisto(b []byte) (*tbHisto, error) {
	h := &tbHisto{}
	doubles := func(typ protowire.Type, v []byte) ([]float64, error) {
		if typ == protowire.Fixed64Type {
			return []float64{tbDouble(v)}, nil
		}
		p := tbBytes(v)
		if len(p)%8 != 0 {
			return nil, fmt.Errorf("packed doubles of %d bytes", len(p))
		}
		var out []float64
		for ; len(p) > 0; p = p[8:] {
			out = append(out, math.Float64frombits(binary.LittleEndian.Uint64(p)))
		}
		return out, nil
	}
	err := tbFields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		var err error
		var d []float64
		switch num {
		case 1:
			h.min = tbDouble(v)
		case 2:
			h.max = tbDouble(v)
		case 3:
			h.num = tbDouble(v)
		case 4:
			h.sum = tbDouble(v)
		case 5:
			h.sumSquares = tbDouble(v)
		case 6:
			d, err = doubles(typ, v)
			h.limits = append(h.limits, d...)
		case 7:
			d, err = doubles(typ, v)
			h.counts = append(h.counts, d...)
		}
		return err
	})
	return h, err
}

// tbReadEvents decodes every record of an event file's bytes.
func tbReadEvents(b []byte) ([]tbEvent, error) {
	recs, rerr := tbRecords(b)
	events := make([]tbEvent, 0, len(recs))
	for i, r := range recs {
		e, err := tbDecodeEvent(r)
		if err != nil {
			return events, fmt.Errorf("record %d: %w", i, err)
		}
		events = append(events, e)
	}
	return events, rerr
}
