package estimator

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/train"
)

// Compression is how the gradients travel between workers: a per-run
// option (RunConfig.Compression). The zero value sends them as float32.
// It applies to the AllReduce strategy; the parameter-server push does not
// compress yet (RunConfig refuses it there rather than ignore it).
type Compression struct {
	// Kind is the scheme.
	Kind CompressionKind
	// Ratio is, for TopK, the fraction of a step's gradient elements each
	// worker sends (0: DefaultTopKRatio).
	Ratio float64
}

// CompressionKind names a gradient compression scheme.
type CompressionKind uint8

const (
	// NoCompression sends float32 gradients.
	NoCompression CompressionKind = iota
	// FP16 sends IEEE binary16 (half the bytes), summing in float32 at
	// each hop of the ring; the mean is taken before the sum, so that it
	// overflows only where the mean would (beyond ±65504).
	FP16
	// BF16 sends bfloat16: half the bytes, float32's range, 8 bits of
	// precision.
	BF16
	// TopK sends, per worker, the Ratio*n largest entries (by magnitude)
	// of its gradient plus its residual, as (index, value) pairs gathered
	// by every worker; what it did not send is kept as its residual and
	// added to the next step's gradient (error feedback: Lin et al. 2018,
	// Deep Gradient Compression; Stich et al. 2018).
	TopK
)

// DefaultTopKRatio is the share of the elements top-k sends by default.
const DefaultTopKRatio = 0.01

// ParseCompression reads the --compression syntax: none, fp16, bf16,
// topk or topk:RATIO (0 < RATIO <= 1).
func ParseCompression(s string) (Compression, error) {
	name, ratio, hasRatio := strings.Cut(s, ":")
	var c Compression
	switch name {
	case "none", "":
		c.Kind = NoCompression
	case "fp16":
		c.Kind = FP16
	case "bf16":
		c.Kind = BF16
	case "topk":
		c.Kind = TopK
	default:
		return c, fmt.Errorf("compression %q: want none, fp16, bf16, topk or topk:RATIO", s)
	}
	if hasRatio {
		if c.Kind != TopK {
			return c, fmt.Errorf("compression %q: only topk takes a ratio", s)
		}
		r, err := strconv.ParseFloat(ratio, 64)
		if err != nil {
			return c, fmt.Errorf("compression %q: ratio %q is not a number", s, ratio)
		}
		if !(r > 0 && r <= 1) {
			return c, fmt.Errorf("compression %q: ratio %g: want 0 < ratio <= 1 (the share of elements sent)", s, r)
		}
		c.Ratio = r
	}
	return c, c.validate()
}

func (c Compression) String() string {
	switch c.Kind {
	case NoCompression:
		return "none"
	case FP16:
		return "fp16"
	case BF16:
		return "bf16"
	case TopK:
		return "topk:" + strconv.FormatFloat(c.ratio(), 'g', -1, 64)
	}
	return fmt.Sprintf("compression(%d)", c.Kind)
}

func (c Compression) ratio() float64 {
	if c.Ratio == 0 {
		return DefaultTopKRatio
	}
	return c.Ratio
}

func (c Compression) validate() error {
	if c.Kind > TopK {
		return fmt.Errorf("estimator: RunConfig.Compression: unknown kind %d", c.Kind)
	}
	if c.Kind == TopK && !(c.Ratio >= 0 && c.Ratio <= 1) || c.Kind != TopK && c.Ratio != 0 {
		return fmt.Errorf("estimator: RunConfig.Compression %s: ratio %g: want 0 < ratio <= 1, with topk only", c, c.Ratio)
	}
	return nil
}

// validateFor refuses a compression that the strategy would not apply.
func (c Compression) validateFor(s Strategy) error {
	if err := c.validate(); err != nil {
		return err
	}
	if _, ok := s.(AllReduce); ok || c.Kind == NoCompression {
		return nil
	}
	return fmt.Errorf("estimator: RunConfig.Compression %s: only the allreduce strategy compresses gradients (not %s): drop the compression or use AllReduce{}", c, s)
}

// compressedRing is what compression needs of a ring: *allreduce.Group.
type compressedRing interface {
	train.AllReducer
	AllReduceWire(ctx context.Context, name string, round int64, data []float32, w allreduce.Wire) error
	AllGather(ctx context.Context, name string, round int64, data []float32) error
}

// gradCompressor makes a ring's AllReduceMean of the gradients compressed;
// it keeps a worker's top-k residual from step to step. One goroutine uses
// it.
type gradCompressor struct {
	c        Compression
	residual []float32 // top-k: what this worker has not sent yet
	mags     []float32 // top-k: scratch for the selection
	gathered []float32 // top-k: every worker's (indices, values)
}

