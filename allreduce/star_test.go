package allreduce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// starRings is n ranks and servers summation servers in one process.
func starRings(t *testing.T, n, servers, chunkBytes int) ([]*Ring, *MemNetwork) {
	t.Helper()
	peers := make([]string, n+servers)
	for i := range peers {
		peers[i] = fmt.Sprintf("memory:%d", i)
	}
	net := NewMemNetwork(make([]Receiver, n+servers), 0)
	rings := make([]*Ring, n+servers)
	for i := range rings {
		r, err := NewRing(Config{Rank: i, Peers: peers, Servers: servers, ServerChunkBytes: chunkBytes, Logger: slog.New(slog.DiscardHandler)}, net.Transport(i))
		if err != nil {
			t.Fatal(err)
		}
		rings[i], net.recv[i] = r, r
	}
	t.Cleanup(func() {
		for _, r := range rings {
			r.Close()
		}
	})
	return rings, net
}

// reduceAll runs AllReduce(name, round) on the first n rings, each with
// its own tensor (rank r's element i is r*1000+i+0.25), and returns their
// results and errors.
func reduceAll(ctx context.Context, rings []*Ring, n, length int, name string, round int64) ([][]float32, []error) {
	out, errs := make([][]float32, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		out[r] = make([]float32, length)
		for i := range out[r] {
			out[r][i] = float32(r*1000+i) + 0.25
		}
		wg.Go(func() { errs[r] = rings[r].AllReduce(ctx, name, round, out[r]) })
	}
	wg.Wait()
	return out, errs
}

func wantSum(n, i int) float32 {
	var s float32
	for r := range n {
		s += float32(r*1000+i) + 0.25
	}
	return s
}

// TestStarSumsThroughTheServers: with summation servers, every rank ends
// with the sum, bit for bit the same on every rank, for tensors shorter
// than a chunk, cut unevenly, and of many chunks; and the sums were made
// on the servers (they completed the operation), not round the ring.
func TestStarSumsThroughTheServers(t *testing.T) {
	for _, tc := range []struct{ ranks, servers, length int }{
		{2, 1, 1}, {2, 1, 7}, {2, 2, 2}, {2, 2, 101}, {3, 2, 50}, {4, 3, 1000}, {3, 1, 64},
		// Fewer values than servers: some servers have nothing to sum.
		{2, 4, 2}, {4, 4, 1}, {4, 4, 3},
	} {
		t.Run(fmt.Sprintf("%d_ranks_%d_servers_%d_values", tc.ranks, tc.servers, tc.length), func(t *testing.T) {
			rings, _ := starRings(t, tc.ranks, tc.servers, 16) // chunks of 4 values
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for round := range int64(3) {
				out, errs := reduceAll(ctx, rings, tc.ranks, tc.length, "grads", round)
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d, round %d: %v", r, round, err)
					}
				}
				for i := range tc.length {
					if out[0][i] != wantSum(tc.ranks, i) {
						t.Fatalf("round %d: element %d = %v, want %v", round, i, out[0][i], wantSum(tc.ranks, i))
					}
					for r := 1; r < tc.ranks; r++ {
						if out[r][i] != out[0][i] {
							t.Fatalf("round %d: rank %d has %v at %d, rank 0 %v", round, r, out[r][i], i, out[0][i])
						}
					}
				}
				for s := tc.ranks; s < len(rings); s++ {
					if j := s - tc.ranks; j*tc.length/tc.servers == (j+1)*tc.length/tc.servers {
						continue // an empty slice: nothing to sum there
					}
					sum := rings[s].sum
					sum.mu.Lock()
					err, ended := sum.ended.get(Op{Name: "grads@servers", Round: round})
					held := sum.bytes
					sum.mu.Unlock()
					if !ended || err != nil || held != 0 {
						t.Errorf("server %d after round %d: ended %v (%v), %d bytes held; want the operation completed there and nothing held", s, round, ended, err, held)
					}
				}
			}
		})
	}
}

// TestStarAmongAView: a group of some of the ranks sums among its members
// through the servers.
func TestStarAmongAView(t *testing.T) {
	rings, _ := starRings(t, 3, 2, 8)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	view := View{Gen: 4, Members: []int{0, 2}}
	out := [][]float32{{1, 2, 3}, {10, 20, 30}}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for k, rank := range view.Members {
		g, err := rings[rank].Among(view)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[k] = g.AllReduceMean(ctx, "grads", 0, out[k]) })
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil || fmt.Sprint(out[k]) != "[5.5 11 16.5]" {
			t.Errorf("member %d: %v, %v; want the mean [5.5 11 16.5]", view.Members[k], out[k], err)
		}
	}
}

