package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/internal/fuzztest"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
)

// Fuzz targets for what this package decodes from the network: the tensor
// channel's requests and batches of keys (server side) and responses
// (client side), the RecvTensor codec's messages, and the ring's chunk
// stream. The limits in their allocation checks are the documented
// maximums (maxRequestSize, Options.MaxTensorBytes, set to fuzzMaxTensor
// here) plus a multiple of the input.

const fuzzMaxTensor = 1 << 20

// fuzzSplit cuts b into messages, each prefixed with a u16 length; a short
// last message takes what is left.
func fuzzSplit(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 2 {
		n := min(int(binary.LittleEndian.Uint16(b)), len(b)-2)
		out = append(out, b[2:2+n])
		b = b[2+n:]
	}
	return out
}

func fuzzJoin(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}

// FuzzReadRequest decodes a tensor-channel request as a server reads it from
// a client: a request that decodes re-encodes to a request that decodes the
// same (metadata names lowercased, as gRPC does); nothing panics, and no more
// than maxRequestSize is allocated beyond a
// multiple of the input.
func FuzzReadRequest(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzReadRequest", func() map[string][]any {
		full := appendRequest(nil, 42, time.Second, "/job:ps/task:0/cpu:0;/job:worker/task:0/cpu:0;w:0", map[string]string{"authorization": "Bearer x"})
		huge := binary.LittleEndian.AppendUint32(nil, maxRequestSize+1)
		lying := binary.LittleEndian.AppendUint32(nil, maxRequestSize)
		pairs := binary.LittleEndian.AppendUint32(nil, 20)
		pairs = append(pairs, make([]byte, 18)...)
		pairs = append(pairs, 0xff, 0xff) // 65535 pairs announced, none there
		return map[string][]any{
			"full":          {full},
			"no_metadata":   {appendRequest(nil, -1, 0, "k", nil)},
			"two_requests":  {append(bytes.Clone(full), full...)},
			"truncated":     {full[:len(full)-3]},
			"too_large":     {huge},
			"lying_length":  {lying},
			"many_pairs":    {pairs},
			"empty":         {[]byte{}},
			"key_too_long":  {binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint32(nil, 20), 0)[:4]},
			"uppercase_key": {appendRequest(nil, 1, 1, "k", map[string]string{"X-Token": "v"})},
		}
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		var req *tensorRequest
		var err error
		fuzztest.CheckAlloc(t, uint64(64*len(b))+maxRequestSize, func() {
			// Version 1.1 (a method byte, a call's body) decodes safely too.
			readRequestV(bufio.NewReader(bytes.NewReader(b)), true)
		})
		fuzztest.CheckAlloc(t, uint64(64*len(b))+maxRequestSize, func() {
			req, err = readRequest(bufio.NewReader(bytes.NewReader(b)))
		})
		// Into a server connection's reused buffer, the same request.
		var reused tensorRequest
		if _, rerr := readRequestInto(bufio.NewReader(bytes.NewReader(b)), false, &reused, make([]byte, 0, 1<<10)); (rerr == nil) != (err == nil) {
			t.Fatalf("into a reused buffer: %v, else %v", rerr, err)
		} else if err == nil && (reused.step != req.step || reused.timeout != req.timeout || reused.key != req.key || !maps.EqualFunc(reused.md, req.md, slices.Equal)) {
			t.Fatalf("into a reused buffer: %+v, else %+v", reused, *req)
		}
		if err != nil {
			return
		}
		md := map[string]string{}
		for k, vs := range req.md {
			if len(vs) != 1 || len(k) > 1<<16-1 {
				return // several values per name: the encoder takes one
			}
			md[k] = vs[0]
		}
		again, err := readRequest(bufio.NewReader(bytes.NewReader(appendRequest(nil, req.step, req.timeout, req.key, md))))
		if err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if again.step != req.step || again.timeout != req.timeout || again.key != req.key || len(again.md) != len(req.md) {
			t.Fatalf("round trip: %+v, then %+v", req, again)
		}
	})
}

