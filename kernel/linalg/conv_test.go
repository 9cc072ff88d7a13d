package linalg

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestNewConvParams(t *testing.T) {
	for _, tc := range []struct {
		h, w, kh, kw, sh, sw int
		same                 bool
		oh, ow, pt, pl       int
	}{
		{28, 28, 5, 5, 1, 1, true, 28, 28, 2, 2},
		{14, 14, 5, 5, 1, 1, true, 14, 14, 2, 2},
		{7, 7, 3, 3, 2, 2, true, 4, 4, 1, 1},
		{8, 8, 3, 3, 2, 2, true, 4, 4, 0, 0}, // pad_total 1: all at the bottom
		{5, 6, 2, 2, 2, 2, true, 3, 3, 0, 0},
		{28, 28, 5, 5, 1, 1, false, 24, 24, 0, 0},
		{7, 8, 3, 3, 2, 2, false, 3, 3, 0, 0},
		{1, 1, 1, 1, 1, 1, false, 1, 1, 0, 0},
	} {
		p, err := NewConvParams(1, tc.h, tc.w, 1, tc.kh, tc.kw, 1, tc.sh, tc.sw, tc.same)
		if err != nil || p.OH != tc.oh || p.OW != tc.ow || p.PadTop != tc.pt || p.PadLeft != tc.pl {
			t.Errorf("%+v: got %+v, %v", tc, p, err)
		}
	}
	if _, err := NewConvParams(1, 3, 3, 1, 5, 5, 1, 1, 1, false); !errors.Is(err, ErrConvParams) {
		t.Errorf("VALID filter larger than input: err = %v", err)
	}
	if _, err := NewConvParams(1, 3, 3, 1, 1, 1, 1, 0, 1, true); !errors.Is(err, ErrConvParams) {
		t.Errorf("zero stride: err = %v", err)
	}
}

// Direct-loop references, in float64.
func refConv(p ConvParams, in, f []float32) []float64 {
	out := make([]float64, p.N*p.OH*p.OW*p.Cout)
	p.each(func(n, oh, ow, kh, kw, ih, iw int) {
		for c := range p.C {
			x := float64(in[((n*p.H+ih)*p.W+iw)*p.C+c])
			for o := range p.Cout {
				out[((n*p.OH+oh)*p.OW+ow)*p.Cout+o] += x * float64(f[((kh*p.KW+kw)*p.C+c)*p.Cout+o])
			}
		}
	})
	return out
}

func refBackpropInput(p ConvParams, f, dOut []float32) []float64 {
	dIn := make([]float64, p.N*p.H*p.W*p.C)
	p.each(func(n, oh, ow, kh, kw, ih, iw int) {
		for c := range p.C {
			for o := range p.Cout {
				dIn[((n*p.H+ih)*p.W+iw)*p.C+c] += float64(dOut[((n*p.OH+oh)*p.OW+ow)*p.Cout+o]) * float64(f[((kh*p.KW+kw)*p.C+c)*p.Cout+o])
			}
		}
	})
	return dIn
}

func refBackpropFilter(p ConvParams, in, dOut []float32) []float64 {
	dF := make([]float64, p.KH*p.KW*p.C*p.Cout)
	p.each(func(n, oh, ow, kh, kw, ih, iw int) {
		for c := range p.C {
			for o := range p.Cout {
				dF[((kh*p.KW+kw)*p.C+c)*p.Cout+o] += float64(in[((n*p.H+ih)*p.W+iw)*p.C+c]) * float64(dOut[((n*p.OH+oh)*p.OW+ow)*p.Cout+o])
			}
		}
	})
	return dF
}

// each visits every (output position, filter tap) pair that reads a real
// (non-padding) input element.
func (p ConvParams) each(f func(n, oh, ow, kh, kw, ih, iw int)) {
	for n := range p.N {
		for oh := range p.OH {
			for ow := range p.OW {
				for kh := range p.KH {
					for kw := range p.KW {
						ih, iw := oh*p.StrideH-p.PadTop+kh, ow*p.StrideW-p.PadLeft+kw
						if ih >= 0 && ih < p.H && iw >= 0 && iw < p.W {
							f(n, oh, ow, kh, kw, ih, iw)
						}
					}
				}
			}
		}
	}
}

func randF32(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.Float64()*2 - 1)
	}
	return x
}

func nanF32(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.NaN())
	}
	return x
}

func compare(t *testing.T, what string, got []float32, want []float64, k int) {
	t.Helper()
	tol := 1e-6 * float64(k+8)
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= tol*(1+math.Abs(want[i]))) {
			t.Fatalf("%s[%d] = %g, want %g", what, i, got[i], want[i])
		}
	}
}