// TestTheRouteIsTheViews: every member takes its view's route. A server
// that dies fails the operation through the servers on every member at
// once, with ErrServerFailed (it is not run round the ring by some
// members and waited for through the servers by others); a view that says
// RingOnly sums round the ring, leaving the servers alone; and a view
// without it goes through the servers again.
func TestTheRouteIsTheViews(t *testing.T) {
	rings, net := starRings(t, 2, 2, 8)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	among := func(v View, round int64) ([][]float32, []error) {
		out, errs := make([][]float32, 2), make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			g, err := rings[r].Among(v)
			if err != nil {
				t.Fatal(err)
			}
			out[r] = make([]float32, 10)
			for i := range out[r] {
				out[r][i] = float32(r*1000+i) + 0.25
			}
			wg.Go(func() { errs[r] = g.AllReduce(ctx, "grads", round, out[r]) })
		}
		wg.Wait()
		return out, errs
	}
	check := func(out [][]float32, errs []error, round int64) {
		t.Helper()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i := range 10 {
			if out[0][i] != wantSum(2, i) || out[1][i] != out[0][i] {
				t.Fatalf("round %d: element %d = %v and %v, want %v", round, i, out[0][i], out[1][i], wantSum(2, i))
			}
		}
	}
	servers := View{Gen: 1, Members: []int{0, 1}}
	out, errs := among(servers, 0)
	check(out, errs, 0)
	net.Cut(3)
	start := time.Now()
	_, errs = among(servers, 1)
	for r, err := range errs {
		if !errors.Is(err, ErrServerFailed) {
			t.Errorf("rank %d, a server down: %v; want the operation failed with ErrServerFailed", r, err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the members failed %v after the server died; want at once", d)
	}
	ring := View{Gen: 2, Members: []int{0, 1}, RingOnly: true}
	for round := int64(1); round < 4; round++ {
		out, errs := among(ring, round)
		check(out, errs, round)
	}
	srv := rings[2].sum
	srv.mu.Lock()
	for op := range srv.ended.outcome {
		if opGen(op) == 2 {
			t.Errorf("server 2 summed %v of a view that goes round the ring", op)
		}
	}
	srv.mu.Unlock()
	if down := rings[0].DownServers(ctx); len(down) != 1 || down[0] != 3 {
		t.Errorf("DownServers: %v, want [3]", down)
	}
	if got, err := decodeView(ring.encode()); err != nil || !got.RingOnly {
		t.Errorf("a view that goes round the ring decodes as %+v, %v", got, err)
	}
}

// TestAServerThatDiesBeforeReturningFailsTheOperation: a member whose
// chunks a server has taken, and which waits for the sums (the other
// member has not sent its own yet), sees the server die at once: its
// stream to the server stays open until the sums are in.
func TestAServerThatDiesBeforeReturningFailsTheOperation(t *testing.T) {
	rings, net := starRings(t, 2, 1, 8)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- rings[0].AllReduce(ctx, "grads", 0, make([]float32, 10)) }()
	// The server holds rank 0's chunks (polling its state: nothing else
	// tells).
	srv := rings[2].sum
	for held := false; !held; {
		srv.mu.Lock()
		held = len(srv.ops) > 0
		srv.mu.Unlock()
		if !held {
			time.Sleep(time.Millisecond)
		}
	}
	start := time.Now()
	net.Cut(2)
	select {
	case err := <-done:
		if !errors.Is(err, ErrServerFailed) || !strings.Contains(err.Error(), "summation server") {
			t.Errorf("%v; want the failure through the server, named", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("failed %v after the server died; want at once", d)
		}
	case <-ctx.Done():
		t.Fatal("rank 0 waited for the sums of a dead server until its deadline")
	}
}

// TestAViewFailsOnEveryMember: an operation of a view that fails on one
// member fails the others' at once (they would wait for it until their
// deadline), and their later operations of the view too; a new view works.
func TestAViewFailsOnEveryMember(t *testing.T) {
	rings, err := NewInProcess(3, InProcessConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range rings {
			r.Close()
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	v := View{Gen: 5, Members: []int{0, 1, 2}}
	groups := make([]*Group, 3)
	for r := range groups {
		if groups[r], err = rings[r].Among(v); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { errs[r] = groups[r].AllReduce(ctx, "grads", 0, make([]float32, 100)) })
	}
	// Rank 2's operation failed before it sent anything (in memory, a
	// failed operation's aborted streams tell the peers too: rank 2 only
	// tells them that the view failed).
	rings[2].tellViewFailed(groups[2].tp, errors.New("an operation of rank 2 failed"))
	wg.Wait()
	for r := range 2 {
		if !errors.Is(errs[r], ErrViewFailed) || !strings.Contains(errs[r].Error(), "rank 2 (memory:2)") {
			t.Errorf("rank %d: %v; want ErrViewFailed, naming rank 2", r, errs[r])
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the members failed %v after rank 2; want at once", d)
	}
	if err := groups[0].AllReduce(ctx, "grads", 1, make([]float32, 100)); !errors.Is(err, ErrViewFailed) {
		t.Errorf("a later operation of the failed view: %v; want ErrViewFailed at once", err)
	}
	next := View{Gen: 6, Members: []int{0, 1, 2}}
	for r := range 3 {
		g, err := rings[r].Among(next)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[r] = g.AllReduce(ctx, "grads", 0, make([]float32, 100)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Errorf("the next view: %v", err)
	}
}

// TestStarMemberLostFailsTheOthers: a member that dies during an
// operation fails it on the other members at once (the server tells
// them), not at their deadline.
func TestStarMemberLostFailsTheOthers(t *testing.T) {
	rings, net := starRings(t, 3, 1, 8)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { errs[r] = rings[r].AllReduce(ctx, "grads", 0, make([]float32, 100)) })
	}
	// Rank 2 sends its first chunks, then dies.
	op := Op{Name: "grads@servers"} // the servers' key of "grads" round 0
	st, err := net.Transport(2).Open(ctx, 3, op)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&Chunk{Op: op, From: 2, Size: 3, Index: 0, Length: 100, Offset: 0, Data: make([]float32, 2)}); err != nil {
		t.Fatal(err)
	}
	net.Cut(2)
	wg.Wait()
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: the operation succeeded without rank 2", r)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the members failed after %v; want them told at once", d)
	}
}