// FuzzParseKeys decodes a batch request's body as a server does, after a
// previous batch on the same connection: the keys are those of a fresh
// decoding whatever the previous body was (the previous keys' string is
// reused only for the same bytes), a batch that decodes re-encodes to a
// batch that decodes the same, and nothing panics.
func FuzzParseKeys(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzParseKeys", func() map[string][]any {
		keys := []string{"/job:ps/task:0/cpu:0;/job:worker/task:0/cpu:0;w:0", "/job:ps/task:0/cpu:0;/job:worker/task:0/cpu:0;b:0"}
		body := appendKeys(nil, keys)
		return map[string][]any{
			"same":       {body, body},
			"other":      {body, appendKeys(nil, keys[:1])},
			"prefix":     {body[:len(body)-4], body},
			"no_keys":    {[]byte{0, 0}, body},
			"too_many":   {binary.LittleEndian.AppendUint16(nil, maxBatchKeys+1), body},
			"truncated":  {body, body[:len(body)-1]},
			"empty":      {[]byte{}, []byte{}},
			"empty_keys": {appendKeys(nil, []string{"", ""}), appendKeys(nil, []string{""})},
		}
	})
	f.Fuzz(func(t *testing.T, prev, body []byte) {
		_, last, _ := parseKeys(prev, nil, "")
		want, _, err := parseKeys(body, nil, "")
		got, all, gerr := parseKeys(body, nil, last)
		if (err == nil) != (gerr == nil) || !slices.Equal(got, want) {
			t.Fatalf("after %q: %q, %v; fresh: %q, %v", prev, got, gerr, want, err)
		}
		if err != nil {
			return
		}
		if all != string(body[2:]) {
			t.Fatalf("keys in %q, want them in %q", all, body[2:])
		}
		again, _, err := parseKeys(appendKeys(nil, want), nil, all)
		if err != nil || !slices.Equal(again, want) {
			t.Fatalf("round trip: %q, then %q (%v)", want, again, err)
		}
	})
}

// fuzzConn is the client's side of a tensor-channel connection: writes are
// dropped, reads come from the fuzzed response (through the bufio.Reader
// exchange reads from).
type fuzzConn struct{ net.Conn }

func (fuzzConn) Write(b []byte) (int, error)      { return len(b), nil }
func (fuzzConn) SetDeadline(time.Time) error      { return nil }
func (fuzzConn) SetWriteDeadline(time.Time) error { return nil }
func (fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (fuzzConn) Close() error                     { return nil }
func (fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }

// appendTensorResponse encodes a tensor response as Server.serveRequest
// writes it (header, then the raw bytes).
func appendTensorResponse(b []byte, t *tensor.Tensor) []byte {
	b = append(b, respTensor, byte(t.DType()), byte(t.Rank()))
	for _, d := range t.Shape() {
		b = binary.LittleEndian.AppendUint64(b, uint64(d))
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(len(t.RawBytes())))
	return append(b, t.RawBytes()...)
}

// appendErrorResponse encodes an error response as Server.serveRequest does.
func appendErrorResponse(b []byte, code codes.Code, reason, msg string) []byte {
	b = append(b, respError)
	b = binary.LittleEndian.AppendUint32(b, uint32(code))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(reason)))
	b = append(b, reason...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(msg)))
	return append(b, msg...)
}

