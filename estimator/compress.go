package estimator

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/topk"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/partition"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// Compression is how the gradients travel between tasks: a per-run option
// (RunConfig.Compression). The zero value sends them as float32.
//
// With AllReduce, every kind applies to the ring's dense gradients; the
// sparse ones (embedding rows: train.AllReduceTrainer all-gathers them)
// travel uncompressed, as float32 words that hold row indices beside the
// values, already only the rows looked up. With the parameter
// servers (Async, Sync, Staleness), every kind applies to the push of each
// dense gradient from the worker to its variable's device: FP16 and BF16
// cast it on the worker and back to float32 beside the variable, so that
// the Send/Recv between them carries half the bytes; TopK sends its largest
// entries as (int32 index, float32 value) pairs, each worker keeping the
// rest as its residual (ops.TopKCompress), and rebuilds the dense gradient
// beside the variable. Sparse gradients are not compressed, nor are the
// pulls of the parameters (see RunConfig.PullCompression). RunConfig
// refuses a compression that the strategy would not apply rather than
// ignore it.
type Compression struct {
	// Kind is the scheme.
	Kind CompressionKind
	// Ratio is, for TopK, the fraction of a step's gradient elements each
	// worker sends (0: DefaultTopKRatio).
	Ratio float64
	// Warmup is, for TopK, the number of global steps over which the
	// fraction sent falls geometrically from all the elements (at step 0)
	// to Ratio: the warm-up of Deep Gradient Compression, which keeps
	// the first steps, where the gradients change fastest, from waiting on
	// error feedback (0: Ratio from the first step).
	Warmup int64
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
	// of its gradient plus its residual: round the ring as (index gap,
	// binary16 value) pairs of 32 bits gathered by every worker, to the ps
	// as (index, value) pairs of 64; what it did not send (including, on
	// the ring, the rounding of the values) is kept as its residual and
	// added to the next step's gradient (error feedback: Lin et al. 2018,
	// Deep Gradient Compression; Stich et al. 2018).
	TopK
)

// DefaultTopKRatio is the share of the elements top-k sends by default.
const DefaultTopKRatio = 0.01

// ParseCompression reads the --compression syntax: none, fp16, bf16, or
// topk[:RATIO][,warmup=STEPS] (0 < RATIO <= 1; STEPS: Compression.Warmup).
func ParseCompression(s string) (Compression, error) {
	var c Compression
	s, warmup, hasWarmup := strings.Cut(s, ",")
	if hasWarmup {
		steps, ok := strings.CutPrefix(warmup, "warmup=")
		n, err := strconv.ParseInt(steps, 10, 64)
		if !ok || err != nil || n < 0 {
			return c, fmt.Errorf("compression %q: %q: want warmup=STEPS (a whole number of steps, at least 0)", s+","+warmup, warmup)
		}
		c.Warmup = n
	}
	name, ratio, hasRatio := strings.Cut(s, ":")
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
		return c, fmt.Errorf("compression %q: want none, fp16, bf16, topk, topk:RATIO or topk:RATIO,warmup=STEPS", s)
	}
	if c.Kind != TopK && (hasRatio || hasWarmup) {
		return c, fmt.Errorf("compression %q: only topk takes a ratio or a warm-up", s)
	}
	if hasRatio {
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
	if c.Kind != TopK {
		return c.Kind.String()
	}
	s := "topk:" + strconv.FormatFloat(c.ratio(), 'g', -1, 64)
	if c.Warmup > 0 {
		s += ",warmup=" + strconv.FormatInt(c.Warmup, 10)
	}
	return s
}

// String returns the scheme's name in the --compression syntax.
func (k CompressionKind) String() string {
	switch k {
	case NoCompression:
		return "none"
	case FP16:
		return "fp16"
	case BF16:
		return "bf16"
	case TopK:
		return "topk"
	}
	return fmt.Sprintf("compression(%d)", uint8(k))
}

// ParsePullCompression reads the --pull-compression syntax: none, fp16 or
// bf16 (RunConfig.PullCompression).
func ParsePullCompression(s string) (CompressionKind, error) {
	switch s {
	case "none", "":
		return NoCompression, nil
	case "fp16":
		return FP16, nil
	case "bf16":
		return BF16, nil
	}
	return NoCompression, fmt.Errorf("pull-compression %q: want none, fp16 or bf16 (the parameters are read whole or rounded, not sparsified)", s)
}