// TestSummerRefusesChunksThatDoNotFit: a server refuses chunks that are
// not of its segment, come twice, or claim another operation's shape, and
// an operation it refused a chunk of stays failed.
func TestSummerRefusesChunksThatDoNotFit(t *testing.T) {
	rings, _ := starRings(t, 2, 2, 8) // server 3 holds [5, 10) of 10, in chunks 3 to 5
	srv := rings[3]
	op := Op{Name: "g"}
	ok := Chunk{Op: op, From: 0, Size: 2, Index: 3, Length: 10, Offset: 5, Data: []float32{1, 2}}
	for _, tc := range []struct {
		name string
		edit func(c *Chunk)
		want string
	}{
		{"other segment", func(c *Chunk) { c.Index, c.Offset = 0, 0 }, "not one of its chunks"},
		{"misaligned", func(c *Chunk) { c.Offset = 6 }, "not one of its chunks"},
		{"negative index", func(c *Chunk) { c.Index = -1 }, "not one of its chunks"},
		{"negative offset", func(c *Chunk) { c.Offset = -5 }, "not one of its chunks"},
		{"short", func(c *Chunk) { c.Data = c.Data[:1] }, "not one of its chunks"},
		{"from a server", func(c *Chunk) { c.From = 2 }, "not one of the 2 ranks"},
		{"too many members", func(c *Chunk) { c.Size = 3 }, "not 1 to 2"},
		{"no values", func(c *Chunk) { c.Length, c.Offset, c.Index = 0, 0, 0; c.Data = nil }, "a tensor of 0 values"},
		{"beyond a short tensor", func(c *Chunk) { c.Length, c.Offset, c.Index = 1, 1, 1; c.Data = c.Data[:1] }, "not one of its chunks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			c.Op.Name = tc.name
			tc.edit(&c)
			if err := srv.Deliver(&c); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Deliver(%+v) = %v; want ErrMismatch with %q", c, err, tc.want)
			}
		})
	}
	first := ok
	if err := srv.Deliver(&first); err != nil {
		t.Fatal(err)
	}
	twice := ok
	twice.Data = []float32{1, 2}
	if err := srv.Deliver(&twice); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "came twice") {
		t.Errorf("the same chunk twice: %v", err)
	}
	other := ok
	other.From, other.Index, other.Offset, other.Data = 1, 4, 7, []float32{1, 2}
	if err := srv.Deliver(&other); !errors.Is(err, ErrMismatch) {
		t.Errorf("a chunk of an operation that failed: %v; want its failure", err)
	}
	if err := srv.AllReduce(t.Context(), "x", 0, []float32{1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("AllReduce on a server: %v", err)
	}
}

// TestSummerBoundsItsOperations: members that vanish without a word
// leave at most maxSumOps operations on a server.
func TestSummerBoundsItsOperations(t *testing.T) {
	rings, _ := starRings(t, 2, 1, 8)
	srv := rings[2].sum
	for i := range maxSumOps + 10 {
		c := &Chunk{Op: Op{Name: "g", Round: int64(i)}, From: 0, Size: 2, Length: 4, Data: []float32{1, 2}}
		if err := rings[2].Deliver(c); err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.ops) != maxSumOps || srv.bytes != 8*maxSumOps {
		t.Errorf("%d operations, %d bytes held; want %d and %d", len(srv.ops), srv.bytes, maxSumOps, 8*maxSumOps)
	}
}
