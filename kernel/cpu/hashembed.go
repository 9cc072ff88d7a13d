package cpu

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/distflow/distflow/checkpoint/bundle"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// Kernels of the hash embeddings (op/hash.go). A table lives in the task's
// resources under "hash_embedding/<table>", behind one mutex: lookups and
// updates of a step are short loops over the batch's ids.

func init() {
	kernel.Register("HashEmbeddingLookup", kernel.CPU, kernel.Borrowing(hashKernel(hashLookup)))
	kernel.Register("HashEmbeddingApplyAdagrad", kernel.CPU, kernel.Borrowing(hashKernel(hashApply)))
	kernel.Register("HashEmbeddingExport", kernel.CPU, hashKernel(hashExport))
	kernel.Register("HashEmbeddingImport", kernel.CPU, kernel.Borrowing(hashKernel(hashImport)))
	kernel.Register("HashEmbeddingSave", kernel.CPU, newHashSaveKernel)
	kernel.Register("HashEmbeddingRestore", kernel.CPU, newHashRestoreKernel)
	kernel.Register("HashEmbeddingSize", kernel.CPU, hashKernel(func(c *kernel.Context, t *hashTable, _ hashConfig) error {
		c.Alloc(0, tensor.Int64).Int64s()[0] = int64(len(t.rows))
		return nil
	}))
	kernel.Register("HashPartition", kernel.CPU, kernel.Borrowing(func(n *graph.Node) (kernel.Kernel, error) {
		shards := n.AttrInt("num_shards")
		return kernel.Func(func(c *kernel.Context) error {
			ids := c.Input(0).Int64s()
			out := c.Alloc(0, tensor.Int32, len(ids)).Int32s()
			for i, id := range ids {
				out[i] = int32(op.HashShard(id, shards))
			}
			return nil
		}), nil
	}))
}

type hashRow struct {
	value, accum []float32
	seen         int64 // the clock when last looked up or updated
	count        int64 // lookups of the id while it had the row
}

type hashTable struct {
	mu    sync.Mutex
	dim   int
	rows  map[int64]*hashRow
	clock int64
	rng   *rand.Rand
}

// hashConfig is a node's view of its table.
type hashConfig struct {
	table                string
	dim, maxRows         int
	evictAfter           int64
	initScale, initAccum float32
	seed                 int
}

func hashKernel(f func(c *kernel.Context, t *hashTable, cfg hashConfig) error) kernel.Factory {
	return func(n *graph.Node) (kernel.Kernel, error) {
		cfg, err := newHashConfig(n)
		if err != nil {
			return nil, err
		}
		return kernel.Func(func(c *kernel.Context) error {
			t, err := hashTableOf(c, cfg)
			if err != nil {
				return err
			}
			t.mu.Lock()
			defer t.mu.Unlock()
			return f(c, t, cfg)
		}), nil
	}
}

func newHashConfig(n *graph.Node) (hashConfig, error) {
	cfg := hashConfig{table: n.AttrString("table"), dim: n.AttrInt("dim"), maxRows: n.AttrInt("max_rows"),
		evictAfter: int64(n.AttrInt("evict_after")), initScale: n.AttrFloat("init_scale"),
		initAccum: n.AttrFloat("initial_accumulator"), seed: n.AttrInt("seed")}
	if cfg.table == "" || cfg.dim < 1 || cfg.maxRows < 0 || cfg.evictAfter < 0 {
		return cfg, fmt.Errorf("kernel: node %s: hash embedding table %q of dim %d, max_rows %d, evict_after %d: want a name, dim >= 1 and no negative limit",
			n, cfg.table, cfg.dim, cfg.maxRows, cfg.evictAfter)
	}
	return cfg, nil
}

