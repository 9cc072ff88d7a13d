package rpc

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
)

// split cuts b into buffers of at most n bytes, as gRPC hands over a
// message received in several HTTP/2 frames.
func split(b []byte, n int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		s = append(s, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	return s
}

// TestTensorChunkIsProtobuf checks that the chunks the server writes are
// pb.RecvTensorResponse messages to any protobuf decoder.
func TestTensorChunkIsProtobuf(t *testing.T) {
	for _, m := range []*tensorChunk{
		{first: true, dtype: tensor.Float32, dims: []int{2, 300}, data: []byte{1, 2, 3}},
		{first: true, dtype: tensor.Float32},
		{data: make([]byte, 200)},
	} {
		var got pb.RecvTensorResponse
		if err := proto.Unmarshal(m.marshal().Materialize(), &got); err != nil {
			t.Fatal(err)
		}
		want := &pb.RecvTensorResponse{Data: m.data}
		if m.first {
			want.Dtype = pb.DataType(m.dtype)
			for _, d := range m.dims {
				want.Dims = append(want.Dims, int64(d))
			}
		}
		if !proto.Equal(&got, want) {
			t.Errorf("decoded %v, want %v", &got, want)
		}
	}
}

// TestTensorReceiver decodes protobuf-marshalled messages split at every
// buffer size, including unpacked dims, and refuses corrupt ones.
func TestTensorReceiver(t *testing.T) {
	marshal := func(m *pb.RecvTensorResponse) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	data := []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0}
	first := marshal(&pb.RecvTensorResponse{Dtype: pb.DataType(tensor.Int32), Dims: []int64{2, 3}, Data: data[:10]})
	second := marshal(&pb.RecvTensorResponse{Data: data[10:]})
	for n := 1; n <= len(first); n++ {
		var r tensorReceiver
		if err := r.unmarshal(split(first, n)); err != nil {
			t.Fatalf("split %d: %v", n, err)
		}
		if err := r.unmarshal(split(second, n)); err != nil {
			t.Fatalf("split %d: %v", n, err)
		}
		if want := tensor.MustFromSlice([]int32{1, 2, 3, 4, 5, 6}, 2, 3); r.off != len(data) || !tensor.Equal(r.t, want) {
			t.Fatalf("split %d: got %v (%d bytes), want %v", n, r.t, r.off, want)
		}
	}

	// Unpacked dims and bools outside 0 and 1.
	unpacked := []byte{1<<3 | 0, byte(tensor.Bool), 2<<3 | 0, 3, 3<<3 | 2, 3, 0, 7, 1}
	var r tensorReceiver
	if err := r.unmarshal(split(unpacked, 2)); err != nil {
		t.Fatal(err)
	}
	if want := tensor.MustFromSlice([]bool{false, true, true}, 3); !tensor.Equal(r.t, want) {
		t.Errorf("got %v, want %v", r.t, want)
	}

	for _, tt := range []struct {
		name string
		msgs [][]byte
	}{
		{"bad dtype", [][]byte{marshal(&pb.RecvTensorResponse{Dtype: 99})}},
		{"negative dim", [][]byte{marshal(&pb.RecvTensorResponse{Dtype: pb.DataType(tensor.Float32), Dims: []int64{-1}})}},
		{"huge dims", [][]byte{marshal(&pb.RecvTensorResponse{Dtype: pb.DataType(tensor.Float32), Dims: []int64{1 << 30, 1 << 30}})}},
		{"too much data", [][]byte{marshal(&pb.RecvTensorResponse{Dtype: pb.DataType(tensor.Float32), Dims: []int64{1}, Data: make([]byte, 5)})}},
		{"too much in a later chunk", [][]byte{
			marshal(&pb.RecvTensorResponse{Dtype: pb.DataType(tensor.Float32), Dims: []int64{1}, Data: make([]byte, 2)}),
			marshal(&pb.RecvTensorResponse{Data: make([]byte, 3)})}},
		{"truncated", [][]byte{slices.Clip(first[:len(first)-1])}},
		{"unknown field", [][]byte{{7<<3 | 0, 1}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var r tensorReceiver
			var err error
			for _, m := range tt.msgs {
				if err = r.unmarshal(split(m, 3)); err != nil {
					break
				}
			}
			if !errors.Is(err, tensor.ErrCorrupt) {
				t.Errorf("err = %v, want one wrapping tensor.ErrCorrupt", err)
			}
		})
	}
}
