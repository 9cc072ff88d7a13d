// Package topk picks the entries of largest magnitude of a float32 vector:
// the selection of top-k gradient compression (Deep Gradient Compression,
// Lin et al. 2018), shared by the all-reduce ring and the TopKCompress op.
//
//	var sel topk.Selector
//	idx := sel.Select(nil, residual, k) // ascending indices of the k largest |residual[i]|
//	for _, i := range idx {
//		send(i, residual[i])
//		residual[i] = 0
//	}
//
// A Selector keeps its scratch between calls, so that selecting from vectors
// of one size allocates nothing once dst and the scratch have grown.
package topk

import (
	"math"
	"math/rand/v2"
)

// sampleSize is the size of the sample the threshold of a large vector is
// estimated on: it holds about sampleSize*k/n of the k largest, enough for
// an estimate within a few percent. Vectors of up to 2*sampleSize entries
// are selected exactly.
const sampleSize = 1 << 15

// Count is the number of entries top-k sends of n at ratio:
// min(max(int(ratio*n), 1), n), with ratio*n taken as the integer it is
// within float32 rounding of, so that a ratio of 0.01 that went through a
// float32 (0.0099999998) sends 10 of 1000 entries rather than 9.
func Count(ratio float64, n int) int {
	p := ratio * float64(n)
	if up := math.Round(p); up > p && up-p <= p*0x1p-24 {
		p = up
	}
	return min(max(int(p), 1), n)
}

// Selector picks the k entries of largest magnitude of a vector. It keeps
// scratch and, for large vectors, a random stream between calls. The zero
// value is ready to use. A Selector is not safe for concurrent use.
type Selector struct {
	mags []float32 // scratch: magnitudes of the vector, a sample or the candidates
	rng  *rand.Rand
}

// Select appends to dst[:0] the indices, in ascending order, of the k
// entries of v of largest magnitude, and returns it; k is clamped to
// [1, len(v)] and nothing is selected from an empty v. Of entries of equal
// magnitude at the k-th place, those of lowest index are chosen. The result
// is always the first m entries of v in order of decreasing magnitude, then
// increasing index, for some m <= k; m is less than k when:
//
//   - v has fewer than k non-zero entries: zeros are never selected;
//   - v has more than 2*32768 entries and the threshold estimated on a
//     random sample of v (aimed at 1.2k entries) overshoots: every entry
//     above it is selected, and rarely are they fewer than k. Error feedback
//     sends the others at a later step.
//
// The sample is drawn from a stream the Selector seeds at its first such
// call with (len(v), k), so that a Selector given the same vectors selects
// the same entries. The cost is two passes over v, plus a quickselect over
// min(len(v), 32768) magnitudes and one over the entries above the
// threshold. v must not hold NaN: the choice is then unspecified (but
// within v). Select writes only dst and the Selector's scratch; dst may grow
// beyond k entries while the candidates are collected.
func (s *Selector) Select(dst []int32, v []float32, k int) []int32 {
	dst = dst[:0]
	n := len(v)
	if n == 0 {
		return dst
	}
	k = min(max(k, 1), n)
	thr := s.threshold(v, k)
	for i, x := range v {
		if m := math.Float32bits(x) & 0x7fffffff; m >= thr && m != 0 {
			dst = append(dst, int32(i))
		}
	}
	if len(dst) <= k {
		return dst
	}
	// Keep the k largest candidates, in index order, compacting dst in
	// place (the write position never passes the read position).
	s.mags = s.mags[:0]
	for _, i := range dst {
		s.mags = append(s.mags, abs32(v[i]))
	}
	kth := kthLargest(s.mags, k)
	ties := k // of the k-th's magnitude, how many may go
	for _, m := range s.mags {
		if m > kth {
			ties--
		}
	}
	out := dst[:0]
	for _, i := range dst {
		if m := abs32(v[i]); m > kth || m == kth && ties > 0 {
			if m == kth {
				ties--
			}
			out = append(out, i)
		}
	}
	return out
}

// threshold estimates, as float32 magnitude bits (which order as the
// magnitudes do), a threshold above which about 1.2k of v's entries lie:
// the exact k-th largest magnitude when v is small.
func (s *Selector) threshold(v []float32, k int) uint32 {
	n := len(v)
	s.mags = s.mags[:0]
	if n <= 2*sampleSize {
		for _, x := range v {
			s.mags = append(s.mags, abs32(x))
		}
		return math.Float32bits(kthLargest(s.mags, k))
	}
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(uint64(n), uint64(k)))
	}
	for range sampleSize {
		s.mags = append(s.mags, abs32(v[s.rng.IntN(n)]))
	}
	ks := min(max(int(1.2*float64(k)*sampleSize/float64(n)), 1), sampleSize)
	return math.Float32bits(kthLargest(s.mags, ks))
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// kthLargest returns the k-th largest of vals (1 <= k <= len(vals)),
// reordering vals: a quickselect, linear on average.
func kthLargest(vals []float32, k int) float32 {
	lo, hi, want := 0, len(vals)-1, k-1 // want: the index in descending order
	for lo < hi {
		// Median of three as the pivot, then a Hoare partition in
		// descending order.
		mid := lo + (hi-lo)/2
		a, b, c := vals[lo], vals[mid], vals[hi]
		p := max(min(a, b), min(max(a, b), c))
		i, j := lo, hi
		for i <= j {
			for vals[i] > p {
				i++
			}
			for vals[j] < p {
				j--
			}
			if i <= j {
				vals[i], vals[j] = vals[j], vals[i]
				i++
				j--
			}
		}
		switch {
		case want <= j:
			hi = j
		case want >= i:
			lo = i
		default:
			return vals[want]
		}
	}
	return vals[want]
}
