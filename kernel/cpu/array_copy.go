package cpu

import (
	"unsafe"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// The array kernels only move elements, so they work on the raw bytes of a
// tensor whatever its dtype: a box copy is a series of memmoves (copy on
// []byte), and the element-granular Transpose works on unsigned words of the
// element size. One code path then serves all six dtypes.

// arrayBytes returns the storage of t as bytes, sharing memory with it.
// The view is valid as long as t is; it is nil for an empty tensor.
func arrayBytes(t *tensor.Tensor) []byte {
	n := t.NumElements() * t.DType().Size()
	if n == 0 {
		return nil
	}
	var p unsafe.Pointer
	switch d := t.Data().(type) {
	case []float32:
		p = unsafe.Pointer(unsafe.SliceData(d))
	case []float64:
		p = unsafe.Pointer(unsafe.SliceData(d))
	case []int32:
		p = unsafe.Pointer(unsafe.SliceData(d))
	case []int64:
		p = unsafe.Pointer(unsafe.SliceData(d))
	case []bool:
		p = unsafe.Pointer(unsafe.SliceData(d))
	case []uint8:
		p = unsafe.Pointer(unsafe.SliceData(d))
	default:
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

// arrayWords views b, whose length is a multiple of unsafe.Sizeof(W), as
// words of type W. Tensor storage is allocated as typed slices, so it is
// aligned for its own element size, which is the W used here.
func arrayWords[W uint8 | uint32 | uint64](b []byte) []W {
	var w W
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*W)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(w)))
}

// arrayFillPattern fills dst with repetitions of elem (one element's bytes)
// by doubling memmoves, which is as fast as a typed fill loop.
func arrayFillPattern(dst, elem []byte) {
	if len(dst) == 0 {
		return
	}
	n := copy(dst, elem)
	for n < len(dst) {
		n += copy(dst[n:], dst[:n])
	}
}

// arrayElem returns the bytes of one element of dtype dt holding v
// (converted as tensor.SetFloat64At does; bool is v != 0).
func arrayElem(dt tensor.DType, v float64) []byte {
	if dt == tensor.Float32 && v == 1 {
		return arrayOneF32 // OnesLike of every float32 gradient
	}
	t := tensor.New(dt, 1)
	t.SetFloat64At(0, v)
	return arrayBytes(t)
}

// arrayOneF32 holds the bytes of float32 1; read only.
var arrayOneF32 = func() []byte {
	t := tensor.New(tensor.Float32, 1)
	t.SetFloat64At(0, 1)
	return arrayBytes(t)
}()

// arrayStrides returns row-major strides (in elements) for dims.
func arrayStrides(dims []int) []int {
	st := make([]int, len(dims))
	acc := 1
	for i := len(dims) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= dims[i]
	}
	return st
}

// arrayBox describes a rectangular box copy between two row-major arrays of
// equal rank: count elements per dimension, read from src at srcStart and
// written to dst at dstStart. Slice, Pad, Split, Concat and Tile are all
// one or more box copies.
type arrayBox struct {
	dst, src           []byte
	dstDims, srcDims   []int
	dstStart, srcStart []int
	count              []int
	esize              int
}

// apply performs the box copy. Trailing dimensions copied whole in both
// arrays are merged into one contiguous run, so that e.g. a Concat on
// axis 0 is a single memmove; the remaining rows are spread over the cores
// when the box is large.
func (b *arrayBox) apply() {
	r := len(b.count)
	total := tensor.NumElements(b.count)
	if total == 0 {
		return
	}
	// k is the first dimension of the contiguous run: dims k.. are copied as one.
	k := r
	run := 1
	for k > 0 {
		k--
		run *= b.count[k]
		if b.count[k] != b.srcDims[k] || b.count[k] != b.dstDims[k] {
			break
		}
	}
	sst, dst := arrayStrides(b.srcDims), arrayStrides(b.dstDims)
	outer := b.count[:k]
	rows := tensor.NumElements(outer)
	runBytes := run * b.esize
	kernel.ParallelFor(rows, run, func(lo, hi int) {
		// Decompose lo into an index over the outer dims, then step an odometer.
		idx := make([]int, k)
		for i, rem := k-1, lo; i >= 0; i-- {
			idx[i] = rem % outer[i]
			rem /= outer[i]
		}
		so, do := 0, 0
		for i := range r {
			o := 0
			if i < k {
				o = idx[i]
			}
			so += (b.srcStart[i] + o) * sst[i]
			do += (b.dstStart[i] + o) * dst[i]
		}
		for row := lo; row < hi; row++ {
			copy(b.dst[do*b.esize:do*b.esize+runBytes], b.src[so*b.esize:so*b.esize+runBytes])
			for i := k - 1; i >= 0; i-- {
				idx[i]++
				so += sst[i]
				do += dst[i]
				if idx[i] < outer[i] {
					break
				}
				so -= outer[i] * sst[i]
				do -= outer[i] * dst[i]
				idx[i] = 0
			}
		}
	})
}

