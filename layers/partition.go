package layers

import "github.com/distflow/distflow/tensor"

// Partitioner says into how many shards a layer's kernel of shape and dt
// is split, by rows (dimension 0), as TensorFlow's variable partitioners;
// 1 keeps it whole. The shards are ops.PartitionedVariable's
// ("<name>/kernel/part_<i>"), so that a replica device setter spreads a
// large layer over the parameter servers and each ps link carries its
// share of it; the layer reads their concatenation.
type Partitioner func(shape []int, dt tensor.DType) int

// MinMaxPartitioner splits a kernel into as many shards of at least
// minSliceBytes as it holds, but at most maxShards and at most one per
// row, as tf.min_max_variable_partitioner(max_partitions,
// min_slice_size). maxShards below 2 or minSliceBytes 0 keeps every
// kernel whole.
func MinMaxPartitioner(maxShards int, minSliceBytes int64) Partitioner {
	return func(shape []int, dt tensor.DType) int {
		if maxShards < 2 || minSliceBytes <= 0 || len(shape) == 0 {
			return 1
		}
		bytes := int64(dt.Size())
		for _, d := range shape {
			bytes *= int64(d)
		}
		return int(max(1, min(int64(maxShards), int64(shape[0]), bytes/minSliceBytes)))
	}
}
