package allreduce

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"
)

// watched is rank 0's Receiver, which tells the test when a chunk of an
// operation arrives from rank 2, whether rank 0 takes it or not.
type watched struct {
	*Ring
	mu   sync.Mutex
	seen map[Op]chan struct{}
}

func (w *watched) arrived(op Op) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.seen[op]
	if c == nil {
		c = make(chan struct{})
		w.seen[op] = c
	}
	return c
}

func (w *watched) Deliver(c *Chunk) error {
	err := w.Ring.Deliver(c)
	if c.From == 2 && c.Index == 0 && c.Size > 0 {
		ch := w.arrived(c.Op)
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	return err
}

// TestHostileMemberCannotStallTheRing: a member (rank 1) that sends rank 0
// malformed chunks, non-finite ones, chunks of ever more operations that
// never start, and chunks of the ring's next operations that are not its
// to send, does not stop the ring from completing those operations, even
// when the chunks of rank 0's true sender (rank 2) arrive before rank 0
// starts them; and rank 0 keeps a bounded share for rank 1.
func TestHostileMemberCannotStallTheRing(t *testing.T) {
	const n = 3
	quiet := slog.New(slog.DiscardHandler)
	net := NewMemNetwork(make([]Receiver, n), 0)
	peers := []string{"memory:0", "memory:1", "memory:2"}
	rings := make([]*Ring, n)
	for i := range rings {
		r, err := NewRing(Config{Rank: i, Peers: peers, ChunkBytes: 16, Logger: quiet}, net.Transport(i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		rings[i] = r
		net.recv[i] = r
	}
	w := &watched{Ring: rings[0], seen: map[Op]chan struct{}{}}
	net.recv[0] = w

	const rounds = 5
	const length = 24
	poison := func() {
		for i := range 300 {
			w.Deliver(&Chunk{Op: Op{Name: fmt.Sprintf("neg%d", i)}, From: 1, Size: n, Index: -1, Length: 1, Data: []float32{1}})
			w.Deliver(&Chunk{Op: Op{Name: fmt.Sprintf("nan%d", i)}, From: 1, Size: n, Length: 1, Data: []float32{float32(math.NaN())}})
		}
		for i := range 1000 {
			w.Deliver(&Chunk{Op: Op{Name: fmt.Sprintf("never%d", i)}, From: 1, Size: n, Length: 1, Data: []float32{1}})
		}
		// Chunks of the next operations, which rank 0 takes from rank 2.
		for round := range int64(rounds) {
			for k := range 8 {
				w.Deliver(&Chunk{Op: Op{Name: "grads", Round: round}, From: 1, Size: n, Index: k, Length: length, Offset: 0, Data: []float32{1e9, 1e9, 1e9, 1e9}})
			}
		}
	}
	poison()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for round := range int64(rounds) {
		data := make([][]float32, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := func(r int) {
			data[r] = make([]float32, length)
			for i := range data[r] {
				data[r][i] = float32(r + 1)
			}
			wg.Go(func() { errs[r] = rings[r].AllReduce(ctx, "grads", round, data[r]) })
		}
		start(1)
		start(2)
		// Rank 0 starts once rank 2's first chunk has come: it is early.
		select {
		case <-w.arrived(Op{Name: "grads", Round: round}):
		case <-ctx.Done():
			t.Fatalf("round %d: rank 2's first chunk did not come", round)
		}
		start(0)
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("round %d: rank %d: %v", round, r, err)
			}
			for i, v := range data[r] {
				if v != 6 {
					t.Fatalf("round %d: rank %d: element %d is %v; want 6", round, r, i, v)
				}
			}
		}
		poison() // again, between operations
	}
	rings[0].box.mu.Lock()
	defer rings[0].box.mu.Unlock()
	if pe := rings[0].box.peers[1]; pe == nil || pe.ops > maxEarlyOps {
		t.Errorf("rank 0 keeps %v early operations of rank 1; want at most %d", pe, maxEarlyOps)
	}
	if got := len(rings[0].box.ops); got > maxEarlyOps+1 {
		t.Errorf("rank 0 holds %d operations; want at most %d", got, maxEarlyOps+1)
	}
}