// hashTableOf returns the task's table of cfg, made empty on first use.
// The caller locks it.
func hashTableOf(c *kernel.Context, cfg hashConfig) (*hashTable, error) {
	if c.Resources == nil {
		return nil, c.Errorf("no resources to keep hash embedding table %q in", cfg.table)
	}
	t := c.Resources.Resource("hash_embedding/"+cfg.table, func() any {
		return &hashTable{dim: cfg.dim, rows: map[int64]*hashRow{}, rng: rand.New(rand.NewPCG(uint64(cfg.seed), 0x68617368))}
	}).(*hashTable)
	if t.dim != cfg.dim {
		return nil, c.Errorf("hash embedding table %q has rows of %d, this node wants %d", cfg.table, t.dim, cfg.dim)
	}
	return t, nil
}

func hashIDs(c *kernel.Context, i int) ([]int64, error) {
	x := c.Input(i)
	if x.DType() != tensor.Int64 || x.Rank() != 1 {
		return nil, c.Errorf("ids must be 1-D int64, got %v%v", x.DType(), x.StaticShape())
	}
	return x.Int64s(), nil
}

func hashLookup(c *kernel.Context, t *hashTable, cfg hashConfig) error {
	ids, err := hashIDs(c, 0)
	if err != nil {
		return err
	}
	create := c.Node.AttrBool("create")
	out := c.Alloc(0, tensor.Float32, len(ids), t.dim).Float32s()
	for i, id := range ids {
		r := t.rows[id]
		if r == nil && create {
			r = &hashRow{value: make([]float32, t.dim), accum: make([]float32, t.dim)}
			for k := range r.value {
				r.value[k] = cfg.initScale * float32(2*t.rng.Float64()-1)
				r.accum[k] = cfg.initAccum
			}
			t.rows[id] = r
		}
		if r != nil {
			if create { // evaluation reads do not keep rows alive
				r.seen = t.clock
				r.count++
			}
			copy(out[i*t.dim:(i+1)*t.dim], r.value)
		}
	}
	if cfg.maxRows > 0 && len(t.rows) > 2*cfg.maxRows {
		t.evict(cfg) // a table that is only read grows at most twice its limit
	}
	return nil
}

func hashApply(c *kernel.Context, t *hashTable, cfg hashConfig) error {
	ids, err := hashIDs(c, 0)
	if err != nil {
		return err
	}
	g, lr := c.Input(1), c.Input(2)
	if g.DType() != tensor.Float32 || g.NumElements() != len(ids)*t.dim || lr.NumElements() != 1 {
		return c.Errorf("grad %v%v and lr %v: want [%d, %d] and a scalar", g.DType(), g.StaticShape(), lr.StaticShape(), len(ids), t.dim)
	}
	rate := float64(lr.Float32s()[0])
	// Sum the rows of repeated ids first, as the dense update would.
	sums := map[int64][]float64{}
	var order []int64
	gs := g.Float32s()
	for i, id := range ids {
		s := sums[id]
		if s == nil {
			s = make([]float64, t.dim)
			sums[id] = s
			order = append(order, id)
		}
		for k := range s {
			s[k] += float64(gs[i*t.dim+k])
		}
	}
	for _, id := range order {
		r := t.rows[id]
		if r == nil {
			continue // evicted since the lookup: its gradient is dropped
		}
		for k, gk := range sums[id] {
			a := float64(r.accum[k]) + gk*gk
			r.accum[k] = float32(a)
			r.value[k] -= float32(rate * gk / math.Sqrt(a))
		}
		r.seen = t.clock
	}
	t.clock++
	t.evict(cfg)
	return nil
}

