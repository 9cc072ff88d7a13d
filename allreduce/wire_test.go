package allreduce

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingReceiver counts the payload bytes delivered to a rank.
type countingReceiver struct {
	*Ring
	bytes *atomic.Int64
}

func (c countingReceiver) Deliver(ch *Chunk) error {
	c.bytes.Add(4 * int64(len(ch.Data)))
	return c.Ring.Deliver(ch)
}

// countedRings is NewInProcess with every delivered byte counted.
func countedRings(t *testing.T, n, chunkBytes int) ([]*Ring, *atomic.Int64) {
	t.Helper()
	var bytes atomic.Int64
	recv := make([]Receiver, n)
	net := NewMemNetwork(recv, 0)
	peers := make([]string, n)
	for i := range peers {
		peers[i] = fmt.Sprintf("memory:%d", i)
	}
	rings := make([]*Ring, n)
	for i := range rings {
		r, err := NewRing(Config{Rank: i, Peers: peers, ChunkBytes: chunkBytes}, net.Transport(i))
		if err != nil {
			t.Fatal(err)
		}
		rings[i] = r
		recv[i] = countingReceiver{r, &bytes}
	}
	t.Cleanup(func() {
		for _, r := range rings {
			r.Close()
		}
	})
	return rings, &bytes
}

// onAll runs f on every rank at once and returns the ranks' errors.
func onAll(rings []*Ring, f func(rank int, r *Ring) error) []error {
	errs := make([]error, len(rings))
	var wg sync.WaitGroup
	for i, r := range rings {
		wg.Go(func() { errs[i] = f(i, r) })
	}
	wg.Wait()
	return errs
}

// TestAllReduceWire: a 16-bit wire gives every rank the same sum, within
// the format's rounding of each hop's partial sum, for odd lengths and
// several chunks per segment (of 26 elements), and sends half the bytes of float32.
func TestAllReduceWire(t *testing.T) {
	const ranks, n = 3, 1001 // segments of 333-334 elements, chunks of 26
	for _, w := range []Wire{Float32, Float16, BFloat16} {
		t.Run(w.String(), func(t *testing.T) {
			rings, bytes := countedRings(t, ranks, 104)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			data := make([][]float32, ranks)
			exact := make([]float64, n)
			for r := range data {
				data[r] = make([]float32, n)
				for i := range data[r] {
					v := float32(math.Sin(float64(i*(r+1)))) * 0.1
					data[r][i] = v
					exact[i] += float64(v)
				}
			}
			for r, err := range onAll(rings, func(r int, ring *Ring) error {
				return ring.AllReduceWire(ctx, "g", 1, data[r], w)
			}) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			// Each of N-1 hops and the result round once, relative to
			// values of at most N*0.1.
			tol := map[Wire]float64{Float32: 1e-6, Float16: ranks * ranks * 0.1 * 0x1p-11, BFloat16: ranks * ranks * 0.1 * 0x1p-8}[w]
			for i := range n {
				for r := 1; r < ranks; r++ {
					if math.Float32bits(data[r][i]) != math.Float32bits(data[0][i]) {
						t.Fatalf("element %d: rank %d has %v, rank 0 %v: not bit-identical", i, r, data[r][i], data[0][i])
					}
				}
				if d := math.Abs(float64(data[0][i]) - exact[i]); d > tol {
					t.Fatalf("element %d: %v, exact %v: error %g beyond %g", i, data[0][i], exact[i], d, tol)
				}
			}
			// Each rank receives 2(N-1)/N of the tensor: 4 bytes an
			// element in float32, 2 (plus a padding half per odd chunk)
			// on a 16-bit wire.
			want := int64(2 * (ranks - 1) * n * 4)
			if w != Float32 {
				want /= 2
			}
			t.Logf("%v: %d bytes delivered to the 3 ranks", w, bytes.Load())
			if got := bytes.Load(); got < want || float64(got) > float64(want)*1.02 {
				t.Errorf("%d bytes delivered, want about %d", got, want)
			}
		})
	}
}

func TestAllReduceWireFloat16Overflow(t *testing.T) {
	rings, _ := countedRings(t, 2, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	errs := onAll(rings, func(r int, ring *Ring) error {
		return ring.AllReduceWire(ctx, "g", 1, []float32{1, 40000, 3, 4}, Float16)
	})
	// 40000 fits float16; the sum 80000 that rank 1 then sends does not.
	var named bool
	for _, err := range errs {
		if errors.Is(err, ErrNonFinite) && strings.Contains(err.Error(), "bfloat16") {
			named = true
		}
	}
	if !named {
		t.Errorf("a float16 partial sum past 65504: %v; want ErrNonFinite suggesting bfloat16", errs)
	}
}

func TestAllReduceWireMismatch(t *testing.T) {
	rings, _ := countedRings(t, 2, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	errs := onAll(rings, func(r int, ring *Ring) error {
		return ring.AllReduceWire(ctx, "g", 1, []float32{1, 2, 3, 4, 5, 6}, Wire(r)) // float32 and float16
	})
	if !errors.Is(errs[0], ErrMismatch) && !errors.Is(errs[1], ErrMismatch) {
		t.Errorf("ranks on different wires: %v; want ErrMismatch", errs)
	}
}

// TestAllGather: every rank ends with every rank's segment, bit for bit
// (the values are integers' bits, as sparse indices travel), having
// received (N-1)/N of the tensor.
func TestAllGather(t *testing.T) {
	const ranks, seg = 3, 50
	rings, bytes := countedRings(t, ranks, 64)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	data := make([][]float32, ranks)
	for r := range data {
		data[r] = make([]float32, ranks*seg)
		for i := range seg {
			data[r][r*seg+i] = math.Float32frombits(uint32(r*1000 + i))
		}
	}
	for r, err := range onAll(rings, func(r int, ring *Ring) error { return ring.AllGather(ctx, "idx", 1, data[r]) }) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range ranks {
		for i, v := range data[r] {
			if want := uint32((i/seg)*1000 + i%seg); math.Float32bits(v) != want {
				t.Fatalf("rank %d element %d: %#x, want %#x", r, i, math.Float32bits(v), want)
			}
		}
	}
	if got, want := bytes.Load(), int64(ranks*(ranks-1)*seg*4); got != want {
		t.Errorf("%d bytes delivered, want %d", got, want)
	}
	if err := rings[0].AllGather(ctx, "odd", 1, make([]float32, 7)); err == nil || !strings.Contains(err.Error(), "equal segments") {
		t.Errorf("an all-gather of 7 values on 3 ranks: %v", err)
	}
}

func BenchmarkAllReduceWire(b *testing.B) {
	for _, w := range []Wire{Float32, Float16} {
		b.Run(w.String(), func(b *testing.B) {
			rings, err := NewInProcess(2, InProcessConfig{})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, r := range rings {
					r.Close()
				}
			}()
			data := [][]float32{make([]float32, 1<<18), make([]float32, 1<<18)}
			b.SetBytes(4 << 18)
			round := int64(0)
			for b.Loop() {
				round++
				for _, err := range onAll(rings, func(r int, ring *Ring) error {
					return ring.AllReduceWire(b.Context(), "g", round, data[r], w)
				}) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