// FuzzTensorResponse reads a tensor-channel response as the client does
// (tensorPool.exchange): a tensor consistent with its header (bools 0 or
// 1), the peer's RemoteError, or an error wrapping tensor.ErrCorrupt,
// ErrTooLarge or an I/O error; never more memory than the tensor limit and
// two strings of maxRequestSize beyond a multiple of the input.
func FuzzTensorResponse(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzTensorResponse", func() map[string][]any {
		t23 := tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
		valid := appendTensorResponse(nil, t23)
		big := []byte{respTensor, byte(tensor.Float64), 2}
		big = binary.LittleEndian.AppendUint64(big, 1<<20)
		big = binary.LittleEndian.AppendUint64(big, 1<<20)
		big = binary.LittleEndian.AppendUint64(big, 1<<43)
		justFits := []byte{respTensor, byte(tensor.Uint8), 1}
		justFits = binary.LittleEndian.AppendUint64(justFits, fuzzMaxTensor)
		justFits = binary.LittleEndian.AppendUint64(justFits, fuzzMaxTensor)
		return map[string][]any{
			"float32_2x3":   {valid},
			"bool":          {appendTensorResponse(nil, tensor.MustFromSlice([]bool{true, false}, 2))},
			"bool_byte_9":   {append(appendTensorResponse(nil, tensor.MustFromSlice([]bool{true}, 1))[:19], 9)},
			"scalar":        {appendTensorResponse(nil, tensor.MustFromSlice([]int64{7}))},
			"empty":         {appendTensorResponse(nil, tensor.New(tensor.Int32, 0, 4))},
			"error":         {appendErrorResponse(nil, codes.NotFound, "ErrNotFound", "no tensor w:0 in step 42")},
			"truncated":     {valid[:len(valid)-5]},
			"too_large":     {big},
			"lying_size":    {justFits},
			"bad_kind":      {[]byte{7}},
			"bad_dtype":     {[]byte{respTensor, 0xee, 0}},
			"byte_count":    {append(bytes.Clone(valid[:27]), 1, 2, 3)},
			"huge_string":   {binary.LittleEndian.AppendUint16([]byte{respError, 0, 0, 0, 0}, 0xffff)},
			"no_response":   {[]byte{}},
			"two_responses": {append(bytes.Clone(valid), valid...)},
		}
	})
	p := &tensorPool{addr: "fuzz:1", peer: "fuzz", opts: Options{MaxTensorBytes: fuzzMaxTensor}}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got *tensor.Tensor
		var err error
		fuzztest.CheckAlloc(t, uint64(64*len(b))+fuzzMaxTensor+2*maxRequestSize+256<<10, func() {
			c := &tensorClientConn{conn: fuzzConn{}, r: bufio.NewReader(bytes.NewReader(b))}
			got, err = p.exchange(context.Background(), c, 42, "key", nil)
		})
		if err != nil {
			var re *RemoteError
			if !errors.As(err, &re) && !errors.Is(err, tensor.ErrCorrupt) && !errors.Is(err, ErrTooLarge) &&
				!errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if n := tensor.NumElements(got.Shape()); n < 0 || len(got.RawBytes()) != n*got.DType().Size() {
			t.Fatalf("tensor %v%v with %d bytes", got.DType(), got.Shape(), len(got.RawBytes()))
		}
		if got.DType() == tensor.Bool {
			for _, c := range got.RawBytes() {
				if c > 1 {
					t.Fatalf("bool byte %d", c)
				}
			}
		}
	})
}

// chunkMessages encodes t as the RecvTensor messages a server sends, in
// chunks of at most chunk bytes.
func chunkMessages(t *tensor.Tensor, chunk int) [][]byte {
	raw := t.RawBytes()
	var msgs [][]byte
	for off := 0; off == 0 || off < len(raw); off += chunk {
		m := &tensorChunk{first: off == 0, dtype: t.DType(), dims: t.Shape(), data: raw[off:min(off+chunk, len(raw))]}
		msgs = append(msgs, m.marshal().Materialize())
		if len(raw) == 0 {
			break
		}
	}
	return msgs
}

// FuzzRecvTensorCodec decodes a stream of RecvTensor messages with the
// client's codec, each message cut in two buffers at split (as gRPC hands
// them over): the tensor never receives more than its bytes, bools stay 0
// or 1, valid protobuf of pb.RecvTensorResponse decodes the same way with
// the generated code, and no more than the tensor limit is allocated beyond
// a multiple of the input.
func FuzzRecvTensorCodec(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzRecvTensorCodec", func() map[string][]any {
		t := tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
		msgs := chunkMessages(t, 8)
		viaProto, _ := proto.Marshal(&pb.RecvTensorResponse{Dtype: pb.DataType(tensor.Int32), Dims: []int64{2}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0}})
		unpacked := []byte{0x08, byte(tensor.Uint8), 0x10, 2, 0x10, 1, 0x1a, 2, 7, 8}
		tooBig := []byte{0x08, byte(tensor.Float64), 0x12, 4, 0x80, 0x80, 0x80, 0x01}
		return map[string][]any{
			"chunks":         {fuzzJoin(msgs...), uint8(3)},
			"one_message":    {fuzzJoin(chunkMessages(t, 1<<20)...), uint8(0)},
			"bool":           {fuzzJoin(chunkMessages(tensor.MustFromSlice([]bool{true, false, true}, 3), 2)...), uint8(1)},
			"scalar_empty":   {fuzzJoin(chunkMessages(tensor.New(tensor.Int64, 0), 8)...), uint8(0)},
			"generated":      {fuzzJoin(viaProto), uint8(5)},
			"unpacked_dims":  {fuzzJoin(unpacked), uint8(4)},
			"too_big":        {fuzzJoin(tooBig), uint8(2)},
			"extra_data":     {fuzzJoin(append(msgs, msgs[len(msgs)-1])...), uint8(0)},
			"missing_header": {fuzzJoin(msgs[1:]...), uint8(0)},
			"truncated":      {fuzzJoin(msgs[0][:len(msgs[0])-2]), uint8(0)},
			"bad_field":      {fuzzJoin([]byte{0x20, 1}), uint8(0)},
		}
	})
	f.Fuzz(func(t *testing.T, b []byte, split uint8) {
		msgs := fuzzSplit(b)
		var r tensorReceiver
		fuzztest.CheckAlloc(t, uint64(64*len(b))+fuzzMaxTensor+64<<10, func() {
			r = tensorReceiver{limit: fuzzMaxTensor}
			for _, m := range msgs {
				cut := min(int(split), len(m))
				data := mem.BufferSlice{mem.SliceBuffer(m[:cut]), mem.SliceBuffer(m[cut:])}
				if err := tensorCodec.Unmarshal(data, &r); err != nil {
					if !errors.Is(err, tensor.ErrCorrupt) && !errors.Is(err, ErrTooLarge) {
						t.Fatalf("unexpected error %v", err)
					}
					return
				}
			}
		})
		if r.err != nil {
			return
		}
		if r.t != nil && (r.off > len(r.raw) || len(r.raw) != tensor.NumElements(r.t.Shape())*r.t.DType().Size()) {
			t.Fatalf("received %d bytes of %v%v (%d)", r.off, r.t.DType(), r.t.Shape(), len(r.raw))
		}
		if r.isBool {
			for _, c := range r.raw {
				if c > 1 {
					t.Fatalf("bool byte %d", c)
				}
			}
		}
		// One message that the generated code reads: the same tensor.
		if len(msgs) == 1 && r.t != nil {
			var m pb.RecvTensorResponse
			if err := proto.Unmarshal(msgs[0], &m); err == nil && len(m.GetData()) == len(r.raw) && !bytes.Equal(m.GetData(), r.raw) && !r.isBool {
				t.Fatalf("codec read %x, protobuf %x", r.raw, m.GetData())
			}
		}
	})
}

