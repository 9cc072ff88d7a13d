package train_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/race"
	"github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
	"github.com/distflow/distflow/worker"
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

// sparseCluster starts ps parameter servers and workers workers, real
// servers talking gRPC over loopback, whose listeners all count the bytes
// their connections carry into the returned counter: a tensor crosses on
// the connection of whoever asks for it (the worker fetches rows from the
// ps, the ps fetches gradients from the worker). The servers are keyed by
// task ("/job:ps/task:0") and stop when the test ends.
func sparseCluster(t *testing.T, ps, workers int) (*atomic.Int64, map[string]*server.Server) {
	t.Helper()
	wire := new(atomic.Int64)
	addrs := map[string][]string{}
	lis := map[string]net.Listener{}
	for _, job := range append(slices.Repeat([]string{"ps"}, ps), slices.Repeat([]string{"worker"}, workers)...) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		id := cluster.TaskID{Job: job, Index: len(addrs[job])}
		addrs[job] = append(addrs[job], l.Addr().String())
		lis[id.String()] = countingListener{l, wire}
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	servers := map[string]*server.Server{}
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
		servers[name] = srv
	}
	return wire, servers
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
	wire, servers := sparseCluster(t, 2, 1)
	w0 := servers["/job:worker/task:0"]
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
	sess, err := session.Open(ctx, w0.Target(), g)
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

// syncWireFigures is what a synchronous round costs: bytes on the wire and
// the bytes the two ps's accumulators hold at most.
type syncWireFigures struct{ wire, accum int64 }

// TestSyncSparseRoundMovesOnlyTouchedRows trains an embedding table of R
// rows x 16 split over two parameter servers with sync replicas (two
// replicas, both aggregated, built by one client on the worker), all real
// servers talking gRPC over loopback, and measures per round the bytes on
// the wire and the ps's accumulator memory (cpu.AccumulatorBytes): both grow
// with the distinct ids of the round's batches and stay far below the
// table's size, and both are the same for a table of 200,000 rows and of
// 10,000,000 (640 MB of float32, 5 s; skipped with -short and under the
// race detector, where it takes minutes).
func TestSyncSparseRoundMovesOnlyTouchedRows(t *testing.T) {
	const dim = 16
	sizes := []int{200_000, 10_000_000}
	if testing.Short() || race.Enabled {
		sizes = sizes[:1]
	}
	figures := map[int][2]syncWireFigures{}
	for _, rows := range sizes {
		t.Run(strconv.Itoa(rows), func(t *testing.T) {
			wire, servers := sparseCluster(t, 2, 1)
			r := sparseSyncBuild(t, placement.ReplicaDeviceSetter(placement.ReplicaConfig{PSTasks: 2, WorkerDevice: "/job:worker/task:0"}),
				train.NewGradientDescent(0.1), rows, dim, 2, 2, ops.ZerosInit(), false)
			ctx := context.Background()
			sess, err := session.Open(ctx, servers["/job:worker/task:0"].Target(), r.g)
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			r.initChief(t, sess)
			// 256 ids a replica, distinct of them, spread over the table
			// and both shards; both replicas look up the same ids.
			stride := rows/257 | 1
			batch := func(distinct int) *tensor.Tensor {
				v := make([]int64, 256)
				for i := range v {
					v[i] = int64((i % distinct) * stride)
				}
				return tensor.MustFromSlice(v, len(v))
			}
			accum := func() int64 {
				var peak int64
				for _, ps := range []string{"/job:ps/task:0", "/job:ps/task:1"} {
					_, p := cpu.AccumulatorBytes(servers[ps].Worker().(*worker.Worker).Resources())
					peak += p
				}
				return peak
			}
			perRound := func(distinct int) syncWireFigures {
				b := batch(distinct)
				feed := func(int) *tensor.Tensor { return b }
				r.round(t, sess, []int{0, 1}, nil, feed) // the plan is made and registered
				before := wire.Load()
				for range 3 {
					r.round(t, sess, []int{0, 1}, nil, feed)
				}
				return syncWireFigures{wire: (wire.Load() - before) / 3, accum: accum()}
			}
			small, large := perRound(8), perRound(256)
			rowBytes := int64(dim * 4)
			t.Logf("per round, 8 and 256 distinct ids: %d and %d bytes on the wire, %d and %d bytes of accumulators (table: %d bytes)",
				small.wire, large.wire, small.accum, large.accum, int64(rows)*rowBytes)
			// Each replica's distinct rows cross twice (the rows out, their
			// gradients in), so four times a round; a few KiB of overhead.
			if large.wire < 4*256*rowBytes || large.wire > 4*256*rowBytes+128<<10 || small.wire > 4*8*rowBytes+128<<10 {
				t.Errorf("a round moved %d (8 ids) and %d (256 ids) bytes: want the touched rows (%d for 256) and at most 128 KiB more",
					small.wire, large.wire, 4*256*rowBytes)
			}
			if growth := large.wire - small.wire; growth < (256-8)*4*rowBytes*9/10 {
				t.Errorf("bytes per round grew by %d from 8 to 256 distinct ids, want about %d", growth, (256-8)*4*rowBytes)
			}
			// The accumulators hold each distinct row once (both replicas
			// touch the same rows) as float64, its index and its map entry,
			// with room for at most as much again.
			perRow := int64(dim*8 + 32)
			if large.accum < 256*dim*8 || large.accum > 2*256*perRow || small.accum > 2*8*perRow+1024 {
				t.Errorf("the accumulators hold at most %d bytes (8 ids) and %d (256 ids): want about %d per distinct row",
					small.accum, large.accum, perRow)
			}
			figures[rows] = [2]syncWireFigures{small, large}
		})
	}
	if a, b := figures[200_000], figures[10_000_000]; len(figures) == 2 {
		for i, n := range []int{8, 256} {
			// The wire carries a little protocol noise (HTTP/2 window
			// updates and pings): up to a few KiB a round.
			if d := a[i].wire - b[i].wire; d < -8192 || d > 8192 || a[i].accum != b[i].accum {
				t.Errorf("%d distinct ids: %d bytes on the wire and %d of accumulators at 200,000 rows, %d and %d at 10,000,000: "+
					"want the same (within 8 KiB on the wire)", n, a[i].wire, a[i].accum, b[i].wire, b[i].accum)
			}
		}
	}
}
