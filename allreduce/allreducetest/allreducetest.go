// Package allreducetest is the conformance suite of allreduce.Transport:
// every transport runs it (the in-memory one in package allreduce, the
// gRPC one in package rpc), as gonum's testblas does for BLAS
// implementations. It checks the ring's results and failure reports over
// the transport under test.
//
//	func TestRingConformance(t *testing.T) {
//		allreducetest.Run(t, func(t testing.TB, recv []allreduce.Receiver) []allreducetest.Peer {
//			net := allreduce.NewMemNetwork(recv, 0)
//			peers := make([]allreducetest.Peer, len(recv))
//			for i := range peers {
//				peers[i] = allreducetest.Peer{Transport: net.Transport(i), Addr: fmt.Sprint("memory:", i), Kill: func() { net.Cut(i) }}
//			}
//			return peers
//		})
//	}
package allreducetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
)

// Network connects len(recv) ranks for one test: it returns each rank's
// Transport, which the suite gives to that rank's Ring (the ring closes
// it), and which must deliver what is sent to rank i to recv[i]. The
// receivers forward to rings that exist once Network has returned; no chunk
// is sent before. The network's own resources (servers, listeners) are
// released with t.Cleanup.
type Network func(t testing.TB, recv []allreduce.Receiver) []Peer

// Peer is one rank of a Network.
type Peer struct {
	// Transport is the rank's transport.
	Transport allreduce.Transport
	// Addr is the rank's address (its Config.Peers entry): unique,
	// non-empty, named in errors.
	Addr string
	// Kill makes the rank look like a process that died: connections to
	// it are refused or broken, its streams break. The suite closes the
	// rank's ring after Kill.
	Kill func()
}

var quiet = slog.New(slog.DiscardHandler)

// proxy is the Receiver the suite hands the network: it forwards to the
// rank's ring, once made, and reports deliveries to tests that wait for
// streams to be up.
type proxy struct {
	ring      atomic.Pointer[allreduce.Ring]
	delivered func(c *allreduce.Chunk) // set before any operation, or nil
}

func (p *proxy) target() allreduce.Receiver {
	if r := p.ring.Load(); r != nil {
		return r
	}
	panic("allreducetest: the network delivered a chunk before the rings were made")
}

func (p *proxy) Deliver(c *allreduce.Chunk) error {
	err := p.target().Deliver(c)
	if err == nil && p.delivered != nil {
		p.delivered(c)
	}
	return err
}

func (p *proxy) Fail(op allreduce.Op, from int, err error) { p.target().Fail(op, from, err) }

func (p *proxy) Err() error {
	if r := p.ring.Load(); r != nil {
		return r.Err()
	}
	return nil
}

// ring is a connected ring under test.
type ring struct {
	rings   []*allreduce.Ring
	peers   []Peer
	names   []string
	proxies []*proxy
}

// describe is how a ring's errors name rank i (see allreduce.PeerDownError).
func (r *ring) describe(i int) string {
	return fmt.Sprintf("rank %d %s (%s)", i, r.names[i], r.peers[i].Addr)
}

// kill kills rank i and closes its ring.
func (r *ring) kill(i int) {
	r.peers[i].Kill()
	r.rings[i].Close()
}

func newRing(t testing.TB, network Network, n, chunkBytes int, hook func(rank int, c *allreduce.Chunk)) *ring {
	t.Helper()
	r := &ring{proxies: make([]*proxy, n), names: make([]string, n)}
	recv := make([]allreduce.Receiver, n)
	for i := range n {
		p := &proxy{}
		if hook != nil {
			p.delivered = func(c *allreduce.Chunk) { hook(i, c) }
		}
		r.proxies[i], recv[i] = p, p
		r.names[i] = fmt.Sprintf("/job:worker/task:%d", i)
	}
	r.peers = network(t, recv)
	if len(r.peers) != n {
		t.Fatalf("the network made %d peers for %d ranks", len(r.peers), n)
	}
	addrs := make([]string, n)
	for i, p := range r.peers {
		addrs[i] = p.Addr
	}
	for i := range n {
		rg, err := allreduce.NewRing(allreduce.Config{Rank: i, Peers: addrs, Names: r.names, ChunkBytes: chunkBytes, Logger: quiet}, r.peers[i].Transport)
		if err != nil {
			t.Fatal(err)
		}
		r.rings = append(r.rings, rg)
		r.proxies[i].ring.Store(rg)
		t.Cleanup(func() { rg.Close() })
	}
	return r
}

// input is rank's contribution: small integers, so that sums are exact in
// float32 whatever the order of the additions.
func input(rank, n int) []float32 {
	d := make([]float32, n)
	for i := range d {
		d[i] = float32((rank+1)*(i%101) - 50*rank)
	}
	return d
}

func wantSum(size, n int) []float32 {
	want := make([]float32, n)
	for r := range size {
		for i, v := range input(r, n) {
			want[i] += v
		}
	}
	return want
}