// fuzzRingStream is the server side of a Ring.Chunks stream whose messages
// are fuzzed: Recv decodes them as gRPC's proto codec does.
type fuzzRingStream struct {
	grpc.ServerStream
	msgs [][]byte
}

func (s *fuzzRingStream) Recv() (*pb.RingChunk, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := &pb.RingChunk{}
	err := proto.Unmarshal(s.msgs[0], m)
	s.msgs = s.msgs[1:]
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadRingMessage, err)
	}
	return m, nil
}

func (s *fuzzRingStream) SendAndClose(*pb.RingAck) error { return nil }
func (s *fuzzRingStream) Context() context.Context       { return context.Background() }
func (s *fuzzRingStream) SetHeader(metadata.MD) error    { return nil }
func (s *fuzzRingStream) SendHeader(metadata.MD) error   { return nil }
func (s *fuzzRingStream) SetTrailer(metadata.MD)         {}

type ringSink struct{}

func (ringSink) Open(context.Context, int, allreduce.Op) (allreduce.Stream, error) {
	return ringSinkStream{}, nil
}
func (ringSink) Probe(context.Context, int) error { return nil }
func (ringSink) Close() error                     { return nil }

type ringSinkStream struct{}

func (ringSinkStream) Send(*allreduce.Chunk) error { return nil }
func (ringSinkStream) Close() error                { return nil }
func (ringSinkStream) Abort()                      {}
func (ringSinkStream) Broken() <-chan struct{}     { return nil }

var (
	errRingStreamEnd  = errors.New("the fuzzed ring stream ended")
	errBadRingMessage = errors.New("grpc: failed to unmarshal the received message")
)

