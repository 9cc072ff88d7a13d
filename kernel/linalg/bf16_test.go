package linalg_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/distflow/distflow/internal/race"
	"github.com/distflow/distflow/kernel/linalg"
	"github.com/distflow/distflow/kernel/linalg/linalgtest"
)

// roundBF16Ref rounds x to bfloat16 by comparing the two neighbours in
// float64, independently of the bit trick of linalg.RoundBF16.
func roundBF16Ref(x float32) float32 {
	u := math.Float32bits(x)
	switch {
	case x != x:
		return math.Float32frombits((u | 0x00400000) &^ 0xffff)
	case u&0x7f800000 == 0: // zero or subnormal: treated as zero
		return math.Float32frombits(u & 0x80000000)
	case math.IsInf(float64(x), 0):
		return x
	}
	lo := math.Float32frombits(u &^ 0xffff) // toward zero
	hi := math.Float32frombits((u &^ 0xffff) + 0x10000)
	dlo := math.Abs(float64(x) - float64(lo))
	fhi := float64(hi)
	if math.IsInf(fhi, 0) { // past the largest bfloat16: 2^128, as if the exponent went on
		fhi = math.Copysign(0x1p128, fhi)
	}
	dhi := math.Abs(fhi - float64(x))
	switch {
	case dlo < dhi:
		return lo
	case dhi < dlo:
		return hi
	case (u>>16)&1 == 0: // a tie: the even one
		return lo
	}
	return hi
}

func bf16Samples() []float32 {
	xs := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1.00390625, 1.005859375, 1.001953125, 1.005, -2.5,
		3.0e38, 3.4e38, math.MaxFloat32, -math.MaxFloat32, 1e-38, 1.2e-38, 1e-40, -1e-45,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x7f800001), math.Float32frombits(0xff812345), math.Float32frombits(0x3f808000),
		math.Float32frombits(0x3f818000), math.Float32frombits(0x3f807fff), math.Float32frombits(0x3f80ffff),
		math.Float32frombits(0x7f7fffff), math.Float32frombits(0x00800000), math.Float32frombits(0x007fffff)}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		xs = append(xs, math.Float32frombits(rng.Uint32()), float32(rng.NormFloat64()))
	}
	return xs
}

