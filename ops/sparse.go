package ops

import (
	"fmt"

	"github.com/distflow/distflow/graph"
)

// Builders of the sparse family (op/sparse.go).

// Range returns 0, 1, ..., limit-1 in limit's int dtype.
func Range(s *graph.Scope, limit graph.Output) graph.Output {
	return s.Out("Range", "Range", []graph.Output{limit}, nil)
}

// Unique returns the distinct values of the 1-D int tensor x in order of
// first appearance, and idx (int32) with x[i] = y[idx[i]].
func Unique(s *graph.Scope, x graph.Output) (y, idx graph.Output) {
	n := s.AddNode("Unique", "Unique", []graph.Output{x}, nil)
	if n == nil {
		return graph.Output{}, graph.Output{}
	}
	return n.Output(0), n.Output(1)
}

// UnsortedSegmentSum adds row i of data into row segmentIDs[i] of a zero
// tensor of numSegments rows.
func UnsortedSegmentSum(s *graph.Scope, data, segmentIDs, numSegments graph.Output) graph.Output {
	return s.Out("UnsortedSegmentSum", "UnsortedSegmentSum", []graph.Output{data, segmentIDs, numSegments}, nil)
}

// DynamicPartition splits the rows of data by partitions (1-D int32 in
// [0, num)) into num outputs, keeping their order. After a build error it
// returns num zero Outputs.
func DynamicPartition(s *graph.Scope, data, partitions graph.Output, num int) []graph.Output {
	n := s.AddNode("DynamicPartition", "DynamicPartition", []graph.Output{data, partitions}, map[string]any{"num_partitions": num})
	if n == nil {
		return make([]graph.Output, max(num, 0))
	}
	outs := make([]graph.Output, n.NumOutputs())
	for i := range outs {
		outs[i] = n.Output(i)
	}
	return outs
}

// DynamicStitch returns the tensor whose row indices[p][j] is row j of
// data[p]: the inverse of DynamicPartition given the partitioned positions.
func DynamicStitch(s *graph.Scope, indices, data []graph.Output) graph.Output {
	if len(indices) != len(data) {
		s.SetErr(fmt.Errorf("ops: DynamicStitch: %d index tensors for %d data tensors", len(indices), len(data)))
		return graph.Output{}
	}
	in := append(append([]graph.Output{}, indices...), data...)
	return s.Out("DynamicStitch", "DynamicStitch", in, map[string]any{"n": len(indices)})
}

// PartitionIDs maps the ids of a table of numRows rows split over shards
// with strategy "mod" or "div" (see op.CheckPartitionStrategy) to the
// shard of each id and its row within that shard.
func PartitionIDs(s *graph.Scope, ids graph.Output, strategy string, shards, numRows int) (shard, local graph.Output) {
	n := s.AddNode("PartitionIDs", "PartitionIDs", []graph.Output{ids},
		map[string]any{"strategy": strategy, "num_shards": shards, "num_rows": numRows})
	if n == nil {
		return graph.Output{}, graph.Output{}
	}
	return n.Output(0), n.Output(1)
}

// SparseApplyGradientDescent subtracts alpha*grad from the rows of v named
// by indices.
func SparseApplyGradientDescent(s *graph.Scope, v, alpha, grad, indices graph.Output) *graph.Node {
	return s.AddNode("SparseApplyGradientDescent", "SparseApplyGradientDescent", []graph.Output{v, alpha, grad, indices}, nil)
}

// SparseApplyMomentum is ApplyMomentum on the rows named by indices.
func SparseApplyMomentum(s *graph.Scope, v, accum, lr, grad, indices, momentum graph.Output, nesterov bool) *graph.Node {
	return s.AddNode("SparseApplyMomentum", "SparseApplyMomentum", []graph.Output{v, accum, lr, grad, indices, momentum},
		map[string]any{"use_nesterov": nesterov})
}

// SparseApplyAdagrad is ApplyAdagrad on the rows named by indices.
func SparseApplyAdagrad(s *graph.Scope, v, accum, lr, grad, indices graph.Output) *graph.Node {
	return s.AddNode("SparseApplyAdagrad", "SparseApplyAdagrad", []graph.Output{v, accum, lr, grad, indices}, nil)
}

// SparseApplyAdam is lazy Adam: ApplyAdam on the rows named by indices.
func SparseApplyAdam(s *graph.Scope, v, m, vv, beta1Power, beta2Power, lr, beta1, beta2, epsilon, grad, indices graph.Output) *graph.Node {
	return s.AddNode("SparseApplyAdam", "SparseApplyAdam",
		[]graph.Output{v, m, vv, beta1Power, beta2Power, lr, beta1, beta2, epsilon, grad, indices}, nil)
}

// ApplyFtrl is TensorFlow's FTRL-Proximal update of every element.
func ApplyFtrl(s *graph.Scope, v, accum, linear, grad, lr, l1, l2, lrPower graph.Output) *graph.Node {
	return s.AddNode("ApplyFtrl", "ApplyFtrl", []graph.Output{v, accum, linear, grad, lr, l1, l2, lrPower}, nil)
}

// SparseApplyFtrl is ApplyFtrl on the rows named by indices.
func SparseApplyFtrl(s *graph.Scope, v, accum, linear, grad, indices, lr, l1, l2, lrPower graph.Output) *graph.Node {
	return s.AddNode("SparseApplyFtrl", "SparseApplyFtrl", []graph.Output{v, accum, linear, grad, indices, lr, l1, l2, lrPower}, nil)
}
