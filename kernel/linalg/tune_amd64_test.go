//go:build !purego

package linalg

import (
	"fmt"
	"strconv"
	"testing"
)

// Benchmarks for tuning the amd64 kernels: the micro-kernels alone, and
// the avx512 tile's blocking. BenchmarkSgemm (bench_test.go) is the one
// that measures what users get.

// BenchmarkMicro times the micro-kernels alone on operands that stay in
// L1: the ceiling that blocking and packing can approach.
func BenchmarkMicro(b *testing.B) {
	for _, kn := range []struct {
		name string
		k    *kernel[float32]
	}{{"avx2", &avx2F32}, {"avx512", &avx512F32}} {
		if _, ok := Get(kn.name); !ok {
			continue
		}
		for _, kc := range []int{64, 128, 256} {
			b.Run(kn.name+"/kc="+strconv.Itoa(kc), func(b *testing.B) {
				mr, nr := kn.k.mr, kn.k.nr
				ap, bp, c := make([]float32, mr*kc), make([]float32, nr*kc), make([]float32, mr*nr)
				for b.Loop() {
					kn.k.micro(kc, ap, bp, c, nr, 0)
				}
				b.ReportMetric(2*float64(mr*nr*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkBlocking runs a 1024^3 product on one core with the avx512
// tile under several cache blockings (mc in tiles of avx512MR rows).
func BenchmarkBlocking(b *testing.B) {
	if _, ok := Get("avx512"); !ok {
		b.Skip("no avx512")
	}
	const n = 1024
	a, bm, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], bm[i] = float32(i%97)/97, float32(i%89)/89
	}
	for _, cfg := range []struct{ kc, mc, nc int }{
		{128, 16, 4096}, {256, 8, 4096}, {256, 16, 4096}, {256, 32, 4096}, {384, 8, 4096}, {256, 16, 512},
	} {
		kn := avx512F32
		kn.kc, kn.mc, kn.nc = cfg.kc, cfg.mc*avx512MR, cfg.nc
		var pool wsPool[float32]
		b.Run(fmt.Sprintf("kc=%d/mc=%d/nc=%d", kn.kc, kn.mc, kn.nc), func(b *testing.B) {
			for b.Loop() {
				gemm(&kn, &pool, false, false, n, n, n, 1, a, n, bm, n, 0, c, n)
			}
			b.ReportMetric(2*float64(n*n*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkMicroMacro runs the micro-kernel as macro does: one B sliver
// past the A slivers of an mc x kc block, into C with row stride ldc.
func BenchmarkMicroMacro(b *testing.B) {
	for _, kn := range []struct {
		name string
		k    *kernel[float32]
	}{{"avx2", &avx2F32}, {"avx512", &avx512F32}} {
		for _, ldc := range []int{0, 1000, 1024} {
			for _, kc := range []int{128, 256} {
				b.Run(kn.name+"/kc="+strconv.Itoa(kc)+"/ldc="+strconv.Itoa(ldc), func(b *testing.B) {
					mr, nr, mc := kn.k.mr, kn.k.nr, kn.k.mc
					ld := max(ldc, nr)
					ap, bp, c := make([]float32, mc*kc), make([]float32, nr*kc), make([]float32, mc*ld)
					for b.Loop() {
						for ir := 0; ir+mr <= mc; ir += mr {
							kn.k.micro(kc, ap[ir*kc:], bp, c[ir*ld:], ld, 0)
						}
					}
					b.ReportMetric(2*float64(mc/mr*mr*nr*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}