// validatePull refuses a pull compression that is not a half type, or that
// the strategy has no pulls for.
func validatePull(k CompressionKind, s Strategy) error {
	if k == NoCompression {
		return nil
	}
	if k != FP16 && k != BF16 {
		return fmt.Errorf("estimator: RunConfig.PullCompression %v: want fp16 or bf16 (or none)", k)
	}
	if s == nil || s.Update(1).PullsFromPS {
		return nil
	}
	return fmt.Errorf("estimator: RunConfig.PullCompression %v: the %s strategy keeps the variables on the workers and pulls nothing: drop it, or use a ps strategy", k, s)
}

// markHalfPulls asks the partitioner to pull, as k's half type, every
// trainable float32 variable that a node of g from the first node with ID
// from on reads (the towers' forward and backward passes and the update,
// built after from): partition.Float16ReadsCollection. What is built later
// (the checkpoints, summaries, the trained variables' fetch) reads them
// whole.
func markHalfPulls(g *graph.Graph, from int, k CompressionKind) {
	key := partition.Float16ReadsCollection
	switch k {
	case FP16:
	case BF16:
		key = partition.BFloat16ReadsCollection
	default:
		return
	}
	trainable := map[*graph.Node]bool{}
	for _, n := range g.Collection(ops.TrainableVariablesCollection) {
		trainable[n] = n.AttrDType("dtype") == tensor.Float32
	}
	for _, n := range g.Nodes() {
		if n.ID() < from {
			continue
		}
		for i, in := range n.Inputs() {
			if trainable[in.Node] && !n.IsRefInput(i) {
				g.AddToCollection(key, n)
				break
			}
		}
	}
}

func (c Compression) ratio() float64 {
	if c.Ratio == 0 {
		return DefaultTopKRatio
	}
	return c.Ratio
}

// ratioAt is the fraction of the elements top-k sends at a global step:
// Ratio^(step/Warmup) during the warm-up, then Ratio.
func (c Compression) ratioAt(step int64) float64 {
	if step >= c.Warmup || step < 0 {
		return c.ratio()
	}
	return math.Pow(c.ratio(), float64(step)/float64(c.Warmup))
}

func (c Compression) validate() error {
	if c.Kind > TopK {
		return fmt.Errorf("estimator: RunConfig.Compression: unknown kind %d", c.Kind)
	}
	if c.Kind == TopK && !(c.Ratio >= 0 && c.Ratio <= 1) || c.Kind != TopK && c.Ratio != 0 {
		return fmt.Errorf("estimator: RunConfig.Compression %s: ratio %g: want 0 < ratio <= 1, with topk only", c, c.Ratio)
	}
	if c.Warmup < 0 || c.Kind != TopK && c.Warmup != 0 {
		return fmt.Errorf("estimator: RunConfig.Compression %s: warm-up %d: want at least 0 steps, with topk only", c, c.Warmup)
	}
	return nil
}

// validateFor refuses a compression that the strategy would not apply.
func (c Compression) validateFor(s Strategy) error {
	if err := c.validate(); err != nil {
		return err
	}
	if c.Kind == NoCompression || s == nil || s.Update(1).Compresses {
		return nil
	}
	return fmt.Errorf("estimator: RunConfig.Compression %s: the %s strategy does not compress gradients: drop the compression, or use AllReduce{} or a ps strategy", c, s)
}

// pushOptimizer returns opt with its dense float32 gradients sent to the
// ps as c's half type (opt itself for other kinds).
func (c Compression) pushOptimizer(opt train.Optimizer) train.Optimizer {
	switch c.Kind {
	case FP16:
		return halfPush{opt, tensor.Float16}
	case BF16:
		return halfPush{opt, tensor.BFloat16}
	case TopK:
		return topKPush{opt, c}
	}
	return opt
}

// topKPush is an optimizer whose dense gradients cross from the worker to
// their variable's device as their top-k entries: ops.TopKCompress where
// the gradient is computed (it keeps the rest as this worker's residual),
// and on the variable's device the dense gradient rebuilt from the pairs
// for the wrapped optimizer's update.
type topKPush struct {
	train.Optimizer
	c Compression
}

