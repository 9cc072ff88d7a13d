//go:build ignore

// avx512_gen writes avx512_amd64.s, the AVX-512 micro-kernels: an mr x 32
// float32 tile (sgemmZ32), its direct-A form (sgemmZ32da), the mr x 16
// halves of both (sgemmZ16, sgemmZ16da) and the convolutions' tile, which
// gathers A in place (sgemmZ32conv), with avx512_mr_amd64.go, which holds
// the heights for the Go side. They are long straight-line code whose shape
// was chosen by measuring several mr, so they are generated rather than
// written out by hand.
//
//	go generate ./kernel/linalg
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
)

var (
	mr  = flag.Int("mr", 14, "rows of the tile (at most 14: 2*mr accumulators, 2 B and 2 broadcast registers)")
	out = flag.String("o", "avx512_amd64", "output files: this plus .s, and this with _mr plus .go")
)

// Registers: accumulators Z0..Z(2mr-1) (row r in Z(2r), Z(2r+1)), B in
// Z28, Z29, broadcasts of A in Z30, Z31. SI walks A, DI walks B, DX walks
// C, R8 is ldc in bytes.
const (
	bLo, bHi = "Z28", "Z29"
)

func acc(i int) string   { return fmt.Sprintf("Z%d", i) }
func bcast(r int) string { return fmt.Sprintf("Z%d", 30+r%2) }

type gen struct {
	bytes.Buffer
}

func (g *gen) p(format string, args ...any) { fmt.Fprintf(&g.Buffer, format+"\n", args...) }

// aRow returns the operand that reads row r of A at the current k step:
// packed (offset aoff from SI) or direct (base register r/3, row r%3 of it).
func aRow(direct bool, aoff, r int) string {
	if !direct {
		return fmt.Sprintf("%d(SI)", aoff+4*r)
	}
	base := daBases[r/3]
	switch r % 3 {
	case 0:
		return fmt.Sprintf("(%s)", base)
	case 1:
		return fmt.Sprintf("(%s)(R9*1)", base)
	}
	return fmt.Sprintf("(%s)(R9*2)", base)
}

// daBases hold the addresses of rows 0, 3, 6, 9, 12 of a direct A sliver.
var daBases = []string{"SI", "R11", "R12", "R13", "R14"}