func newGradCompressor(c Compression) *gradCompressor {
	if c.Kind == NoCompression {
		return nil
	}
	return &gradCompressor{c: c}
}

// wrap returns ring with its AllReduceMean compressed (ring itself for no
// compression, or a ring that cannot).
func (g *gradCompressor) wrap(ring train.AllReducer) train.AllReducer {
	cr, ok := ring.(compressedRing)
	if g == nil || !ok {
		return ring
	}
	return compressingRing{cr, g}
}

type compressingRing struct {
	compressedRing
	g *gradCompressor
}

func (r compressingRing) AllReduceMean(ctx context.Context, name string, round int64, data []float32) error {
	switch r.g.c.Kind {
	case FP16, BF16:
		inv := 1 / float32(r.Size())
		for i := range data {
			data[i] *= inv
		}
		w := allreduce.Float16
		if r.g.c.Kind == BF16 {
			w = allreduce.BFloat16
		}
		return r.AllReduceWire(ctx, name, round, data, w)
	case TopK:
		return r.g.topKMean(ctx, r.compressedRing, name, round, data)
	}
	return r.compressedRing.AllReduceMean(ctx, name, round, data)
}

// topKMean replaces data (this worker's gradient) by the mean over the
// ring of every worker's top-k selection of gradient plus residual, and
// keeps the rest as the residual. Each worker sends 2k words (indices and
// values) instead of n, and all end with bit-identical sums (added in rank
// order). A failed exchange leaves the residual holding what was selected
// too, so that nothing is lost if the step is retried.
func (g *gradCompressor) topKMean(ctx context.Context, ring compressedRing, name string, round int64, data []float32) error {
	n := len(data)
	if len(g.residual) != n {
		g.residual, g.mags = make([]float32, n), make([]float32, n)
	}
	k := min(max(int(g.c.ratio()*float64(n)), 1), n)
	for i, v := range data {
		g.residual[i] += v
		g.mags[i] = float32(math.Abs(float64(g.residual[i])))
	}
	thr := kthLargest(g.mags, k)
	size, pos := ring.Size(), ring.Rank()
	if cap(g.gathered) < 2*k*size {
		g.gathered = make([]float32, 2*k*size)
	}
	buf := g.gathered[:2*k*size]
	clear(buf)
	idx, vals := buf[pos*2*k:pos*2*k+k], buf[pos*2*k+k:(pos+1)*2*k]
	// The k largest: those above the k-th magnitude, then ties with it.
	j := 0
	for pass := 0; pass < 2 && j < k; pass++ {
		for i, v := range g.residual {
			m := float32(math.Abs(float64(v)))
			if (pass == 0 && m > thr) || (pass == 1 && m == thr && v != 0) {
				idx[j], vals[j] = math.Float32frombits(uint32(i)), v
				if j++; j == k {
					break
				}
			}
		}
	}
	if err := ring.AllGather(ctx, name, round, buf); err != nil {
		return err
	}
	for s := range j { // sent: no longer owed
		g.residual[math.Float32bits(idx[s])] = 0
	}
	clear(data)
	inv := 1 / float32(size)
	for r := range size {
		seg := buf[r*2*k : (r+1)*2*k]
		for s := range k {
			i, v := math.Float32bits(seg[s]), seg[k+s]
			if v == 0 {
				continue // padding (fewer than k non-zero entries)
			}
			if i >= uint32(n) {
				return fmt.Errorf("%w: %s round %d: rank %d sent index %d for a gradient of %d elements", allreduce.ErrMismatch, name, round, r, i, n)
			}
			data[i] += v * inv
		}
	}
	return nil
}

// kthLargest returns the k-th largest of vals (1 <= k <= len(vals)),
// reordering vals: a quickselect, linear on average.
func kthLargest(vals []float32, k int) float32 {
	lo, hi, want := 0, len(vals)-1, k-1 // want: the index in descending order
	for lo < hi {
		// Median of three as the pivot, then a Hoare partition in
		// descending order.
		mid := lo + (hi-lo)/2
		a, b, c := vals[lo], vals[mid], vals[hi]
		p := max(min(a, b), min(max(a, b), c))
		i, j := lo, hi
		for i <= j {
			for vals[i] > p {
				i++
			}
			for vals[j] < p {
				j--
			}
			if i <= j {
				vals[i], vals[j] = vals[j], vals[i]
				i++
				j--
			}
		}
		switch {
		case want <= j:
			hi = j
		case want >= i:
			lo = i
		default:
			return vals[want]
		}
	}
	return vals[want]
}
