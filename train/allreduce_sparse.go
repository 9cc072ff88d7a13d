package train

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Sparse gradients under all-reduce. An embedding table's gradient
// (GradVar.Sparse: the rows a batch looked up) is not summed over the ring
// as a dense table: every rank's rows are all-gathered, in rank order, and
// every rank applies the same sparse update from them (Horovod's and
// MirroredStrategy's treatment of IndexedSlices). The optimizer then stays
// lazy, as on parameter servers (Adam's moments of rows no rank looked up
// do not decay), and the ring carries the rows used, not the table.

// AllGatherer is an AllReducer's optional all-gather, which the all-reduce
// trainer uses for sparse gradients: *allreduce.Ring and *allreduce.Group
// have it. AllGather concatenates the ranks' pieces: data holds Size()
// equal segments, each rank fills segment Rank() before the call, and all
// end with every segment, bit for bit. A ring without it gathers by one
// Broadcast per rank, which moves the same bytes in Size() operations.
type AllGatherer interface {
	AllGather(ctx context.Context, name string, round int64, data []float32) error
}

// allreduceMaxRows bounds a table's rows: the indices cross the ring as the
// bits of float32 words, and those of 0x7f800000 and above are infinities
// and NaNs, which the ring refuses.
const allreduceMaxRows = 0x7f800000

// allreduceSparseVar is one variable with a sparse gradient.
type allreduceSparseVar struct {
	name             string
	rows, width      int
	rowShape         []int        // the variable's dimensions after the first
	indices, values  graph.Output // this rank's gradient, fetched
	idxFeed, valFeed graph.Output // the gathered mean, fed to the update
}

// allreduceSparse exchanges the sparse gradients of a step.
type allreduceSparse struct {
	vars   []allreduceSparseVar
	own    []allreduceRows // this rank's rows of each variable
	counts []float32       // the all-gather of every rank's row counts
	buf    []float32       // the all-gather of every rank's rows
	sum    []float64       // the gathered rows of a variable, summed
	// slot[i] is one more than the position of row i among the rows
	// being summed, 0 if absent: a map would cost more than the rest of
	// the exchange. Sized to the largest table (whose values this rank
	// holds anyway) and cleared after each use.
	slot []int32
}

// allreduceRows is a variable's rows of one gradient, each index once.
type allreduceRows struct {
	idx  []int64
	vals []float32 // len(idx) rows of the variable's width
}

// allreduceNewSparseVar adds, in s (on the variable's device), the
// placeholders of gv's gathered mean, and returns the variable's entry and
// the GradVar the optimizer applies.
func allreduceNewSparseVar(s *graph.Scope, i int, gv GradVar) (allreduceSparseVar, GradVar, error) {
	v := gv.Var
	if v.DType() != tensor.Float32 {
		return allreduceSparseVar{}, GradVar{}, fmt.Errorf("%w: variable %v", ErrNotFloat32, v)
	}
	shape := v.Shape()
	if !shape.FullyDefined() || shape.Rank() < 1 {
		return allreduceSparseVar{}, GradVar{}, fmt.Errorf("train: all-reduce: variable %v has no static shape with rows", v)
	}
	dims := shape.Dims()
	if dims[0] >= allreduceMaxRows {
		return allreduceSparseVar{}, GradVar{}, fmt.Errorf("train: all-reduce: variable %v has %d rows: sparse gradients take fewer than %d", v, dims[0], allreduceMaxRows)
	}
	sv := allreduceSparseVar{name: v.Name(), rows: dims[0], width: tensor.NumElements(dims[1:]), rowShape: dims[1:],
		indices: gv.Sparse.Indices, values: gv.Sparse.Values}
	sv.idxFeed = ops.Placeholder(s, fmt.Sprintf("grad_%d_indices", i), tensor.Int64, tensor.MakeShape(-1))
	sv.valFeed = ops.Placeholder(s, fmt.Sprintf("grad_%d_values", i), tensor.Float32, tensor.MakeShape(append([]int{-1}, dims[1:]...)...))
	mean := grad.IndexedSlices{Indices: sv.idxFeed, Values: sv.valFeed, DenseShape: ops.Const(s, dims)}
	// The dense form, for an optimizer without a sparse update.
	return sv, GradVar{Grad: mean.Dense(s.SubScope(fmt.Sprintf("grad_%d_dense", i))), Var: v, Sparse: &mean}, nil
}