func (p topKPush) ApplyGradients(s *graph.Scope, gvs []train.GradVar, globalStep *ops.Variable) (*graph.Node, error) {
	cs := s.SubScope("compress")
	ratio := ops.Scalar(cs, tensor.Float32, p.c.ratio())
	if p.c.Warmup > 0 {
		if globalStep == nil {
			return nil, fmt.Errorf("estimator: top-k push with a warm-up of %d steps: no global step to count them", p.c.Warmup)
		}
		// Ratio^(step/Warmup) during the warm-up, then Ratio (ratioAt).
		step := ops.Cast(cs, globalStep.Value(), tensor.Float32)
		frac := ops.Minimum(cs, ops.Div(cs, step, ops.Scalar(cs, tensor.Float32, float64(p.c.Warmup))), ops.Scalar(cs, tensor.Float32, 1))
		ratio = ops.Pow(cs, ratio, frac)
	}
	out, err := replaceDenseGrads(gvs, func(gv train.GradVar) (graph.Output, error) {
		shape := gv.Var.Shape()
		if !shape.FullyDefined() {
			return graph.Output{}, fmt.Errorf("estimator: top-k push of %s: the variable's shape %v is not fully known", gv.Var.Name(), shape)
		}
		// The residual lives with the op: beside the gradient, on the worker.
		idx, vals := ops.TopKCompress(cs.WithDevice(gv.Grad.Node.Device()), gv.Grad, ratio)
		vs := cs.WithDevice(gv.Var.Node().Device())
		dense := ops.UnsortedSegmentSum(vs, vals, idx, ops.Scalar(vs, tensor.Int32, float64(shape.NumElements())))
		return ops.ReshapeTo(vs, dense, shape.Dims()...), nil
	})
	if err != nil {
		return nil, err
	}
	return p.Optimizer.ApplyGradients(s, out, globalStep)
}

// halfPush is an optimizer whose dense gradients cross from the worker to
// their variable's device as half floats: a Cast where the gradient is
// computed, a Cast back to float32 on the variable's device, and the
// wrapped optimizer's update from that.
type halfPush struct {
	train.Optimizer
	half tensor.DType
}

func (h halfPush) ApplyGradients(s *graph.Scope, gvs []train.GradVar, globalStep *ops.Variable) (*graph.Node, error) {
	cs := s.SubScope("compress")
	out, _ := replaceDenseGrads(gvs, func(gv train.GradVar) (graph.Output, error) {
		sent := ops.Cast(cs, gv.Grad, h.half)
		return ops.Cast(cs.WithDevice(gv.Var.Node().Device()), sent, tensor.Float32), nil
	})
	return h.Optimizer.ApplyGradients(s, out, globalStep)
}

// replaceDenseGrads returns a copy of gvs with each dense float32 gradient
// replaced by what f builds from its pair: the push compressions leave
// sparse gradients and other types alone.
func replaceDenseGrads(gvs []train.GradVar, f func(train.GradVar) (graph.Output, error)) ([]train.GradVar, error) {
	out := slices.Clone(gvs)
	for i, gv := range gvs {
		if gv.Sparse != nil || gv.Grad.DType() != tensor.Float32 {
			continue
		}
		g, err := f(gv)
		if err != nil {
			return nil, err
		}
		out[i].Grad = g
	}
	return out, nil
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
	cand     []int32   // top-k: the entries selected
	sel      topk.Selector
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
// ring of every worker's top-k selection of gradient plus residual (k of
// the ratio at step round: every worker must pass the global step), and
// keeps the rest as the residual. Each worker sends about k words (a
// 16-bit index gap and a binary16 value each: see encodeSparse) instead of
// n, and all end with bit-identical sums (added in rank order). A failed
// exchange leaves the residual holding what was selected too, so that
// nothing is lost if the step is retried.
//
// The selection (topk.Selector) costs two passes over the gradient, as in
// DGC: when it sends fewer than k entries, their slots are padded, and
// error feedback makes them up later.
func (g *gradCompressor) topKMean(ctx context.Context, ring compressedRing, name string, round int64, data []float32) error {
	n := len(data)
	if len(g.residual) != n {
		g.residual = make([]float32, n)
	}
	k := topk.Count(g.c.ratioAt(round), n)
	for i, v := range data {
		g.residual[i] += v
	}
	g.cand = g.sel.Select(g.cand, g.residual, k)
	size, pos := ring.Size(), ring.Rank()
	words := sparseWords(n, k)
	if cap(g.gathered) < words*size {
		g.gathered = make([]float32, words*size)
	}
	buf := g.gathered[:words*size]
	clear(buf)
	own := buf[pos*words : (pos+1)*words]
	if err := encodeSparse(own, g.cand, g.residual); err != nil {
		return fmt.Errorf("estimator: top-k %s round %d: %w", name, round, err)
	}
	if err := ring.AllGather(ctx, name, round, buf); err != nil {
		return err
	}
	if err := decodeSparse(g.residual, own, -1); err != nil { // sent: no longer owed
		return err
	}
	clear(data)
	inv := 1 / float32(size)
	for r := range size {
		if err := decodeSparse(data, buf[r*words:(r+1)*words], inv); err != nil {
			return fmt.Errorf("estimator: top-k %s round %d, from rank %d: %w", name, round, r, err)
		}
	}
	return nil
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }
