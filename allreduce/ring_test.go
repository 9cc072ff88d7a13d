package allreduce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	// Every rank sends and receives (size-1) segments per phase, and what
	// rank r receives is what rank r-1 sends.
	tests := []struct {
		size, n, chunk int
		gather         bool
		want           string // rank 0's send sequence
	}{
		{2, 4, 4, false, "[{0 2 true} {2 4 false}]"},
		{3, 7, 4, false, "[{0 2 true} {4 7 true} {2 4 false} {0 2 false}]"},
		{3, 7, 2, false, "[{0 2 true} {4 6 true} {6 7 true} {2 4 false} {0 2 false}]"},
		{2, 1, 4, false, "[{0 1 false}]"},
		// An all-gather: rank 0 sends its own segment, then forwards
		// rank 2's and rank 1's.
		{3, 6, 4, true, "[{0 2 false} {4 6 false}]"},
	}
	for _, tc := range tests {
		items, _ := schedule(0, tc.size, tc.n, tc.chunk, tc.gather)
		if got := fmt.Sprint(items); got != tc.want {
			t.Errorf("schedule(0, %d, %d, %d, %v) = %s, want %s", tc.size, tc.n, tc.chunk, tc.gather, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tr := NewMemNetwork(make([]Receiver, 2), 0).Transport(0)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no peers", Config{}, "no peers"},
		{"rank out of range", Config{Rank: 2, Peers: []string{"a:1", "b:1"}}, "rank 2 outside the 2 peers"},
		{"negative rank", Config{Rank: -1, Peers: []string{"a:1"}}, "rank -1"},
		{"empty address", Config{Peers: []string{"a:1", ""}}, "peer 1 has no address"},
		{"duplicate", Config{Peers: []string{"a:1", "a:1"}}, "peers 0 and 1 share"},
		{"chunk", Config{Peers: []string{"a:1"}, ChunkBytes: -4}, "negative chunk size"},
		{"names", Config{Peers: []string{"a:1"}, Names: []string{"x", "y"}}, "2 names for 1 peers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewRing(tc.cfg, tr)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewRing(%+v) = %v, want ErrInvalidConfig with %q", tc.cfg, err, tc.want)
			}
		})
	}
	if _, err := NewRing(Config{Peers: []string{"a:1"}}, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewRing without a transport: %v, want ErrInvalidConfig", err)
	}
}

func TestOneRank(t *testing.T) {
	r, err := NewRing(Config{Peers: []string{"a:1"}}, NewMemNetwork(make([]Receiver, 1), 0).Transport(0))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d := []float32{1}
	if err := r.AllReduce(t.Context(), "x", 0, d); err != nil || d[0] != 1 {
		t.Errorf("one-rank ring: %v, %v", d, err)
	}
}

func TestDeliverRefusesNegativeOffsets(t *testing.T) {
	r, err := NewRing(Config{Peers: []string{"a:1", "b:1"}}, NewMemNetwork(make([]Receiver, 2), 0).Transport(0))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Deliver(&Chunk{Op: Op{Name: "x"}, From: 1, Size: 2, Index: -1}); !errors.Is(err, ErrMismatch) {
		t.Errorf("Deliver of a chunk with index -1: %v, want ErrMismatch", err)
	}
}

// TestNonFiniteValuesAreNamed: a rank whose own tensor holds a NaN refuses
// to send it, and a NaN that arrives in a peer's chunk fails the operation
// with an error naming the rank that sent it.
func TestNonFiniteValuesAreNamed(t *testing.T) {
	rings, err := NewInProcess(2, InProcessConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range rings {
			r.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	own := []float32{1, float32(math.Inf(-1)), 3, 4}
	if err := rings[0].AllReduce(ctx, "own", 0, own); !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "own tensor") {
		t.Errorf("a rank's own infinity: %v; want ErrNonFinite saying it is its own", err)
	}
	injected := &Chunk{Op: Op{Name: "g"}, From: 0, Size: 2, Length: 4, Data: []float32{float32(math.NaN()), 0}}
	if err := rings[1].Deliver(injected); !errors.Is(err, ErrNonFinite) {
		t.Fatalf("Deliver of a NaN: %v; want ErrNonFinite", err)
	}
	err = rings[1].AllReduce(ctx, "g", 0, []float32{1, 2, 3, 4})
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "rank 0") {
		t.Errorf("the operation a NaN was injected into: %v; want ErrNonFinite naming rank 0", err)
	}
}

// TestOwnNonFiniteFailsThePeersAtOnce: a rank whose own tensor holds a
// NaN tells the other members, whose operation fails at once, naming it,
// rather than at their deadline; those that had not started it fail as
// they start it.
func TestOwnNonFiniteFailsThePeersAtOnce(t *testing.T) {
	rings, err := NewInProcess(3, InProcessConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range rings {
			r.Close()
		}
	}()
	const deadline = 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	errs := make(chan error, 1)
	go func() { errs <- rings[0].AllReduce(ctx, "g", 7, []float32{1, 2, 3}) }()
	if err := rings[1].AllReduce(ctx, "g", 7, []float32{1, float32(math.NaN()), 3}); !errors.Is(err, ErrNonFinite) {
		t.Fatalf("the rank with the NaN: %v", err)
	}
	for i, err := range []error{<-errs, rings[2].AllReduce(ctx, "g", 7, []float32{1, 2, 3})} {
		if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "rank 1") {
			t.Errorf("member %d: %v; want ErrNonFinite naming rank 1", []int{0, 2}[i], err)
		}
	}
	if d := time.Since(start); d > deadline/2 {
		t.Errorf("the members failed after %v; want at once, not at their deadline %v", d, deadline)
	}
}

