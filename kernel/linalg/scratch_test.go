package linalg

import (
	"math/bits"
	"runtime"
	"testing"
)

func TestScratch(t *testing.T) {
	for _, tc := range []struct {
		n, wantCap int
	}{
		{0, 1},
		{1, 1},
		{2, 2},
		{3, 4},
		{51200, 65536},
		{1 << 20, 1 << 20},
		{1<<20 + 1, 1 << 21},
		{1<<scratchMaxClass + 1, 1 << (scratchMaxClass + 1)}, // not kept
	} {
		bp := getScratch(tc.n)
		if len(*bp) != tc.n || cap(*bp) != tc.wantCap {
			t.Errorf("getScratch(%d): len %d cap %d, want len %d cap %d", tc.n, len(*bp), cap(*bp), tc.n, tc.wantCap)
		}
		putScratch(bp)
		again := getScratch(tc.n)
		kept := bits.Len(uint(tc.wantCap))-1 <= scratchMaxClass
		if (again == bp) != kept {
			t.Errorf("getScratch(%d) after putScratch: same buffer %v, want %v", tc.n, again == bp, kept)
		}
		putScratch(again)
	}
}

// TestScratchBounded checks that a free list keeps at most scratchKeep
// buffers of a class.
func TestScratchBounded(t *testing.T) {
	const n = 1000
	var bufs []*[]float32
	for range scratchKeep + 3 {
		bufs = append(bufs, getScratch(n))
	}
	for _, bp := range bufs {
		putScratch(bp)
	}
	s := &scratch[bits.Len(uint(n-1))]
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.free) != scratchKeep {
		t.Errorf("free list of class %d holds %d buffers, want %d", bits.Len(uint(n-1)), len(s.free), scratchKeep)
	}
}

// TestConvScratchReused checks that convolutions reuse their scratch
// buffers across garbage collections (a sync.Pool is emptied by them) and
// across layers of different sizes.
func TestConvScratchReused(t *testing.T) {
	be, ok := Get(Path())
	if !ok || convKernelOf(be) == nil {
		t.Skip("no implicit-GEMM convolution on this machine")
	}
	type layer struct {
		p          ConvParams
		in, f, out []float32
	}
	var layers []layer
	for _, l := range [][4]int{{28, 28, 1, 32}, {14, 14, 32, 64}} {
		p, err := NewConvParams(4, l[0], l[1], l[2], 5, 5, l[3], 1, 1, true)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, layer{p, make([]float32, p.N*p.H*p.W*p.C),
			make([]float32, p.KH*p.KW*p.C*p.Cout), make([]float32, p.N*p.OH*p.OW*p.Cout)})
	}
	step := func() {
		for _, l := range layers {
			conv2D(be, l.p, l.in, l.f, l.out)
			conv2DBackpropFilter(be, l.p, l.in, l.out, l.f)
			conv2DBackpropInput(be, l.p, l.f, l.out, l.in)
		}
	}
	// Warm up: how many buffers a step holds at once depends on how its
	// parallel parts happened to be scheduled.
	for range 5 {
		step()
	}
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 3 {
		step()
	}
	runtime.ReadMemStats(&after)
	// Closures and parallel jobs take a few hundred bytes a step; the
	// scratch buffers of the second layer alone are 9 MiB (padded copies of
	// 1M and 518K values, 400 KiB of partial sums per part).
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<10 {
		t.Errorf("3 convolution steps after two garbage collections allocated %d bytes, want at most 256 KiB", got)
	}
}

// TestGemmWorkspaceReused checks that products reuse their packing
// workspaces across garbage collections, which empty a sync.Pool.
func TestGemmWorkspaceReused(t *testing.T) {
	be, ok := Get("avx2")
	if !ok {
		be, _ = Get("generic")
	}
	// The reference CNN's fc1 forward product at batch 50: 4 MiB of packed
	// panels per part.
	m, n, k := 50, 1024, 3136
	a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	for range 3 {
		be.Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
	}
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 3 {
		be.Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Errorf("3 products of %dx%dx%d after two garbage collections allocated %d bytes, want at most 64 KiB", m, n, k, got)
	}
}
