package estimator

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/internal/fuzztest"
)

// sparseCase is a gradient and a selection of it in index order.
func sparseCase(rng *rand.Rand, n, k int, spread float64) ([]float32, []int32) {
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64() * math.Exp(spread*rng.NormFloat64()))
	}
	sel := make([]int32, 0, k)
	for _, i := range rng.Perm(n)[:k] {
		sel = append(sel, int32(i))
	}
	slices.Sort(sel)
	return vals, sel
}

// TestSparseRoundTrip: a decoded segment holds the selected entries within
// binary16's rounding at the segment's scale, nothing else; decoding it
// with -1 into the values leaves exactly what was not received; no word
// is a float32 NaN or infinity (the ring would refuse it).
func TestSparseRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		name   string
		n, k   int
		spread float64 // of the magnitudes, in e-folds
	}{
		{"one", 1, 1, 0},
		{"dense", 100, 100, 1},
		{"tenth", 10_000, 1000, 3},
		{"wide gaps", 500_000, 5, 0},        // gaps of more than 0xffff: skips
		{"all far", 4*sparseSkip + 1, 1, 0}, // filled below
		{"huge range", 1000, 500, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals, sel := sparseCase(rng, tc.n, tc.k, tc.spread)
			if tc.name == "all far" {
				sel = []int32{int32(tc.n - 1)}
			}
			seg := make([]float32, sparseWords(tc.n, len(sel)))
			for i := range seg {
				seg[i] = 1234 // encodeSparse must overwrite the padding
			}
			if err := encodeSparse(seg, sel, vals); err != nil {
				t.Fatal(err)
			}
			for i, w := range seg {
				if w-w != 0 {
					t.Fatalf("word %d is %v", i, w)
				}
			}
			got := make([]float32, tc.n)
			if err := decodeSparse(got, seg, 1); err != nil {
				t.Fatal(err)
			}
			var largest float64
			for _, i := range sel {
				largest = max(largest, math.Abs(float64(vals[i])))
			}
			left := slices.Clone(vals)
			if err := decodeSparse(left, seg, -1); err != nil {
				t.Fatal(err)
			}
			in := make([]bool, tc.n)
			for _, i := range sel {
				in[i] = true
			}
			for i, v := range got {
				if !in[i] {
					if v != 0 || left[i] != vals[i] {
						t.Fatalf("element %d not selected: decoded %v, left %v of %v", i, v, left[i], vals[i])
					}
					continue
				}
				// binary16 keeps 11 bits of values within 2^-14 of the
				// largest, and steps of largest*2^-25 below.
				tol := math.Max(math.Abs(float64(vals[i]))*0x1p-11, largest*0x1p-25)
				if d := math.Abs(float64(v - vals[i])); d > tol {
					t.Fatalf("element %d: decoded %v, sent %v: off by %v, more than %v", i, v, vals[i], d, tol)
				}
				if left[i] != vals[i]-v {
					t.Fatalf("element %d: left %v, want %v - %v", i, left[i], vals[i], v)
				}
			}
		})
	}
}

// TestSparseEdges: entries too small for the scale stay home, values past
// binary16 at the largest scale are clipped (the rest stays home), and a
// NaN is refused.
func TestSparseEdges(t *testing.T) {
	vals := []float32{1000, 1e-12, -3}
	seg := make([]float32, sparseWords(3, 3))
	if err := encodeSparse(seg, []int32{0, 1, 2}, vals); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 3)
	if err := decodeSparse(got, seg, 1); err != nil {
		t.Fatal(err)
	}
	if want := []float32{1000, 0, -3}; !slices.Equal(got, want) {
		t.Errorf("decoded %v, want %v", got, want)
	}

	big := []float32{math.MaxFloat32, -math.MaxFloat32}
	seg = make([]float32, sparseWords(2, 2))
	if err := encodeSparse(seg, []int32{0, 1}, big); err != nil {
		t.Fatal(err)
	}
	got = make([]float32, 2)
	if err := decodeSparse(got, seg, 1); err != nil {
		t.Fatal(err)
	}
	if got[0] != 65504*0x1p112 || got[1] != -65504*0x1p112 {
		t.Errorf("decoded %v, want ±65504*2^112", got)
	}

	nan := []float32{1, float32(math.NaN())}
	if err := encodeSparse(make([]float32, sparseWords(2, 2)), []int32{0, 1}, nan); !errors.Is(err, allreduce.ErrNonFinite) {
		t.Errorf("a NaN entry: %v, want ErrNonFinite", err)
	}
}