// FuzzRingChunks serves a Ring.Chunks stream of fuzzed messages into rank 1
// of a ring of 3 (ringServer.Chunks, as gRPC calls it), then ends the
// stream and runs operation "g" round 0 over n elements: the server must
// end the stream with a status for malformed chunks, the operation must
// end at once, and nothing may panic.
func FuzzRingChunks(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzRingChunks", func() map[string][]any {
		chunk := func(index, offset int, data ...float32) []byte {
			c := &allreduce.Chunk{Op: allreduce.Op{Name: "g"}, From: 0, Size: 3, Index: index, Length: 6, Offset: offset, Data: data}
			m := &pb.RingChunk{Name: c.Op.Name, Round: c.Op.Round, From: int32(c.From), Size: int32(c.Size),
				Index: int32(c.Index), Length: int64(c.Length), Offset: int64(c.Offset), Data: floatBytes(c.Data)}
			b, err := proto.Marshal(m)
			if err != nil {
				panic(err)
			}
			return b
		}
		valid := [][]byte{chunk(0, 0, 1, 2), chunk(1, 4, 3, 4), chunk(2, 2, 5, 6), chunk(3, 0, 7, 8)}
		odd, _ := proto.Marshal(&pb.RingChunk{Name: "g", Size: 3, Length: 6, Data: []byte{1, 2, 3}})
		huge, _ := proto.Marshal(&pb.RingChunk{Name: "g", Size: 3, Length: 1 << 40})
		neg, _ := proto.Marshal(&pb.RingChunk{Name: "g", Size: 3, Length: -1, Index: -5})
		return map[string][]any{
			"complete":       {fuzzJoin(valid...), uint8(6)},
			"missing":        {fuzzJoin(valid[:2]...), uint8(6)},
			"odd_bytes":      {fuzzJoin(odd), uint8(6)},
			"huge_length":    {fuzzJoin(huge), uint8(6)},
			"negative":       {fuzzJoin(neg), uint8(6)},
			"not_protobuf":   {fuzzJoin([]byte{0xff, 0xff, 0xff}), uint8(6)},
			"length_differs": {fuzzJoin(valid...), uint8(5)},
		}
	})
	quiet := slog.New(slog.DiscardHandler)
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		r, err := allreduce.NewRing(allreduce.Config{Rank: 1, Peers: []string{"a", "b", "c"}, ChunkBytes: 8, Logger: quiet}, ringSink{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		s := &ringServer{recv: r, opts: Options{MaxTensorBytes: fuzzMaxTensor}}
		st := &fuzzRingStream{msgs: fuzzSplit(b)}
		fuzztest.CheckAlloc(t, uint64(64*len(b))+256<<10, func() { s.Chunks(st) })
		r.Fail(allreduce.Op{Name: "g"}, 0, errRingStreamEnd)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.AllReduce(ctx, "g", 0, make([]float32, n%33)); err != nil &&
			!errors.Is(err, allreduce.ErrMismatch) && !errors.Is(err, allreduce.ErrNonFinite) && !errors.Is(err, errRingStreamEnd) &&
			!errors.Is(err, ErrTooLarge) && !errors.Is(err, errBadRingMessage) &&
			!errors.Is(err, allreduce.ErrServerFailed) && !errors.Is(err, allreduce.ErrViewFailed) {
			t.Fatalf("AllReduce: %v", err)
		}
	})
}

// FuzzRunGraphRequests decodes RunGraph requests as a responder does, one
// after the other so that the second may take the first's fields: each
// must be what proto.Unmarshal makes of its bytes, or fail as it fails.
func FuzzRunGraphRequests(f *testing.F) {
	fuzztest.WriteSeeds(f, "FuzzRunGraphRequests", func() map[string][]any {
		req := &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: "g1", StepId: 7, Targets: []string{"a", "b"}, Fetches: []string{"y:0"}}
		a, _ := proto.Marshal(req)
		req.StepId = 8
		b, _ := proto.Marshal(req)
		req.StepId = 0
		zero, _ := proto.Marshal(req)
		req.StepId, req.Trace = 9, true
		traced, _ := proto.Marshal(req)
		req.Feeds = []*pb.NamedTensor{{Name: "x:0", Tensor: &pb.TensorProto{Dtype: pb.DataType_DT_FLOAT32, Dims: []int64{1}, Content: []byte{0, 0, 128, 63}}}}
		fed, _ := proto.Marshal(req)
		return map[string][]any{
			"next_step":   {a, b},
			"step_zero":   {a, zero},
			"traced":      {a, traced},
			"feeds":       {a, fed},
			"bad_utf8":    {a, append(slices.Clone(b), 0x0a, 1, 0xff)},
			"two_steps":   {a, append(slices.Clone(b), 0x18, 5)},
			"truncated":   {a, b[:len(b)-1]},
			"empty":       {[]byte{}, []byte{}},
			"other_graph": {a, bytes.Replace(b, []byte("g1"), []byte("g2"), 1)},
		}
	})
	f.Fuzz(func(t *testing.T, first, second []byte) {
		var d runGraphRequests
		for _, body := range [][]byte{first, second, first} {
			want := new(pb.RunGraphRequest)
			werr := proto.Unmarshal(body, want)
			got, err := d.decode(body)
			if (err == nil) != (werr == nil) {
				t.Fatalf("%x: error %v, proto.Unmarshal's %v", body, err, werr)
			}
			if err == nil && !proto.Equal(got, want) {
				t.Fatalf("%x: %v, proto.Unmarshal gives %v", body, got, want)
			}
			d.done()
		}
	})
}
