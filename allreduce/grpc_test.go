package allreduce

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
)

var quiet = slog.New(slog.DiscardHandler)

// overGRPC starts n rings serving on 127.0.0.1.
func overGRPC(t testing.TB, n, chunkBytes int) []*Ring {
	t.Helper()
	lis := make([]net.Listener, n)
	peers := make([]string, n)
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], peers[i] = l, l.Addr().String()
	}
	rings := make([]*Ring, n)
	for i := range rings {
		r, err := New(Config{Rank: i, Peers: peers, Listener: lis[i], Logger: quiet, ChunkBytes: chunkBytes, Names: taskNames(n)})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		rings[i] = r
		t.Cleanup(func() { r.Close() })
	}
	return rings
}

func TestGRPC(t *testing.T) { runConformance(t, overGRPC, []int{2, 3}) }

func TestConfigValidate(t *testing.T) {
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New(%+v) = %v, want ErrInvalidConfig with %q", tc.cfg, err, tc.want)
			}
		})
	}
}

func TestNotStarted(t *testing.T) {
	r, err := New(Config{Peers: []string{"127.0.0.1:0"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.AllReduce(t.Context(), "x", 0, []float32{1}); !errors.Is(err, ErrNotStarted) {
		t.Errorf("AllReduce before Start: %v, want ErrNotStarted", err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	d := []float32{1}
	if err := r.AllReduce(t.Context(), "x", 0, d); err != nil || d[0] != 1 {
		t.Errorf("one-rank ring: %v, %v", d, err)
	}
}

func benchmarkAllReduce(b *testing.B, n int) {
	rings := overGRPC(b, 2, 0)
	ctx := b.Context()
	data := [][]float32{make([]float32, n), make([]float32, n)}
	b.SetBytes(int64(4 * n))
	b.ResetTimer()
	for i := range b.N {
		errs := parallel(rings, func(r *Ring) error {
			return r.AllReduce(ctx, "bench", int64(i), data[r.Rank()])
		})
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAllReduceGRPC measures the bytes of tensor all-reduced per
// second by 2 ranks over loopback gRPC.
func BenchmarkAllReduceGRPC1MiB(b *testing.B)  { benchmarkAllReduce(b, 1<<20/4) }
func BenchmarkAllReduceGRPC64MiB(b *testing.B) { benchmarkAllReduce(b, 64<<20/4) }
