package linalg

import (
	"runtime"
	"sync"
)

type float interface{ ~float32 | ~float64 }

// kernel is a register-tiled micro-kernel plus the cache blocking that feeds it
// (BLIS/GotoBLAS structure). Packing copies a kc x nc panel of op(B) into
// nr-wide column slivers (kept in L3, one sliver hot in L1) and an mc x kc block
// of alpha*op(A) into mr-tall row slivers (kept in L2), so the micro-kernel
// streams both operands with unit stride whatever the transposes and strides
// of the caller, and edge tiles see zero padding instead of special cases.
type kernel[T float] struct {
	mr, nr     int
	mc, kc, nc int
	// micro computes the mr x nr tile C = Ap*Bp + beta*C over kc steps, where
	// ap holds mr*kc packed values (column by column) and bp kc*nr (row by row).
	// beta == 0 overwrites C. c has at least (mr-1)*ldc+nr elements.
	micro func(kc int, ap, bp, c []T, ldc int, beta T)
	// microDA, if not nil, is micro reading a full mr-row sliver of A where
	// it lies (element (r, l) at a[r*rsa+l*csa]) instead of packed, for
	// alpha == 1. See directA.
	microDA func(kc int, a []T, rsa, csa int, bp, c []T, ldc int, beta T)
	// microHalf and microHalfDA, if not nil, are micro and microDA for the
	// first nr/2 columns only (B still packed nr wide): the last sliver of
	// a product whose width leaves at most nr/2 columns there, such as the
	// MLP's 100 = 6*16+4, costs half a full tile instead of a whole one.
	microHalf   func(kc int, ap, bp, c []T, ldc int, beta T)
	microHalfDA func(kc int, a []T, rsa, csa int, bp, c []T, ldc int, beta T)
	// microEdge and microEdgeDA, if not nil, are micro and microDA that
	// write only the first mm rows and nn columns of the tile, straight to
	// C (AVX-512's masked stores): edge tiles then need no scratch tile and
	// merge, which cost as much as the product when k is short (a
	// convolution's input gradient with 25 columns over k = 32).
	microEdge   func(kc int, ap, bp, c []T, ldc int, beta T, mm, nn int)
	microEdgeDA func(kc int, a []T, rsa, csa int, bp, c []T, ldc int, beta T, mm, nn int)
}

// directSlivers is the number of nr-wide column slivers up to which A is
// read in place rather than packed. Packing A costs one pass over the
// block, repaid only when many slivers reuse it; the skinny products of
// training (MLP layers of 100 units, convolutions with 32 or 64 output
// channels) have 2 to 7 slivers and spent as long packing A as computing.
const directSlivers = 8

// transKCElems bounds the packed B panel (kc x its width) of a product
// computed as its transpose, whose kc is raised to fit it: the reference
// CNN's fc1 input gradient (C^T = W*dY^T, k = 1024, 64 packed columns) then
// runs in one kc block instead of four, with a quarter of the transposed
// merges and each row of W streamed whole; 25-30% less CPU time on one
// core (A B A B, caches flushed between calls). 2^16 values are 256 KiB,
// half of the smallest L2 of the machines measured.
const transKCElems = 1 << 16

// workspace holds one goroutine's packing buffers; pooled so that steady-state
// calls do not allocate.
type workspace[T float] struct {
	a, b, tile []T
}

// wsPool keeps workspaces between products, at most one more than there
// are processors. Not a sync.Pool: every garbage collection empties one,
// and the reference CNN's fc1 products then reallocated their megabytes of
// packing buffers every few training steps.
type wsPool[T float] struct{ list freeList[*workspace[T]] }

func (p *wsPool[T]) get() *workspace[T] {
	if w, ok := p.list.get(); ok {
		return w
	}
	return new(workspace[T])
}

func (p *wsPool[T]) put(w *workspace[T]) { p.list.put(w, runtime.GOMAXPROCS(0)+1) }

