package rpc

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec delegated to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
)

// The RecvTensor stream moves tensor bytes without the copies of protobuf
// marshalling. Its messages stay byte for byte pb.RecvTensorResponse
// (dtype = 1, dims = 2 packed, data = 3, in that order), so any protobuf
// client can read them; but the server writes each chunk as a few header
// bytes followed by the tensor's own memory (tensorChunk), and the client
// parses the header and copies the data straight from gRPC's receive
// buffers into the destination tensor (tensorReceiver).
//
// codec is a protobuf codec with those two fast paths; every other message
// (the services' and the all-reduce ring's) goes to gRPC's own "proto"
// codec. It is the codec of every call a Server serves (the ring's streams
// included: grpc.ForceServerCodecV2); clients force it on RecvTensor only,
// the other calls' messages being what gRPC's proto codec, to which it
// delegates, makes anyway.
type codec struct{ proto encoding.CodecV2 }

var tensorCodec = codec{proto: encoding.GetCodecV2("proto")}

var _ encoding.CodecV2 = codec{}

// Name is "proto": what goes on the wire is protobuf.
func (codec) Name() string { return "proto" }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*tensorChunk); ok {
		return m.marshal(), nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*tensorReceiver); ok {
		r.err = r.unmarshal(data)
		return r.err
	}
	return c.proto.Unmarshal(data, v)
}

// Field numbers of pb.RecvTensorResponse.
const (
	fieldDtype = 1
	fieldDims  = 2
	fieldData  = 3
)

// tensorChunk is one RecvTensor message as the server sends it: the first
// of a stream carries dtype and dims (first is set), every one a slice of
// the tensor's bytes, which the message references rather than copies.
// The tensor must not change until the stream has ended (tensors in a
// rendezvous never do).
type tensorChunk struct {
	first bool
	dtype tensor.DType
	dims  []int
	data  []byte
}

// marshal encodes the chunk as a pb.RecvTensorResponse: a small header,
// then the data itself.
func (m *tensorChunk) marshal() mem.BufferSlice {
	hdr := make([]byte, 0, 16+10*len(m.dims))
	if m.first {
		if m.dtype != 0 {
			hdr = protowire.AppendTag(hdr, fieldDtype, protowire.VarintType)
			hdr = protowire.AppendVarint(hdr, uint64(pb.DataType(m.dtype)))
		}
		if len(m.dims) > 0 {
			n := 0
			for _, d := range m.dims {
				n += protowire.SizeVarint(uint64(d))
			}
			hdr = protowire.AppendTag(hdr, fieldDims, protowire.BytesType)
			hdr = protowire.AppendVarint(hdr, uint64(n))
			for _, d := range m.dims {
				hdr = protowire.AppendVarint(hdr, uint64(d))
			}
		}
	}
	if len(m.data) == 0 {
		return mem.BufferSlice{mem.SliceBuffer(hdr)}
	}
	hdr = protowire.AppendTag(hdr, fieldData, protowire.BytesType)
	hdr = protowire.AppendVarint(hdr, uint64(len(m.data)))
	return mem.BufferSlice{mem.SliceBuffer(hdr), mem.SliceBuffer(m.data)}
}

// tensorReceiver decodes the messages of one RecvTensor stream into the
// tensor they describe: it allocates the tensor from the first message's
// dtype and dims and copies every message's data into place.
type tensorReceiver struct {
	limit  int64 // Options.MaxTensorBytes (0: maxTensorSize), set by limitedStream
	t      *tensor.Tensor
	raw    []byte // t's bytes
	off    int    // bytes received so far
	isBool bool
	err    error // of the last message, for RecvTensor to wrap
}

// unmarshal decodes one message. It does not keep data.
func (r *tensorReceiver) unmarshal(data mem.BufferSlice) error {
	c := cursor{bufs: data}
	first := r.t == nil
	var (
		dtype   uint64
		dims    []int64
		gotData bool
	)
	for !c.done() {
		num, typ, err := c.tag()
		if err != nil {
			return err
		}
		switch {
		case num == fieldDtype && typ == protowire.VarintType && first && !gotData:
			if dtype, err = c.varint(); err != nil {
				return err
			}
		case num == fieldDims && first && !gotData:
			if dims, err = c.dims(typ, dims); err != nil {
				return err
			}
		case num == fieldData && typ == protowire.BytesType:
			n, err := c.varint()
			if err != nil {
				return err
			}
			if first && !gotData {
				if err := r.alloc(dtype, dims); err != nil {
					return err
				}
			}
			gotData = true
			if n > uint64(len(r.raw)-r.off) {
				return fmt.Errorf("%w: more than the %d bytes of %v%v", tensor.ErrCorrupt, len(r.raw), r.t.DType(), r.t.Shape())
			}
			dst := r.raw[r.off : r.off+int(n)]
			if err := c.read(dst); err != nil {
				return err
			}
			if r.isBool { // keep bools 0 or 1 whatever the peer sent
				for i := range dst {
					dst[i] = min(dst[i], 1)
				}
			}
			r.off += int(n)
		default:
			return fmt.Errorf("%w: unexpected field %d (wire type %d) in a RecvTensor message", tensor.ErrCorrupt, num, typ)
		}
	}
	if first && !gotData {
		return r.alloc(dtype, dims)
	}
	return nil
}