func sameBits(a, b float32) bool {
	if a != a && b != b {
		return math.Float32bits(a) == math.Float32bits(b)
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// TestRoundBF16 holds the portable rounding to an independent reference,
// on every machine.
func TestRoundBF16(t *testing.T) {
	for _, x := range bf16Samples() {
		got, want := linalg.RoundBF16(x), roundBF16Ref(x)
		if !sameBits(got, want) {
			t.Errorf("RoundBF16(%g = %#08x) = %#08x, want %#08x", x, math.Float32bits(x), math.Float32bits(got), math.Float32bits(want))
		}
	}
}

// TestBF16HardwareRounding holds VCVTNE2PS2BF16 (the packing's rounding)
// to the portable one, bit for bit, at every length of a tail.
func TestBF16HardwareRounding(t *testing.T) {
	if why := linalg.BF16Missing(); why != "" || linalg.CvtBF16 == nil {
		t.Skipf("AVX512_BF16 kernels not run: %s", why)
	}
	xs := bf16Samples()
	for _, n := range []int{1, 2, 15, 16, 17, 31, 32, 33, 63, len(xs)} {
		src := xs[len(xs)-n:]
		dst := make([]uint32, (n+1)/2+1)
		dst[len(dst)-1] = 0xdeadbeef
		linalg.CvtBF16(dst, src)
		if dst[len(dst)-1] != 0xdeadbeef {
			t.Fatalf("n=%d: wrote past ceil(n/2) pairs", n)
		}
		for i, x := range src {
			got := uint16(dst[i/2] >> (16 * (i % 2)))
			if want := linalg.BF16Bits(x); got != want {
				t.Errorf("n=%d: x[%d] = %#08x: hardware %#04x, portable %#04x", n, i, math.Float32bits(x), got, want)
			}
		}
		if n%2 == 1 && dst[n/2]>>16 != 0 {
			t.Errorf("n=%d: the odd last pair's high half is %#04x, want 0", n, dst[n/2]>>16)
		}
	}
}

type gemmFunc func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)

// runBF16 checks one case of a bf16 GEMM twice: against the float64
// product of the unrounded operands, within what bf16 operands allow (each
// product off by at most about 2^-8 of itself, plus float32 accumulation),
// and against the float64 product of the operands rounded by RoundBF16,
// within float32 accumulation alone, which shows that the kernel rounds
// to nearest even and nothing else.
func runBF16(t *testing.T, gemm gemmFunc, c linalgtest.Case) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(c.M*1e6+c.N*1e3+c.K), 11))
	uni := func() float32 { return float32(rng.Float64()*2 - 1) }
	mat := func(rows, cols, pad int, fill func() float32) ([]float32, int) {
		ld := max(1, cols+pad)
		if rows == 0 || cols == 0 {
			return nil, ld
		}
		x := make([]float32, (rows-1)*ld+cols)
		for i := range x {
			x[i] = -7777
		}
		for i := range rows {
			for j := range cols {
				x[i*ld+j] = fill()
			}
		}
		return x, ld
	}
	ar, ac := c.M, c.K
	if c.TransA {
		ar, ac = ac, ar
	}
	br, bc := c.K, c.N
	if c.TransB {
		br, bc = bc, br
	}
	a, lda := mat(ar, ac, c.PadA, uni)
	b, ldb := mat(br, bc, c.PadB, uni)
	cfill := uni
	if c.Beta == 0 {
		cfill = func() float32 { return float32(math.NaN()) }
	}
	cm, ldc := mat(c.M, c.N, c.PadC, cfill)
	a0, b0, c0 := append([]float32(nil), a...), append([]float32(nil), b...), append([]float32(nil), cm...)

	gemm(c.TransA, c.TransB, c.M, c.N, c.K, c.Alpha, a, lda, b, ldb, c.Beta, cm, ldc)

	for i := range a {
		if !sameBits(a[i], a0[i]) {
			t.Fatalf("%v: A modified at %d", c, i)
		}
	}
	for i := range b {
		if !sameBits(b[i], b0[i]) {
			t.Fatalf("%v: B modified at %d", c, i)
		}
	}
	opA := func(i, l int) float32 {
		if c.TransA {
			return a[l*lda+i]
		}
		return a[i*lda+l]
	}
	opB := func(l, j int) float32 {
		if c.TransB {
			return b[j*ldb+l]
		}
		return b[l*ldb+j]
	}
	bad := 0
	for i := range c.M {
		for j := range c.N {
			var exact, rounded, mag float64
			if c.Alpha != 0 {
				for l := range c.K {
					x, y := opA(i, l), opB(l, j)
					exact += float64(x) * float64(y)
					rounded += float64(linalg.RoundBF16(x)) * float64(linalg.RoundBF16(y))
					mag += math.Abs(float64(x) * float64(y))
				}
			}
			alpha := float64(c.Alpha)
			mag *= math.Abs(alpha)
			exact, rounded = alpha*exact, alpha*rounded
			if c.Beta != 0 {
				bc := float64(c.Beta) * float64(c0[i*ldc+j])
				exact += bc
				rounded += bc
				mag += math.Abs(bc)
			}
			got := float64(cm[i*ldc+j])
			acc := 2 * float64(c.K+4) * 0x1p-24 * mag
			tolExact := 0x1p-7*mag + acc
			if math.IsNaN(got) || math.Abs(got-exact) > tolExact+1e-30 || math.Abs(got-rounded) > acc+1e-30 {
				if bad < 5 {
					t.Errorf("%v: C[%d,%d] = %g, want %g within %g (bf16 operands: %g within %g)", c, i, j, got, exact, tolExact, rounded, acc)
				}
				bad++
			}
		}
		for j := c.N; c.N > 0 && j < ldc && i < c.M-1; j++ {
			if cm[i*ldc+j] != -7777 {
				t.Fatalf("%v: C padding [%d,%d] overwritten with %g", c, i, j, cm[i*ldc+j])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%v: %d of %d elements wrong", c, bad, c.M*c.N)
	}
}

func bf16Cases() []linalgtest.Case {
	cs := linalgtest.Cases(testing.Short() || race.Enabled)
	// Past the bf16 blocking (kc = 256 values, an odd last block; mc =
	// 160; nc = 4096) and split across the pool.
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		cs = append(cs,
			linalgtest.Case{TransA: tr[0], TransB: tr[1], M: 171, N: 65, K: 515, Alpha: 1, Beta: 0.5, PadA: 1, PadB: 2, PadC: 3},
			linalgtest.Case{TransA: tr[0], TransB: tr[1], M: 11, N: 4100, K: 3, Alpha: -2, Beta: 0},
			// A transposed B's full slivers: 16-pair blocks and an odd rest.
			linalgtest.Case{TransA: tr[0], TransB: tr[1], M: 23, N: 96, K: 45, Alpha: 1, Beta: 0, PadB: 3},
		)
	}
	return cs
}

// TestSgemmBF16 runs the bf16 GEMM on the conformance table: the
// AVX512_BF16 kernels where the CPU has them.
func TestSgemmBF16(t *testing.T) {
	if why := linalg.BF16Missing(); why != "" {
		t.Skipf("AVX512_BF16 kernels not run (SgemmBF16 would take its portable path, tested by TestSgemmBF16Emulated): %s", why)
	}
	for _, c := range bf16Cases() {
		t.Run(c.String(), func(t *testing.T) { runBF16(t, linalg.SgemmBF16, c) })
	}
}

