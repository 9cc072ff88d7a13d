//go:build ignore

// bf16_gen writes bf16_amd64.s, the AVX512_BF16 kernels of the bf16 GEMM
// (bf16_amd64.go): the 10x32 micro-kernel bf16Z32 and the two packing
// routines that round float32 operands to bf16 (bf16PackRows, bf16Cvt,
// bf16TransPairs).
//
//	go generate ./kernel/linalg
//
// The Go assembler (as of Go 1.26) knows neither VDPBF16PS nor
// VCVTNE2PS2BF16, so this program encodes them itself as BYTE sequences
// (evex below), register operands only: a 512-bit EVEX prefix, map 0F38,
// W0, no masking. Each encoded line carries the instruction in Intel
// syntax as a comment. The encodings were checked against GNU as 2.40
// (objdump -d of the same instructions), and the tests check the results
// against float64 references on CPUs that have the instructions.
package main

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"strings"
)

// The tile: mr rows of A by 32 columns of B (two zmm of 16 float32 each),
// 2*mr accumulators Z0..Z19, B in Z28/Z29, broadcasts of A in Z30/Z31.
const mr = 10

// daBases hold the addresses of rows 0, 3, 6, 9 of the A sliver; R9 is
// the row stride in bytes, so rows 3i+1 and 3i+2 are (base)(R9*1) and
// (base)(R9*2).
var daBases = []string{"SI", "R11", "R12", "R13"}

type gen struct{ bytes.Buffer }

func (g *gen) p(format string, args ...any) { fmt.Fprintf(&g.Buffer, format+"\n", args...) }

// evex encodes a 512-bit register-only EVEX.0F38.W0 instruction with
// prefix pp (2 = F3, 3 = F2) and opcode op: dst in ModRM.reg (with
// EVEX.R and R'), src1 in EVEX.vvvv (with V'), src2 in ModRM.rm (with
// EVEX.B and X).
func evex(pp, op byte, dst, src1, src2 int) []byte {
	inv := func(b int) byte { return byte(^b & 1) }
	p0 := inv(dst>>3)<<7 | inv(src2>>4)<<6 | inv(src2>>3)<<5 | inv(dst>>4)<<4 | 0x2 // map 0F38
	p1 := byte(^src1&0xf)<<3 | 1<<2 | pp                                            // W0
	p2 := byte(2)<<5 | inv(src1>>4)<<3                                              // L'L = 512, no mask
	modrm := byte(0xc0) | byte(dst&7)<<3 | byte(src2&7)
	return []byte{0x62, p0, p1, p2, op, modrm}
}

func (g *gen) bytesLine(b []byte, comment string) {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("BYTE $0x%02x", x)
	}
	g.p("\t%s // %s", strings.Join(parts, "; "), comment)
}

// dpbf16 emits VDPBF16PS zacc, za, zb: each float32 lane of zacc plus the
// dot product of the lane's pair of bf16 values in za and in zb.
func (g *gen) dpbf16(acc, a, b int) {
	g.bytesLine(evex(2, 0x52, acc, a, b), fmt.Sprintf("VDPBF16PS zmm%d, zmm%d, zmm%d", acc, a, b))
}

// cvt2 emits VCVTNE2PS2BF16 zdst, zhi, zlo: the 16 float32 of zlo rounded
// (to nearest even) to the bf16 words 0-15 of zdst, those of zhi to 16-31.
func (g *gen) cvt2(dst, hi, lo int) {
	g.bytesLine(evex(3, 0x72, dst, hi, lo), fmt.Sprintf("VCVTNE2PS2BF16 zmm%d, zmm%d, zmm%d", dst, hi, lo))
}

func aRow(r int) string {
	base := daBases[r/3]
	switch r % 3 {
	case 0:
		return fmt.Sprintf("(%s)", base)
	case 1:
		return fmt.Sprintf("(%s)(R9*1)", base)
	}
	return fmt.Sprintf("(%s)(R9*2)", base)
}

// step writes one step over a pair of k: 32 columns of B pairs, mr
// broadcasts of A pairs, 2*mr dot products.
func (g *gen) step() {
	g.p("\tVMOVDQU32 (DI), Z28")
	g.p("\tVMOVDQU32 64(DI), Z29")
	for r := range mr {
		z := 30 + r%2
		g.p("\tVPBROADCASTD %s, Z%d", aRow(r), z)
		g.dpbf16(2*r, z, 28)
		g.dpbf16(2*r+1, z, 29)
	}
	for _, b := range daBases {
		g.p("\tADDQ BX, %s", b)
	}
	g.p("\tADDQ $128, DI")
}