// parallel runs f for every rank at once and returns the errors by rank.
func parallel(rings []*allreduce.Ring, f func(r *allreduce.Ring) error) []error {
	errs := make([]error, len(rings))
	var wg sync.WaitGroup
	for i, r := range rings {
		wg.Go(func() { errs[i] = f(r) })
	}
	wg.Wait()
	return errs
}

func checkAllReduce(t *testing.T, rings []*allreduce.Ring, name string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	data := make([][]float32, len(rings))
	for i := range rings {
		data[i] = input(i, n)
	}
	for i, err := range parallel(rings, func(r *allreduce.Ring) error {
		return r.AllReduce(ctx, name, 1, data[r.Rank()])
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	want := wantSum(len(rings), n)
	for r, d := range data {
		for i := range d {
			if d[i] != want[i] {
				t.Fatalf("rank %d of %d, %d elements: element %d = %v, want %v", r, len(rings), n, i, d[i], want[i])
			}
		}
	}
}

// Run runs the conformance suite over network. Rings of 1 to 4 ranks are
// made; the large cases (3 MiB) use 2 and 3.
func Run(t *testing.T, network Network) {
	t.Run("sums", func(t *testing.T) {
		cases := []struct {
			ranks, elems, chunkBytes int
		}{
			{1, 7, 0},
			{2, 0, 0},
			{2, 1, 0},
			{2, 7, 0},
			{2, 7, 8},
			{2, 1000, 0},
			{2, 1000, 64},
			{3, 1, 0},
			{3, 2, 0},
			{3, 7, 4},
			{3, 1000, 0},
			{3, 1001, 36},
			{4, 1003, 12},
			{2, 3 << 20 / 4, 0},
			{2, 3<<20/4 + 1, 256 << 10},
			{3, 3 << 20 / 4, 0},
			{3, 3<<20/4 + 1, 256 << 10},
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("ranks=%d/elems=%d/chunk=%d", c.ranks, c.elems, c.chunkBytes), func(t *testing.T) {
				checkAllReduce(t, newRing(t, network, c.ranks, c.chunkBytes, nil).rings, "t", c.elems)
			})
		}
	})

	t.Run("concurrent and successive", func(t *testing.T) {
		rings := newRing(t, network, 3, 64, nil).rings
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		const ops = 4
		const n = 333
		for round := range int64(3) {
			var wg sync.WaitGroup
			errs := make(chan error, ops*len(rings))
			results := make([][][]float32, ops)
			for op := range ops {
				results[op] = make([][]float32, len(rings))
				for _, r := range rings {
					d := input(r.Rank()+op, n)
					results[op][r.Rank()] = d
					wg.Go(func() {
						if err := r.AllReduce(ctx, fmt.Sprintf("op%d", op), round, d); err != nil {
							errs <- err
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for op := range ops {
				want := make([]float32, n)
				for r := range rings {
					for i, v := range input(r+op, n) {
						want[i] += v
					}
				}
				for r := range rings {
					for i, v := range results[op][r] {
						if v != want[i] {
							t.Fatalf("round %d op %d rank %d: element %d = %v, want %v", round, op, r, i, v, want[i])
						}
					}
				}
			}
		}
	})

	t.Run("mean and broadcast", func(t *testing.T) {
		rings := newRing(t, network, 3, 0, nil).rings
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		data := [][]float32{{3, 0, -3}, {6, 3, 0}, {0, 3, 3}}
		for _, err := range parallel(rings, func(r *allreduce.Ring) error {
			return r.AllReduceMean(ctx, "mean", 0, data[r.Rank()])
		}) {
			if err != nil {
				t.Fatal(err)
			}
		}
		for r, d := range data {
			if fmt.Sprint(d) != "[3 2 0]" {
				t.Errorf("rank %d: mean = %v, want [3 2 0]", r, d)
			}
		}
		data = [][]float32{{1, 2}, {5, 6}, {7, 8}}
		for _, err := range parallel(rings, func(r *allreduce.Ring) error {
			return r.Broadcast(ctx, "bcast", 0, 1, data[r.Rank()])
		}) {
			if err != nil {
				t.Fatal(err)
			}
		}
		for r, d := range data {
			if fmt.Sprint(d) != "[5 6]" {
				t.Errorf("rank %d: broadcast = %v, want [5 6]", r, d)
			}
		}
	})

	t.Run("busy key", func(t *testing.T) {
		rings := newRing(t, network, 2, 0, nil).rings
		// Two calls of operation ("k", 5) on rank 0 alone: one runs (and
		// waits for rank 1), the other is refused at once.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		results := make(chan error, 2)
		for range 2 {
			go func() { results <- rings[0].AllReduce(ctx, "k", 5, make([]float32, 10)) }()
		}
		select {
		case err := <-results:
			if !errors.Is(err, allreduce.ErrBusy) {
				t.Errorf("two calls with the same key: the first to return gave %v, want ErrBusy", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("two calls with the same key: neither returned ErrBusy")
		}
		cancel()
		if err := <-results; !errors.Is(err, context.Canceled) {
			t.Errorf("the running call, cancelled: %v, want context.Canceled", err)
		}
		checkAllReduce(t, rings, "t", 10) // the ring still works
	})

	t.Run("length mismatch", func(t *testing.T) {
		rings := newRing(t, network, 2, 0, nil).rings
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		errs := parallel(rings, func(r *allreduce.Ring) error {
			return r.AllReduce(ctx, "m", 0, make([]float32, 10+r.Rank()))
		})
		if !errors.Is(errs[0], allreduce.ErrMismatch) && !errors.Is(errs[1], allreduce.ErrMismatch) {
			t.Errorf("different lengths: errors %v, want ErrMismatch", errs)
		}
	})

	t.Run("closed ring", func(t *testing.T) {
		r := newRing(t, network, 2, 0, nil)
		if err := r.rings[1].Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.rings[1].AllReduce(t.Context(), "c", 0, make([]float32, 3)); !errors.Is(err, allreduce.ErrClosed) {
			t.Errorf("AllReduce on a closed ring: %v, want ErrClosed", err)
		}
		if err := r.rings[1].Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})

	t.Run("dead peer", func(t *testing.T) {
		r := newRing(t, network, 3, 0, nil)
		r.kill(2)
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		errs := parallel(r.rings[:2], func(rg *allreduce.Ring) error {
			return rg.AllReduce(ctx, "dead", 0, make([]float32, 1000))
		})
		// Rank 0 waits for the dead rank 2, rank 1 cannot send to it:
		// both name it, within their deadline.
		checkDeadPeer(t, r, errs, ctx)
	})

	t.Run("gone peer is not waited for", func(t *testing.T) {
		// Rank 0 has sent a view to the others, which answered; then
		// rank 2's process exits. The next view sent to it fails at once,
		// not at the deadline (a leader that sent views and "training is
		// over" to ranks that had exited waited its whole deadline on
		// each).
		r := newRing(t, network, 3, 0, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := r.rings[0].SendView(ctx, allreduce.View{Gen: 1, Members: []int{0, 1, 2}}); err != nil {
			t.Fatal(err)
		}
		r.kill(2)
		start := time.Now()
		err := r.rings[0].SendView(ctx, allreduce.View{Gen: 2, Members: []int{0, 1, 2}})
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("sending a view to a rank that has exited took %v; want it to fail at once, not at the deadline", took)
		}
		if err == nil || !strings.Contains(err.Error(), r.describe(2)) {
			t.Errorf("sending a view to a rank that has exited: %v; want an error naming %s", err, r.describe(2))
		}
		if v, ok := r.rings[1].NewestView(); !ok || v.Gen != 2 {
			t.Errorf("rank 1 did not take the view (%v, %v)", v, ok)
		}
	})

	t.Run("peer killed midway", func(t *testing.T) {
		// Rank 2 dies once it has received a chunk and rank 0 has
		// received one from it: streams are then up. Rank 1 sees rank 0
		// give up rather than rank 2 die, yet names rank 2.
		got := make(chan struct{}, 2)
		var once0, once2 sync.Once
		hook := func(rank int, c *allreduce.Chunk) {
			switch {
			case rank == 0 && c.From == 2:
				once0.Do(func() { got <- struct{}{} })
			case rank == 2:
				once2.Do(func() { got <- struct{}{} })
			}
		}
		r := newRing(t, network, 3, 64<<10, hook)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i, rg := range r.rings {
			wg.Go(func() { errs[i] = rg.AllReduce(ctx, "big", 0, make([]float32, 4<<20)) })
		}
		for range 2 {
			select {
			case <-got:
			case <-ctx.Done():
				t.Fatal("no chunk arrived")
			}
		}
		r.kill(2)
		wg.Wait()
		if errs[2] == nil {
			t.Errorf("rank 2 was killed, yet its operation succeeded")
		}
		checkDeadPeer(t, r, errs[:2], ctx)
	})
}

// checkDeadPeer checks that the errors of the surviving ranks (by rank)
// name rank 2, with its task and address, as the dead rank, before ctx's
// deadline.
func checkDeadPeer(t *testing.T, r *ring, errs []error, ctx context.Context) {
	t.Helper()
	// The slack is for goroutines that -race on a loaded machine wakes
	// late; the ring keeps a fifth of the time for its probes.
	deadline, _ := ctx.Deadline()
	if late := time.Since(deadline); late > 300*time.Millisecond {
		t.Errorf("the survivors failed %v after their deadline", late)
	}
	for rank, err := range errs {
		var pe *allreduce.PeerDownError
		if !errors.As(err, &pe) || !errors.Is(err, allreduce.ErrPeerUnreachable) {
			t.Errorf("rank %d: %v, want a PeerDownError", rank, err)
			continue
		}
		if want := r.describe(2); !slices.Equal(pe.Down, []int{2}) || !strings.Contains(err.Error(), want+" is down") {
			t.Errorf("rank %d: down %v, error %q; want rank 2 named as %q", rank, pe.Down, err, want)
		}
	}
}
