package train_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// countingListener counts the bytes its connections read and write: what
// a task sends and receives on the wire.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	k, err := c.Conn.Read(b)
	c.n.Add(int64(k))
	return k, err
}

func (c countingConn) Write(b []byte) (int, error) {
	k, err := c.Conn.Write(b)
	c.n.Add(int64(k))
	return k, err
}

// TestSparseStepMovesOnlyTouchedRows trains an embedding table of 200000
// rows x 16 (12.8 MB of float32) split over two parameter servers, from a
// worker, all real servers talking gRPC over loopback, and counts the bytes
// every task's connections carry per step (the client's included): they grow with the
// number of distinct ids in the batch and stay far below the table's size.
// The table's values after the steps are those of the same steps run in
// one process.
func TestSparseStepMovesOnlyTouchedRows(t *testing.T) {
	// SPARSE_WIRE_ROWS scales the table by hand (scripts/sparse_scale.sh:
	// 10M rows); above a million rows the one-process comparison is skipped.
	rows, dim := 200000, 16
	if n, err := strconv.Atoi(os.Getenv("SPARSE_WIRE_ROWS")); err == nil && n > 0 {
		rows = n
	}
	// Every task's listener counts: a tensor crosses on the connection of
	// whoever asks for it (the worker fetches rows from the ps, the ps
	// fetches gradients from the worker).
	var wire atomic.Int64
	addrs := map[string][]string{}
	lis := map[string]net.Listener{}
	for _, job := range []string{"ps", "ps", "worker"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		id := cluster.TaskID{Job: job, Index: len(addrs[job])}
		addrs[job] = append(addrs[job], l.Addr().String())
		lis[id.String()] = countingListener{l, &wire}
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	var worker *server.Server
	for name, l := range lis {
		id, err := cluster.ParseTaskID(name)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := server.New(server.Config{Cluster: spec, Task: id, Listener: l, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		if id.Job == "worker" {
			worker = srv
		}
	}

	build := func(device graph.DeviceFunc) (*graph.Graph, graph.Output, *graph.Node, *graph.Node, []*ops.Variable) {
		s := graph.NewScope()
		if device != nil {
			s = s.WithDeviceFunc(device)
		}
		table, err := ops.NewPartitionedVariable(s, "emb", tensor.Float32, []int{rows, dim}, ops.RandomUniformInit(-0.1, 0.1, 3), 2)
		if err != nil {
			t.Fatal(err)
		}
		ids := ops.Placeholder(s, "ids", tensor.Int64, tensor.MakeShape(-1))
		e := ops.EmbeddingLookup(s, table, ids, "mod")
		loss := ops.Sum(s, ops.Square(s, ops.Sub(s, e, ops.Scalar(s, tensor.Float32, 1))), nil, false)
		step, err := train.Minimize(s, train.NewAdagrad(0.1, 0.1), loss, nil)
		if err != nil {
			t.Fatal(err)
		}
		init := ops.GlobalVariablesInitializer(s)
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		return s.Graph(), ids, step, init, table.Shards()
	}
	g, ids, step, init, shards := build(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
		PSTasks: 2, WorkerDevice: "/job:worker/task:0"}))
	for i, v := range shards {
		if want := "/job:ps/task:"; len(v.Node().Device()) < len(want) || v.Node().Device()[:len(want)] != want {
			t.Fatalf("shard %d is on %q, want a ps", i, v.Node().Device())
		}
	}
	ctx := context.Background()
	sess, err := session.Open(ctx, worker.Target(), g)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	batch := func(distinct int) *tensor.Tensor {
		v := make([]int64, 256)
		for i := range v {
			v[i] = int64((i % distinct) * 7919 % rows)
		}
		if rows > 1_000_000 { // spread the ids over the whole table
			for i := range v {
				v[i] = int64((i % distinct) * (rows / 257))
			}
		}
		return tensor.MustFromSlice(v, len(v))
	}
	// perStep runs one warm-up step (the plan is made and registered) and
	// then measures three steps of the same signature.
	var fed []*tensor.Tensor
	perStep := func(distinct int) int64 {
		b := batch(distinct)
		fed = append(fed, b)
		if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{ids: b}, nil, []*graph.Node{step}); err != nil {
			t.Fatal(err)
		}
		before := wire.Load()
		for range 3 {
			fed = append(fed, b)
			if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{ids: b}, nil, []*graph.Node{step}); err != nil {
				t.Fatal(err)
			}
		}
		return (wire.Load() - before) / 3
	}
	small, large := perStep(8), perStep(256)
	tableBytes := int64(rows) * int64(dim) * 4
	rowBytes := int64(dim * 4)
	t.Logf("bytes per step on the wire: %d for 8 distinct ids, %d for 256 (table: %d)", small, large, tableBytes)
	// Each distinct row crosses at least twice (the row out, its gradient
	// in); protocol overhead is a few kilobytes per step.
	if large < 2*256*rowBytes {
		t.Errorf("256 distinct ids moved %d bytes per step: fewer than the rows themselves (%d)", large, 2*256*rowBytes)
	}
	if large > 2*256*rowBytes+64<<10 || small > 2*8*rowBytes+64<<10 {
		t.Errorf("a step moved %d (8 ids) and %d (256 ids) bytes: more than the touched rows and 64 KiB of overhead", small, large)
	}
	if growth := large - small; growth < (256-8)*2*rowBytes*9/10 {
		t.Errorf("bytes per step grew by %d from 8 to 256 distinct ids, want about %d (proportional to the ids)", growth, (256-8)*2*rowBytes)
	}

	if rows > 1_000_000 {
		return
	}
	// The same steps in one process give the same table.
	lg, lids, lstep, linit, lshards := build(nil)
	local, err := session.New(lg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.Run(ctx, nil, nil, []*graph.Node{linit}); err != nil {
		t.Fatal(err)
	}
	for _, b := range fed {
		if _, err := local.Run(ctx, map[graph.Output]*tensor.Tensor{lids: b}, nil, []*graph.Node{lstep}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range shards {
		want, err := local.Run(ctx, nil, []graph.Output{lshards[i].Value()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sess.Run(ctx, nil, []graph.Output{shards[i].Value()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !tensor.Equal(got[0], want[0]) {
			t.Fatalf("shard %d differs between the cluster and one process", i)
		}
	}
}
