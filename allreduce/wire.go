package allreduce

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/distflow/distflow/tensor"
)

// Wire is the type in which an all-reduce's values travel between ranks.
// Sums are always accumulated in float32 at each hop; a 16-bit wire halves
// the bytes sent at the price of rounding each partial sum once per hop
// (N-1 roundings in all, for N ranks) and the result once.
type Wire uint8

const (
	// Float32 sends the values as they are (AllReduce).
	Float32 Wire = iota
	// Float16 sends IEEE binary16: 11 significant bits, finite values up
	// to ±65504 (a larger partial sum fails the operation with
	// ErrNonFinite; scale the values down, or use BFloat16).
	Float16
	// BFloat16 sends bfloat16: 8 significant bits, float32's range.
	BFloat16
)

func (w Wire) String() string {
	switch w {
	case Float32:
		return "float32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("wire(%d)", uint8(w))
}

// words is the number of 32-bit words that carry n values: a Chunk's Data
// is a transport's unit whatever the wire, so a 16-bit wire packs two
// values per word (little-endian halves, the last one padded with zero).
// A packed word is never a float32 NaN or infinity unless its upper half
// is one, so transports and Deliver treat it as any chunk.
func (w Wire) words(n int) int {
	if w == Float32 {
		return n
	}
	return (n + 1) / 2
}

// mode selects a variant of the ring's one path: the wire, and an
// all-gather instead of an all-reduce.
type mode struct {
	wire   Wire
	gather bool
}

// codec turns one stream's chunks to and from their wire form, reusing
// its buffers from chunk to chunk (a transport copies or has marshalled a
// chunk when Send returns). It belongs to one goroutine.
type codec struct {
	w        Wire
	words    []float32
	vals     []float32
	overflow int // of the last failed encode, the element's index in the chunk
}

func newCodec(w Wire, chunk int) *codec {
	c := &codec{w: w}
	if w != Float32 {
		c.words = make([]float32, w.words(chunk))
		c.vals = make([]float32, chunk)
	}
	return c
}

func halves(words []float32) []uint16 {
	if len(words) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&words[0])), 2*len(words))
}

// encode returns the words that carry vals. With round, vals is also
// replaced by what the receiver will decode, so that the sender of a
// finished segment ends with the same values as the ranks it sends it to.
func (c *codec) encode(vals []float32, round bool) ([]float32, error) {
	if c.w == Float32 {
		return vals, nil
	}
	words := c.words[:c.w.words(len(vals))]
	h := halves(words)
	var over int
	switch c.w {
	case Float16:
		over = tensor.EncodeFloat16(h, vals)
	case BFloat16:
		over = tensor.EncodeBFloat16(h, vals)
	}
	if over >= 0 {
		c.overflow = over
		return nil, fmt.Errorf("%v does not fit %v (largest ±65504): scale the values down or use bfloat16", vals[over], c.w)
	}
	if len(vals)%2 == 1 {
		h[len(vals)] = 0
	}
	if round {
		c.decodeInto(vals, h[:len(vals)])
	}
	return words, nil
}

// decode returns the n values that words carry (a view of words for
// float32, else the codec's buffer, valid until the next decode).
func (c *codec) decode(words []float32, n int) []float32 {
	if c.w == Float32 {
		return words
	}
	vals := c.vals[:n]
	c.decodeInto(vals, halves(words)[:n])
	return vals
}

func (c *codec) decodeInto(dst []float32, h []uint16) {
	if c.w == Float16 {
		tensor.DecodeFloat16(dst, h)
	} else {
		tensor.DecodeBFloat16(dst, h)
	}
}

// AllReduceWire is AllReduce with the values sent as w: half the bytes on
// the network for a 16-bit wire, sums still accumulated in float32. Every
// rank must pass the same w (a peer with another wire fails with
// ErrMismatch). All ranks end with bit-identical results, each element
// rounded to w.
func (r *Ring) AllReduceWire(ctx context.Context, name string, round int64, data []float32, w Wire) error {
	if err := r.box.closedErr(); err != nil {
		return err
	}
	if r.size == 1 {
		return ctx.Err()
	}
	return r.allReduce(ctx, Op{Name: name, Round: round}, data, r.full(), mode{wire: w})
}

// AllReduceWire is Ring.AllReduceWire among the members.
func (g *Group) AllReduceWire(ctx context.Context, name string, round int64, data []float32, w Wire) error {
	if err := g.r.box.closedErr(); err != nil {
		return err
	}
	if g.tp.size() == 1 {
		return ctx.Err()
	}
	return g.r.allReduce(ctx, g.op(name, round), data, g.tp, mode{wire: w})
}

// AllGather concatenates the ranks' pieces: data holds Size() equal
// segments, and each rank fills segment Rank() before the call; all ranks
// end with every rank's segment, bit for bit. It sends each rank (N-1)/N of
// data, half what AllReduce does, in N-1 steps. The contracts are
// AllReduce's; len(data) must be a multiple of the number of ranks.
func (r *Ring) AllGather(ctx context.Context, name string, round int64, data []float32) error {
	if err := r.box.closedErr(); err != nil {
		return err
	}
	if err := checkGather(name, len(data), r.size); err != nil || r.size == 1 {
		return cmpOr(err, ctx.Err())
	}
	return r.allReduce(ctx, Op{Name: name, Round: round}, data, r.full(), mode{gather: true})
}

// AllGather is Ring.AllGather among the members: each fills the segment of
// its position, Rank().
func (g *Group) AllGather(ctx context.Context, name string, round int64, data []float32) error {
	if err := g.r.box.closedErr(); err != nil {
		return err
	}
	if err := checkGather(name, len(data), g.tp.size()); err != nil || g.tp.size() == 1 {
		return cmpOr(err, ctx.Err())
	}
	return g.r.allReduce(ctx, g.op(name, round), data, g.tp, mode{gather: true})
}

func checkGather(name string, n, size int) error {
	if n%size != 0 {
		return fmt.Errorf("allreduce: all-gather %q: %d values do not split into %d equal segments", name, n, size)
	}
	return nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
