package ops

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// HashEmbedding describes a hash embedding (op/hash.go): a table of rows
// keyed by int64 ids of any value, created on first use, split over the
// devices in Devices (one shard each, by op.HashShard of the id; none: the
// scope's device). It is a description: the rows live in the tasks that
// run its ops.
type HashEmbedding struct {
	// Name names the table; shard i is "<Name>/shard_<i>".
	Name string
	// Dim is the width of a row.
	Dim int
	// MaxRows bounds each shard's rows after every update (0: no bound);
	// the least frequently looked-up rows are evicted beyond it.
	MaxRows int
	// EvictAfter evicts rows not seen for this many updates (0: never).
	EvictAfter int
	// InitScale draws new rows uniformly in [-InitScale, InitScale].
	InitScale float32
	// Seed makes new rows reproducible.
	Seed int
	// InitialAccumulator starts Adagrad's accumulators (default 0.1).
	InitialAccumulator float32
	// Devices places the shards.
	Devices []string
}

// HashLookup is a lookup into a hash embedding: Rows (float32 [n, dim],
// one per id) and, per shard, the distinct ids sent there and the rows it
// returned, which an update needs (see train.ApplyHashAdagrad).
type HashLookup struct {
	Table     *HashEmbedding
	Rows      graph.Output
	ShardIDs  []graph.Output
	ShardRows []graph.Output
}

func (h *HashEmbedding) attrs(shard int) map[string]any {
	acc := h.InitialAccumulator
	if acc == 0 {
		acc = 0.1
	}
	return map[string]any{"table": fmt.Sprintf("%s/shard_%d", h.Name, shard), "dim": h.Dim, "max_rows": h.MaxRows,
		"evict_after": h.EvictAfter, "init_scale": h.InitScale, "seed": h.Seed + shard, "initial_accumulator": acc}
}

func (h *HashEmbedding) shards() int { return max(1, len(h.Devices)) }

func (h *HashEmbedding) device(s *graph.Scope, i int) *graph.Scope {
	if len(h.Devices) == 0 {
		return s
	}
	return s.WithDevice(h.Devices[i])
}

// Lookup returns the rows of ids (1-D int64). The ids are deduplicated where
// they are, and each shard receives only its distinct ids. create makes the
// missing rows (training); without it they read as zeros (evaluation).
func (h *HashEmbedding) Lookup(s *graph.Scope, ids graph.Output, create bool) HashLookup {
	out := HashLookup{Table: h}
	if s.Err() != nil {
		return out
	}
	if h.Name == "" || h.Dim < 1 {
		s.SetErr(fmt.Errorf("ops: HashEmbedding %q of dim %d: want a name and dim >= 1", h.Name, h.Dim))
		return out
	}
	ls := s.SubScope(h.Name + "_lookup")
	uniq, inv := Unique(ls, ids)
	n := h.shards()
	lookup := func(i int, ids graph.Output) graph.Output {
		a := h.attrs(i)
		a["create"] = create
		return h.device(ls, i).Out("HashEmbeddingLookup", "HashEmbeddingLookup", []graph.Output{ids}, a)
	}
	var rows graph.Output
	if n == 1 {
		rows = lookup(0, uniq)
		out.ShardIDs, out.ShardRows = []graph.Output{uniq}, []graph.Output{rows}
	} else {
		part := ls.Out("HashPartition", "HashPartition", []graph.Output{uniq}, map[string]any{"num_shards": n})
		parts := DynamicPartition(ls, uniq, part, n)
		pos := DynamicPartition(ls, Range(ls, Size(ls, uniq)), part, n)
		for i := range n {
			out.ShardIDs = append(out.ShardIDs, parts[i])
			out.ShardRows = append(out.ShardRows, lookup(i, parts[i]))
		}
		rows = DynamicStitch(ls, pos, out.ShardRows)
	}
	out.Rows = Gather(ls, rows, inv, 0)
	return out
}

// ApplyAdagrad adds, for each shard, the Adagrad update of the rows of ids
// with gradients grads (one pair per shard, on the shard's device).
func (h *HashEmbedding) ApplyAdagrad(s *graph.Scope, ids, grads []graph.Output, lr float32) []*graph.Node {
	var out []*graph.Node
	for i := range ids {
		ds := h.device(s, i)
		out = append(out, ds.AddNode("HashEmbeddingApplyAdagrad", "HashEmbeddingApplyAdagrad",
			[]graph.Output{ids[i], grads[i], Scalar(ds, tensor.Float32, float64(lr))}, h.attrs(i)))
	}
	return out
}

// Size returns each shard's number of rows (int64 scalars).
func (h *HashEmbedding) Size(s *graph.Scope) []graph.Output {
	var out []graph.Output
	for i := range h.shards() {
		out = append(out, h.device(s, i).Out("HashEmbeddingSize", "HashEmbeddingSize", nil, h.attrs(i)))
	}
	return out
}

// Export returns each shard's rows: keys, values and accumulators, to save
// them (HashEmbeddingExport).
func (h *HashEmbedding) Export(s *graph.Scope) (keys, values, accums []graph.Output) {
	for i := range h.shards() {
		n := h.device(s, i).AddNode("HashEmbeddingExport", "HashEmbeddingExport", nil, h.attrs(i))
		if n == nil {
			return nil, nil, nil
		}
		keys, values, accums = append(keys, n.Output(0)), append(values, n.Output(1)), append(accums, n.Output(2))
	}
	return keys, values, accums
}

