package linalg_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/distflow/distflow/kernel/linalg"
)

func randSlice(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%97)/97 - 0.5
	}
	return x
}

func benchGemm(b *testing.B, be linalg.Backend, ta, tb bool, m, n, k int) {
	a, bm, c := randSlice(m*k), randSlice(k*n), randSlice(m*n)
	lda, ldb := k, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	be.Sgemm(ta, tb, m, n, k, 1, a, lda, bm, ldb, 0, c, n) // warm pools
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		be.Sgemm(ta, tb, m, n, k, 1, a, lda, bm, ldb, 0, c, n)
	}
	cpu := cpuTime() - cpu0
	flop := 2 * float64(m) * float64(n) * float64(k) * float64(b.N)
	b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if cpu > 0 && runtime.GOMAXPROCS(0) == 1 {
		// With one processor, the product's CPU time is its run time
		// minus the time other processes had the core.
		b.ReportMetric(flop/cpu.Seconds()/1e9, "cpu-GFLOP/s")
	}
}

// withProcs runs f with GOMAXPROCS set to p (0 keeps the current value).
func withProcs(p int, f func()) {
	if p > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
	}
	f()
}

func BenchmarkSgemm(b *testing.B) {
	for _, name := range linalg.List() {
		be, _ := linalg.Get(name)
		b.Run(name, func(b *testing.B) {
			for _, procs := range []int{0, 1} {
				suffix := ""
				if procs == 1 {
					suffix = "/1core"
				}
				for _, n := range []int{256, 512, 1000, 1024} {
					b.Run(fmt.Sprintf("n=%d%s", n, suffix), func(b *testing.B) {
						withProcs(procs, func() { benchGemm(b, be, false, false, n, n, n) })
					})
				}
				// MLP 784-100-10, batch 100: forward X*W, dW = X^T*dY, dX = dY*W^T.
				for _, s := range []struct {
					name    string
					ta, tb  bool
					m, n, k int
				}{
					{"mlp_fwd_100x784x100", false, false, 100, 100, 784},
					{"mlp_dW_784x100x100_TN", true, false, 784, 100, 100},
					{"mlp_dX_100x100x784_NT", false, true, 100, 784, 100},
					// CNN fc1 3136-1024, batch 50: forward, dX = dY*W^T, dW = X^T*dY.
					{"cnn_fc1_fwd_50x1024x3136", false, false, 50, 1024, 3136},
					{"cnn_fc1_dX_50x3136x1024_NT", false, true, 50, 3136, 1024},
					{"cnn_fc1_dW_3136x1024x50_TN", true, false, 3136, 1024, 50},
				} {
					b.Run(s.name+suffix, func(b *testing.B) {
						withProcs(procs, func() { benchGemm(b, be, s.ta, s.tb, s.m, s.n, s.k) })
					})
				}
			}
		})
	}
}

// BenchmarkConv2D covers the reference CNN's two convolution layers, batch 50.
func BenchmarkConv2D(b *testing.B) {
	layers := []struct {
		name                string
		n, h, w, c, k, cout int
	}{
		{"28x28x1-5x5x32", 50, 28, 28, 1, 5, 32},
		{"14x14x32-5x5x64", 50, 14, 14, 32, 5, 64},
	}
	for _, l := range layers {
		p, err := linalg.NewConvParams(l.n, l.h, l.w, l.c, l.k, l.k, l.cout, 1, 1, true)
		if err != nil {
			b.Fatal(err)
		}
		in := randSlice(p.N * p.H * p.W * p.C)
		f := randSlice(p.KH * p.KW * p.C * p.Cout)
		out := randSlice(p.N * p.OH * p.OW * p.Cout)
		for _, op := range []struct {
			name string
			run  func()
		}{
			{"forward", func() { linalg.Conv2D(p, in, f, out) }},
			{"backprop-input", func() { linalg.Conv2DBackpropInput(p, f, out, in) }},
			{"backprop-filter", func() { linalg.Conv2DBackpropFilter(p, in, out, f) }},
		} {
			for _, procs := range []int{0, 1} {
				suffix := ""
				if procs == 1 {
					suffix = "/1core"
				}
				b.Run(l.name+"/"+op.name+suffix, func(b *testing.B) {
					withProcs(procs, func() {
						op.run()
						b.ResetTimer()
						cpu0 := cpuTime()
						for b.Loop() {
							op.run()
						}
						cpu := cpuTime() - cpu0
						b.ReportMetric(p.FLOPs()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
						if cpu > 0 && procs == 1 {
							b.ReportMetric(p.FLOPs()*float64(b.N)/cpu.Seconds()/1e9, "cpu-GFLOP/s")
						}
					})
				})
			}
		}
	}
}