// TestSgemmBF16Emulated runs the portable path on every machine.
func TestSgemmBF16Emulated(t *testing.T) {
	for _, c := range linalgtest.Cases(true) {
		t.Run(c.String(), func(t *testing.T) { runBF16(t, linalg.SgemmBF16Emulated, c) })
	}
}

// TestSetPrecision: BF16 routes Sgemm to the bf16 GEMM where it can run,
// and is refused, naming why, where it cannot.
func TestSetPrecision(t *testing.T) {
	defer linalg.SetPrecision(linalg.Float32)
	for _, s := range []string{"bf16", " BF16", "bfloat16"} {
		if p, err := linalg.ParsePrecision(s); err != nil || p != linalg.BF16 {
			t.Errorf("ParsePrecision(%q) = %v, %v", s, p, err)
		}
	}
	if p, err := linalg.ParsePrecision("float32"); err != nil || p != linalg.Float32 {
		t.Errorf("ParsePrecision(float32) = %v, %v", p, err)
	}
	if _, err := linalg.ParsePrecision("fp8"); err == nil {
		t.Error("ParsePrecision(fp8): no error")
	}
	// 0.1 is not a bfloat16: its products differ between the precisions.
	a, b := []float32{0.1, 0.1}, []float32{0.1, 0.1}
	c := []float32{0}
	err := linalg.SetPrecision(linalg.BF16)
	if why := linalg.BF16Missing(); why != "" {
		if !errors.Is(err, linalg.ErrBF16Unavailable) {
			t.Fatalf("SetPrecision(BF16) without the kernels: err = %v, want ErrBF16Unavailable", err)
		}
		if linalg.CurrentPrecision() != linalg.Float32 {
			t.Fatal("a refused SetPrecision(BF16) changed the precision")
		}
		t.Skipf("routing not checked: %s", why)
	}
	if err != nil || linalg.CurrentPrecision() != linalg.BF16 {
		t.Fatalf("SetPrecision(BF16) = %v, precision %v", err, linalg.CurrentPrecision())
	}
	linalg.Sgemm(false, false, 1, 1, 2, 1, a, 2, b, 1, 0, c, 1)
	r := linalg.RoundBF16(0.1)
	if want := 2 * r * r; c[0] != want {
		t.Errorf("Sgemm at BF16 = %g, want %g", c[0], want)
	}
	if err := linalg.SetPrecision(linalg.Float32); err != nil {
		t.Fatal(err)
	}
	linalg.Sgemm(false, false, 1, 1, 2, 1, a, 2, b, 1, 0, c, 1)
	if want := float32(0.1)*0.1 + float32(0.1)*0.1; math.Abs(float64(c[0]-want)) > 1e-8 {
		t.Errorf("Sgemm at Float32 = %g, want %g", c[0], want)
	}
}

// bf16Backend adapts SgemmBF16 to the benchmarks' Backend.
type bf16Backend struct{}

func (bf16Backend) Name() string { return "bf16" }

func (bf16Backend) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	linalg.SgemmBF16(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// BenchmarkBF16 times the bf16 GEMM against the float32 one of the path in
// use, shape by shape in one run (float32 then bf16 for each shape, so that
// drift on a shared machine touches both alike):
//
//	go test ./kernel/linalg -run '^$' -bench BF16 -count 4
func BenchmarkBF16(b *testing.B) {
	if why := linalg.BF16Missing(); why != "" {
		b.Skipf("no AVX512_BF16 kernels: %s", why)
	}
	f32, _ := linalg.Get(linalg.Path())
	for _, s := range []struct {
		name    string
		ta, tb  bool
		m, n, k int
	}{
		{"n=512", false, false, 512, 512, 512},
		{"n=1024", false, false, 1024, 1024, 1024},
		{"mlp_fwd_100x784x100", false, false, 100, 100, 784},
		{"mlp_dW_784x100x100_TN", true, false, 784, 100, 100},
		{"cnn_fc1_fwd_50x1024x3136", false, false, 50, 1024, 3136},
		{"cnn_fc1_dX_50x3136x1024_NT", false, true, 50, 3136, 1024},
		{"cnn_fc1_dW_3136x1024x50_TN", true, false, 3136, 1024, 50},
	} {
		for _, procs := range []int{0, 1} {
			suffix := ""
			if procs == 1 {
				suffix = "/1core"
			}
			for _, be := range []linalg.Backend{f32, bf16Backend{}} {
				prec := "float32"
				if be.Name() == "bf16" {
					prec = "bf16"
				}
				b.Run(s.name+suffix+"/"+prec, func(b *testing.B) {
					withProcs(procs, func() { benchGemm(b, be, s.ta, s.tb, s.m, s.n, s.k) })
				})
			}
		}
	}
}
