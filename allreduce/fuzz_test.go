package allreduce_test

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/internal/fuzztest"
)

// sinkTransport accepts every chunk and sends it nowhere: the fuzzed rank
// only receives.
type sinkTransport struct{}

func (sinkTransport) Open(context.Context, int, allreduce.Op) (allreduce.Stream, error) {
	return sinkStream{}, nil
}
func (sinkTransport) Probe(context.Context, int) error { return nil }
func (sinkTransport) Close() error                     { return nil }

type sinkStream struct{}

func (sinkStream) Send(*allreduce.Chunk) error { return nil }
func (sinkStream) Close() error                { return nil }
func (sinkStream) Abort()                      {}
func (sinkStream) Broken() <-chan struct{}     { return nil }

// errStreamEnd is the fuzzed incoming stream's end, after its last chunk.
var errStreamEnd = errors.New("the fuzzed stream ended")

// decodeChunks reads chunks from b, 12 bytes of header each:
//
//	u8 op (bit 0: name "g" or "h", bits 1-2: round) | i8 from | i8 size
//	| i16 index | i16 length | i16 offset | u8 elements | f32 elements...
//
// The signed fields reach the negative values a hostile peer may send.
// deliverFuzzed delivers the chunks that b encodes to r, as its transport
// would: each is filed or refused with ErrMismatch or ErrNonFinite, and
// what r holds of them costs no more memory than a multiple of b.
func deliverFuzzed(t *testing.T, r *allreduce.Ring, b []byte) {
	t.Helper()
	chunks := decodeChunks(b)
	fuzztest.CheckAlloc(t, uint64(32*len(b))+64<<10, func() {
		for _, c := range chunks {
			if err := r.Deliver(c); err != nil && !errors.Is(err, allreduce.ErrMismatch) && !errors.Is(err, allreduce.ErrNonFinite) {
				t.Fatalf("Deliver(%+v): %v", c, err)
			}
		}
	})
}

func decodeChunks(b []byte) []*allreduce.Chunk {
	var out []*allreduce.Chunk
	for len(b) >= 10 {
		name := "g"
		if b[0]&1 == 1 {
			name = "h"
		}
		c := &allreduce.Chunk{
			Op:     allreduce.Op{Name: name, Round: int64(b[0]>>1) & 3},
			From:   int(int8(b[1])),
			Size:   int(int8(b[2])),
			Index:  int(int16(binary.LittleEndian.Uint16(b[3:]))),
			Length: int(int16(binary.LittleEndian.Uint16(b[5:]))),
			Offset: int(int16(binary.LittleEndian.Uint16(b[7:]))),
		}
		n := int(b[9])
		b = b[10:]
		for i := 0; i < n && len(b) >= 4; i++ {
			c.Data = append(c.Data, math.Float32frombits(binary.LittleEndian.Uint32(b)))
			b = b[4:]
		}
		out = append(out, c)
	}
	return out
}

