//go:build !purego

package cpu

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

//go:noescape
func stateFiniteF32AVX(x *float32, n int) bool

//go:noescape
func stateFiniteF64AVX(x *float64, n int) bool

// stateFinite32 reports whether data holds no NaN and no infinity,
// 32 values at a time where the CPU has AVX.
func stateFinite32(data []float32) bool {
	if n := len(data) &^ 31; n > 0 && nnHasAVX {
		if !stateFiniteF32AVX(&data[0], n) {
			return false
		}
		data = data[n:]
	}
	return tensor.FirstNonFinite32(data) < 0
}

// stateFinite64 is stateFinite32 for float64, 16 values at a time.
func stateFinite64(data []float64) bool {
	if n := len(data) &^ 15; n > 0 && nnHasAVX {
		if !stateFiniteF64AVX(&data[0], n) {
			return false
		}
		data = data[n:]
	}
	return tensor.FirstNonFinite64(data) < 0
}

//go:noescape
func stateSubScaledFiniteAVX(v, grad *float32, n int, alpha float32) bool

// stateSubScaledFinite32 returns the first i where v[i] - alpha*g[i],
// computed as nnSubScaledF32 computes it, is not finite, and that value
// (-1 when all are finite), without storing anything; ok is false when it
// cannot tell bit for bit (no AVX).
func stateSubScaledFinite32(v, g []float32, alpha float32) (at int, bad float32, ok bool) {
	if !nnHasAVX {
		return -1, 0, false
	}
	g = g[:len(v)]
	start := 0
	if n := len(v) &^ 15; n > 0 && stateSubScaledFiniteSplit(v[:n], g[:n], alpha) {
		start = n
	}
	for i := start; i < len(v); i++ {
		if x := v[i] - float32(alpha*g[i]); x-x != 0 {
			return i, x, true
		}
	}
	return -1, 0, true
}

// stateSubScaledFiniteSplit runs stateSubScaledFiniteAVX on len(v) (a
// multiple of 16) elements, split across cores as the update is.
func stateSubScaledFiniteSplit(v, g []float32, alpha float32) bool {
	if kernel.Serial(len(v)/16, 32) {
		return stateSubScaledFiniteAVX(&v[0], &g[0], len(v), alpha)
	}
	j, _ := gdCheckJobs.Get().(*gdCheckJob)
	if j == nil {
		j = new(gdCheckJob)
	}
	j.v, j.g, j.alpha = v, g, alpha
	j.bad.Store(false)
	kernel.ParallelRange(len(v)/16, 32, j)
	finite := !j.bad.Load()
	j.v, j.g = nil, nil
	gdCheckJobs.Put(j)
	return finite
}

// gdCheckJob is stateSubScaledFiniteSplit's split loop, pooled so that a
// step's check allocates nothing; its ranges count blocks of 16 elements.
type gdCheckJob struct {
	v, g  []float32
	alpha float32
	bad   atomic.Bool
}

func (j *gdCheckJob) Range(lo, hi int) {
	if !stateSubScaledFiniteAVX(&j.v[16*lo], &j.g[16*lo], 16*(hi-lo), j.alpha) {
		j.bad.Store(true)
	}
}

var gdCheckJobs sync.Pool

//go:noescape
func adamFiniteAVX(v, m, vv, grad *float32, n int, lrT, c1, c2, eps float32) bool

// stateAdamFinite32 reports whether the float32 Adam update
// (stateAdamF32, from v, the old value) would leave every element of v, m
// and vv finite, computing each as the update does, without storing
// anything; ok is false when it cannot tell bit for bit (no AVX).
func stateAdamFinite32(v, m, vv, g []float32, lrT, beta1, beta2, epsilon float32) (finite, ok bool) {
	if !adamHasAVX {
		return false, false
	}
	m, vv, g = m[:len(v)], vv[:len(v)], g[:len(v)]
	if adamBoundedFinite(v, m, vv, g, lrT, 1-beta1, 1-beta2, epsilon) {
		return true, true
	}
	n := len(v) &^ 7
	if n > 0 {
		j, _ := adamCheckJobs.Get().(*adamCheckJob)
		if j == nil {
			j = new(adamCheckJob)
		}
		*j = adamCheckJob{v: v, m: m, vv: vv, g: g, lrT: lrT, c1: 1 - beta1, c2: 1 - beta2, eps: epsilon}
		kernel.ParallelRange(n/8, 8*stateAdamF32Cost, j)
		finite = !j.bad.Load()
		*j = adamCheckJob{}
		adamCheckJobs.Put(j)
		if !finite {
			return false, true
		}
	}
	for i := n; i < len(v); i++ {
		var a, b, x [1]float32
		a[0], b[0], x[0] = m[i], vv[i], v[i]
		stateAdamRange(x[:], a[:], b[:], g[i:i+1], lrT, beta1, beta2, epsilon)
		if a[0]-a[0] != 0 || b[0]-b[0] != 0 || x[0]-x[0] != 0 {
			return false, true
		}
	}
	return true, true
}

// adamCheckJob is stateAdamFinite32's split loop, pooled; its ranges count
// blocks of 8 elements.
type adamCheckJob struct {
	v, m, vv, g      []float32
	lrT, c1, c2, eps float32
	bad              atomic.Bool
}