// fetches returns the outputs of this rank's sparse gradients: the
// indices and values of each variable in turn.
func (a *allreduceSparse) fetches() []graph.Output {
	out := make([]graph.Output, 0, 2*len(a.vars))
	for _, v := range a.vars {
		out = append(out, v.indices, v.values)
	}
	return out
}

// mean replaces this rank's sparse gradients (vals, as fetches returns
// them) by their mean over the ring, as feeds of the update: every rank's
// rows, gathered, with the rows of each index summed and divided by the
// number of ranks. Every rank computes the same feeds, bit for bit, or
// fails the same way: a piece that does not fit a table (a row out of
// range: another rank's model differs) with allreduce.ErrMismatch.
//
// A rank's rows of a variable are summed by index first, in float32 and in
// order of first appearance (what a parameter server's sparse accumulator
// does with each gradient it takes), then the ranks' in float64 in rank
// order, divided and rounded once: the mean a sync round on parameter
// servers hands the optimizer. Each index then appears once, as the
// accumulator's mean has it, which a clipping of the global norm or an
// optimizer without a sparse update also needs.
//
// The ranks' pieces differ in length, and the all-gather takes equal
// segments: a first all-gather of one count per variable and rank lets
// every rank pad its rows to the longest piece. A bound known in advance
// would save that operation but not the bytes: the table's rows (the only
// bound of distinct indices) would send it whole, and a batch's lookups
// are neither static nor the same on every rank (a last partial batch).
// The pieces travel as float32 words (the indices as their bits, finite
// below allreduceMaxRows), uncompressed whatever the ring compresses: the
// ring refuses a non-finite value, as it does in the dense gradients.
func (a *allreduceSparse) mean(ctx context.Context, ring AllReducer, round int64, vals []*tensor.Tensor, feeds map[graph.Output]*tensor.Tensor) error {
	nv, size, rank := len(a.vars), ring.Size(), ring.Rank()
	if cap(a.own) < nv {
		a.own = make([]allreduceRows, nv)
	}
	a.own = a.own[:nv]
	for i, v := range a.vars {
		if len(a.slot) < v.rows {
			a.slot = make([]int32, v.rows)
		}
		rows, err := allreduceDedup(a.own[i], v, vals[2*i], vals[2*i+1], a.slot)
		if err != nil {
			return fmt.Errorf("train: all-reduce step %d: %w", round, err)
		}
		a.own[i] = rows
	}

	a.counts = allreduceGrow(a.counts, size*nv)
	for i := range a.own {
		a.counts[rank*nv+i] = math.Float32frombits(uint32(len(a.own[i].idx)))
	}
	if err := allreduceGather(ctx, ring, "grads/sparse_counts", round, a.counts); err != nil {
		return fmt.Errorf("train: all-reduce step %d: gathering the sparse gradients' sizes: %w", round, err)
	}
	longest := make([]int, nv)
	seg := 0
	for i, v := range a.vars {
		for r := range size {
			n := int(math.Float32bits(a.counts[r*nv+i]))
			if n > v.rows { // distinct indices of the table's rows
				return fmt.Errorf("train: all-reduce step %d: rank %d sent %d rows of the gradient of %s, which has %d: %w", round, r, n, v.name, v.rows, allreduce.ErrMismatch)
			}
			longest[i] = max(longest[i], n)
		}
		seg += longest[i] * (1 + v.width)
	}

	a.buf = allreduceGrow(a.buf, size*seg)
	own := a.buf[rank*seg : (rank+1)*seg]
	off := 0
	for i, v := range a.vars {
		rows := a.own[i]
		for j, ix := range rows.idx {
			own[off+j] = math.Float32frombits(uint32(ix))
		}
		off += longest[i]
		copy(own[off:], rows.vals)
		off += longest[i] * v.width
	}
	if seg > 0 {
		if err := allreduceGather(ctx, ring, "grads/sparse", round, a.buf); err != nil {
			return fmt.Errorf("train: all-reduce step %d: gathering the sparse gradients: %w", round, err)
		}
	}

	inv := 1 / float64(size)
	off = 0
	for i, v := range a.vars {
		var idx []int64
		a.sum = a.sum[:0]
		for r := range size {
			n := int(math.Float32bits(a.counts[r*nv+i]))
			piece := a.buf[r*seg+off : r*seg+off+longest[i]*(1+v.width)]
			for j := range n {
				ix := int64(math.Float32bits(piece[j]))
				if ix >= int64(v.rows) {
					allreduceClearSlots(a.slot, idx)
					return fmt.Errorf("train: all-reduce step %d: rank %d sent row %d of the gradient of %s, out of range [0, %d): %w", round, r, ix, v.name, v.rows, allreduce.ErrMismatch)
				}
				row := piece[longest[i]+j*v.width : longest[i]+(j+1)*v.width]
				p := int(a.slot[ix]) - 1
				if p < 0 {
					a.slot[ix] = int32(len(idx) + 1)
					idx = append(idx, ix)
					for _, x := range row {
						a.sum = append(a.sum, float64(x))
					}
					continue
				}
				dst := a.sum[p*v.width : (p+1)*v.width]
				for e, x := range row {
					dst[e] += float64(x)
				}
			}
		}
		allreduceClearSlots(a.slot, idx)
		off += longest[i] * (1 + v.width)
		it := tensor.New(tensor.Int64, len(idx))
		copy(it.Int64s(), idx)
		vt := tensor.New(tensor.Float32, append([]int{len(idx)}, v.rowShape...)...)
		out := vt.Float32s()
		for e, x := range a.sum {
			out[e] = float32(x * inv)
		}
		feeds[v.idxFeed], feeds[v.valFeed] = it, vt
	}
	return nil
}