func encodeChunks(cs ...*allreduce.Chunk) []byte {
	var b []byte
	for _, c := range cs {
		op := byte(c.Op.Round&3) << 1
		if c.Op.Name == "h" {
			op |= 1
		}
		b = append(b, op, byte(int8(c.From)), byte(int8(c.Size)))
		b = binary.LittleEndian.AppendUint16(b, uint16(int16(c.Index)))
		b = binary.LittleEndian.AppendUint16(b, uint16(int16(c.Length)))
		b = binary.LittleEndian.AppendUint16(b, uint16(int16(c.Offset)))
		b = append(b, byte(len(c.Data)))
		for _, v := range c.Data {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	return b
}

// validChunks returns the chunks that rank 0 of a ring of 3 sends to rank 1
// for op "g" round 0 over 6 elements in chunks of 2 (segments of 2): the
// chunks rank 1 needs to complete.
func validChunks() []*allreduce.Chunk {
	op := allreduce.Op{Name: "g"}
	return []*allreduce.Chunk{
		{Op: op, From: 0, Size: 3, Index: 0, Length: 6, Offset: 0, Data: []float32{1, 2}},
		{Op: op, From: 0, Size: 3, Index: 1, Length: 6, Offset: 4, Data: []float32{3, 4}},
		{Op: op, From: 0, Size: 3, Index: 2, Length: 6, Offset: 2, Data: []float32{5, 6}},
		{Op: op, From: 0, Size: 3, Index: 3, Length: 6, Offset: 0, Data: []float32{7, 8}},
	}
}

// FuzzDeliver files fuzzed chunks with a rank, as its transport does with
// what the previous rank sends, then ends the incoming stream and runs the
// operation they claim to be part of: Deliver must refuse malformed chunks
// with ErrMismatch, and the operation must end at once with success,
// ErrMismatch or the stream's end, never hang or panic. A chunk costs no
// more memory than its encoding's multiple.
func FuzzDeliver(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzDeliver", func() map[string][]any {
		valid := validChunks()
		neg := *valid[0]
		neg.Index = -1
		short := *valid[1]
		short.Data = short.Data[:1]
		other := *valid[2]
		other.Op.Name = "h"
		wrongRing := *valid[0]
		wrongRing.Size = 4
		dup := *valid[0]
		dup.Data = []float32{float32(math.NaN()), float32(math.Inf(1))}
		return map[string][]any{
			"complete":       {encodeChunks(valid...), uint8(6)},
			"reordered":      {encodeChunks(valid[3], valid[1], valid[0], valid[2]), uint8(6)},
			"missing_last":   {encodeChunks(valid[:3]...), uint8(6)},
			"negative_index": {encodeChunks(&neg, valid[1], valid[2], valid[3]), uint8(6)},
			"short_data":     {encodeChunks(valid[0], &short, valid[2], valid[3]), uint8(6)},
			"other_op":       {encodeChunks(valid[0], valid[1], &other, valid[3]), uint8(6)},
			"wrong_ring":     {encodeChunks(&wrongRing), uint8(6)},
			"replaced_nan":   {encodeChunks(append(valid, &dup)...), uint8(6)},
			"length_differs": {encodeChunks(valid...), uint8(7)},
			"empty":          {[]byte{}, uint8(0)},
		}
	})
	quiet := slog.New(slog.DiscardHandler)
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		r, err := allreduce.NewRing(allreduce.Config{Rank: 1, Peers: []string{"a", "b", "c"}, ChunkBytes: 8, Logger: quiet}, sinkTransport{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		deliverFuzzed(t, r, b)
		r.Fail(allreduce.Op{Name: "g"}, 0, errStreamEnd)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		data := make([]float32, n%33)
		err = r.AllReduce(ctx, "g", 0, data)
		// A notice from the previous rank may fail the operation for any
		// cause a member tells (a server failure, a failed view).
		if err != nil && !errors.Is(err, allreduce.ErrMismatch) && !errors.Is(err, allreduce.ErrNonFinite) && !errors.Is(err, errStreamEnd) &&
			!errors.Is(err, allreduce.ErrServerFailed) && !errors.Is(err, allreduce.ErrViewFailed) {
			t.Fatalf("AllReduce: %v", err)
		}
		r.Close()
		if err := r.Deliver(&allreduce.Chunk{Op: allreduce.Op{Name: "g"}}); !errors.Is(err, allreduce.ErrClosed) {
			t.Fatalf("Deliver on a closed ring: %v", err)
		}
	})
}

// FuzzSummerDeliver files fuzzed chunks with a summation server (rank 2
// of 2 ranks and 1 server, chunks of 2 values), as its transport does with
// what the ranks stream: chunks that do not fit an operation are refused
// with ErrMismatch or ErrNonFinite, nothing panics, and the partial sums
// held cost no more memory than the chunks' encoding's multiple.
func FuzzSummerDeliver(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzSummerDeliver", func() map[string][]any {
		op := allreduce.Op{Name: "g"}
		from := func(rank int) []*allreduce.Chunk {
			return []*allreduce.Chunk{
				{Op: op, From: rank, Size: 2, Index: 0, Length: 5, Offset: 0, Data: []float32{1, 2}},
				{Op: op, From: rank, Size: 2, Index: 1, Length: 5, Offset: 2, Data: []float32{3, 4}},
				{Op: op, From: rank, Size: 2, Index: 2, Length: 5, Offset: 4, Data: []float32{5}},
			}
		}
		bad := *from(0)[1]
		bad.Offset = 3
		return map[string][]any{
			"complete":   {encodeChunks(append(from(0), from(1)...)...)},
			"one_member": {encodeChunks(from(1)...)},
			"twice":      {encodeChunks(append(from(0), from(0)...)...)},
			"misaligned": {encodeChunks(from(0)[0], &bad)},
			"empty":      {[]byte{}},
		}
	})
	quiet := slog.New(slog.DiscardHandler)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := allreduce.NewRing(allreduce.Config{Rank: 2, Peers: []string{"a", "b", "c"}, Servers: 1, ServerChunkBytes: 8, Logger: quiet}, sinkTransport{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		deliverFuzzed(t, r, b)
		r.Fail(allreduce.Op{Name: "g"}, 0, errStreamEnd)
		r.Close()
		if err := r.Deliver(&allreduce.Chunk{Op: allreduce.Op{Name: "g"}, Size: 1, Length: 1, Data: []float32{1}}); !errors.Is(err, allreduce.ErrClosed) {
			t.Fatalf("Deliver on a closed server: %v", err)
		}
	})
}
