//go:build !purego

package linalg

import (
	"runtime"
	"sync"

	"golang.org/x/sys/cpu"
)

//go:generate go run bf16_gen.go

// The bf16 GEMM (Precision BF16): the driver of gemm.go with operands
// rounded to bf16 as they are packed. VDPBF16PS multiplies pairs of bf16
// along k and adds both products to a float32 lane, so both operands are
// packed as pairs: a dword holds (x[2p], x[2p+1]) for one row of A or one
// column of B, and an odd k ends in a zero. A 10x32 tile (bf16Z32) takes
// per pair step two loads of B, 10 broadcasts of A and 20 VDPBF16PS, the
// float32 avx512 tile's shape with two multiply-adds in each lane.
//
// Packing rounds with VCVTNE2PS2BF16. Rows of op(B) (B not transposed) and
// of op(A)^T (A transposed) are contiguous along the tile's other side:
// bf16PackRows rounds two of them and interleaves them into pairs. A not
// transposed is contiguous along k: bf16Cvt rounds each row in order, and
// the kernel reads those rows with a row stride. B transposed is contiguous
// along k too, but its pairs must be spread across the 32 columns of a
// sliver: bf16TransPairs transposes them in registers, 16 columns by 16
// pairs at a time.
//
// Blocking: kc = 256 values (128 pairs: a 16 KiB B sliver in L1), mc =
// 160 rows of A (80 KiB in L2), nc = 4096 columns (a 2 MiB B panel).
const (
	bf16MR = 10
	bf16NR = 32
	bf16KC = 256
	bf16MC = 16 * bf16MR
	bf16NC = 4096
)

func bf16Missing() string {
	switch {
	case !cpu.X86.HasAVX512F:
		return "this CPU lacks avx512f"
	case !cpu.X86.HasAVX512BW:
		return "this CPU lacks avx512bw"
	case !cpu.X86.HasAVX512BF16:
		return "this CPU lacks avx512_bf16"
	}
	return ""
}

//go:noescape
func bf16Z32(kp int, a *uint32, rsa, csa int, b *uint32, c *float32, ldc int, alpha, beta float32, mm int, mlo, mhi uint16)

//go:noescape
func bf16PackRows(dst *uint32, stride int, r0, r1 *float32, n int)

//go:noescape
func bf16Cvt(dst *uint32, src *float32, n int)

//go:noescape
func bf16TransPairs(dst *uint32, src *float32, ldb int, blocks int)

// packRowsBF16 writes, for j < n, the pair (r0[j], r1[j]) rounded to bf16
// into the 32-dword chunks of dst that start every stride dwords (column
// j in chunk j/32, lane j%32); the last chunk is padded with zeros.
func packRowsBF16(dst []uint32, stride int, r0, r1 []float32, n int) {
	if n <= 0 {
		return
	}
	_ = r0[n-1]
	_ = r1[n-1]
	_ = dst[(ceilDiv(n, bf16NR)-1)*stride+bf16NR-1]
	bf16PackRows(&dst[0], stride, &r0[0], &r1[0], n)
}

// cvtBF16 writes src rounded to bf16 into dst as ceil(len(src)/2) pairs.
func cvtBF16(dst []uint32, src []float32) {
	if len(src) == 0 {
		return
	}
	_ = dst[(len(src)+1)/2-1]
	bf16Cvt(&dst[0], &src[0], len(src))
}

type bf16Workspace struct {
	a, b, col []uint32
	zero      []float32
}

var bf16Pool freeList[*bf16Workspace]

func getBF16Workspace() *bf16Workspace {
	if w, ok := bf16Pool.get(); ok {
		return w
	}
	return new(bf16Workspace)
}

func putBF16Workspace(w *bf16Workspace) { bf16Pool.put(w, runtime.GOMAXPROCS(0)+1) }

func growU32(s []uint32, n int) []uint32 {
	if cap(s) < n {
		return make([]uint32, n)
	}
	return s[:n]
}