func (j *adamCheckJob) Range(lo, hi int) {
	if !adamFiniteAVX(&j.v[8*lo], &j.m[8*lo], &j.vv[8*lo], &j.g[8*lo], 8*(hi-lo), j.lrT, j.c1, j.c2, j.eps) {
		j.bad.Store(true)
	}
}

var adamCheckJobs sync.Pool

//go:noescape
func stateMaxBitsAVX2(x *float32, n int, mask uint32) uint32

// stateMaxBits returns the largest of the bits of x[i] & mask, compared as
// unsigned integers (0 for an empty x).
func stateMaxBits(x []float32, mask uint32) uint32 {
	var most uint32
	if n := len(x) &^ 7; n > 0 && nnHasAVX2 {
		most = stateMaxBitsAVX2(&x[0], n, mask)
		x = x[n:]
	}
	for _, f := range x {
		most = max(most, math.Float32bits(f)&mask)
	}
	return most
}

// adamBoundedFinite reports, from the largest magnitudes of the inputs
// alone, that the float32 Adam update (adamAVX, from v, the old value;
// c1 = 1-beta1 and c2 = 1-beta2 as it takes them) leaves every element of
// v, m and vv finite; false means that it cannot tell, and the update is
// then computed without storing (adamFiniteAVX). The scan reads the four
// arrays once, with no square root or division, so that a guarded step
// of a sane model costs about one pass of loads more than an unguarded one.
//
// With G, M, X the largest |g|, |m|, |v|, V the largest vv (every vv not
// negative), c1 and c2 in [0, 1], eps > 0 and u the unit roundoff, in
// float32 arithmetic rounded to nearest:
//   - new m = m + (g-m)*c1 has |new m| <= (M + (G+M)(1+u))(1+u) <= 3(G+M);
//   - new vv = vv + (g*g-vv)*c2 is at least 0 (g*g-vv rounds to at least
//     -vv, times c2 <= 1 to at least -vv, so the sum rounds to at least
//     0) and at most 3(G*G+V);
//   - sqrt(new vv)+eps is at least eps, so the step lrT*new m/(...) is at
//     most |lrT|*3(G+M)(1+u)^2/eps, and |new v| at most X plus that, with
//     a rounding.
//
// Each bound is computed in float64 and must stay below a quarter of the
// largest float32, which leaves room for every rounding above. A NaN or
// an infinity in any input makes a bound NaN or infinite, and the answer
// false.
func adamBoundedFinite(v, m, vv, g []float32, lrT, c1, c2, eps float32) bool {
	if !nnHasAVX2 || !(c1 >= 0 && c1 <= 1 && c2 >= 0 && c2 <= 1 && eps > 0 && eps <= math.MaxFloat32 && lrT-lrT == 0) {
		return false
	}
	j, _ := adamBoundJobs.Get().(*adamBoundJob)
	if j == nil {
		j = new(adamBoundJob)
	}
	*j = adamBoundJob{x: [4][]float32{g, m, vv, v}}
	if blocks := len(v) / 8; blocks > 0 {
		kernel.ParallelRange(blocks, 8, j)
	}
	j.Range(len(v)/8, len(v)/8) // the tail
	bits := [4]uint32{j.most[0].Load(), j.most[1].Load(), j.most[2].Load(), j.most[3].Load()}
	*j = adamBoundJob{}
	adamBoundJobs.Put(j)
	// vv's bits, sign included: below 0x80000000, none is negative (nor
	// -0), and the largest is the largest magnitude.
	if bits[2] >= 0x80000000 {
		return false
	}
	f := func(b uint32) float64 { return float64(math.Float32frombits(b)) }
	G, M, V, X := f(bits[0]), f(bits[1]), f(bits[2]), f(bits[3])
	const limit = math.MaxFloat32 / 4
	mNew := 3 * (G + M)
	vvNew := 3 * (G*G + V)
	lr := math.Abs(float64(lrT))
	num := lr * mNew * 1.01
	step := num / float64(eps) * 1.01
	return G+M <= limit && G*G <= limit && mNew <= limit && vvNew <= limit && num <= limit && step <= limit && X+step <= limit
}

// adamBoundJob is adamBoundedFinite's scan of g, m, vv and v, split across
// cores, pooled; its ranges count blocks of 8 elements, and Range(k, k)
// with k the number of whole blocks scans the tail. most holds each
// array's largest bits: of the magnitude for g, m and v, sign included
// for vv.
type adamBoundJob struct {
	x    [4][]float32
	most [4]atomic.Uint32
}

func (j *adamBoundJob) Range(lo, hi int) {
	end := 8 * hi
	if lo == hi {
		end = len(j.x[0])
	}
	for i, x := range j.x {
		mask := uint32(0x7fffffff)
		if i == 2 {
			mask = 0xffffffff
		}
		b := stateMaxBits(x[8*lo:end], mask)
		for {
			old := j.most[i].Load()
			if b <= old || j.most[i].CompareAndSwap(old, b) {
				break
			}
		}
	}
}

var adamBoundJobs sync.Pool
