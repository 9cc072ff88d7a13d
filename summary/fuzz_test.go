package summary_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/internal/fuzztest"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/summary"
)

// eventFile returns the bytes of an event file written by a Writer.
func eventFile(f *testing.F) []byte {
	w, err := summary.NewWriter(f.TempDir(), summary.WriterOptions{FlushInterval: -1})
	if err != nil {
		f.Fatal(err)
	}
	for _, add := range []func() error{
		func() error { return w.AddScalar("loss", 1, 0.5) },
		func() error { return w.AddHistogram("weights", 2, []float64{-1, 0, 0.5, 3}) },
		func() error { return w.AddSessionLog(3, pb.SessionLog_START, "restarted") },
	} {
		if err := add(); err != nil {
			f.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(w.Path())
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// header returns a record header announcing n bytes, with a valid checksum.
func header(n uint64) []byte {
	h := binary.LittleEndian.AppendUint64(nil, n)
	return binary.LittleEndian.AppendUint32(h, summary.MaskedCRC(h))
}

// FuzzReadEvents reads arbitrary bytes as an event file (TFRecord framing
// of Event protos), as TensorBoard-style readers and the tests do with the
// files in a log directory. It returns the events before the first bad
// record and an error wrapping ErrTruncated or ErrCorrupt, or every event;
// the events returned re-frame into a file that reads back the same. A
// header that announces a large record must not make the reader allocate
// more than the input holds.
func FuzzReadEvents(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzReadEvents", func() map[string][]any {
		file := eventFile(f)
		bogus := summary.AppendRecord(nil, []byte{0xff, 0xff})
		return map[string][]any{
			"writer":           {file},
			"empty":            {[]byte{}},
			"truncated_body":   {file[:len(file)-3]},
			"truncated_head":   {file[:5]},
			"bad_length_crc":   {append(binary.LittleEndian.AppendUint64(nil, 4), 0, 0, 0, 0)},
			"bad_data_crc":     {append(summary.AppendRecord(nil, []byte("abcd"))[:16], 1, 2, 3, 4)},
			"not_an_event":     {append(bytes.Clone(file), bogus...)},
			"huge_length":      {header(1 << 30)},
			"over_limit":       {header(1<<30 + 1)},
			"empty_record":     {summary.AppendRecord(nil, nil)},
			"trailing_garbage": {append(bytes.Clone(file), 7)},
		}
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		var events []*pb.Event
		var err error
		fuzztest.CheckAlloc(t, uint64(16*len(b))+2<<20, func() { events, err = summary.ReadEvents(bytes.NewReader(b)) })
		if err != nil && !errors.Is(err, summary.ErrTruncated) && !errors.Is(err, summary.ErrCorrupt) {
			t.Fatalf("error %v wraps neither ErrTruncated nor ErrCorrupt", err)
		}
		var again []byte
		for _, e := range events {
			data, err := proto.MarshalOptions{Deterministic: true}.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			again = summary.AppendRecord(again, data)
		}
		back, err := summary.ReadEvents(bytes.NewReader(again))
		if err != nil || len(back) != len(events) {
			t.Fatalf("re-framed %d events read back as %d: %v", len(events), len(back), err)
		}
		for i := range back {
			if !proto.Equal(back[i], events[i]) {
				t.Fatalf("event %d differs after re-framing", i)
			}
		}
	})
}