func grow[T float](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// parallelMin is the m*n*k below which a product runs on the calling goroutine.
// Measured on the 2-vCPU reference VM, waking a sleeping thread costs 50-200 us,
// which makes the MLP shapes (7.8M multiply-adds, 230 us serial) slower
// split in two on fresh goroutines. Parts run on the persistent pool (pool.go), whose
// workers stay awake between the kernels of a step, and split at 2^20 the
// MLP training step ran about 8% faster than at 2^23 (models'
// BenchmarkTrainStep/mlp, A B A B).
const parallelMin = 1 << 20

// gemm is the driver shared by all backends: argument checks, trivial cases,
// splitting across goroutines, then the blocked loop nest.
func gemm[T float](kn *kernel[T], pool *wsPool[T], transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if alpha == 0 || k == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	g := gemmArgs[T]{kn, transA, transB, false, k, alpha, a, lda, b, ldb, beta, c, ldc}
	if swapOperands(kn, transB, m, n, k, alpha) {
		// C^T = op(B)^T op(A)^T: the large op(B) becomes the A read in
		// place, the few rows of op(A) the B that is packed.
		g = gemmArgs[T]{kn, !transB, !transA, true, k, alpha, b, ldb, a, lda, beta, c, ldc}
		m, n = n, m
	}
	mt, nt := ceilDiv(m, kn.mr), ceilDiv(n, kn.nr)
	threads := runtime.GOMAXPROCS(0)
	if m*n*k < parallelMin || threads == 1 || mt*nt < 2 {
		ws := pool.get()
		g.run(ws, 0, m, 0, n)
		pool.put(ws)
		return
	}
	g.parallel(pool, threads, m, n, mt, nt)
}

// swapOperands reports whether an m x n product is computed as its
// transpose. A product with few rows and many columns (the input gradient
// dY*W^T of a fully connected layer at a small batch: 50 x 3136 over
// k = 1024 in the reference CNN's fc1) would pack all of op(B), a pass over the whole weight matrix for only
// ceil(m/mr) micro-tiles of reuse. Transposed, op(B) is read in place by
// the direct-A micro-kernel and only the m rows are packed. Only when op(B)
// is B^T: B's rows are then the swapped A's rows, read with unit stride (read
// by columns, at the 4 KiB stride of a 1024-wide matrix, the fc1 forward
// product ran slower than packed). And only over a long k: every tile of
// C^T is merged transposed from a scratch tile, which at k = 100 (the
// MLP's dY*W^T) cost more than the packing it saves.
func swapOperands[T float](kn *kernel[T], transB bool, m, n, k int, alpha T) bool {
	return kn.microDA != nil && alpha == 1 && transB && k > kn.kc &&
		ceilDiv(m, kn.nr) <= directSlivers && ceilDiv(n, kn.nr) > directSlivers
}

// gemmJob is one product split across the pool: parts are ranges of
// micro-tiles of the dimension with more of them. Each part packs its own
// panels, so no synchronisation is needed beyond the final wait. Jobs are
// pooled so that a parallel product does not allocate.
type gemmJob[T float] struct {
	g          gemmArgs[T]
	ws         *wsPool[T]
	splitM     bool
	m, n, unit int
}

func (j *gemmJob[T]) Range(lo, hi int) {
	ws := j.ws.get()
	lo *= j.unit
	if j.splitM {
		j.g.run(ws, lo, min(hi*j.unit, j.m), 0, j.n)
	} else {
		j.g.run(ws, 0, j.m, lo, min(hi*j.unit, j.n))
	}
	j.ws.put(ws)
}

var jobPoolF32, jobPoolF64 sync.Pool

func (g gemmArgs[T]) parallel(pool *wsPool[T], threads, m, n, mt, nt int) {
	jobs := &jobPoolF32
	if _, f64 := any(g.alpha).(float64); f64 {
		jobs = &jobPoolF64
	}
	j, _ := jobs.Get().(*gemmJob[T])
	if j == nil {
		j = new(gemmJob[T])
	}
	*j = gemmJob[T]{g: g, ws: pool, splitM: mt >= nt, m: m, n: n, unit: g.kn.nr}
	tiles := nt
	if j.splitM {
		tiles, j.unit = mt, g.kn.mr
	}
	Parallel(tiles, gemmParts(threads, m, n, g.k), j)
	*j = gemmJob[T]{}
	jobs.Put(j)
}

// gemmPartWork is the multiply-adds below which a product is not cut into
// more parts than threads. Each part packs its own panels, so more parts
// cost more packing; but parts are claimed, not assigned (see Parallel), so
// on a shared machine a thread that is descheduled holds up only its own
// small part while the others take the rest.
const gemmPartWork = 1 << 21

// gemmParts returns how many parts an m x n x k product is split into on
// threads threads: one per thread, up to four per thread for large
// products, always a multiple of threads (3 parts on 2 threads would leave
// one thread a third of the work to do alone at the end).
func gemmParts(threads, m, n, k int) int {
	return threads * min(4, max(1, m*n*k/(threads*gemmPartWork)))
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// scale sets C = beta*C, writing zeros (not beta*NaN) when beta == 0.
func scale[T float](m, n int, beta T, c []T, ldc int) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
		} else if beta != 1 {
			for j := range row {
				row[j] *= beta
			}
		}
	}
}