func dot32(x, y []float32) float64 {
	var s float64
	for i := range x {
		s += float64(x[i]) * float64(y[i])
	}
	return s
}

type convCase struct {
	n, h, w, c, kh, kw, cout, sh, sw int
	same                             bool
}

var convCases = []convCase{
	{1, 5, 5, 1, 3, 3, 1, 1, 1, true},
	{1, 5, 5, 1, 3, 3, 1, 1, 1, false},
	{3, 7, 6, 2, 3, 3, 4, 2, 2, true},
	{3, 7, 6, 2, 3, 3, 4, 2, 2, false},
	{2, 8, 8, 3, 3, 3, 5, 2, 2, true},
	{1, 9, 7, 1, 5, 5, 32, 1, 1, true},
	{3, 9, 9, 4, 5, 5, 1, 1, 2, true},
	{3, 11, 13, 3, 2, 4, 7, 2, 1, false},
	{2, 6, 6, 5, 1, 1, 3, 1, 1, true},  // pointwise
	{2, 6, 6, 5, 1, 1, 3, 2, 2, false}, // strided 1x1
	{1, 3, 3, 2, 5, 5, 2, 1, 1, true},  // filter wider than the image
	{3, 14, 14, 8, 5, 5, 16, 1, 1, true},
	{3, 28, 28, 1, 5, 5, 32, 1, 1, true},
	// Enough input channels for the implicit-GEMM input gradient (avx2):
	// partial row tiles and column slivers, an even filter (SAME pads one
	// more row below), VALID, and a strided layer that falls back to col2im.
	{2, 9, 7, 16, 5, 5, 20, 1, 1, true},
	{2, 8, 7, 16, 4, 2, 5, 1, 1, true},
	{2, 6, 5, 17, 3, 2, 33, 1, 1, false},
	{2, 9, 9, 16, 3, 3, 16, 2, 2, true},
	{2, 14, 14, 32, 5, 5, 64, 1, 1, true}, // the reference CNN's second layer
	// Around the avx512 path's 10x32 tiles: column slivers one short of
	// and one past 32 and 64, rows (output positions, filter taps) that
	// leave partial row tiles, and input gradients 31 and 33 channels wide.
	{1, 3, 7, 16, 3, 3, 31, 1, 1, true},
	{3, 5, 5, 31, 3, 3, 33, 1, 1, false},
	{2, 7, 3, 33, 2, 3, 65, 1, 1, true},
	{1, 11, 9, 16, 3, 2, 63, 1, 1, false},
	{2, 6, 7, 3, 3, 3, 40, 2, 1, true},
}

// TestConv checks the three passes of every backend against float64
// references: the built-in SIMD paths (each with its own implicit-GEMM
// tile), skipped by name where the CPU or build lacks one, and any other
// registered backend (im2col over its Sgemm).
func TestConv(t *testing.T) {
	var names []string
	for _, p := range Paths() {
		if p.Missing != "" {
			t.Run(p.Name, func(t *testing.T) {
				t.Skipf("%s path skipped: needs %s, which this CPU or build lacks", p.Name, p.Missing)
			})
			continue
		}
		names = append(names, p.Name)
	}
	for _, name := range List() {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, name := range names {
		be, _ := Get(name)
		for _, cc := range convCases {
			t.Run(fmt.Sprintf("%s/%+v", name, cc), func(t *testing.T) {
				p, err := NewConvParams(cc.n, cc.h, cc.w, cc.c, cc.kh, cc.kw, cc.cout, cc.sh, cc.sw, cc.same)
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(3, uint64(cc.h*100+cc.c)))
				in := randF32(rng, p.N*p.H*p.W*p.C)
				f := randF32(rng, p.KH*p.KW*p.C*p.Cout)
				g := randF32(rng, p.N*p.OH*p.OW*p.Cout)
				out := nanF32(len(g))
				dIn := nanF32(len(in))
				dF := nanF32(len(f))
				conv2D(be, p, in, f, out)
				conv2DBackpropInput(be, p, f, g, dIn)
				conv2DBackpropFilter(be, p, in, g, dF)
				compare(t, "output", out, refConv(p, in, f), p.KH*p.KW*p.C)
				compare(t, "dInput", dIn, refBackpropInput(p, f, g), p.KH*p.KW*p.Cout)
				compare(t, "dFilter", dF, refBackpropFilter(p, in, g), p.N*p.OH*p.OW)
				// Adjointness: <conv(x,f), g> = <x, dInput(f,g)> = <f, dFilter(x,g)>.
				a, b, c := dot32(out, g), dot32(in, dIn), dot32(f, dF)
				if tol := 1e-4 * (1 + math.Abs(a)); math.Abs(a-b) > tol || math.Abs(a-c) > tol {
					t.Errorf("not adjoint: <conv,g>=%g <x,dIn>=%g <f,dF>=%g", a, b, c)
				}
			})
		}
	}
}