// alloc allocates the tensor announced by the first message, refusing
// invalid dtypes and dimensions before allocating anything.
func (r *tensorReceiver) alloc(dtype uint64, dims []int64) error {
	dt := tensor.DType(dtype)
	if dtype > 1<<16 || !dt.Valid() {
		return fmt.Errorf("%w: invalid dtype %d", tensor.ErrCorrupt, dtype)
	}
	shape := make([]int, len(dims))
	size := int64(dt.Size())
	for i, d := range dims {
		if d < 0 || d > maxTensorSize || (d > 0 && size > maxTensorSize/d) {
			return fmt.Errorf("%w: bad dimensions %v", tensor.ErrCorrupt, dims)
		}
		size *= d
		shape[i] = int(d)
	}
	if err := (Options{MaxTensorBytes: r.limit}).tensorTooLarge(uint64(size)); err != nil {
		return fmt.Errorf("%v%v: %w", dt, shape, err)
	}
	r.t = tensor.New(dt, shape...)
	r.raw, r.isBool = r.t.RawBytes(), dt == tensor.Bool
	return nil
}

// cursor reads protobuf wire data spread over the buffers of a message.
type cursor struct {
	bufs mem.BufferSlice
	i    int // current buffer
	off  int // offset in it
}

var errTruncated = fmt.Errorf("%w: truncated RecvTensor message", tensor.ErrCorrupt)

func (c *cursor) done() bool {
	for c.i < len(c.bufs) && c.off >= c.bufs[c.i].Len() {
		c.i, c.off = c.i+1, 0
	}
	return c.i >= len(c.bufs)
}

func (c *cursor) readByte() (byte, error) {
	if c.done() {
		return 0, errTruncated
	}
	b := c.bufs[c.i].ReadOnlyData()[c.off]
	c.off++
	return b, nil
}

func (c *cursor) varint() (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		b, err := c.readByte()
		if err != nil {
			return 0, err
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: bad varint in a RecvTensor message", tensor.ErrCorrupt)
}

func (c *cursor) tag() (protowire.Number, protowire.Type, error) {
	v, err := c.varint()
	if err != nil {
		return 0, 0, err
	}
	num, typ := protowire.DecodeTag(v)
	if num < protowire.MinValidNumber {
		return 0, 0, fmt.Errorf("%w: bad field tag in a RecvTensor message", tensor.ErrCorrupt)
	}
	return num, typ, nil
}

// read fills dst from the message.
func (c *cursor) read(dst []byte) error {
	for len(dst) > 0 {
		if c.done() {
			return errTruncated
		}
		n := copy(dst, c.bufs[c.i].ReadOnlyData()[c.off:])
		dst, c.off = dst[n:], c.off+n
	}
	return nil
}

// dims appends the dimensions of a dims field, packed or not.
func (c *cursor) dims(typ protowire.Type, dims []int64) ([]int64, error) {
	switch typ {
	case protowire.VarintType:
		d, err := c.varint()
		return append(dims, int64(d)), err
	case protowire.BytesType:
		n, err := c.varint()
		if err != nil {
			return nil, err
		}
		if n > 1024 {
			return nil, fmt.Errorf("%w: %d bytes of dimensions", tensor.ErrCorrupt, n)
		}
		b := make([]byte, n)
		if err := c.read(b); err != nil {
			return nil, err
		}
		for len(b) > 0 {
			d, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return nil, fmt.Errorf("%w: bad dimensions in a RecvTensor message", tensor.ErrCorrupt)
			}
			dims, b = append(dims, int64(d)), b[k:]
		}
		return dims, nil
	}
	return nil, fmt.Errorf("%w: dims of wire type %d in a RecvTensor message", tensor.ErrCorrupt, typ)
}