// evict drops the rows not seen for evict_after ticks, then, beyond
// max_rows, the least frequently looked-up (the least recently seen among
// equals) down to 90% of it, so that a table at its limit does not sort on
// every step. Counting keeps the frequent ids of a Zipf-like stream, which
// least-recently-used eviction loses when one batch holds more distinct
// ids than the limit; a rare id's row is made, updated and dropped.
func (t *hashTable) evict(cfg hashConfig) {
	if cfg.evictAfter > 0 && t.clock%max(1, cfg.evictAfter/8) == 0 {
		for id, r := range t.rows {
			if t.clock-r.seen > cfg.evictAfter {
				delete(t.rows, id)
			}
		}
	}
	if cfg.maxRows <= 0 || len(t.rows) <= cfg.maxRows {
		return
	}
	type aged struct {
		id          int64
		count, seen int64
	}
	all := make([]aged, 0, len(t.rows))
	for id, r := range t.rows {
		all = append(all, aged{id, r.count, r.seen})
	}
	slices.SortFunc(all, func(a, b aged) int {
		switch {
		case a.count != b.count:
			return cmp.Compare(a.count, b.count)
		case a.seen != b.seen:
			return cmp.Compare(a.seen, b.seen)
		}
		return cmp.Compare(a.id, b.id)
	})
	target := cfg.maxRows * 9 / 10
	for _, a := range all {
		if len(t.rows) <= target {
			break
		}
		delete(t.rows, a.id)
	}
}

func hashExport(c *kernel.Context, t *hashTable, _ hashConfig) error {
	keys := make([]int64, 0, len(t.rows))
	for id := range t.rows {
		keys = append(keys, id)
	}
	slices.Sort(keys)
	k := c.Alloc(0, tensor.Int64, len(keys)).Int64s()
	v := c.Alloc(1, tensor.Float32, len(keys), t.dim).Float32s()
	a := c.Alloc(2, tensor.Float32, len(keys), t.dim).Float32s()
	for i, id := range keys {
		k[i] = id
		copy(v[i*t.dim:], t.rows[id].value)
		copy(a[i*t.dim:], t.rows[id].accum)
	}
	return nil
}

func hashImport(c *kernel.Context, t *hashTable, _ hashConfig) error {
	keys, err := hashIDs(c, 0)
	if err != nil {
		return err
	}
	v, a := c.Input(1), c.Input(2)
	if v.DType() != tensor.Float32 || a.DType() != tensor.Float32 || v.NumElements() != len(keys)*t.dim || a.NumElements() != len(keys)*t.dim {
		return c.Errorf("values %v%v and accumulators %v%v: want float32 [%d, %d]", v.DType(), v.StaticShape(), a.DType(), a.StaticShape(), len(keys), t.dim)
	}
	rows := map[int64]*hashRow{}
	t.keep(rows, keys, v.Float32s(), a.Float32s(), nil, c.Node.AttrInt("shard"), c.Node.AttrInt("num_shards"))
	t.rows = rows
	return nil
}

// keep adds to rows those of the exported rows (keys, values, accums and,
// if not nil, counts) that belong to shard of shards, each with its own
// copy of the values.
func (t *hashTable) keep(rows map[int64]*hashRow, keys []int64, values, accums []float32, counts []int64, shard, shards int) {
	for i, id := range keys {
		if op.HashShard(id, shards) != shard {
			continue
		}
		r := &hashRow{value: slices.Clone(values[i*t.dim : (i+1)*t.dim]), accum: slices.Clone(accums[i*t.dim : (i+1)*t.dim]), seen: t.clock}
		if counts != nil {
			r.count = counts[i]
		}
		rows[id] = r
	}
}

// Checkpoints of hash embeddings. A table shard is saved as four records
// of the checkpoint, named hash_embedding/<table>/{keys, values,
// accumulators, counts} (<table> is "<name>/shard_<i>"), in a data file
// of its own written by the task that holds it; the checkpoint format is
// unchanged. A restore reads every saved shard of the table and keeps the
// rows that hash to its shard, so a table saved in 2 shards restores into
// 1 or 3.

// hashRecords are the names of a saved table shard's records, after
// "hash_embedding/<table>/".
var hashRecords = [...]string{"keys", "values", "accumulators", "counts"}

type hashSaveKernel struct {
	cfg              hashConfig
	dir, basename    string
	shard, numShards int
}