type gemmArgs[T float] struct {
	kn             *kernel[T]
	transA, transB bool
	// transC: the product computed is C^T, so element (i, j) of the
	// driver's C is c[j*ldc+i]; tiles are then always merged from ws.tile.
	transC bool
	k      int
	alpha  T
	a      []T
	lda    int
	b      []T
	ldb    int
	beta   T
	c      []T
	ldc    int
}

// run computes the block C[m0:m1, n0:n1] with the loop nest jc (nc) -> pc (kc)
// -> ic (mc) -> jr (nr) -> ir (mr).
func (g *gemmArgs[T]) run(ws *workspace[T], m0, m1, n0, n1 int) {
	kn := g.kn
	mr, nr := kn.mr, kn.nr
	direct := kn.microDA != nil && g.alpha == 1 && ceilDiv(n1-n0, nr) <= directSlivers
	kc := kn.kc
	if direct && g.transC {
		// Every kc block of a transposed product is merged into C from
		// a scratch tile, element by element; its few columns of packed
		// B allow longer blocks in L2 (see transKCElems).
		kc = max(kc, min(g.k, transKCElems/(ceilDiv(n1-n0, nr)*nr)))
	}
	kcMax := min(kc, g.k)
	ncMax := min(kn.nc, ceilDiv(n1-n0, nr)*nr)
	mcMax := min(kn.mc, ceilDiv(m1-m0, mr)*mr)
	ws.b = grow(ws.b, kcMax*ncMax)
	ws.a = grow(ws.a, kcMax*mcMax)
	ws.tile = grow(ws.tile, mr*nr)
	for jc := n0; jc < n1; jc += kn.nc {
		nb := min(kn.nc, n1-jc)
		for pc := 0; pc < g.k; pc += kc {
			kb := min(kc, g.k-pc)
			packB(nr, g.transB, g.b, g.ldb, pc, kb, jc, nb, ws.b)
			beta := g.beta
			if pc > 0 {
				beta = 1
			}
			for ic := m0; ic < m1; ic += kn.mc {
				mb := min(kn.mc, m1-ic)
				if direct {
					// Only a partial last sliver is packed, into sliver 0.
					if full := mb / mr * mr; full < mb {
						packA(mr, g.transA, g.a, g.lda, ic+full, mb-full, pc, kb, g.alpha, ws.a)
					}
					g.macroDirect(ws, ic, pc, kb, mb, nb, g.c[g.offset(ic, jc):], beta)
					continue
				}
				packA(mr, g.transA, g.a, g.lda, ic, mb, pc, kb, g.alpha, ws.a)
				g.macro(ws, kb, mb, nb, g.c[g.offset(ic, jc):], beta)
			}
		}
	}
}

// offset is the index in c of the driver's C element (i, j).
func (g *gemmArgs[T]) offset(i, j int) int {
	if g.transC {
		return j*g.ldc + i
	}
	return i*g.ldc + j
}