// arrayTranspose writes src (dims) permuted by perm into dst, for any
// element size. Adjacent input dimensions that stay adjacent in the output
// are merged first, so NHWC->NCHW becomes a batch of 2-D transposes and
// an identity permutation becomes one memmove.
func arrayTranspose(dst, src []byte, esize int, dims, perm []int) {
	if len(src) == 0 {
		return
	}
	cd, cp := arrayCoalesce(dims, perm)
	if len(cp) == 1 {
		copy(dst, src)
		return
	}
	switch esize {
	case 1:
		arrayTransposeWords(arrayWords[uint8](dst), arrayWords[uint8](src), cd, cp)
	case 4:
		arrayTransposeWords(arrayWords[uint32](dst), arrayWords[uint32](src), cd, cp)
	case 8:
		arrayTransposeWords(arrayWords[uint64](dst), arrayWords[uint64](src), cd, cp)
	}
}

// arrayCoalesce drops size-1 dimensions and merges runs of input dimensions
// that appear consecutively in perm, returning the reduced dims and perm.
func arrayCoalesce(dims, perm []int) ([]int, []int) {
	// Keep the dims that are not 1, renumbered.
	newIdx := make([]int, len(dims))
	var kept []int
	for i, d := range dims {
		newIdx[i] = -1
		if d != 1 {
			newIdx[i] = len(kept)
			kept = append(kept, d)
		}
	}
	var p []int
	for _, j := range perm {
		if newIdx[j] >= 0 {
			p = append(p, newIdx[j])
		}
	}
	if len(p) == 0 {
		return []int{1}, []int{0}
	}
	// Merge: output positions i-1, i with p[i] == p[i-1]+1 form one dim.
	// group[j] is the merged dim that input dim j belongs to (heads only).
	head := make([]bool, len(kept))
	head[p[0]] = true
	for i := 1; i < len(p); i++ {
		if p[i] != p[i-1]+1 {
			head[p[i]] = true
		}
	}
	mergedDims := []int{}
	group := make([]int, len(kept))
	for j, d := range kept {
		if head[j] || j == 0 {
			mergedDims = append(mergedDims, d)
		} else {
			mergedDims[len(mergedDims)-1] *= d
		}
		group[j] = len(mergedDims) - 1
	}
	var mp []int
	for i, j := range p {
		if i == 0 || p[i] != p[i-1]+1 {
			mp = append(mp, group[j])
		}
	}
	return mergedDims, mp
}

// arrayTileSize is the edge of the square tiles of 2-D transposes. A tile
// touches arrayTileSize source and arrayTileSize destination cache lines;
// keeping that within the 8-way associativity of L1 avoids the conflict
// misses of power-of-two row strides (1024 columns: every row maps to the
// same cache set), which made 32x32 tiles 5x slower on 1024x1024.
const arrayTileSize = 8

func arrayTransposeWords[W uint8 | uint32 | uint64](dst, src []W, dims, perm []int) {
	r := len(dims)
	switch {
	case r == 2:
		arrayTranspose2D(dst, src, 1, dims[0], dims[1])
		return
	case r == 3 && perm[0] == 0 && perm[1] == 2:
		arrayTranspose2D(dst, src, dims[0], dims[1], dims[2])
		return
	}
	// General case: walk the output rows; each output row reads the input
	// with the stride of the input dimension that became the last one.
	inSt := arrayStrides(dims)
	outDims := make([]int, r)
	st := make([]int, r) // input stride of each output dimension
	for i, j := range perm {
		outDims[i] = dims[j]
		st[i] = inSt[j]
	}
	last := outDims[r-1]
	lastSt := st[r-1]
	rows := len(dst) / last
	kernel.ParallelFor(rows, last, func(lo, hi int) {
		for row := lo; row < hi; row++ {
			off := 0
			for i, rem := r-2, row; i >= 0; i-- {
				off += (rem % outDims[i]) * st[i]
				rem /= outDims[i]
			}
			out := dst[row*last : (row+1)*last]
			for c := range out {
				out[c] = src[off+c*lastSt]
			}
		}
	})
}

// arrayTranspose2D transposes batch matrices of rows x cols in tiles, so that
// both the reads and the writes stay within a few cache lines per tile.
func arrayTranspose2D[W uint8 | uint32 | uint64](dst, src []W, batch, rows, cols int) {
	tilesR := (rows + arrayTileSize - 1) / arrayTileSize
	mat := rows * cols
	kernel.ParallelFor(batch*tilesR, arrayTileSize*cols, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			b, tr := t/tilesR, t%tilesR
			s, d := src[b*mat:(b+1)*mat], dst[b*mat:(b+1)*mat]
			r0, r1 := tr*arrayTileSize, min((tr+1)*arrayTileSize, rows)
			for c0 := 0; c0 < cols; c0 += arrayTileSize {
				c1 := min(c0+arrayTileSize, cols)
				for i := r0; i < r1; i++ {
					row := s[i*cols : i*cols+cols]
					for j := c0; j < c1; j++ {
						d[j*rows+i] = row[j]
					}
				}
			}
		}
	})
}
