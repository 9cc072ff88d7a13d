package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// hashCluster is a cluster (in-memory network, a worker per task) whose
// graph has the test model's variables and a hash embedding of one shard
// per ps task.
type hashCluster struct {
	*cluster
	h      ops.HashEmbedding
	ids    graph.Output
	update []*graph.Node
	keys   []graph.Output
	values []graph.Output
	accums []graph.Output
}

func newHashCluster(t *testing.T, numPS int, dir string) *hashCluster {
	t.Helper()
	c := &hashCluster{h: ops.HashEmbedding{Name: "emb", Dim: 3, InitScale: 0.5, Seed: numPS}}
	for i := range numPS {
		c.h.Devices = append(c.h.Devices, fmt.Sprintf("/job:ps/task:%d/cpu:0", i))
	}
	c.cluster = newClusterWith(t, numPS, dir, func(s *graph.Scope) {
		c.ids = ops.Placeholder(s, "ids", tensor.Int64, tensor.MakeShape(-1))
		lk := c.h.Lookup(s, c.ids, true)
		var grads []graph.Output
		for i, rows := range lk.ShardRows {
			grads = append(grads, ops.Mul(s.WithDevice(c.h.Devices[i]), rows, ops.Scalar(s, tensor.Float32, 0.5)))
		}
		c.update = c.h.ApplyAdagrad(s, lk.ShardIDs, grads, 0.1)
		c.keys, c.values, c.accums = c.h.Export(s)
	})
	return c
}

// train looks up and updates ids (new ones get rows).
func (c *hashCluster) train(t *testing.T, ids ...int64) {
	t.Helper()
	feeds := map[graph.Output]*tensor.Tensor{c.ids: tensor.MustFromSlice(ids, len(ids))}
	if _, err := c.sess.Run(context.Background(), feeds, nil, c.update); err != nil {
		t.Fatal(err)
	}
}

type hashRowValue struct{ value, accum [3]float32 }

// rows exports every shard: id -> row, checking that each id is in the
// shard it hashes to.
func (c *hashCluster) rows(t *testing.T) map[int64]hashRowValue {
	t.Helper()
	out, err := c.sess.Run(context.Background(), nil, slices.Concat(c.keys, c.values, c.accums), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := len(c.keys)
	rows := map[int64]hashRowValue{}
	for s := range n {
		v, a := out[n+s].Float32s(), out[2*n+s].Float32s()
		for i, id := range out[s].Int64s() {
			if got := op.HashShard(id, n); got != s {
				t.Errorf("id %d is in shard %d of %d, hashes to %d", id, s, n, got)
			}
			var r hashRowValue
			copy(r.value[:], v[3*i:])
			copy(r.accum[:], a[3*i:])
			rows[id] = r
		}
	}
	return rows
}

// TestSaverHashEmbedding: a checkpoint holds the hash embedding's rows and
// Adagrad accumulators beside the variables, each table shard written by
// its ps task; it restores into 1 ps (2 -> 1) and back into 2 (1 -> 2),
// every row in the shard its id hashes to, the variables as saved.
func TestSaverHashEmbedding(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c2 := newHashCluster(t, 2, dir)
	if got := len(c2.sv.HashTables()); got != 2 {
		t.Fatalf("the saver saves %d hash table shards, want 2", got)
	}
	if _, err := c2.sess.Run(ctx, nil, nil, []*graph.Node{c2.m.init}); err != nil {
		t.Fatal(err)
	}
	wantVars := c2.m.setValues(t, c2.s, c2.sess, 3)
	c2.train(t, 1, 2, 3, -40, 1<<40, 2, 7)
	c2.train(t, 1, 99, -40)
	want := c2.rows(t)
	if len(want) != 7 {
		t.Fatalf("%d rows before saving, want 7", len(want))
	}
	if _, err := c2.sv.Save(ctx, c2.sess, 10); err != nil {
		t.Fatal(err)
	}
	ix, err := checkpoint.ReadIndex(dir, "model.ckpt-10")
	if err != nil {
		t.Fatal(err)
	}
	// Files: the variables of each ps, then a table shard per ps.
	if ix.NumShards != 4 {
		t.Errorf("%d data files, want 4", ix.NumShards)
	}
	for i := range 2 {
		e, ok := ix.Lookup(fmt.Sprintf("hash_embedding/emb/shard_%d/values", i))
		if !ok || e.Shard != 2+i {
			t.Errorf("table shard %d: entry %+v (found %v), want it in data file %d", i, e, ok, 2+i)
		}
	}

	c1 := newHashCluster(t, 1, dir)
	if step, ok, err := c1.sv.RestoreLatest(ctx, c1.sess); step != 10 || !ok || err != nil {
		t.Fatalf("RestoreLatest into 1 ps = %d, %v, %v", step, ok, err)
	}
	checkValues(t, c1.m.values(t, c1.sess), wantVars)
	if got := c1.rows(t); !maps.Equal(got, want) {
		t.Fatalf("2 -> 1 ps: rows\n%v\nwant\n%v", got, want)
	}
	c1.train(t, 1, 5)
	want = c1.rows(t)
	if len(want) != 8 {
		t.Fatalf("%d rows after training on, want 8", len(want))
	}
	if _, err := c1.sv.Save(ctx, c1.sess, 11); err != nil {
		t.Fatal(err)
	}

	c2b := newHashCluster(t, 2, dir)
	if step, ok, err := c2b.sv.RestoreLatest(ctx, c2b.sess); step != 11 || !ok || err != nil {
		t.Fatalf("RestoreLatest into 2 ps = %d, %v, %v", step, ok, err)
	}
	got := c2b.rows(t) // checks each id's shard
	if !maps.Equal(got, want) {
		t.Fatalf("1 -> 2 ps: rows\n%v\nwant\n%v", got, want)
	}
	sizes, err := c2b.sess.Run(ctx, nil, c2b.h.Size(c2b.s), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := sizes[0].Int64s()[0], sizes[1].Int64s()[0]; a == 0 || b == 0 || a+b != 8 {
		t.Errorf("the shards hold %d and %d rows, want 8 split over both", a, b)
	}

	// A checkpoint without the table (saved before it existed) is refused
	// by name, not restored as an empty table.
	plain := newCluster(t, 2, t.TempDir())
	if _, err := plain.sess.Run(ctx, nil, nil, []*graph.Node{plain.m.init}); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.sv.Save(ctx, plain.sess, 1); err != nil {
		t.Fatal(err)
	}
	c := newHashCluster(t, 2, plain.sv.Dir())
	if _, _, err := c.sv.RestoreLatest(ctx, c.sess); err == nil || !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("restoring a checkpoint without the table: %v, want ErrNotFound naming it", err)
	}
}