// Import replaces every shard's rows by those of the exported rows (of
// any number of shards, concatenated) that belong to it: restoring a saved
// table, and resharding it when the number of shards changed.
func (h *HashEmbedding) Import(s *graph.Scope, keys, values, accums graph.Output) []*graph.Node {
	var out []*graph.Node
	for i := range h.shards() {
		a := h.attrs(i)
		a["shard"], a["num_shards"] = i, h.shards()
		out = append(out, h.device(s, i).AddNode("HashEmbeddingImport", "HashEmbeddingImport", []graph.Output{keys, values, accums}, a))
	}
	return out
}

// HashTableShard is one shard of a hash embedding table as a graph's
// nodes use it: what a checkpoint saves and restores (see HashTables).
type HashTableShard struct {
	// Name is the table's name (HashEmbedding.Name); Shard and NumShards
	// place this shard among the table's.
	Name             string
	Shard, NumShards int
	// Device is the device of the nodes that use the shard.
	Device string
	attrs  map[string]any
}

// hashOps are the ops that use a table (the checkpoint ops excluded, so
// that a graph with a saver lists the same tables again).
var hashOps = map[string]bool{"HashEmbeddingLookup": true, "HashEmbeddingApplyAdagrad": true, "HashEmbeddingExport": true,
	"HashEmbeddingImport": true, "HashEmbeddingSize": true}

// HashTables lists the shards of every hash embedding table that g's
// nodes use, sorted by name then shard. A table's shards are found by the
// "<name>/shard_<i>" names HashEmbedding gives them; it is an error if a
// shard is used from two devices or with two widths, or if some of a
// table's shards are missing.
func HashTables(g *graph.Graph) ([]HashTableShard, error) {
	byTable := map[string]*HashTableShard{}
	shards := map[string]int{}
	for _, n := range g.Nodes() {
		if !hashOps[n.Op()] {
			continue
		}
		table := n.AttrString("table")
		i := strings.LastIndex(table, "/shard_")
		shard, err := -1, error(nil)
		if i >= 0 {
			shard, err = strconv.Atoi(table[i+len("/shard_"):])
		}
		if err != nil || shard < 0 {
			return nil, fmt.Errorf("ops: node %s: hash embedding table %q is not named <name>/shard_<i>", n, table)
		}
		if h := byTable[table]; h != nil {
			if h.Device != n.Device() || h.attrs["dim"] != n.AttrInt("dim") {
				return nil, fmt.Errorf("ops: hash embedding table %q is used on %q with dim %v and by node %s on %q with dim %d",
					table, h.Device, h.attrs["dim"], n, n.Device(), n.AttrInt("dim"))
			}
			continue
		}
		attrs := map[string]any{}
		for _, a := range []string{"table", "dim", "max_rows", "evict_after", "init_scale", "seed", "initial_accumulator"} {
			if v, ok := n.Attr(a); ok {
				attrs[a] = v
			}
		}
		name := table[:i]
		byTable[table] = &HashTableShard{Name: name, Shard: shard, Device: n.Device(), attrs: attrs}
		shards[name] = max(shards[name], shard+1)
	}
	var out []HashTableShard
	for _, h := range byTable {
		h.NumShards = shards[h.Name]
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b HashTableShard) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.Shard, b.Shard))
	})
	for i, h := range out {
		if i == 0 || out[i-1].Name != h.Name {
			if i+h.NumShards > len(out) || out[i+h.NumShards-1].Name != h.Name {
				return nil, fmt.Errorf("ops: hash embedding table %q has %d shards, but the graph uses only some of them", h.Name, h.NumShards)
			}
		}
	}
	return out, nil
}

// SaveHashTable writes the shard's rows (keys, values, Adagrad
// accumulators, lookup counts) as data file shard of numShards of
// checkpoint dir/<basename>-<step>, from the task that holds it, and
// returns the file's description (as SaveVariables does).
func SaveHashTable(s *graph.Scope, step graph.Output, h HashTableShard, dir, basename string, shard, numShards int) graph.Output {
	a := maps.Clone(h.attrs)
	a["dir"], a["basename"], a["shard"], a["num_shards"] = dir, basename, shard, numShards
	return s.Out("HashEmbeddingSave", "HashEmbeddingSave", []graph.Output{step}, a)
}

// RestoreHashTable replaces the shard's rows by the rows of its table in
// checkpoint dir/<basename>-<step> that hash to it, whatever the number of
// shards the table was saved in, and returns the number of rows restored
// (int64 scalar).
func RestoreHashTable(s *graph.Scope, step graph.Output, h HashTableShard, dir, basename string) graph.Output {
	a := maps.Clone(h.attrs)
	a["dir"], a["basename"], a["name"], a["table_shard"], a["table_shards"] = dir, basename, h.Name, h.Shard, h.NumShards
	return s.Out("HashEmbeddingRestore", "HashEmbeddingRestore", []graph.Output{step}, a)
}