// step writes one k step: B from boff(DI), A as aRow says.
func (g *gen) step(direct, half bool, aoff, boff int) {
	g.p("\tVMOVUPS %d(DI), %s", boff, bLo)
	if !half {
		g.p("\tVMOVUPS %d(DI), %s", boff+64, bHi)
	}
	for r := range *mr {
		if half {
			// One FMA per element of A: the broadcast rides in the FMA.
			g.p("\tVFMADD231PS.BCST %s, %s, %s", aRow(direct, aoff, r), bLo, acc(r))
			continue
		}
		g.p("\tVBROADCASTSS %s, %s", aRow(direct, aoff, r), bcast(r))
		g.p("\tVFMADD231PS %s, %s, %s", bLo, bcast(r), acc(2*r))
		g.p("\tVFMADD231PS %s, %s, %s", bHi, bcast(r), acc(2*r+1))
	}
	if direct {
		for i := range ceilDiv(*mr, 3) {
			g.p("\tADDQ BX, %s", daBases[i])
		}
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func (g *gen) kernel(direct, half bool) {
	m := *mr
	cols := 32
	if half {
		cols = 16
	}
	name := "sgemmZ32"
	if half {
		name = "sgemmZ16"
	}
	args := "kc int, a *float32, b *float32, c *float32, ldc int, beta float32, mm int, mlo, mhi uint16"
	size, betaOff := 60, 40
	if direct {
		name += "da"
		args = "kc int, a *float32, rsa, csa int, b *float32, c *float32, ldc int, beta float32, mm int, mlo, mhi uint16"
		size, betaOff = 76, 56
	}
	g.p("// func %s(%s)", name, args)
	g.p("TEXT ·%s(SB), NOSPLIT, $0-%d", name, size)
	g.p("\tMOVQ kc+0(FP), CX")
	g.p("\tMOVQ a+8(FP), SI")
	if direct {
		g.p("\tMOVQ rsa+16(FP), R9")
		g.p("\tSHLQ $2, R9")
		g.p("\tMOVQ csa+24(FP), BX")
		g.p("\tSHLQ $2, BX")
		g.p("\tMOVQ b+32(FP), DI")
		g.p("\tMOVQ c+40(FP), DX")
		g.p("\tMOVQ ldc+48(FP), R8")
		// Base i is row 3i: the previous base plus 3*rsa.
		g.p("\tLEAQ (R9)(R9*2), AX")
		for i := 1; i < ceilDiv(m, 3); i++ {
			g.p("\tLEAQ (%s)(AX*1), %s", daBases[i-1], daBases[i])
		}
	} else {
		g.p("\tMOVQ b+16(FP), DI")
		g.p("\tMOVQ c+24(FP), DX")
		g.p("\tMOVQ ldc+32(FP), R8")
	}
	g.p("\tSHLQ $2, R8")
	g.p("")
	// Touch the C rows early so that their lines arrive during the k loop.
	g.p("\tMOVQ DX, R10")
	for r := range m {
		g.p("\tPREFETCHT0 (R10)")
		if !half {
			g.p("\tPREFETCHT0 64(R10)")
		}
		g.p("\tPREFETCHT0 %d(R10)", 4*cols-4)
		if r < m-1 {
			g.p("\tADDQ R8, R10")
		}
	}
	g.p("")
	n := 2 * m
	if half {
		n = m
	}
	for i := range n {
		g.p("\tVPXORD %s, %s, %s", acc(i), acc(i), acc(i))
	}
	g.p("")
	l := strings.ToLower(name)
	aStep, bStep := 4*m, 4*32
	g.p("\tMOVQ CX, R10")
	g.p("\tSHRQ $2, R10")
	g.p("\tJZ   %s_tail", l)
	g.p("")
	g.p("%s_loop4:", l)
	if !direct {
		// A streams from L2: fetch about two unrolled iterations ahead.
		g.p("\tPREFETCHT0 %d(SI)", 8*aStep)
		g.p("\tPREFETCHT0 %d(SI)", 8*aStep+64)
	}
	for u := range 4 {
		g.step(direct, half, u*aStep, u*bStep)
	}
	if !direct {
		g.p("\tADDQ $%d, SI", 4*aStep)
	}
	g.p("\tADDQ $%d, DI", 4*bStep)
	g.p("\tDECQ R10")
	g.p("\tJNZ  %s_loop4", l)
	g.p("")
	g.p("%s_tail:", l)
	g.p("\tANDQ $3, CX")
	g.p("\tJZ   %s_store", l)
	g.p("")
	g.p("%s_loop1:", l)
	g.step(direct, half, 0, 0)
	if !direct {
		g.p("\tADDQ $%d, SI", aStep)
	}
	g.p("\tADDQ $%d, DI", bStep)
	g.p("\tDECQ CX")
	g.p("\tJNZ  %s_loop1", l)
	g.p("")
	g.p("%s_store:", l)
	g.p("\t// beta == +0 or -0: overwrite C without reading it (NaNs must not leak).")
	g.p("\tMOVL  beta+%d(FP), AX", betaOff)
	g.p("\tTESTL $0x7fffffff, AX")
	g.p("\tJNZ   %s_beta", l)
	g.store(half, false, betaOff, l+"_done")
	g.p("")
	g.p("%s_beta:", l)
	g.p("\tVBROADCASTSS beta+%d(FP), Z30", betaOff)
	g.store(half, true, betaOff, l+"_betadone")
	g.p("")
}

// store writes the first mm rows of the tile to C, each under the column
// masks mlo (lanes 0-15) and mhi (16-31): an edge tile goes straight to C,
// and masked-off lanes are neither read nor written.
func (g *gen) store(half, beta bool, betaOff int, done string) {
	g.storeRows(*mr, half, beta, betaOff, done)
}

// storeRows is store for a tile of m rows.
func (g *gen) storeRows(m int, half, beta bool, betaOff int, done string) {
	g.p("\tMOVQ mm+%d(FP), R9", betaOff+8)
	g.p("\tKMOVW mlo+%d(FP), K1", betaOff+16)
	if !half {
		g.p("\tKMOVW mhi+%d(FP), K2", betaOff+18)
	}
	for r := range m {
		regs := []string{acc(2 * r), acc(2*r + 1)}
		if half {
			regs = []string{acc(r)}
		}
		for j, z := range regs {
			k := fmt.Sprintf("K%d", j+1)
			if beta {
				g.p("\tVMOVUPS.Z %d(DX), %s, Z31", 64*j, k)
				g.p("\tVFMADD231PS Z31, Z30, %s", z)
			}
			g.p("\tVMOVUPS %s, %s, %d(DX)", z, k, 64*j)
		}
		if r < m-1 {
			g.p("\tDECQ R9")
			g.p("\tJZ   %s", done)
			g.p("\tADDQ R8, DX")
		}
	}
	g.p("")
	g.p("%s:", done)
	g.p("\tVZEROUPPER")
	g.p("\tRET")
}

// convRows hold the row pointers of the convolution tile: its rows are
// gathered at arbitrary offsets, so each needs a register of its own. DI
// walks B, BX is the k offset from every row pointer, R14 its step (csa in
// bytes) and CX counts k steps; the segment count and stride stay in the
// argument frame. BP, the frame pointer, is left alone, which caps the
// tile at len(convRows) rows.
var convRows = []string{"AX", "DX", "SI", "R8", "R9", "R10", "R11", "R12", "R13", "R15"}

// convMR returns the height of the convolution tile: the GEMM tile's, up
// to the registers left for row pointers.
func convMR() int { return min(*mr, len(convRows)) }

// convStep writes one k step of the convolution tile: B from boff(DI),
// row r of A at (row pointer r)+BX.
func (g *gen) convStep(m, boff int) {
	g.p("\tVMOVUPS %d(DI), %s", boff, bLo)
	g.p("\tVMOVUPS %d(DI), %s", boff+64, bHi)
	for r := range m {
		g.p("\tVBROADCASTSS (%s)(BX*1), %s", convRows[r], bcast(r))
		g.p("\tVFMADD231PS %s, %s, %s", bLo, bcast(r), acc(2*r))
		g.p("\tVFMADD231PS %s, %s, %s", bHi, bcast(r), acc(2*r+1))
	}
	g.p("\tADDQ R14, BX")
}

// convKernel writes sgemmZ32conv, the tile whose A is a convolution's patch
// matrix gathered in place: its k steps come in nseg segments of seglen,
// and element (r, s, l) of A is a[rows[r] + s*segstride + l*csa].
func (g *gen) convKernel() {
	m := convMR()
	const betaOff = 72
	g.p("// func sgemmZ32conv(a *float32, rows *[%d]int, csa, seglen, nseg, segstride int, b *float32, c *float32, ldc int, beta float32, mm int, mlo, mhi uint16)", m)
	g.p("TEXT ·sgemmZ32conv(SB), NOSPLIT, $0-%d", betaOff+20)
	g.p("\tMOVQ c+56(FP), DX")
	g.p("\tMOVQ ldc+64(FP), R8")
	g.p("\tSHLQ $2, R8")
	g.p("\tMOVQ DX, R10")
	for r := range m {
		g.p("\tPREFETCHT0 (R10)")
		g.p("\tPREFETCHT0 124(R10)")
		if r < m-1 {
			g.p("\tADDQ R8, R10")
		}
	}
	g.p("")
	g.p("\tMOVQ a+0(FP), CX")
	g.p("\tMOVQ rows+8(FP), BX")
	for r := range m {
		g.p("\tMOVQ %d(BX), %s", 8*r, convRows[r])
		g.p("\tLEAQ (CX)(%s*4), %s", convRows[r], convRows[r])
	}
	g.p("\tMOVQ csa+16(FP), R14")
	g.p("\tSHLQ $2, R14")
	g.p("\tSHLQ $2, segstride+40(FP)")
	g.p("\tMOVQ b+48(FP), DI")
	for i := range 2 * m {
		g.p("\tVPXORD %s, %s, %s", acc(i), acc(i), acc(i))
	}
	g.p("")
	g.p("sgemmz32conv_seg:")
	g.p("\tXORQ BX, BX")
	g.p("\tMOVQ seglen+24(FP), CX")
	g.p("\tSHRQ $2, CX")
	g.p("\tJZ   sgemmz32conv_tail")
	g.p("")
	g.p("sgemmz32conv_loop4:")
	for u := range 4 {
		g.convStep(m, 128*u)
	}
	g.p("\tADDQ $512, DI")
	g.p("\tDECQ CX")
	g.p("\tJNZ  sgemmz32conv_loop4")
	g.p("")
	g.p("sgemmz32conv_tail:")
	g.p("\tMOVQ seglen+24(FP), CX")
	g.p("\tANDQ $3, CX")
	g.p("\tJZ   sgemmz32conv_segend")
	g.p("")
	g.p("sgemmz32conv_loop1:")
	g.convStep(m, 0)
	g.p("\tADDQ $128, DI")
	g.p("\tDECQ CX")
	g.p("\tJNZ  sgemmz32conv_loop1")
	g.p("")
	g.p("sgemmz32conv_segend:")
	g.p("\tMOVQ segstride+40(FP), CX")
	for r := range m {
		g.p("\tADDQ CX, %s", convRows[r])
	}
	g.p("\tDECQ nseg+32(FP)")
	g.p("\tJNZ  sgemmz32conv_seg")
	g.p("")
	g.p("\tMOVQ c+56(FP), DX")
	g.p("\tMOVQ ldc+64(FP), R8")
	g.p("\tSHLQ $2, R8")
	g.p("\t// beta == +0 or -0: overwrite C without reading it (NaNs must not leak).")
	g.p("\tMOVL  beta+%d(FP), AX", betaOff)
	g.p("\tTESTL $0x7fffffff, AX")
	g.p("\tJNZ   sgemmz32conv_beta")
	g.storeRows(m, false, false, betaOff, "sgemmz32conv_done")
	g.p("")
	g.p("sgemmz32conv_beta:")
	g.p("\tVBROADCASTSS beta+%d(FP), Z30", betaOff)
	g.storeRows(m, false, true, betaOff, "sgemmz32conv_betadone")
	g.p("")
}

func main() {
	flag.Parse()
	if *mr < 1 || *mr > 14 {
		log.Fatalf("avx512_gen: -mr %d: want 1..14", *mr)
	}
	g := new(gen)
	g.p("// Code generated by avx512_gen.go -mr %d; DO NOT EDIT.", *mr)
	g.p("")
	g.p("//go:build !purego")
	g.p("")
	g.p("#include \"textflag.h\"")
	g.p("")
	g.p("// The %dx32 tile (sgemmZ32): per k step, two 16-wide loads of packed B, %d broadcasts", *mr, *mr)
	g.p("// of A and %d FMAs into Z0..Z%d (row r in Z(2r), Z(2r+1)). The %dx16", 2**mr, 2**mr-1, *mr)
	g.p("// halves read the first 16 of each 32 packed values of B. The direct-A")
	g.p("// forms read element (r, l) of A at a + 4*(r*rsa + l*csa), for alpha == 1.")
	g.p("// All store only the first mm rows of C, and of those the columns set in")
	g.p("// the masks mlo (columns 0-15) and mhi (16-31).")
	g.p("")
	for _, half := range []bool{false, true} {
		for _, direct := range []bool{false, true} {
			g.kernel(direct, half)
		}
	}
	g.p("// The %dx32 convolution tile (sgemmZ32conv): the same k step with", convMR())
	g.p("// A gathered in place, row r read at a + 4*(rows[r] + s*segstride + l*csa)")
	g.p("// in k step l of segment s; stored as the others.")
	g.p("")
	g.convKernel()
	if err := os.WriteFile(*out+".s", g.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	goFile := fmt.Sprintf(`// Code generated by avx512_gen.go -mr %d; DO NOT EDIT.

//go:build !purego

package linalg

// avx512MR is the number of rows of the AVX-512 tiles in avx512_amd64.s,
// avx512ConvMR that of its convolution tile.
const (
	avx512MR     = %d
	avx512ConvMR = %d
)
`, *mr, *mr, convMR())
	name := strings.Replace(*out, "_amd64", "_mr_amd64", 1) + ".go"
	if err := os.WriteFile(name, []byte(goFile), 0o644); err != nil {
		log.Fatal(err)
	}
}
