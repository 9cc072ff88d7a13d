//go:build !purego

package cpu

import (
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