func newHashSaveKernel(n *graph.Node) (kernel.Kernel, error) {
	cfg, err := newHashConfig(n)
	if err != nil {
		return nil, err
	}
	k := &hashSaveKernel{cfg: cfg, dir: n.AttrString("dir"), basename: n.AttrString("basename"),
		shard: n.AttrInt("shard"), numShards: n.AttrInt("num_shards")}
	if k.dir == "" || k.numShards <= 0 || k.shard < 0 || k.shard >= k.numShards {
		return nil, fmt.Errorf("kernel: node %s: bad dir %q or shard %d of %d", n, k.dir, k.shard, k.numShards)
	}
	return k, nil
}

// MayBlock reports that the kernel does disk I/O.
func (*hashSaveKernel) MayBlock() bool { return true }

// BorrowsInputs reports that the step input is only read.
func (*hashSaveKernel) BorrowsInputs() bool { return true }

func (k *hashSaveKernel) Compute(c *kernel.Context) error {
	step, err := checkpointStep(c)
	if err != nil {
		return err
	}
	t, err := hashTableOf(c, k.cfg)
	if err != nil {
		return err
	}
	dir, err := c.Resources.CheckPath(k.dir)
	if err != nil {
		return checkpointWrap(c, "saving", err)
	}
	// Copy under the lock, write without it: lookups and updates go on
	// while the file is written and synced.
	t.mu.Lock()
	n := len(t.rows)
	keys := make([]int64, 0, n)
	for id := range t.rows {
		keys = append(keys, id)
	}
	slices.Sort(keys)
	values, accums, counts := make([]float32, n*t.dim), make([]float32, n*t.dim), make([]int64, n)
	for i, id := range keys {
		r := t.rows[id]
		copy(values[i*t.dim:], r.value)
		copy(accums[i*t.dim:], r.accum)
		counts[i] = r.count
	}
	t.mu.Unlock()
	base := "hash_embedding/" + k.cfg.table + "/"
	recs := map[string]*tensor.Tensor{
		base + "keys":         tensor.MustFromSlice(keys, n),
		base + "values":       tensor.MustFromSlice(values, n, t.dim),
		base + "accumulators": tensor.MustFromSlice(accums, n, t.dim),
		base + "counts":       tensor.MustFromSlice(counts, n),
	}
	info, err := bundle.WriteShard(dir, bundle.Prefix(k.basename, step), k.shard, k.numShards, recs)
	if err != nil {
		return checkpointWrap(c, "", err)
	}
	data, err := json.Marshal(info)
	if err != nil {
		return checkpointWrap(c, "encoding the shard description", err)
	}
	copy(c.AllocUninit(0, tensor.Uint8, len(data)).Uint8s(), data)
	return nil
}

type hashRestoreKernel struct {
	cfg                     hashConfig
	dir, basename, name     string
	tableShard, tableShards int
}

func newHashRestoreKernel(n *graph.Node) (kernel.Kernel, error) {
	cfg, err := newHashConfig(n)
	if err != nil {
		return nil, err
	}
	k := &hashRestoreKernel{cfg: cfg, dir: n.AttrString("dir"), basename: n.AttrString("basename"), name: n.AttrString("name"),
		tableShard: n.AttrInt("table_shard"), tableShards: n.AttrInt("table_shards")}
	if k.dir == "" || k.name == "" || k.tableShards < 1 || k.tableShard < 0 || k.tableShard >= k.tableShards {
		return nil, fmt.Errorf("kernel: node %s: bad dir %q, table %q or table shard %d of %d", n, k.dir, k.name, k.tableShard, k.tableShards)
	}
	return k, nil
}

// MayBlock reports that the kernel does disk I/O.
func (*hashRestoreKernel) MayBlock() bool { return true }

// BorrowsInputs reports that the step input is only read.
func (*hashRestoreKernel) BorrowsInputs() bool { return true }

