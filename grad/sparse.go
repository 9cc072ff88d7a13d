package grad

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Sparse gradients.
//
// The gradient of Gather along axis 0 is a GatherGrad node: the dense form
// of the indexed slices (indices, dy, params_shape). Gradients returns it
// like any dense gradient, so dense consumers are unchanged; a consumer
// that can use rows (a sparse optimizer update) asks SparseOf for the
// triple instead and builds on its components. Since a session runs only
// the nodes its fetches need, the dense GatherGrad (and the AddN over
// several of them) is then never computed: the table is densified only
// where a dense consumer asks for it. Send/Recv carry the components, plain
// tensors, unchanged.

func init() {
	RegisterNone("Range", "its output is integers")
	RegisterNone("Unique", "its outputs are integers")
	RegisterNone("PartitionIDs", "its outputs are integers")
	for _, op := range []string{"SparseApplyGradientDescent", "SparseApplyMomentum", "SparseApplyAdagrad",
		"SparseApplyAdam", "SparseApplyFtrl", "ApplyFtrl"} {
		RegisterNone(op, "an optimizer update has no outputs to differentiate")
	}
	for _, op := range []string{"HashEmbeddingLookup", "HashEmbeddingApplyAdagrad", "HashEmbeddingExport",
		"HashEmbeddingImport", "HashEmbeddingSize", "HashPartition", "HashEmbeddingSave", "HashEmbeddingRestore"} {
		RegisterNone(op, "a hash embedding's rows are a resource, updated by HashEmbeddingApplyAdagrad from the gradient of the looked-up rows")
	}
	Register("UnsortedSegmentSum", sparseSegmentSumGrad)
	Register("DynamicPartition", sparseDynamicPartitionGrad)
	Register("DynamicStitch", sparseDynamicStitchGrad)
}

// IndexedSlices is a sparse value of dense shape DenseShape whose rows
// Indices (1-D int32 or int64) are Values ([len(Indices)]+DenseShape[1:]);
// every other row is zero, and repeated indices add up. It is TensorFlow's
// IndexedSlices: a triple of graph tensors.
type IndexedSlices struct {
	Indices, Values, DenseShape graph.Output
}

// Dense adds the node that scatters the slices into a zero tensor.
func (x IndexedSlices) Dense(s *graph.Scope) graph.Output {
	return ops.GatherGrad(s, x.Values, x.Indices, x.DenseShape, 0)
}

// SparseOf returns the indexed-slices form of g, a gradient returned by
// Gradients, when g is the dense form of slices: the gradient of a Gather
// along axis 0, or a sum (AddN) or Identity of such gradients. Several
// slices are aggregated by AggregateIndexedSlices (in s), so the indices of
// the result are distinct. ok is false if any part of g is dense.
func SparseOf(s *graph.Scope, g graph.Output) (x IndexedSlices, ok bool) {
	parts, ok := sparseParts(s, g, nil)
	if !ok || len(parts) == 0 {
		return IndexedSlices{}, false
	}
	if len(parts) == 1 {
		return parts[0], true
	}
	return AggregateIndexedSlices(s, parts), true
}

// sparseParts collects the slices whose sum is g, flattening multi-
// dimensional indices.
func sparseParts(s *graph.Scope, g graph.Output, acc []IndexedSlices) ([]IndexedSlices, bool) {
	if !g.Valid() {
		return nil, false
	}
	n := g.Node
	switch n.Op() {
	case "Identity":
		return sparseParts(s, n.Input(0), acc)
	case "AddN":
		for i := range n.NumInputs() {
			var ok bool
			if acc, ok = sparseParts(s, n.Input(i), acc); !ok {
				return nil, false
			}
		}
		return acc, true
	case "GatherGrad":
		if n.AttrInt("axis") != 0 {
			return nil, false
		}
		dense := g.Shape()
		idx, vals := n.Input(1), n.Input(0)
		is := idx.Shape()
		if !is.KnownRank() {
			return nil, false
		}
		if is.Rank() != 1 {
			if !dense.KnownRank() || dense.Rank() < 1 {
				return nil, false
			}
			rest := dense.Dims()[1:]
			for _, d := range rest {
				if d < 0 {
					return nil, false
				}
			}
			idx = ops.ReshapeTo(s, idx, -1)
			vals = ops.ReshapeTo(s, vals, append([]int{-1}, rest...)...)
		}
		return append(acc, IndexedSlices{Indices: idx, Values: vals, DenseShape: n.Input(2)}), true
	}
	return nil, false
}

// AggregateIndexedSlices adds slices of one dense shape and stays sparse:
// it concatenates their indices (as int64) and values, and sums the rows
// of each distinct index (Unique, then UnsortedSegmentSum), so the result
// has distinct indices in order of first appearance.
func AggregateIndexedSlices(s *graph.Scope, parts []IndexedSlices) IndexedSlices {
	if len(parts) == 0 {
		s.SetErr(fmt.Errorf("grad: AggregateIndexedSlices: no slices"))
		return IndexedSlices{}
	}
	idx := make([]graph.Output, len(parts))
	vals := make([]graph.Output, len(parts))
	for i, p := range parts {
		idx[i] = p.Indices
		if p.Indices.Valid() && p.Indices.DType() != tensor.Int64 {
			idx[i] = ops.Cast(s, p.Indices, tensor.Int64)
		}
		vals[i] = p.Values
	}
	all := idx[0]
	values := vals[0]
	if len(parts) > 1 {
		all = ops.Concat(s, 0, idx...)
		values = ops.Concat(s, 0, vals...)
	}
	uniq, pos := ops.Unique(s, all)
	sum := ops.UnsortedSegmentSum(s, values, pos, ops.Size(s, uniq))
	return IndexedSlices{Indices: uniq, Values: sum, DenseShape: parts[0].DenseShape}
}

// UnsortedSegmentSum is linear in data; its adjoint gathers dy's rows.
func sparseSegmentSumGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	return []graph.Output{ops.Gather(s, dys[0], n.Input(1), 0), {}, {}}, nil
}

// DynamicPartition moves rows; its adjoint puts each output's gradient
// back at the rows it came from (TensorFlow's _DynamicPartitionGrads).
func sparseDynamicPartitionGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	parts := n.Input(1)
	pos := ops.DynamicPartition(s, ops.Range(s, ops.Size(s, parts)), parts, len(dys))
	return []graph.Output{ops.DynamicStitch(s, pos, dys), {}}, nil
}

// DynamicStitch's adjoint gathers, for each data input, the rows of dy it
// was written to. (Rows overwritten by a later input get the gradient too,
// which is exact when the indices are distinct, as for embedding lookups.)
func sparseDynamicStitchGrad(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error) {
	k := n.AttrInt("n")
	out := make([]graph.Output, 2*k)
	for p := range k {
		out[k+p] = ops.Gather(s, dys[0], n.Input(p), 0)
	}
	return out, nil
}