// TestEarlyChunksAreBounded: a peer cannot make a rank keep chunks for
// ever more operations that never start there: over its share, its
// oldest are dropped, not another peer's, and an operation that would
// take the dropped chunks fails when it starts.
func TestEarlyChunksAreBounded(t *testing.T) {
	m := newMailbox()
	chunk := func(from, i int) *Chunk {
		return &Chunk{Op: Op{Name: "g", Round: int64(i)}, From: from, Size: 2, Length: 1, Data: []float32{1}}
	}
	if err := m.deliver(chunk(2, 0)); err != nil { // another peer's, first
		t.Fatal(err)
	}
	const extra = 10
	for i := range maxEarlyOps + extra {
		if err := m.deliver(chunk(1, i)); err != nil {
			t.Fatalf("early operation %d: %v", i, err)
		}
	}
	if pe := m.peers[1]; pe.ops != maxEarlyOps || pe.bytes != 4*maxEarlyOps {
		t.Errorf("rank 1 holds %d early operations, %d bytes; want %d and %d", pe.ops, pe.bytes, maxEarlyOps, 4*maxEarlyOps)
	}
	if err := m.deliver(chunk(1, 0)); !errors.Is(err, ErrMismatch) {
		t.Errorf("a later chunk of a dropped operation: %v; want it refused", err)
	}
	if _, err := m.open(Op{Name: "g", Round: 1}, []int{1}); !errors.Is(err, ErrMismatch) {
		t.Errorf("an operation whose sender's chunks were dropped: %v; want ErrMismatch", err)
	}
	// Rank 2's chunk of operation 0 stays: its operation, which takes
	// rank 2's chunks, runs.
	ib, err := m.open(Op{Name: "g", Round: 0}, []int{2})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := ib.take(t.Context(), 2, 0); err != nil || c.From != 2 {
		t.Errorf("rank 2's chunk: %v, %v", c, err)
	}
	m.finish(Op{Name: "g", Round: 0})
	for i := extra; i < maxEarlyOps+extra; i++ {
		if _, err := m.open(Op{Name: "g", Round: int64(i)}, []int{1}); err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
	}
	for p, pe := range m.peers {
		if pe.ops != 0 || pe.bytes != 0 {
			t.Errorf("rank %d: %d early operations, %d bytes, once every operation started", p, pe.ops, pe.bytes)
		}
	}
}

// TestEarlyChunksExpireWithTheirView: the chunks of operations of a view
// that has not started here are dropped when the ring re-forms.
func TestEarlyChunksExpireWithTheirView(t *testing.T) {
	r, err := NewRing(Config{Rank: 0, Peers: []string{"a", "b", "c"}, Logger: slog.New(slog.DiscardHandler)}, sinkTransport{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	old, _ := r.Among(View{Gen: 3, Members: []int{0, 1, 2}})
	for i := range 10 {
		if err := r.Deliver(&Chunk{Op: old.op("grads", int64(i)), From: 2, Size: 3, Length: 3, Data: []float32{1}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Deliver(&Chunk{Op: Op{Name: "grads", Round: 1}, From: 2, Size: 3, Length: 3, Data: []float32{1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Among(View{Gen: 4, Members: []int{0, 2}}); err != nil {
		t.Fatal(err)
	}
	if pe := r.box.peers[2]; pe.ops != 1 || pe.bytes != 4 {
		t.Errorf("after the ring re-formed, rank 2 holds %d early operations, %d bytes; want the whole ring's one, 4 bytes", pe.ops, pe.bytes)
	}
	if err := r.Deliver(&Chunk{Op: old.op("grads", 0), From: 2, Size: 3, Length: 3, Data: []float32{1}}); err != nil || len(r.box.ops) != 1 {
		t.Errorf("a late chunk of an expired operation: %v, %d operations held; want it dropped", err, len(r.box.ops))
	}
}

// sinkTransport sends nowhere.
type sinkTransport struct{}

func (sinkTransport) Open(ctx context.Context, to int, op Op) (Stream, error) {
	return nil, ErrPeerUnreachable
}
func (sinkTransport) Probe(ctx context.Context, to int) error { return ErrPeerUnreachable }
func (sinkTransport) Close() error                            { return nil }

// TestEveryRankIsToldThatTheRanksDisagree: when one rank's tensor is
// longer than the others', the ranks that find the mismatch tell the
// others, so that every rank fails with ErrMismatch at once, not on its
// deadline (a wait that looks like a slow peer, and fails as one), round
// the ring and through summation servers.
func TestEveryRankIsToldThatTheRanksDisagree(t *testing.T) {
	for _, servers := range []int{0, 1} {
		t.Run(fmt.Sprintf("servers=%d", servers), func(t *testing.T) {
			rings, _ := starRings(t, 3, servers, 8)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for r := range 3 {
				n := 100
				if r == 2 {
					n = 101
				}
				wg.Go(func() { errs[r] = rings[r].AllReduce(ctx, "grads", 0, make([]float32, n)) })
			}
			wg.Wait()
			for r, err := range errs {
				if !errors.Is(err, ErrMismatch) || errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("rank %d: %v; want ErrMismatch", r, err)
				}
			}
		})
	}
}