type bf16Args struct {
	transA, transB bool
	k              int
	alpha          float32
	a              []float32
	lda            int
	b              []float32
	ldb            int
	beta           float32
	c              []float32
	ldc            int
}

// sgemmBF16 is SgemmBF16 on the AVX512_BF16 kernels; the caller has checked
// that the CPU has them.
func sgemmBF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if alpha == 0 || k == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	g := bf16Args{transA, transB, k, alpha, a, lda, b, ldb, beta, c, ldc}
	mt, nt := ceilDiv(m, bf16MR), ceilDiv(n, bf16NR)
	threads := runtime.GOMAXPROCS(0)
	if m*n*k < parallelMin || threads == 1 || mt*nt < 2 {
		ws := getBF16Workspace()
		g.run(ws, 0, m, 0, n)
		putBF16Workspace(ws)
		return
	}
	j, _ := bf16Jobs.Get().(*bf16Job)
	if j == nil {
		j = new(bf16Job)
	}
	*j = bf16Job{g: g, splitM: mt >= nt, m: m, n: n, unit: bf16NR}
	tiles := nt
	if j.splitM {
		tiles, j.unit = mt, bf16MR
	}
	Parallel(tiles, gemmParts(threads, m, n, k), j)
	*j = bf16Job{}
	bf16Jobs.Put(j)
}

// bf16Job is one product split across the pool by ranges of tiles, as
// gemmJob is.
type bf16Job struct {
	g          bf16Args
	splitM     bool
	m, n, unit int
}

var bf16Jobs sync.Pool

func (j *bf16Job) Range(lo, hi int) {
	ws := getBF16Workspace()
	lo *= j.unit
	if j.splitM {
		j.g.run(ws, lo, min(hi*j.unit, j.m), 0, j.n)
	} else {
		j.g.run(ws, 0, j.m, lo, min(hi*j.unit, j.n))
	}
	putBF16Workspace(ws)
}

// run computes the block C[m0:m1, n0:n1].
func (g *bf16Args) run(ws *bf16Workspace, m0, m1, n0, n1 int) {
	kcMax := min(bf16KC, g.k)
	kpMax := (kcMax + 1) / 2
	ncMax := min(bf16NC, ceilDiv(n1-n0, bf16NR)*bf16NR)
	mcMax := min(bf16MC, ceilDiv(m1-m0, bf16MR)*bf16MR)
	ws.b = growU32(ws.b, kpMax*ncMax)
	// A packed by rows (kpMax per row, mcMax rows) or by pairs (ceil32 of
	// the rows per pair); the slack covers the rows of a last partial tile,
	// which the kernel reads but does not store.
	ws.a = growU32(ws.a, max(kpMax*mcMax, kpMax*ceilDiv(mcMax, bf16NR)*bf16NR+bf16MR))
	ws.zero = growF32Zero(ws.zero, max(ncMax, mcMax))
	for jc := n0; jc < n1; jc += bf16NC {
		nb := min(bf16NC, n1-jc)
		for pc := 0; pc < g.k; pc += bf16KC {
			kb := min(bf16KC, g.k-pc)
			kp := (kb + 1) / 2
			g.packB(ws, pc, kb, jc, nb)
			beta := g.beta
			if pc > 0 {
				beta = 1
			}
			for ic := m0; ic < m1; ic += bf16MC {
				mb := min(bf16MC, m1-ic)
				rsa, csa := g.packA(ws, ic, mb, pc, kb)
				for jr := 0; jr < nb; jr += bf16NR {
					bp := ws.b[jr*kp : (jr+bf16NR)*kp]
					lo, hi := edgeMasks(min(bf16NR, nb-jr))
					nn := min(bf16NR, nb-jr)
					for ir := 0; ir < mb; ir += bf16MR {
						mm := min(bf16MR, mb-ir)
						ap := ws.a[ir*rsa:]
						_ = ap[(bf16MR-1)*rsa+(kp-1)*csa]
						cc := g.c[(ic+ir)*g.ldc+jc+jr:]
						_ = cc[(mm-1)*g.ldc+nn-1]
						bf16Z32(kp, &ap[0], rsa, csa, &bp[0], &cc[0], g.ldc, g.alpha, beta, mm, lo, hi)
					}
				}
			}
		}
	}
}