func (k *hashRestoreKernel) Compute(c *kernel.Context) error {
	step, err := checkpointStep(c)
	if err != nil {
		return err
	}
	t, err := hashTableOf(c, k.cfg)
	if err != nil {
		return err
	}
	dir, err := c.Resources.CheckPath(k.dir)
	if err != nil {
		return checkpointWrap(c, "restoring", err)
	}
	prefix := bundle.Prefix(k.basename, step)
	ix, err := bundle.ReadIndex(dir, prefix)
	if err != nil {
		return checkpointWrap(c, "", err)
	}
	// Every saved shard of the table: hash_embedding/<name>/shard_<i>/keys.
	start := "hash_embedding/" + k.name + "/shard_"
	var saved []string
	for _, e := range ix.Variables {
		mid, ok := strings.CutPrefix(e.Name, start)
		if mid, ok = strings.CutSuffix(mid, "/keys"); ok {
			if _, err := strconv.Atoi(mid); err == nil {
				saved = append(saved, strings.TrimSuffix(e.Name, "keys"))
			}
		}
	}
	if len(saved) == 0 {
		return checkpointWrap(c, "restoring", fmt.Errorf("checkpoint %s has no rows of hash embedding table %q (saved without it?): %w",
			prefix, k.name, bundle.ErrNotFound))
	}
	var names []string
	for _, p := range saved {
		for _, r := range hashRecords {
			names = append(names, p+r)
		}
	}
	recs, err := bundle.ReadVariables(dir, prefix, names)
	if err != nil {
		return checkpointWrap(c, "", err)
	}
	rows := map[int64]*hashRow{}
	seen := map[int64]bool{}
	for _, p := range saved {
		keys, values, accums, counts, err := hashRecordsOf(recs, p, t.dim)
		if err != nil {
			return checkpointWrap(c, "restoring from "+prefix, err)
		}
		for _, id := range keys {
			if seen[id] {
				return checkpointWrap(c, "restoring from "+prefix, fmt.Errorf("%w: hash embedding table %q: id %d is saved in two shards", bundle.ErrCorrupt, k.name, id))
			}
			seen[id] = true
		}
		t.keep(rows, keys, values, accums, counts, k.tableShard, k.tableShards)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range rows {
		r.seen = t.clock
	}
	t.rows = rows
	c.Alloc(0, tensor.Int64).Int64s()[0] = int64(len(rows))
	return nil
}

// hashRecordsOf checks the saved records of one table shard (prefix p)
// against each other and the table's width dim: the checksums held, but
// the shapes and values are the file's word.
func hashRecordsOf(recs map[string]*tensor.Tensor, p string, dim int) (keys []int64, values, accums []float32, counts []int64, err error) {
	k, v, a, n := recs[p+"keys"], recs[p+"values"], recs[p+"accumulators"], recs[p+"counts"]
	rows := k.NumElements()
	if k.DType() != tensor.Int64 || k.Rank() != 1 || n.DType() != tensor.Int64 || n.NumElements() != rows ||
		v.DType() != tensor.Float32 || a.DType() != tensor.Float32 || v.NumElements() != rows*dim || a.NumElements() != rows*dim {
		return nil, nil, nil, nil, fmt.Errorf("%w: %s: keys %v%v, values %v%v, accumulators %v%v, counts %v%v: want %d rows of width %d (is the table's dim the one it was saved with?)",
			bundle.ErrCorrupt, strings.TrimSuffix(p, "/"), k.DType(), k.StaticShape(), v.DType(), v.StaticShape(), a.DType(), a.StaticShape(),
			n.DType(), n.StaticShape(), rows, dim)
	}
	values, accums = v.Float32s(), a.Float32s()
	for i := range values {
		if math.IsNaN(float64(values[i])) || math.IsInf(float64(values[i]), 0) || !(accums[i] >= 0) || math.IsInf(float64(accums[i]), 0) {
			return nil, nil, nil, nil, fmt.Errorf("%w: %s: row %d has value %v, accumulator %v", bundle.ErrCorrupt, strings.TrimSuffix(p, "/"), i/dim, values[i], accums[i])
		}
	}
	return k.Int64s(), values, accums, n.Int64s(), nil
}