func (g *gen) kernel() {
	g.p("// func bf16Z32(kp int, a *uint32, rsa, csa int, b *uint32, c *float32, ldc int, alpha, beta float32, mm int, mlo, mhi uint16)")
	g.p("TEXT ·bf16Z32(SB), NOSPLIT, $0-76")
	g.p("\tMOVQ kp+0(FP), CX")
	g.p("\tMOVQ a+8(FP), SI")
	g.p("\tMOVQ rsa+16(FP), R9")
	g.p("\tSHLQ $2, R9")
	g.p("\tMOVQ csa+24(FP), BX")
	g.p("\tSHLQ $2, BX")
	g.p("\tMOVQ b+32(FP), DI")
	g.p("\tMOVQ c+40(FP), DX")
	g.p("\tMOVQ ldc+48(FP), R8")
	g.p("\tSHLQ $2, R8")
	g.p("\tLEAQ (R9)(R9*2), AX")
	for i := 1; i < len(daBases); i++ {
		g.p("\tLEAQ (%s)(AX*1), %s", daBases[i-1], daBases[i])
	}
	g.p("")
	g.p("\tMOVQ DX, R10")
	for r := range mr {
		g.p("\tPREFETCHT0 (R10)")
		g.p("\tPREFETCHT0 64(R10)")
		if r < mr-1 {
			g.p("\tADDQ R8, R10")
		}
	}
	for i := range 2 * mr {
		g.p("\tVPXORD Z%d, Z%d, Z%d", i, i, i)
	}
	g.p("")
	g.p("\tMOVQ CX, R10")
	g.p("\tSHRQ $1, R10")
	g.p("\tJZ   bf16z32_tail")
	g.p("bf16z32_loop2:")
	g.step()
	g.step()
	g.p("\tDECQ R10")
	g.p("\tJNZ  bf16z32_loop2")
	g.p("bf16z32_tail:")
	g.p("\tANDQ $1, CX")
	g.p("\tJZ   bf16z32_store")
	g.step()
	g.p("")
	g.p("bf16z32_store:")
	g.p("\t// C = alpha*acc (+ beta*C). beta == +0 or -0 overwrites C without")
	g.p("\t// reading it (NaNs must not leak).")
	g.p("\tVBROADCASTSS alpha+56(FP), Z30")
	for i := range 2 * mr {
		g.p("\tVMULPS Z30, Z%d, Z%d", i, i)
	}
	g.p("\tMOVL  beta+60(FP), AX")
	g.p("\tTESTL $0x7fffffff, AX")
	g.p("\tJNZ   bf16z32_beta")
	g.store(false, "bf16z32_done")
	g.p("")
	g.p("bf16z32_beta:")
	g.p("\tVBROADCASTSS beta+60(FP), Z30")
	g.store(true, "bf16z32_betadone")
	g.p("")
}