// merge writes the valid mm x nn part of the micro-tile t (row stride nr)
// to the tile at (ir, jr) of the block whose origin is c: C = T + beta*C.
func (g *gemmArgs[T]) merge(t, c []T, ir, jr, mm, nn int, beta T) {
	nr, ldc := g.kn.nr, g.ldc
	if g.transC {
		for j := range nn {
			dst := c[(jr+j)*ldc+ir : (jr+j)*ldc+ir+mm]
			for i := range dst {
				v := t[i*nr+j]
				if beta != 0 {
					v += beta * dst[i]
				}
				dst[i] = v
			}
		}
		return
	}
	for i := range mm {
		dst := c[(ir+i)*ldc+jr : (ir+i)*ldc+jr+nn]
		src := t[i*nr : i*nr+nn]
		if beta == 0 {
			copy(dst, src)
		} else {
			for j := range dst {
				dst[j] = src[j] + beta*dst[j]
			}
		}
	}
}

// macro multiplies a packed mb x kb block of A by a packed kb x nb panel of B
// into c (whose origin is the block's top-left element).
func (g *gemmArgs[T]) macro(ws *workspace[T], kb, mb, nb int, c []T, beta T) {
	kn := g.kn
	mr, nr := kn.mr, kn.nr
	// One B sliver stays in L1 while the A slivers stream past it from L2.
	for jr := 0; jr < nb; jr += nr {
		for ir := 0; ir < mb; ir += mr {
			g.tile(ws, kb, mb, nb, ir, jr, c, beta)
		}
	}
}

// tile runs the micro-kernel on the packed slivers of A and B at (ir, jr).
func (g *gemmArgs[T]) tile(ws *workspace[T], kb, mb, nb, ir, jr int, c []T, beta T) {
	kn := g.kn
	mr, nr, ldc := kn.mr, kn.nr, g.ldc
	bp := ws.b[jr*kb : (jr+nr)*kb]
	nn := min(nr, nb-jr)
	ap := ws.a[ir*kb : (ir+mr)*kb]
	mm := min(mr, mb-ir)
	if mm == mr && nn == nr && !g.transC {
		kn.micro(kb, ap, bp, c[ir*ldc+jr:], ldc, beta)
		return
	}
	if kn.microEdge != nil && !g.transC {
		kn.microEdge(kb, ap, bp, c[ir*ldc+jr:], ldc, beta, mm, nn)
		return
	}
	// Edge tile: compute the padded tile aside, merge the valid part.
	t := ws.tile
	if 2*nn <= nr && kn.microHalf != nil {
		kn.microHalf(kb, ap, bp, t, nr, 0)
	} else {
		kn.micro(kb, ap, bp, t, nr, 0)
	}
	g.merge(t, c, ir, jr, mm, nn, beta)
}

// macroDirect is macro for rows ic.. of op(A) read in place (full slivers)
// or from the packed partial sliver at the start of ws.a.
func (g *gemmArgs[T]) macroDirect(ws *workspace[T], ic, pc, kb, mb, nb int, c []T, beta T) {
	kn := g.kn
	mr, nr, ldc := kn.mr, kn.nr, g.ldc
	rsa, csa := g.lda, 1
	if g.transA {
		rsa, csa = 1, g.lda
	}
	full := mb / mr * mr
	for jr := 0; jr < nb; jr += nr {
		bp := ws.b[jr*kb : (jr+nr)*kb]
		nn := min(nr, nb-jr)
		for ir := 0; ir < mb; ir += mr {
			if ir < full && nn == nr && !g.transC {
				kn.microDA(kb, g.a[(ic+ir)*rsa+pc*csa:], rsa, csa, bp, c[ir*ldc+jr:], ldc, beta)
				continue
			}
			if kn.microEdge != nil && !g.transC {
				if ir < full {
					kn.microEdgeDA(kb, g.a[(ic+ir)*rsa+pc*csa:], rsa, csa, bp, c[ir*ldc+jr:], ldc, beta, mr, nn)
				} else {
					kn.microEdge(kb, ws.a[:mr*kb], bp, c[ir*ldc+jr:], ldc, beta, min(mr, mb-ir), nn)
				}
				continue
			}
			t := ws.tile
			half := 2*nn <= nr && kn.microHalf != nil
			switch {
			case ir < full && half:
				kn.microHalfDA(kb, g.a[(ic+ir)*rsa+pc*csa:], rsa, csa, bp, t, nr, 0)
			case ir < full:
				kn.microDA(kb, g.a[(ic+ir)*rsa+pc*csa:], rsa, csa, bp, t, nr, 0)
			case half:
				kn.microHalf(kb, ws.a[:mr*kb], bp, t, nr, 0)
			default:
				kn.micro(kb, ws.a[:mr*kb], bp, t, nr, 0)
			}
			g.merge(t, c, ir, jr, min(mr, mb-ir), nn, beta)
		}
	}
}