// allreduceDedup reads this rank's gradient of v (indices and values, as
// the graph computed them) into rows, reusing its memory, with the rows of
// each index summed in float32 in order of first appearance; slot (of at
// least v.rows zeros) is left as it was found.
func allreduceDedup(rows allreduceRows, v allreduceSparseVar, indices, values *tensor.Tensor, slot []int32) (allreduceRows, error) {
	var ids []int64
	switch d := indices.Data().(type) {
	case []int64:
		ids = d
	case []int32:
		ids = make([]int64, len(d))
		for i, x := range d {
			ids[i] = int64(x)
		}
	default:
		return rows, fmt.Errorf("train: all-reduce: the gradient indices of %s are %v, want int32 or int64", v.name, indices.DType())
	}
	g := values.Float32s()
	if g == nil || indices.Rank() != 1 || len(g) != len(ids)*v.width {
		return rows, fmt.Errorf("train: all-reduce: the gradient of %s is %v%v values at %v%v indices, want a row of %v per index",
			v.name, values.DType(), values.Shape(), indices.DType(), indices.Shape(), v.rowShape)
	}
	rows.idx, rows.vals = rows.idx[:0], rows.vals[:0]
	defer func() { allreduceClearSlots(slot, rows.idx) }()
	for j, ix := range ids {
		if ix < 0 || ix >= int64(v.rows) {
			return rows, fmt.Errorf("train: all-reduce: the gradient of %s has row %d at position %d, out of range [0, %d)", v.name, ix, j, v.rows)
		}
		src := g[j*v.width : (j+1)*v.width]
		p := int(slot[ix]) - 1
		if p < 0 {
			slot[ix] = int32(len(rows.idx) + 1)
			rows.idx = append(rows.idx, ix)
			rows.vals = append(rows.vals, src...)
			continue
		}
		dst := rows.vals[p*v.width : (p+1)*v.width]
		for e, x := range src {
			dst[e] += x
		}
	}
	return rows, nil
}

// allreduceClearSlots zeroes the slots of rows.
func allreduceClearSlots(slot []int32, rows []int64) {
	for _, ix := range rows {
		slot[ix] = 0
	}
}

// allreduceGather all-gathers data over ring: with its AllGather, else by
// a Broadcast of each rank's segment in turn.
func allreduceGather(ctx context.Context, ring AllReducer, name string, round int64, data []float32) error {
	if g, ok := ring.(AllGatherer); ok {
		return g.AllGather(ctx, name, round, data)
	}
	size := ring.Size()
	seg := len(data) / size
	for r := range size {
		if err := ring.Broadcast(ctx, name+"/from"+strconv.Itoa(r), round, r, data[r*seg:(r+1)*seg]); err != nil {
			return err
		}
	}
	return nil
}

// allreduceGrow returns buf with n zero elements, reusing its memory.
func allreduceGrow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	buf = buf[:n]
	clear(buf)
	return buf
}
