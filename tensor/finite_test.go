package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// nonFiniteByValue is FirstNonFinite32 one value at a time: the reference.
func nonFiniteByValue(data []float32) int {
	for i, v := range data {
		if v-v != 0 {
			return i
		}
	}
	return -1
}

// TestNonFinite: the first NaN or infinity is found wherever it is (in
// either half of a word, in a block's tail, in an odd last value), and
// the largest finite values, subnormals and zeros of either sign are not
// taken for one.
func TestNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00001), math.Float32frombits(0xff800001)}
	good := []float32{math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, float32(math.Copysign(0, -1)), 0, 1, -1}
	for _, n := range []int{0, 1, 2, 3, 7, 255, 256, 257, 511, 513, 1000} {
		data := make([]float32, n)
		for i := range data {
			data[i] = good[rng.IntN(len(good))]
		}
		if got := FirstNonFinite32(data); got != -1 {
			t.Fatalf("%d finite values: FirstNonFinite32 = %d, want -1", n, got)
		}
		for i := range n {
			for _, at := range []int{i, rng.IntN(n)} {
				d := append([]float32(nil), data...)
				d[at] = bad[rng.IntN(len(bad))]
				if i < at {
					d[i] = bad[rng.IntN(len(bad))]
				}
				if got, want := FirstNonFinite32(d), nonFiniteByValue(d); got != want {
					t.Fatalf("%d values, non-finite at %d and %d: FirstNonFinite32 = %d, want %d", n, i, at, got, want)
				}
			}
		}
	}
}

// BenchmarkNonFinite checks the reference mlp's gradients (79,510
// values), against the check one value at a time in the same run.
func BenchmarkNonFinite(b *testing.B) {
	data := make([]float32, 79510)
	for i := range data {
		data[i] = float32(i%1000) / 7
	}
	for _, f := range []struct {
		name string
		fn   func([]float32) int
	}{{"words", FirstNonFinite32}, {"values", nonFiniteByValue}} {
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(data)))
			for b.Loop() {
				if f.fn(data) != -1 {
					b.Fatal("found a non-finite value")
				}
			}
		})
	}
}
