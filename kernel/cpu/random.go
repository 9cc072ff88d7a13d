package cpu

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

func init() {
	kernel.Register("RandomNormal", kernel.CPU, stateRandomFactory(stateSampleNormal))
	kernel.Register("TruncatedNormal", kernel.CPU, stateRandomFactory(stateSampleTruncated))
	kernel.Register("RandomUniform", kernel.CPU, stateRandomFactory(stateSampleUniform))
}

// stateRandomBlock is the number of samples drawn from one sub-stream. It is
// fixed (not derived from the core count) so that results do not depend on
// how many goroutines fill the tensor.
const stateRandomBlock = 1 << 14

// stateSampler draws samples of one distribution in both float types;
// float32 samples are drawn directly (not rounded from float64) so that, for
// example, a uniform float32 sample is never rounded up to 1.
type stateSampler struct {
	f32 func(r *rand.Rand) float32
	f64 func(r *rand.Rand) float64
}

var (
	stateSampleNormal = stateSampler{
		f32: func(r *rand.Rand) float32 { return float32(r.NormFloat64()) },
		f64: func(r *rand.Rand) float64 { return r.NormFloat64() },
	}
	stateSampleTruncated = stateSampler{
		f32: func(r *rand.Rand) float32 { return float32(stateTruncated(r)) },
		f64: stateTruncated,
	}
	stateSampleUniform = stateSampler{
		f32: func(r *rand.Rand) float32 { return r.Float32() },
		f64: func(r *rand.Rand) float64 { return r.Float64() },
	}
)

// stateTruncated re-draws standard normal samples beyond 2 standard
// deviations, as TensorFlow's TruncatedNormal does (about 4.6% of draws).
func stateTruncated(r *rand.Rand) float64 {
	for {
		if x := r.NormFloat64(); x > -2 && x < 2 {
			return x
		}
	}
}

// stateMix is the splitmix64 finalizer: it decorrelates the seeds of
// neighbouring sub-streams.
func stateMix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// stateRandomKernel owns the random stream of one node. Each step draws a
// step seed from the stream under the mutex; block b of the output is then
// filled, possibly in parallel, from the sub-stream (step seed, b).
type stateRandomKernel struct {
	dtype  tensor.DType
	sample stateSampler

	mu  sync.Mutex
	rng *rand.PCG
}

func stateRandomFactory(sample stateSampler) kernel.Factory {
	return func(n *graph.Node) (kernel.Kernel, error) {
		if dt := n.AttrDType("dtype"); !dt.IsFloat() {
			return nil, fmt.Errorf("kernel: node %s: dtype must be float32 or float64, got %v", n, dt)
		}
		seed, seed2 := uint64(n.AttrInt("seed")), uint64(n.AttrInt("seed2"))
		if seed == 0 && seed2 == 0 {
			var b [16]byte
			_, _ = crand.Read(b[:]) // never fails on supported platforms
			seed, seed2 = binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])
		}
		return &stateRandomKernel{dtype: n.AttrDType("dtype"), sample: sample, rng: rand.NewPCG(seed, seed2)}, nil
	}
}

func (k *stateRandomKernel) Compute(c *kernel.Context) error {
	st := c.Input(0)
	if st.Rank() != 1 || (st.DType() != tensor.Int32 && st.DType() != tensor.Int64) {
		return c.Errorf("shape must be an int32 or int64 vector, got %v%v", st.DType(), st.StaticShape())
	}
	dims := make([]int, st.NumElements())
	for i := range dims {
		dims[i] = int(st.Float64At(i))
		if dims[i] < 0 {
			return c.Errorf("shape %v has a negative dimension", st)
		}
	}
	out := c.Alloc(0, k.dtype, dims...)
	k.mu.Lock()
	stepSeed := k.rng.Uint64()
	k.mu.Unlock()

	n := out.NumElements()
	blocks := (n + stateRandomBlock - 1) / stateRandomBlock
	f32, f64 := out.Float32s(), out.Float64s()
	kernel.ParallelFor(blocks, stateRandomBlock*16, func(lo, hi int) {
		var src rand.PCG
		r := rand.New(&src)
		for b := lo; b < hi; b++ {
			src.Seed(stepSeed, stateMix(stepSeed+uint64(b)*0x9e3779b97f4a7c15))
			start, end := b*stateRandomBlock, min((b+1)*stateRandomBlock, n)
			if f32 != nil {
				for i := start; i < end; i++ {
					f32[i] = k.sample.f32(r)
				}
			} else {
				for i := start; i < end; i++ {
					f64[i] = k.sample.f64(r)
				}
			}
		}
	})
	return nil
}
