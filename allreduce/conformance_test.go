package allreduce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// makeRings starts a connected ring of n ranks with the given chunk size
// and registers its closing with t.
type makeRings func(t testing.TB, n, chunkBytes int) []*Ring

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
func parallel(rings []*Ring, f func(r *Ring) error) []error {
	errs := make([]error, len(rings))
	var wg sync.WaitGroup
	for i, r := range rings {
		wg.Go(func() { errs[i] = f(r) })
	}
	wg.Wait()
	return errs
}

func checkAllReduce(t *testing.T, rings []*Ring, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	data := make([][]float32, len(rings))
	for i := range rings {
		data[i] = input(i, n)
	}
	for i, err := range parallel(rings, func(r *Ring) error {
		return r.AllReduce(ctx, "t", 1, data[r.Rank()])
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

// runConformance is the suite that every transport passes.
func runConformance(t *testing.T, mk makeRings, sizes []int) {
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
		}
		for _, n := range sizes {
			cases = append(cases, struct{ ranks, elems, chunkBytes int }{n, 3 << 20 / 4, 0}, struct{ ranks, elems, chunkBytes int }{n, 3<<20/4 + 1, 256 << 10})
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("ranks=%d/elems=%d/chunk=%d", c.ranks, c.elems, c.chunkBytes), func(t *testing.T) {
				checkAllReduce(t, mk(t, c.ranks, c.chunkBytes), c.elems)
			})
		}
	})

	t.Run("concurrent and successive", func(t *testing.T) {
		rings := mk(t, 3, 64)
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
		rings := mk(t, 3, 0)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		data := [][]float32{{3, 0, -3}, {6, 3, 0}, {0, 3, 3}}
		for _, err := range parallel(rings, func(r *Ring) error {
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
		for _, err := range parallel(rings, func(r *Ring) error {
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
		rings := mk(t, 2, 0)
		// An operation with key ("k", 5) is running on rank 0.
		key := opKey{name: "k", round: 5}
		if _, err := rings[0].box.open(key); err != nil {
			t.Fatal(err)
		}
		err := rings[0].AllReduce(t.Context(), "k", 5, make([]float32, 10))
		if !errors.Is(err, ErrBusy) {
			t.Errorf("second call with the same key: %v, want ErrBusy", err)
		}
		rings[0].box.finish(key)
		checkAllReduce(t, rings, 10) // the ring still works
	})

	t.Run("length mismatch", func(t *testing.T) {
		rings := mk(t, 2, 0)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		errs := parallel(rings, func(r *Ring) error {
			return r.AllReduce(ctx, "m", 0, make([]float32, 10+r.Rank()))
		})
		if !errors.Is(errs[0], ErrMismatch) && !errors.Is(errs[1], ErrMismatch) {
			t.Errorf("different lengths: errors %v, want ErrMismatch", errs)
		}
	})

	t.Run("dead peer", func(t *testing.T) {
		rings := mk(t, 3, 0)
		if err := rings[2].Close(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		errs := parallel(rings[:2], func(r *Ring) error {
			return r.AllReduce(ctx, "dead", 0, make([]float32, 1000))
		})
		// Rank 0 waits for the dead rank 2, rank 1 cannot send to it:
		// both name it, within their deadline.
		checkDeadPeer(t, rings, errs, ctx)
		if err := rings[2].AllReduce(ctx, "dead", 0, nil); !errors.Is(err, ErrClosed) {
			t.Errorf("closed ring: %v, want ErrClosed", err)
		}
	})

	t.Run("peer killed midway", func(t *testing.T) {
		// Rank 2 dies once it has taken in its first chunk and rank 0 has
		// taken one from it: every stream is then up. Rank 1 sees rank 0
		// give up rather than rank 2 die, yet names rank 2.
		rings := mk(t, 3, 64<<10)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		got := make(chan struct{}, 2)
		var once0, once2 sync.Once
		rings[0].testReceived = func(opKey, int) { once0.Do(func() { got <- struct{}{} }) }
		rings[2].testReceived = func(opKey, int) { once2.Do(func() { got <- struct{}{} }) }
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i, r := range rings {
			wg.Go(func() { errs[i] = r.AllReduce(ctx, "big", 0, make([]float32, 4<<20)) })
		}
		<-got
		<-got
		rings[2].Close()
		wg.Wait()
		if !errors.Is(errs[2], ErrClosed) {
			t.Errorf("rank 2: %v, want ErrClosed", errs[2])
		}
		checkDeadPeer(t, rings, errs[:2], ctx)
	})
}

// taskNames names n ranks' tasks as a cluster's workers.
func taskNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("/job:worker/task:%d", i)
	}
	return names
}

// checkDeadPeer checks that the errors of the surviving ranks (by rank)
// name rank 2, with its task and address, as the dead rank, before ctx's
// deadline.
func checkDeadPeer(t *testing.T, rings []*Ring, errs []error, ctx context.Context) {
	t.Helper()
	// The slack is for goroutines that -race on a loaded machine wakes
	// late; the ring keeps a fifth of the time for its probes.
	deadline, _ := ctx.Deadline()
	if late := time.Since(deadline); late > 300*time.Millisecond {
		t.Errorf("the survivors failed %v after their deadline", late)
	}
	for rank, err := range errs {
		var pe *PeerDownError
		if !errors.As(err, &pe) || !errors.Is(err, ErrPeerUnreachable) {
			t.Errorf("rank %d: %v, want a PeerDownError", rank, err)
			continue
		}
		if want := rings[rank].peer(2); !slices.Equal(pe.Down, []int{2}) || !strings.Contains(err.Error(), want+" is down") {
			t.Errorf("rank %d: down %v, error %q; want rank 2 named as %q", rank, pe.Down, err, want)
		}
	}
}

func TestSchedule(t *testing.T) {
	// Every rank sends and receives (size-1) segments per phase, and what
	// rank r receives is what rank r-1 sends.
	tests := []struct {
		size, n, chunk int
		want           string // rank 0's send sequence
	}{
		{2, 4, 4, "[{0 2 true} {2 4 false}]"},
		{3, 7, 4, "[{0 2 true} {4 7 true} {2 4 false} {0 2 false}]"},
		{3, 7, 2, "[{0 2 true} {4 6 true} {6 7 true} {2 4 false} {0 2 false}]"},
		{2, 1, 4, "[{0 0 true} {0 1 false}]"[:0] + "[{0 1 false}]"},
	}
	for _, tc := range tests {
		items, _ := schedule(0, tc.size, tc.n, tc.chunk)
		if got := fmt.Sprint(items); got != tc.want {
			t.Errorf("schedule(0, %d, %d, %d) = %s, want %s", tc.size, tc.n, tc.chunk, got, tc.want)
		}
	}
}