// TestConvChunked forces several im2col chunks so the accumulation across
// chunks in Conv2DBackpropFilter is exercised.
func TestConvChunked(t *testing.T) {
	p, _ := NewConvParams(5, 40, 40, 30, 5, 5, 3, 1, 1, true) // 1600*750 per image: chunk 1
	if p.chunk() >= p.N {
		t.Fatalf("case does not chunk: chunk %d", p.chunk())
	}
	rng := rand.New(rand.NewPCG(5, 6))
	in := randF32(rng, p.N*p.H*p.W*p.C)
	f := randF32(rng, p.KH*p.KW*p.C*p.Cout)
	g := randF32(rng, p.N*p.OH*p.OW*p.Cout)
	out, dIn, dF := nanF32(len(g)), nanF32(len(in)), nanF32(len(f))
	Conv2D(p, in, f, out)
	Conv2DBackpropInput(p, f, g, dIn)
	Conv2DBackpropFilter(p, in, g, dF)
	compare(t, "output", out, refConv(p, in, f), p.KH*p.KW*p.C)
	compare(t, "dInput", dIn, refBackpropInput(p, f, g), p.KH*p.KW*p.Cout)
	compare(t, "dFilter", dF, refBackpropFilter(p, in, g), p.N*p.OH*p.OW)
}

// TestConvDirectChunked forces the implicit-GEMM forward pass and input
// gradient of every SIMD path to pad the batch in several chunks.
func TestConvDirectChunked(t *testing.T) {
	for _, name := range []string{"avx2", "avx512"} {
		t.Run(name, func(t *testing.T) {
			be, ok := Get(name)
			if !ok {
				t.Skipf("no %s backend on this CPU or build", name)
			}
			p, _ := NewConvParams(5, 9, 8, 16, 3, 3, 20, 1, 1, true)
			if p.direct(be, true) == nil {
				t.Fatalf("%+v does not take the direct path", p)
			}
			defer func(n int) { convPadElems = n }(convPadElems)
			convPadElems = 2 * 11 * 10 * 20 // two padded images of the input gradient's problem
			rng := rand.New(rand.NewPCG(7, 8))
			in := randF32(rng, p.N*p.H*p.W*p.C)
			f := randF32(rng, p.KH*p.KW*p.C*p.Cout)
			g := randF32(rng, p.N*p.OH*p.OW*p.Cout)
			out, dIn := nanF32(len(g)), nanF32(len(in))
			conv2D(be, p, in, f, out)
			conv2DBackpropInput(be, p, f, g, dIn)
			compare(t, "output", out, refConv(p, in, f), p.KH*p.KW*p.C)
			compare(t, "dInput", dIn, refBackpropInput(p, f, g), p.KH*p.KW*p.Cout)
		})
	}
}

// TestPackB checks packB's float32 packing (assembly where there is one)
// against its float64 instantiation (always the Go loop) for sliver widths
// of both SIMD paths, with partial last slivers, row strides wider than
// the block and blocks that start inside the matrix.
func TestPackB(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, nr := range []int{16, 32} {
		for _, sz := range []struct{ ldb, p0, kb, j0, nb int }{
			{16, 0, 1, 0, 16}, {35, 2, 7, 1, 33}, {100, 3, 17, 5, 95}, {1024, 1, 300, 64, 960}, {64, 0, 5, 0, 64},
		} {
			rows := sz.p0 + sz.kb
			b32 := randF32(rng, rows*sz.ldb)
			b64 := make([]float64, len(b32))
			for i, v := range b32 {
				b64[i] = float64(v)
			}
			slivers := ceilDiv(sz.nb, nr)
			got, want := nanF32(slivers*nr*sz.kb), make([]float64, slivers*nr*sz.kb)
			packB(nr, false, b32, sz.ldb, sz.p0, sz.kb, sz.j0, sz.nb, got)
			packB(nr, false, b64, sz.ldb, sz.p0, sz.kb, sz.j0, sz.nb, want)
			for i := range want {
				if float64(got[i]) != want[i] {
					t.Fatalf("nr=%d %+v: packed[%d] = %g, want %g", nr, sz, i, got[i], want[i])
				}
			}
		}
	}
}