// packA copies alpha*op(A)[i0:i0+mb, p0:p0+kb] into mr-row slivers: sliver s
// holds, for each l, the mr values op(A)[i0+s*mr+r, p0+l], r = 0..mr-1.
// Rows past mb are zero. Full 6-row slivers (the avx2 tile) take unrolled
// paths: packing is what bounds skinny products such as conv filter grads.
// Full slivers of an even number of rows above 6 are packed two rows at a time.
func packA[T float](mr int, trans bool, a []T, lda, i0, mb, p0, kb int, alpha T, dst []T) {
	for s := 0; s < mb; s += mr {
		d := dst[s*kb : (s+mr)*kb]
		rows := min(mr, mb-s)
		switch {
		case rows == 6 && mr == 6 && trans:
			off := p0*lda + i0 + s
			for l := 0; l < kb; l++ {
				src := a[off : off+6 : off+6]
				dd := d[l*6 : l*6+6 : l*6+6]
				dd[0], dd[1], dd[2] = alpha*src[0], alpha*src[1], alpha*src[2]
				dd[3], dd[4], dd[5] = alpha*src[3], alpha*src[4], alpha*src[5]
				off += lda
			}
			continue
		case rows == 10 && mr == 10 && !trans:
			packA10(a[(i0+s)*lda+p0:], lda, kb, alpha, d)
			continue
		case rows == mr && mr > 6 && mr%2 == 0 && !trans:
			packAPairs(a[(i0+s)*lda+p0:], lda, mr, kb, alpha, d)
			continue
		case rows == 6 && mr == 6:
			base := (i0+s)*lda + p0
			r0 := a[base : base+kb]
			r1 := a[base+lda : base+lda+kb]
			r2 := a[base+2*lda : base+2*lda+kb]
			r3 := a[base+3*lda : base+3*lda+kb]
			r4 := a[base+4*lda : base+4*lda+kb]
			r5 := a[base+5*lda : base+5*lda+kb]
			for l := range r0 {
				dd := d[l*6 : l*6+6 : l*6+6]
				dd[0], dd[1], dd[2] = alpha*r0[l], alpha*r1[l], alpha*r2[l]
				dd[3], dd[4], dd[5] = alpha*r3[l], alpha*r4[l], alpha*r5[l]
			}
			continue
		}
		if rows < mr {
			clear(d)
		}
		if trans {
			// op(A)[i,l] = a[l*lda+i]: each l gives rows contiguous values.
			for l := range kb {
				src := a[(p0+l)*lda+i0+s:][:rows]
				dd := d[l*mr:][:rows]
				for r, v := range src {
					dd[r] = alpha * v
				}
			}
			continue
		}
		for r := range rows {
			src := a[(i0+s+r)*lda+p0:][:kb]
			for l, v := range src {
				d[l*mr+r] = alpha * v
			}
		}
	}
}