// growF32Zero returns a slice of n zeros, reusing s (which is never
// written) when it is long enough.
func growF32Zero(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// packB packs op(B)[pc:pc+kb, jc:jc+nb] into ws.b: sliver s (32 columns)
// at s*32*kp, pair p of its 32 columns at p*32 within it.
func (g *bf16Args) packB(ws *bf16Workspace, pc, kb, jc, nb int) {
	kp := (kb + 1) / 2
	if !g.transB {
		for p := range kp {
			l := pc + 2*p
			r0 := g.b[l*g.ldb+jc:]
			r1 := ws.zero
			if 2*p+1 < kb {
				r1 = g.b[(l+1)*g.ldb+jc:]
			}
			packRowsBF16(ws.b[p*bf16NR:], kp*bf16NR, r0, r1, nb)
		}
		return
	}
	// op(B)[l, j] = b[j*ldb+l]: full slivers are transposed 16 pairs of
	// 16 columns at a time (bf16TransPairs); the pairs past the last 16,
	// and the columns of a partial sliver, are rounded column by column
	// and spread over the sliver.
	ws.col = growU32(ws.col, kp)
	col := ws.col
	first := nb / bf16NR * bf16NR
	blocks := kb / 32
	for s := 0; s < first; s += bf16NR {
		src := g.b[(jc+s)*g.ldb+pc:]
		d := ws.b[s*kp : (s+bf16NR)*kp]
		if blocks > 0 {
			_ = src[(bf16NR-1)*g.ldb+32*blocks-1]
			_ = d[16*blocks*bf16NR-1]
			bf16TransPairs(&d[0], &src[0], g.ldb, blocks)
		}
		if rest := kb - 32*blocks; rest > 0 {
			tail := col[:(rest+1)/2]
			for c := range bf16NR {
				cvtBF16(tail, src[c*g.ldb+32*blocks:][:rest])
				dd := d[16*blocks*bf16NR+c:]
				for p, v := range tail {
					dd[p*bf16NR] = v
				}
			}
		}
	}
	for j := first; j < nb; j++ {
		cvtBF16(col, g.b[(jc+j)*g.ldb+pc:][:kb])
		s, lane := j/bf16NR, j%bf16NR
		d := ws.b[s*bf16NR*kp+lane:]
		for p, v := range col {
			d[p*bf16NR] = v
		}
	}
}

// packA packs op(A)[ic:ic+mb, pc:pc+kb] into ws.a and returns the strides
// (in dwords) at which the kernel finds pair p of row r: r*rsa + p*csa.
func (g *bf16Args) packA(ws *bf16Workspace, ic, mb, pc, kb int) (rsa, csa int) {
	kp := (kb + 1) / 2
	if !g.transA {
		for r := range mb {
			cvtBF16(ws.a[r*kp:], g.a[(ic+r)*g.lda+pc:][:kb])
		}
		return kp, 1
	}
	// op(A)[i, l] = a[l*lda+i]: rows l and l+1 of a give pair p of every
	// row of the block, side by side.
	w := ceilDiv(mb, bf16NR) * bf16NR
	for p := range kp {
		l := pc + 2*p
		r0 := g.a[l*g.lda+ic:]
		r1 := ws.zero
		if 2*p+1 < kb {
			r1 = g.a[(l+1)*g.lda+ic:]
		}
		packRowsBF16(ws.a[p*w:], bf16NR, r0, r1, mb)
	}
	return 1, w
}
