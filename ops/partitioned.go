package ops

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// PartitionedVariable is a large variable stored as several ordinary
// variables ("shards"), each holding a contiguous block of rows (dimension
// 0), so that a replica device setter spreads it over the ps tasks. Like
// Variable it is a view on the graph and holds no state of its own.
type PartitionedVariable struct {
	name   string
	dtype  tensor.DType
	shape  []int
	shards []*Variable
	value  graph.Output
}

// NewPartitionedVariable adds a variable called name (within the scope) of
// the given dtype and shape, split along dimension 0 into shards nearly
// equal blocks: the first shape[0] % shards shards get one extra row. Shard
// i is an ordinary variable (see NewVariable, which records it in the
// graph's collections) called "<name>/part_<i>", with the scope's device or
// device function; opts apply to every shard.
//
// The initializer is built once for the whole shape, and each shard is
// initialised with its block of rows, so scale-dependent initializers
// (Glorot) and random streams behave as for one unpartitioned variable.
// Value concatenates the shards along dimension 0 (on the scope's device);
// gradients flow through that Concat to every shard.
//
// It fails if shards < 1, the shape has no dimension 0, or shards >
// shape[0]; the error is also recorded in the scope.
func NewPartitionedVariable(s *graph.Scope, name string, dt tensor.DType, shape []int, init Initializer, shards int, opts ...VariableOption) (*PartitionedVariable, error) {
	full := s.Prefix() + name
	fail := func(format string, args ...any) (*PartitionedVariable, error) {
		err := fmt.Errorf("ops: partitioned variable %q: %s", full, fmt.Sprintf(format, args...))
		s.SetErr(err)
		return nil, err
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	switch {
	case len(shape) == 0:
		return fail("a scalar cannot be partitioned (it has no dimension 0)")
	case shards < 1:
		return fail("%d shards: want at least 1", shards)
	case shape[0] < 1 || shards > shape[0]:
		return fail("%d shards for dimension 0 of size %d: want at most one shard per row", shards, shape[0])
	case init == nil:
		return fail("no initializer")
	}
	for _, d := range shape[1:] {
		if d < 0 {
			return fail("shape %v is not fully defined", shape)
		}
	}
	pv := &PartitionedVariable{name: full, dtype: dt, shape: append([]int(nil), shape...)}

	// The whole initial value is built lazily, in the first shard's
	// initializer scope (so it follows the scope's device rules), and each
	// shard takes its rows with a Slice.
	var whole graph.Output
	begin := 0
	values := make([]graph.Output, 0, shards)
	for i := range shards {
		rows := shape[0] / shards
		if i < shape[0]%shards {
			rows++
		}
		shardShape := append([]int{rows}, shape[1:]...)
		start := begin
		shardInit := init
		if shards > 1 {
			shardInit = func(is *graph.Scope, dt tensor.DType, _ []int) graph.Output {
				if !whole.Valid() {
					whole = init(is.SubScope("whole"), dt, pv.shape)
				}
				b := make([]int, len(shape))
				b[0] = start
				size := append([]int{rows}, shape[1:]...)
				return Slice(is, whole, b, size)
			}
		}
		v := NewVariable(s, fmt.Sprintf("%s/part_%d", name, i), dt, shardShape, shardInit, opts...)
		if v == nil {
			return nil, s.Err()
		}
		pv.shards = append(pv.shards, v)
		values = append(values, v.Value())
		begin += rows
	}
	pv.value = Concat(s.SubScope(name), 0, values...)
	if err := s.Err(); err != nil {
		return nil, err
	}
	return pv, nil
}

// Shards returns the shard variables in row order. The slice is the
// caller's; the variables are shared.
func (p *PartitionedVariable) Shards() []*Variable { return append([]*Variable(nil), p.shards...) }

// Value returns the whole variable: the shards concatenated along
// dimension 0.
func (p *PartitionedVariable) Value() graph.Output { return p.value }

// Name returns the variable's full name ("embedding"); shard i is
// "<name>/part_<i>".
func (p *PartitionedVariable) Name() string { return p.name }

// Shape returns the whole variable's shape (a copy).
func (p *PartitionedVariable) Shape() []int { return append([]int(nil), p.shape...) }

// DType returns the element type.
func (p *PartitionedVariable) DType() tensor.DType { return p.dtype }

// Initializers returns the shards' initializer nodes, to run as targets.
func (p *PartitionedVariable) Initializers() []*graph.Node {
	out := make([]*graph.Node, len(p.shards))
	for i, v := range p.shards {
		out[i] = v.Initializer()
	}
	return out
}