// TestSparseDecodeRefuses: what a peer cannot have encoded fails with
// ErrMismatch.
func TestSparseDecodeRefuses(t *testing.T) {
	word := func(h uint16, gap uint16) float32 { return math.Float32frombits(uint32(h)<<16 | uint32(gap)) }
	one := uint16(0x3c00) // binary16 1.0
	for _, tc := range []struct {
		name string
		seg  []float32
		want string
	}{
		{"empty", nil, "empty"},
		{"scale 3", []float32{3, word(one, 0)}, "scale"},
		{"scale 0", []float32{0}, "scale"},
		{"negative scale", []float32{-1}, "scale"},
		{"scale too large", []float32{0x1p113}, "scale"},
		{"index past the end", []float32{1, word(one, 3), word(one, 0)}, "index 4 of a gradient of 4"},
		{"skips past the end", []float32{1, word(0, sparseSkip), word(one, 0)}, "index 65535"},
		{"infinite value", []float32{1, word(0x7c00, 0)}, "not a finite"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeSparse(make([]float32, 4), tc.seg, 1)
			if !errors.Is(err, allreduce.ErrMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrMismatch with %q", err, tc.want)
			}
		})
	}
}

// FuzzDecodeSparse: whatever a peer sends as its top-k segment, decoding
// it neither panics nor writes a non-finite value, and a segment that
// decodes once decodes the same way again.
func FuzzDecodeSparse(f *testing.F) {
	seeds := func() map[string][]any {
		out := map[string][]any{}
		rng := rand.New(rand.NewPCG(9, 10))
		for _, c := range []struct {
			name string
			n, k int
		}{{"small", 40, 7}, {"skips", 3 * sparseSkip, 3}} {
			vals, sel := sparseCase(rng, c.n, c.k, 2)
			seg := make([]float32, sparseWords(c.n, c.k))
			if err := encodeSparse(seg, sel, vals); err != nil {
				f.Fatal(err)
			}
			b := make([]byte, 4*len(seg))
			for i, w := range seg {
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(w))
			}
			out[c.name] = []any{b, int64(c.n)}
		}
		out["empty"] = []any{[]byte{}, int64(1)}
		return out
	}
	fuzztest.WriteSeeds(f, "FuzzDecodeSparse", seeds)
	for _, args := range seeds() {
		f.Add(args[0].([]byte), args[1].(int64))
	}
	f.Fuzz(func(t *testing.T, b []byte, n int64) {
		n = n & 0x3ffff // up to 4 skips' worth of elements
		seg := make([]float32, len(b)/4)
		for i := range seg {
			seg[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		dst := make([]float32, n)
		err := decodeSparse(dst, seg, 0.5)
		if err != nil && !errors.Is(err, allreduce.ErrMismatch) {
			t.Fatalf("error %v is not ErrMismatch", err)
		}
		for i, v := range dst {
			if v-v != 0 {
				t.Fatalf("element %d decoded as %v", i, v)
			}
		}
		if err != nil {
			return
		}
		again := make([]float32, n)
		if err := decodeSparse(again, seg, 0.5); err != nil || !slices.Equal(again, dst) {
			t.Fatalf("decoded twice: %v", err)
		}
	})
}

// gatherCounter records the words each all-gather of a ring carries.
type gatherCounter struct {
	compressedRing
	words int
}

func (g *gatherCounter) AllGather(ctx context.Context, name string, round int64, data []float32) error {
	g.words = len(data)
	return g.compressedRing.AllGather(ctx, name, round, data)
}

// TestTopKSendsOneWordPerEntry: a top-k step of 2 ranks gathers one word
// per entry of each rank (plus the scale and the room for skips), half
// the index-and-value pairs it sent before.
func TestTopKSendsOneWordPerEntry(t *testing.T) {
	const ranks, n, ratio = 2, 200_000, 0.1
	rings, err := allreduce.NewInProcess(ranks, allreduce.InProcessConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range rings {
			r.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	counted := make([]*gatherCounter, ranks)
	var wg sync.WaitGroup
	errs := make([]error, ranks)
	for r := range ranks {
		counted[r] = &gatherCounter{compressedRing: rings[r]}
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(math.Sin(float64(i * (r + 1))))
		}
		comp := newGradCompressor(Compression{Kind: TopK, Ratio: ratio})
		wg.Go(func() { errs[r] = compressingRing{counted[r], comp}.AllReduceMean(ctx, "g", 1, data) })
	}
	wg.Wait()
	k := int(ratio * n)
	for r := range ranks {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if want := ranks * (1 + k + n/sparseSkip); counted[r].words != want {
			t.Errorf("rank %d gathered %d words, want %d: %d ranks of one word per entry (k %d), the scale and %d skips", r, counted[r].words, want, ranks, k, n/sparseSkip)
		}
	}
}
