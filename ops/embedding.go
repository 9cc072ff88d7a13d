package ops

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// Embedding lookups over a table partitioned by rows, as
// TensorFlow 1's embedding_lookup and embedding_lookup_sparse.
//
// The lookup deduplicates the ids where they are (the worker), splits the
// distinct ids by shard, gathers each shard's rows on the shard's own device
// (its parameter server) and stitches them back: each ps receives only the
// distinct ids it holds and sends back only those rows. Its gradient, by
// the same path backwards, reaches each shard as indexed slices of the
// distinct rows (grad.SparseOf), which the sparse optimizer updates apply
// on the ps.

// EmbeddingLookup returns the rows of table at ids (int32 or int64, any
// shape): a tensor of shape ids.shape + table.shape[1:]. strategy says how
// the table's rows are spread over its shards: "div" (contiguous blocks,
// the layout of NewPartitionedVariable and of Value) or "mod" (id i in shard
// i % shards, row i / shards; then Value lists the rows shard by shard, not
// in id order). An id outside [0, rows) fails the step, naming it.
func EmbeddingLookup(s *graph.Scope, table *PartitionedVariable, ids graph.Output, strategy string) graph.Output {
	if s.Err() != nil {
		return graph.Output{}
	}
	if table == nil {
		s.SetErr(fmt.Errorf("ops: EmbeddingLookup: no table"))
		return graph.Output{}
	}
	shards := table.Shards()
	if err := checkStrategy(strategy, len(shards), table.shape[0]); err != nil {
		s.SetErr(fmt.Errorf("ops: EmbeddingLookup of %q: %w", table.Name(), err))
		return graph.Output{}
	}
	ls := s.SubScope("embedding_lookup")
	flat := ReshapeTo(ls, ids, -1)
	uniq, inv := Unique(ls, flat)
	var rows graph.Output
	if len(shards) == 1 {
		rows = Gather(ls.WithDevice(shards[0].Node().Device()), shards[0].Value(), uniq, 0)
	} else {
		shard, local := PartitionIDs(ls, uniq, strategy, len(shards), table.shape[0])
		locals := DynamicPartition(ls, local, shard, len(shards))
		pos := DynamicPartition(ls, Range(ls, Size(ls, uniq)), shard, len(shards))
		parts := make([]graph.Output, len(shards))
		for i, v := range shards {
			parts[i] = Gather(ls.WithDevice(v.Node().Device()), v.Value(), locals[i], 0)
		}
		rows = DynamicStitch(ls, pos, parts)
	}
	out := Gather(ls, rows, inv, 0)
	rest := table.shape[1:]
	// With at most one dimension of the ids unknown (the batch's), a
	// static reshape keeps every other dimension known to the graph.
	if is := ids.Shape(); is.KnownRank() && unknownDims(is.Dims()) <= 1 {
		return ReshapeTo(ls, out, append(append([]int{}, is.Dims()...), rest...)...)
	}
	restC := Const(ls, tensorInt32(rest))
	return Reshape(ls, out, Concat(ls, 0, Shape(ls, ids), restC))
}

// EmbeddingLookupSparse combines bags of ids, as embedding_lookup_sparse:
// ids (1-D) holds every bag's ids and bags (1-D int, as long as ids) the
// bag of each; the result has numBags (an int scalar) rows of
// table.shape[1:], row b the combination of the rows of bag b's ids:
// "sum", "mean" or "sqrtn" (the sum divided by the square root of the bag's
// size). An empty bag gives zeros.
func EmbeddingLookupSparse(s *graph.Scope, table *PartitionedVariable, ids, bags, numBags graph.Output, strategy, combiner string) graph.Output {
	if s.Err() != nil {
		return graph.Output{}
	}
	switch combiner {
	case "sum", "mean", "sqrtn":
	default:
		s.SetErr(fmt.Errorf("ops: EmbeddingLookupSparse: unknown combiner %q: want sum, mean or sqrtn", combiner))
		return graph.Output{}
	}
	emb := EmbeddingLookup(s, table, ids, strategy)
	cs := s.SubScope("embedding_combine")
	sum := UnsortedSegmentSum(cs, emb, bags, numBags)
	if combiner == "sum" {
		return sum
	}
	dt := table.DType()
	count := UnsortedSegmentSum(cs, OnesLike(cs, Cast(cs, bags, dt)), bags, numBags)
	count = Maximum(cs, count, Scalar(cs, dt, 1))
	if combiner == "sqrtn" {
		count = Sqrt(cs, count)
	}
	shape := []int{-1}
	for range table.shape[1:] {
		shape = append(shape, 1)
	}
	return Div(cs, sum, ReshapeTo(cs, count, shape...))
}

// unknownDims counts the dimensions not known at build time.
func unknownDims(dims []int) int {
	n := 0
	for _, d := range dims {
		if d < 0 {
			n++
		}
	}
	return n
}

func checkStrategy(strategy string, shards, rows int) error {
	switch strategy {
	case "mod", "div":
		return nil
	}
	return fmt.Errorf("unknown partition strategy %q: want mod or div (rows %d, shards %d)", strategy, rows, shards)
}

func tensorInt32(dims []int) *tensor.Tensor {
	v := make([]int32, len(dims))
	for i, d := range dims {
		v[i] = int32(d)
	}
	return tensor.MustFromSlice(v, len(v))
}

// NewEmbeddingTable adds a table of rows x dim split by rows into shards
// variables like NewPartitionedVariable ("<name>/part_<i>", the same row
// counts), but initialises each shard on its own, with init(i) for shard i:
// no task ever holds the whole table's initial value, which for a table of
// millions of rows would be the largest tensor of the job (and the other
// shards' slices of it would cross the wire). Value concatenates the
// shards as for NewPartitionedVariable; lookups should use EmbeddingLookup.
func NewEmbeddingTable(s *graph.Scope, name string, dt tensor.DType, rows, dim int, init func(shard int) Initializer, shards int, opts ...VariableOption) (*PartitionedVariable, error) {
	full := s.Prefix() + name
	fail := func(format string, args ...any) (*PartitionedVariable, error) {
		err := fmt.Errorf("ops: embedding table %q: %s", full, fmt.Sprintf(format, args...))
		s.SetErr(err)
		return nil, err
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	switch {
	case shards < 1 || rows < shards:
		return fail("%d rows in %d shards: want at least one shard and one row per shard", rows, shards)
	case dim < 1:
		return fail("width %d: want at least 1", dim)
	case init == nil:
		return fail("no initializer")
	}
	pv := &PartitionedVariable{name: full, dtype: dt, shape: []int{rows, dim}}
	values := make([]graph.Output, 0, shards)
	for i := range shards {
		n := rows / shards
		if i < rows%shards {
			n++
		}
		v := NewVariable(s, fmt.Sprintf("%s/part_%d", name, i), dt, []int{n, dim}, init(i), opts...)
		if v == nil {
			return nil, s.Err()
		}
		pv.shards = append(pv.shards, v)
		values = append(values, v.Value())
	}
	pv.value = Concat(s.SubScope(name), 0, values...)
	if err := s.Err(); err != nil {
		return nil, err
	}
	return pv, nil
}