// packB copies op(B)[p0:p0+kb, j0:j0+nb] into nr-column slivers: sliver s
// holds, for each l, the nr values op(B)[p0+l, j0+s*nr+c]. Columns past nb are zero.
func packB[T float](nr int, trans bool, b []T, ldb, p0, kb, j0, nb int, dst []T) {
	full := 0
	if !trans && nr%16 == 0 {
		// Full slivers row by row: each row of B is read once, front to
		// back. Sliver by sliver, the reads would stride by ldb, and at
		// the 4 KiB stride of a 1024-wide weight (the reference CNN's
		// fc1) every line came from memory unprefetched, in cache sets
		// that keep only 8 of them. Each 64-byte array copy of the Go
		// loop is still a call to memmove, and with W coming from
		// memory the fc1 forward product spent twice as long packing as
		// multiplying; packFullRows's assembly halved its time.
		full = nb / nr * nr
		if !packFullRows(b, ldb, p0, kb, j0, full/nr, nr, dst) {
			for l := range kb {
				src := b[(p0+l)*ldb+j0:][:full]
				for s := 0; s < full; s += nr {
					d := dst[s*kb+l*nr:]
					for c := 0; c < nr; c += 16 {
						*(*[16]T)(d[c:]) = *(*[16]T)(src[s+c:])
					}
				}
			}
		}
	}
	for s := full; s < nb; s += nr {
		d := dst[s*kb : (s+nr)*kb]
		cols := min(nr, nb-s)
		if cols < nr {
			clear(d)
		}
		if !trans {
			for l := range kb {
				copy(d[l*nr:l*nr+cols], b[(p0+l)*ldb+j0+s:])
			}
			continue
		}
		// op(B)[l,j] = b[j*ldb+l]: each column j is a contiguous run over l.
		for c := range cols {
			src := b[(j0+s+c)*ldb+p0:][:kb]
			for l, v := range src {
				d[l*nr+c] = v
			}
		}
	}
}

// packFullRows packs the full slivers of packB's block, slivers of them
// nr wide, with the assembly of packRowsF32 when there is one for T and
// this CPU, and reports whether it did.
func packFullRows[T float](b []T, ldb, p0, kb, j0, slivers, nr int, dst []T) bool {
	b32, ok := any(b).([]float32)
	if !ok || slivers == 0 || kb == 0 {
		return false
	}
	return packRowsF32(b32[p0*ldb+j0:], ldb, kb, slivers, nr, any(dst).([]float32))
}

// packAPairs packs the mr x kb block of a (row stride lda, mr even) into
// d, column by column, scaled by alpha, two rows at a time: one row at a
// time strides through the whole sliver once per row (the avx512 tile's
// 14 rows took three times as long), and the dozen row slices of an
// unrolled loop are more than the registers hold.
func packAPairs[T float](a []T, lda, mr, kb int, alpha T, d []T) {
	d = d[:mr*kb]
	for r := 0; r < mr; r += 2 {
		r0 := a[r*lda : r*lda+kb]
		r1 := a[(r+1)*lda : (r+1)*lda+kb]
		for l := range r0 {
			dd := d[l*mr+r : l*mr+r+2 : l*mr+r+2]
			dd[0], dd[1] = alpha*r0[l], alpha*r1[l]
		}
	}
}

// packA10 is packAPairs for the avx512 tile's 10 rows, all ten read at
// once: each row is a short run (kb values), too short for the hardware
// prefetcher to get ahead of two at a time, and ten streams in flight hide
// more of the latency of a block that comes from L3 (6% of a 1024^3
// product at two rows at a time).
func packA10[T float](a []T, lda, kb int, alpha T, d []T) {
	r0 := a[:kb]
	r1 := a[lda:][:len(r0)]
	r2 := a[2*lda:][:len(r0)]
	r3 := a[3*lda:][:len(r0)]
	r4 := a[4*lda:][:len(r0)]
	r5 := a[5*lda:][:len(r0)]
	r6 := a[6*lda:][:len(r0)]
	r7 := a[7*lda:][:len(r0)]
	r8 := a[8*lda:][:len(r0)]
	r9 := a[9*lda:][:len(r0)]
	d = d[:10*len(r0)]
	for l := range r0 {
		dd := (*[10]T)(d[l*10:])
		dd[0], dd[1], dd[2], dd[3], dd[4] = alpha*r0[l], alpha*r1[l], alpha*r2[l], alpha*r3[l], alpha*r4[l]
		dd[5], dd[6], dd[7], dd[8], dd[9] = alpha*r5[l], alpha*r6[l], alpha*r7[l], alpha*r8[l], alpha*r9[l]
	}
}