// store writes the first mm rows of the tile to C under the column masks
// mlo (columns 0-15) and mhi (16-31).
func (g *gen) store(beta bool, done string) {
	g.p("\tMOVQ mm+64(FP), R9")
	g.p("\tKMOVW mlo+72(FP), K1")
	g.p("\tKMOVW mhi+74(FP), K2")
	for r := range mr {
		for j := range 2 {
			z := fmt.Sprintf("Z%d", 2*r+j)
			k := fmt.Sprintf("K%d", j+1)
			if beta {
				g.p("\tVMOVUPS.Z %d(DX), %s, Z31", 64*j, k)
				g.p("\tVFMADD231PS Z31, Z30, %s", z)
			}
			g.p("\tVMOVUPS %s, %s, %d(DX)", z, k, 64*j)
		}
		if r < mr-1 {
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

// mask sets K<k> to the low min(count, 16) bits, count in CX (0..16);
// clobbers AX.
func (g *gen) mask(k int) {
	g.p("\tMOVL $1, AX")
	g.p("\tSHLL CX, AX")
	g.p("\tDECL AX")
	g.p("\tKMOVW AX, K%d", k)
}

func (g *gen) packRows() {
	g.p("// func bf16PackRows(dst *uint32, stride int, r0, r1 *float32, n int)")
	g.p("TEXT ·bf16PackRows(SB), NOSPLIT, $0-40")
	g.p("\tMOVQ dst+0(FP), DI")
	g.p("\tMOVQ stride+8(FP), R8")
	g.p("\tSHLQ $2, R8")
	g.p("\tMOVQ r0+16(FP), SI")
	g.p("\tMOVQ r1+24(FP), R10")
	g.p("\tMOVQ n+32(FP), DX")
	g.p("\tVMOVDQU32 bf16interleave<>(SB), Z31")
	g.p("\tCMPQ DX, $32")
	g.p("\tJLT  bf16rows_tail")
	g.p("bf16rows_loop:")
	for half := range 2 {
		g.p("\tVMOVUPS %d(SI), Z0", 64*half)
		g.p("\tVMOVUPS %d(R10), Z1", 64*half)
		g.cvt2(2, 1, 0)
		g.p("\tVPERMW Z2, Z31, Z3")
		g.p("\tVMOVDQU32 Z3, %d(DI)", 64*half)
	}
	g.p("\tADDQ $128, SI")
	g.p("\tADDQ $128, R10")
	g.p("\tADDQ R8, DI")
	g.p("\tSUBQ $32, DX")
	g.p("\tCMPQ DX, $32")
	g.p("\tJGE  bf16rows_loop")
	g.p("bf16rows_tail:")
	g.p("\tTESTQ DX, DX")
	g.p("\tJZ   bf16rows_done")
	g.p("\t// The last n < 32 columns: masked loads read zeros past n, and the")
	g.p("\t// whole 32-column chunk is written, zero-padded.")
	g.p("\tMOVQ DX, CX")
	g.p("\tCMPQ CX, $16")
	g.p("\tJLE  bf16rows_lo")
	g.p("\tMOVQ $16, CX")
	g.p("bf16rows_lo:")
	g.mask(1)
	g.p("\tMOVQ DX, CX")
	g.p("\tSUBQ $16, CX")
	g.p("\tJGE  bf16rows_hi")
	g.p("\tXORQ CX, CX")
	g.p("bf16rows_hi:")
	g.mask(2)
	for half := range 2 {
		k := half + 1
		g.p("\tVMOVUPS.Z %d(SI), K%d, Z0", 64*half, k)
		g.p("\tVMOVUPS.Z %d(R10), K%d, Z1", 64*half, k)
		g.cvt2(2, 1, 0)
		g.p("\tVPERMW Z2, Z31, Z3")
		g.p("\tVMOVDQU32 Z3, %d(DI)", 64*half)
	}
	g.p("bf16rows_done:")
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("")
}

func (g *gen) cvt() {
	g.p("// func bf16Cvt(dst *uint32, src *float32, n int)")
	g.p("TEXT ·bf16Cvt(SB), NOSPLIT, $0-24")
	g.p("\tMOVQ dst+0(FP), DI")
	g.p("\tMOVQ src+8(FP), SI")
	g.p("\tMOVQ n+16(FP), DX")
	g.p("\tCMPQ DX, $32")
	g.p("\tJLT  bf16cvt_tail")
	g.p("bf16cvt_loop:")
	g.p("\tVMOVUPS (SI), Z0")
	g.p("\tVMOVUPS 64(SI), Z1")
	g.cvt2(2, 1, 0)
	g.p("\tVMOVDQU32 Z2, (DI)")
	g.p("\tADDQ $128, SI")
	g.p("\tADDQ $64, DI")
	g.p("\tSUBQ $32, DX")
	g.p("\tCMPQ DX, $32")
	g.p("\tJGE  bf16cvt_loop")
	g.p("bf16cvt_tail:")
	g.p("\tTESTQ DX, DX")
	g.p("\tJZ   bf16cvt_done")
	g.p("\tMOVQ DX, CX")
	g.p("\tCMPQ CX, $16")
	g.p("\tJLE  bf16cvt_lo")
	g.p("\tMOVQ $16, CX")
	g.p("bf16cvt_lo:")
	g.mask(1)
	g.p("\tMOVQ DX, CX")
	g.p("\tSUBQ $16, CX")
	g.p("\tJGE  bf16cvt_hi")
	g.p("\tXORQ CX, CX")
	g.p("bf16cvt_hi:")
	g.mask(2)
	g.p("\t// ceil(n/2) pairs are written; an odd n's last pair ends in a zero.")
	g.p("\tMOVQ DX, CX")
	g.p("\tINCQ CX")
	g.p("\tSHRQ $1, CX")
	g.mask(3)
	g.p("\tVMOVUPS.Z (SI), K1, Z0")
	g.p("\tVMOVUPS.Z 64(SI), K2, Z1")
	g.cvt2(2, 1, 0)
	g.p("\tVMOVDQU32 Z2, K3, (DI)")
	g.p("bf16cvt_done:")
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("")
}

// trans writes bf16TransPairs: the packing of a transposed B, whose
// columns are contiguous along k. For 16 columns at a time, 16 pairs of
// each are loaded and rounded (one zmm of 16 pairs per column), and the
// 16x16 dwords are transposed in registers (unpack 32, unpack 64, two
// 128-bit shuffles) into 16 zmm of one pair for the 16 columns each.
// Gathering the pair of each column instead was three times slower: 32
// columns 4 KiB apart fall in one L1 set, so the lines a gather loaded
// were gone by the next pair.
func (g *gen) trans() {
	g.p("// func bf16TransPairs(dst *uint32, src *float32, ldb int, blocks int)")
	g.p("TEXT ·bf16TransPairs(SB), NOSPLIT, $0-32")
	g.p("\tMOVQ dst+0(FP), DI")
	g.p("\tMOVQ src+8(FP), SI")
	g.p("\tMOVQ ldb+16(FP), R8")
	g.p("\tSHLQ $2, R8")
	g.p("\tMOVQ R8, R11")
	g.p("\tSHLQ $4, R11")
	g.p("\tMOVQ blocks+24(FP), R9")
	g.p("\tTESTQ R9, R9")
	g.p("\tJZ   bf16trans_done")
	g.p("bf16trans_loop:")
	z := func(i int) string { return fmt.Sprintf("Z%d", i) }
	for half := range 2 {
		if half == 0 {
			g.p("\tMOVQ SI, R10")
		} else {
			g.p("\tLEAQ (SI)(R11*1), R10")
		}
		// r[c] = the 16 pairs of column c, in Z0..Z15.
		for c := range 16 {
			g.p("\tVMOVUPS (R10), Z16")
			g.p("\tVMOVUPS 64(R10), Z17")
			g.cvt2(c, 17, 16)
			if c < 15 {
				g.p("\tADDQ R8, R10")
			}
		}
		// t = unpack 32 of column pairs (Go operand order: src2, src1, dst).
		for i := range 8 {
			g.p("\tVPUNPCKLDQ %s, %s, %s", z(2*i+1), z(2*i), z(16+2*i))
			g.p("\tVPUNPCKHDQ %s, %s, %s", z(2*i+1), z(2*i), z(16+2*i+1))
		}
		// r[4g+j]: columns 4g..4g+3, pairs j, j+4, j+8, j+12 by 128-bit lane.
		for gr := range 4 {
			t := 16 + 4*gr
			g.p("\tVPUNPCKLQDQ %s, %s, %s", z(t+2), z(t), z(4*gr))
			g.p("\tVPUNPCKHQDQ %s, %s, %s", z(t+2), z(t), z(4*gr+1))
			g.p("\tVPUNPCKLQDQ %s, %s, %s", z(t+3), z(t+1), z(4*gr+2))
			g.p("\tVPUNPCKHQDQ %s, %s, %s", z(t+3), z(t+1), z(4*gr+3))
		}
		// t[8h+q]: columns 8h..8h+7, pairs q and q+8 (q < 4: j; q >= 4: j+4).
		for h := range 2 {
			for j := range 4 {
				a, b := z(8*h+j), z(8*h+4+j)
				g.p("\tVSHUFI32X4 $0x88, %s, %s, %s", b, a, z(16+8*h+j))
				g.p("\tVSHUFI32X4 $0xdd, %s, %s, %s", b, a, z(16+8*h+4+j))
			}
		}
		// r[p]: pair p of the 16 columns.
		for q := range 8 {
			g.p("\tVSHUFI32X4 $0x88, %s, %s, %s", z(16+8+q), z(16+q), z(q))
			g.p("\tVSHUFI32X4 $0xdd, %s, %s, %s", z(16+8+q), z(16+q), z(q+8))
		}
		for p := range 16 {
			g.p("\tVMOVDQU32 %s, %d(DI)", z(p), 128*p+64*half)
		}
	}
	g.p("\tADDQ $128, SI")
	g.p("\tADDQ $2048, DI")
	g.p("\tDECQ R9")
	g.p("\tJNZ  bf16trans_loop")
	g.p("bf16trans_done:")
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("")
}

func main() {
	g := new(gen)
	g.p("// Code generated by bf16_gen.go; DO NOT EDIT.")
	g.p("")
	g.p("//go:build !purego")
	g.p("")
	g.p("#include \"textflag.h\"")
	g.p("")
	g.p("// The bf16 GEMM's kernels. Operands are pairs of bf16 along k in one")
	g.p("// dword: (x[2p], x[2p+1]) in the low and high halves. bf16Z32 computes")
	g.p("// a %dx32 tile over kp pairs, reading pair p of row r of A at", mr)
	g.p("// a + 4*(r*rsa + p*csa) and the 32 column pairs of B at b + 128*p.")
	g.p("")
	g.p("// bf16interleave is the VPERMW index that turns the words of two")
	g.p("// rows (x0..x15, y0..y15) into pairs (x0, y0, x1, y1, ...).")
	for i := 0; i < 32; i += 4 {
		var q uint64
		for w := range 4 {
			j := i + w
			idx := uint64(j / 2)
			if j%2 == 1 {
				idx += 16
			}
			q |= idx << (16 * w)
		}
		g.p("DATA bf16interleave<>+%d(SB)/8, $0x%016x", 2*i, q)
	}
	g.p("GLOBL bf16interleave<>(SB), RODATA|NOPTR, $64")
	g.p("")
	g.kernel()
	g.packRows()
	g.cvt()
	g.trans()
	if err := os.WriteFile("bf16_amd64.s", g.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
