package summary

import (
	"fmt"
	"math"
	"sort"
	"sync"

	pb "github.com/distflow/distflow/proto/distflowpb"
)

// ErrNonFinite reports a NaN or infinite value given to a histogram, which
// TensorBoard cannot draw (TensorFlow's histogram op rejects them too).
var ErrNonFinite = fmt.Errorf("non-finite value")

// DefaultBucketLimits returns TensorFlow's default histogram bucket limits:
// -DBL_MAX, the negated exponential series from -1e20 up to -1e-12, 0, then
// 1e-12 growing by a factor 1.1 while below 1e20, and DBL_MAX. Bucket i
// counts the values v with limit[i-1] <= v < limit[i]. The slice is shared:
// callers must not modify it.
func DefaultBucketLimits() []float64 { return defaultLimits() }

var defaultLimits = sync.OnceValue(func() []float64 {
	var pos []float64
	for v := 1e-12; v < 1e20; v *= 1.1 {
		pos = append(pos, v)
	}
	pos = append(pos, math.MaxFloat64)
	limits := make([]float64, 0, 2*len(pos)+1)
	for i := len(pos) - 1; i >= 0; i-- {
		limits = append(limits, -pos[i])
	}
	limits = append(limits, 0)
	return append(limits, pos...)
})

// NewHistogram summarises values over the default buckets, encoded as
// TensorFlow encodes them: each run of empty buckets collapses into one entry
// with count 0 whose limit is the run's last, and an empty histogram has the
// single bucket (DBL_MAX, 0). The bucket counts sum to num. A NaN or
// infinite value is an error wrapping ErrNonFinite.
func NewHistogram(values []float64) (*pb.HistogramProto, error) {
	limits := defaultLimits()
	counts := make([]float64, len(limits))
	h := &pb.HistogramProto{Min: math.MaxFloat64, Max: -math.MaxFloat64}
	for i, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("summary: histogram value %d is %v: %w", i, v, ErrNonFinite)
		}
		// The first limit above v, as C++'s upper_bound; DBL_MAX itself
		// falls into the last bucket.
		b := sort.Search(len(limits), func(j int) bool { return limits[j] > v })
		counts[min(b, len(limits)-1)]++
		h.Min, h.Max = min(h.Min, v), max(h.Max, v)
		h.Num++
		h.Sum += v
		h.SumSquares += v * v
	}
	for i := 0; i < len(counts); {
		limit, count := limits[i], counts[i]
		i++
		if count == 0 {
			for i < len(counts) && counts[i] == 0 {
				limit = limits[i]
				i++
			}
		}
		h.BucketLimit = append(h.BucketLimit, limit)
		h.Bucket = append(h.Bucket, count)
	}
	return h, nil
}
