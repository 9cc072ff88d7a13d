package data

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/tensor"
)

// rangeDataset returns the dataset of (x[i] = [i, -i] float32, y[i] = i int32).
func rangeDataset(t testing.TB, n int) *Dataset {
	t.Helper()
	x := tensor.New(tensor.Float32, n, 2)
	y := tensor.New(tensor.Int32, n)
	for i := range n {
		x.Float32s()[2*i], x.Float32s()[2*i+1] = float32(i), float32(-i)
		y.Int32s()[i] = int32(i)
	}
	d, err := FromTensors(x, y)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// collect runs d to the end and returns its elements, cloned: Next may
// recycle a batch's tensors once the next element is asked for.
func collect(t testing.TB, d *Dataset) [][]*tensor.Tensor {
	t.Helper()
	it := d.Iterator(context.Background())
	defer it.Close()
	var out [][]*tensor.Tensor
	for {
		x, err := it.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		c := make([]*tensor.Tensor, len(x))
		for i, v := range x {
			c[i] = v.Clone()
		}
		out = append(out, c)
	}
}

// labels flattens the int32 second component of each element.
func labels(t testing.TB, d *Dataset) []int32 {
	var out []int32
	for _, x := range collect(t, d) {
		out = append(out, x[1].Int32s()...)
	}
	return out
}

func seq(lo, hi int) []int32 {
	var s []int32
	for i := lo; i < hi; i++ {
		s = append(s, int32(i))
	}
	return s
}

func TestDatasetOrder(t *testing.T) {
	d := rangeDataset(t, 5)
	tests := []struct {
		name string
		d    *Dataset
		want []int32
	}{
		{"source", d, seq(0, 5)},
		{"take", d.Take(3), seq(0, 3)},
		{"take more than there is", d.Take(9), seq(0, 5)},
		{"take 0", d.Take(0), nil},
		{"repeat", d.Repeat(2), append(seq(0, 5), seq(0, 5)...)},
		{"repeat 0", d.Repeat(0), nil},
		{"repeat forever then take", d.Repeat(-1).Take(12), append(append(seq(0, 5), seq(0, 5)...), 0, 1)},
		{"shard 0 of 2", d.Shard(2, 0), []int32{0, 2, 4}},
		{"shard 1 of 2", d.Shard(2, 1), []int32{1, 3}},
		{"shard 4 of 5", d.Shard(5, 4), []int32{4}},
		{"shard 2 of 7", d.Shard(7, 2), []int32{2}},
		{"shard 6 of 7", d.Shard(7, 6), nil},
		{"batch", d.Batch(2, false), seq(0, 5)},
		{"batch drop", d.Batch(2, true), seq(0, 4)},
		{"prefetch", d.Prefetch(2), seq(0, 5)},
		{"empty repeat forever", d.Take(0).Repeat(-1), nil},
		{"all", d.Shard(1, 0).Repeat(3).Take(11).Batch(4, false).Prefetch(1),
			append(append(seq(0, 5), seq(0, 5)...), 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := labels(t, tc.d); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFromTensorsElements(t *testing.T) {
	d := rangeDataset(t, 3)
	xs := collect(t, d)
	if len(xs) != 3 {
		t.Fatalf("%d elements, want 3", len(xs))
	}
	for i, x := range xs {
		want := tensor.MustFromSlice([]float32{float32(i), float32(-i)}, 2)
		if !tensor.Equal(x[0], want) || !tensor.Equal(x[1], tensor.Scalar(int32(i))) {
			t.Errorf("element %d = %v, want (%v, %d)", i, x, want, i)
		}
	}
}

func TestFromTensorsErrors(t *testing.T) {
	tests := []struct {
		name string
		ts   []*tensor.Tensor
		want string
	}{
		{"none", nil, "no tensors"},
		{"nil", []*tensor.Tensor{nil}, "tensor 0 is nil"},
		{"scalar", []*tensor.Tensor{tensor.Scalar(float32(1))}, "tensor 0 is a scalar"},
		{"first dims differ", []*tensor.Tensor{tensor.New(tensor.Float32, 3, 2), tensor.New(tensor.Int32, 4)},
			"tensor 1 has shape [4], tensor 0 has [3,2]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromTensors(tc.ts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "data: FromTensors: ") {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestDatasetArgumentErrors(t *testing.T) {
	d := rangeDataset(t, 4)
	tests := []struct {
		name string
		d    *Dataset
		want string
	}{
		{"take", d.Take(-1), "data: Take: negative count -1"},
		{"shard n", d.Shard(0, 0), "data: Shard: number of shards 0"},
		{"shard i", d.Shard(2, 2), "data: Shard: index 2 out of range [0, 2)"},
		{"shard negative i", d.Shard(2, -1), "index -1 out of range"},
		{"repeat", d.Repeat(-2), "data: Repeat: count -2"},
		{"shuffle", d.Shuffle(0, 1), "data: Shuffle: buffer size 0"},
		{"batch", d.Batch(0, false), "data: Batch: batch size 0"},
		{"prefetch", d.Prefetch(-1), "data: Prefetch: buffer size -1"},
		{"first error wins", d.Take(-1).Batch(0, true).Prefetch(2), "data: Take: negative count -1"},
		{"zero dataset", &Dataset{}, "not made by FromTensors"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			it := tc.d.Iterator(context.Background())
			defer it.Close()
			for range 2 { // the error is sticky
				_, err := it.Next()
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Next: error %v, want one containing %q", err, tc.want)
				}
			}
			if tc.name == "zero dataset" {
				return // no argument error, only an unusable value
			}
			if err := tc.d.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Err() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestShuffle(t *testing.T) {
	const n = 100
	d := rangeDataset(t, n)
	for _, buf := range []int{1, 10, n, 1000} {
		a := labels(t, d.Shuffle(buf, 7))
		b := labels(t, d.Shuffle(buf, 7))
		c := labels(t, d.Shuffle(buf, 8))
		if !slices.Equal(a, b) {
			t.Errorf("buffer %d: same seed, different orders", buf)
		}
		sorted := slices.Sorted(slices.Values(a))
		if !slices.Equal(sorted, seq(0, n)) {
			t.Errorf("buffer %d: not a permutation: %v", buf, a)
		}
		if buf == 1 {
			if !slices.Equal(a, seq(0, n)) {
				t.Errorf("buffer 1 reordered: %v", a)
			}
			continue
		}
		if slices.Equal(a, seq(0, n)) || slices.Equal(a, c) {
			t.Errorf("buffer %d: not shuffled or seed ignored: %v", buf, a)
		}
		// A buffer of k elements can move an element at most k-1 places earlier.
		for pos, v := range a {
			if int(v) > pos+buf-1 {
				t.Errorf("buffer %d: element %d at position %d", buf, v, pos)
			}
		}
	}
}

func TestShuffleEpochs(t *testing.T) {
	const n = 50
	d := rangeDataset(t, n).Shuffle(n, 3)
	// Each pass of a Repeat is a different permutation...
	all := labels(t, d.Repeat(3))
	e0, e1, e2 := all[:n], all[n:2*n], all[2*n:]
	for _, e := range [][]int32{e0, e1, e2} {
		if !slices.Equal(slices.Sorted(slices.Values(e)), seq(0, n)) {
			t.Fatalf("epoch is not a permutation: %v", e)
		}
	}
	if slices.Equal(e0, e1) || slices.Equal(e1, e2) {
		t.Error("Repeat did not reshuffle between epochs")
	}
	// ...and so are successive iterators, the same way every time the
	// pipeline is rebuilt.
	d1 := rangeDataset(t, n).Shuffle(n, 3)
	d2 := rangeDataset(t, n).Shuffle(n, 3)
	first, second := labels(t, d1), labels(t, d1)
	if slices.Equal(first, second) {
		t.Error("successive iterators share an order")
	}
	if !slices.Equal(first, labels(t, d2)) || !slices.Equal(second, labels(t, d2)) {
		t.Error("rebuilt pipeline gives other orders")
	}
}

func TestBatch(t *testing.T) {
	d := rangeDataset(t, 7)
	tests := []struct {
		n      int
		drop   bool
		shapes [][]int // per batch, the shape of component 0
	}{
		{3, false, [][]int{{3, 2}, {3, 2}, {1, 2}}},
		{3, true, [][]int{{3, 2}, {3, 2}}},
		{7, true, [][]int{{7, 2}}},
		{8, false, [][]int{{7, 2}}},
		{8, true, nil},
		{1, false, [][]int{{1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}}},
	}
	for _, tc := range tests {
		batches := collect(t, d.Batch(tc.n, tc.drop))
		if len(batches) != len(tc.shapes) {
			t.Errorf("Batch(%d, %v): %d batches, want %d", tc.n, tc.drop, len(batches), len(tc.shapes))
			continue
		}
		next := 0
		for i, b := range batches {
			if !slices.Equal(b[0].Shape(), tc.shapes[i]) || !slices.Equal(b[1].Shape(), tc.shapes[i][:1]) {
				t.Errorf("Batch(%d, %v): batch %d has shapes %v %v, want %v", tc.n, tc.drop, i,
					b[0].Shape(), b[1].Shape(), tc.shapes[i])
			}
			for r := range b[1].Shape()[0] {
				x := b[0].Float32s()
				if x[2*r] != float32(next) || x[2*r+1] != float32(-next) || b[1].Int32s()[r] != int32(next) {
					t.Errorf("Batch(%d): batch %d row %d holds %v, want element %d", tc.n, i, r, b, next)
				}
				next++
			}
		}
	}
}

func TestBatchOwnership(t *testing.T) {
	x := tensor.MustFromSlice([]float32{1, 2, 3, 4}, 4)
	d, err := FromTensors(x)
	if err != nil {
		t.Fatal(err)
	}
	b := collect(t, d.Batch(4, false))[0][0]
	b.Float32s()[0] = 99
	if x.Float32s()[0] != 1 {
		t.Error("writing to a batch changed the source")
	}
}

func TestBatchOfBatches(t *testing.T) {
	got := collect(t, rangeDataset(t, 12).Batch(2, false).Batch(3, false))
	if len(got) != 2 || !slices.Equal(got[0][0].Shape(), []int{3, 2, 2}) || !slices.Equal(got[1][1].Shape(), []int{3, 2}) {
		t.Fatalf("got %v", got)
	}
	if want := seq(6, 12); !slices.Equal(got[1][1].Int32s(), want) {
		t.Errorf("second batch labels %v, want %v", got[1][1].Int32s(), want)
	}
}

func TestBatchMismatchedShapes(t *testing.T) {
	// Batches of 3 and 2 rows cannot be stacked together.
	it := rangeDataset(t, 5).Batch(3, false).Batch(2, false).Iterator(context.Background())
	defer it.Close()
	_, err := it.Next()
	if err == nil || !strings.Contains(err.Error(), "data: Batch: element 1 has a component of type float32 and shape [2,2], the first element's is float32 [3,2]") {
		t.Errorf("error %v", err)
	}
}

func TestShardCoverage(t *testing.T) {
	const n, shards = 103, 4
	seen := map[int32]int{}
	for i := range shards {
		// Shard the source, then shuffle each shard on its own.
		part := labels(t, rangeDataset(t, n).Shard(shards, i).Shuffle(8, int64(i)))
		for _, v := range part {
			if int(v)%shards != i {
				t.Errorf("shard %d holds element %d", i, v)
			}
			seen[v]++
		}
	}
	for i := range n {
		if seen[int32(i)] != 1 {
			t.Errorf("element %d seen %d times across shards", i, seen[int32(i)])
		}
	}
}

func TestPrefetchMatches(t *testing.T) {
	build := func() *Dataset { return rangeDataset(t, 200).Shuffle(64, 9).Repeat(2).Batch(7, false) }
	plain := collect(t, build())
	pre := collect(t, build().Prefetch(3))
	nested := collect(t, rangeDataset(t, 200).Prefetch(5).Shuffle(64, 9).Repeat(2).Prefetch(1).Batch(7, false).Prefetch(2))
	for _, got := range [][][]*tensor.Tensor{pre, nested} {
		if len(got) != len(plain) {
			t.Fatalf("%d batches with prefetch, %d without", len(got), len(plain))
		}
		for i := range plain {
			for j := range plain[i] {
				if !tensor.Equal(plain[i][j], got[i][j]) {
					t.Fatalf("batch %d component %d differs: %v vs %v", i, j, got[i][j], plain[i][j])
				}
			}
		}
	}
}

// waitGoroutines waits until at most n goroutines run, and fails otherwise.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, want at most %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPrefetchClose(t *testing.T) {
	base := runtime.NumGoroutine()
	// An endless pipeline with three prefetch stages, abandoned midway.
	d := rangeDataset(t, 10).Repeat(-1).Prefetch(2).Batch(3, false).Prefetch(4).Prefetch(1)
	it := d.Iterator(context.Background())
	for range 5 {
		if _, err := it.Next(); err != nil {
			t.Fatal(err)
		}
	}
	it.Close()
	it.Close()
	if _, err := it.Next(); err != io.EOF {
		t.Errorf("Next after Close: %v, want io.EOF", err)
	}
	waitGoroutines(t, base)
}

func TestPrefetchCancel(t *testing.T) {
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	it := rangeDataset(t, 10).Repeat(-1).Prefetch(2).Batch(2, true).Prefetch(2).Iterator(ctx)
	defer it.Close()
	if _, err := it.Next(); err != nil {
		t.Fatal(err)
	}
	cancel()
	for range 2 {
		if _, err := it.Next(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Next after cancel: %v, want context.Canceled", err)
		}
	}
	// Cancellation alone (no Close) stops the goroutines.
	waitGoroutines(t, base)
}

func TestPrefetchEndReleasesGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	it := rangeDataset(t, 10).Prefetch(3).Iterator(context.Background())
	for {
		if _, err := it.Next(); err == io.EOF {
			break
		}
	}
	waitGoroutines(t, base) // io.EOF released the pipeline without Close
}

func TestCancelWithoutPrefetch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	it := rangeDataset(t, 10).Iterator(ctx)
	defer it.Close()
	cancel()
	if _, err := it.Next(); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after cancel: %v, want context.Canceled", err)
	}
}

func TestBatchAllocations(t *testing.T) {
	const n, batch = 1000, 100
	x := tensor.New(tensor.Float32, n, 784)
	y := tensor.New(tensor.Int32, n)
	d, err := FromTensors(x, y)
	if err != nil {
		t.Fatal(err)
	}
	it := d.Shuffle(n, 1).Repeat(-1).Batch(batch, true).Iterator(context.Background())
	defer it.Close()
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := it.Next(); err != nil {
			t.Fatal(err)
		}
	})
	// The batch tensors are recycled: nothing per element or per batch.
	// Allow a little slack for the repeat's new pass.
	if allocs > 2 {
		t.Errorf("%v allocations per batch of %d, want at most 2", allocs, batch)
	}
}

// TestBatchRecycling checks the ownership contract of batches: the next
// call to Next may reuse the previous batch's tensors (and does, for full
// batches, with and without Prefetch), every batch holds the right rows,
// and Close leaves the last batch alone.
func TestBatchRecycling(t *testing.T) {
	for _, tc := range []struct {
		name     string
		d        func() *Dataset
		recycled bool
	}{
		{"batch", func() *Dataset { return rangeDataset(t, 30).Batch(4, true) }, true},
		{"shuffled/prefetched", func() *Dataset { return rangeDataset(t, 30).Shuffle(30, 3).Repeat(3).Batch(4, false).Prefetch(2) }, true},
		{"batch of batches", func() *Dataset { return rangeDataset(t, 30).Batch(2, true).Batch(3, true) }, true},
		{"sharded batches", func() *Dataset { return rangeDataset(t, 30).Batch(2, true).Shard(2, 1) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := collect(t, tc.d())
			it := tc.d().Iterator(context.Background())
			defer it.Close()
			seen := map[*float32]bool{}
			reused := false
			for i := 0; ; i++ {
				b, err := it.Next()
				if err == io.EOF {
					if i != len(want) {
						t.Fatalf("%d batches, want %d", i, len(want))
					}
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				for j := range b {
					if !tensor.Equal(b[j], want[i][j]) {
						t.Fatalf("batch %d component %d is %v, want %v", i, j, b[j], want[i][j])
					}
				}
				p := &b[0].Float32s()[0]
				reused = reused || seen[p]
				seen[p] = true
				// The consumer may write to its batch.
				b[0].Float32s()[0] = -1
			}
			if reused != tc.recycled {
				t.Errorf("batch tensors reused: %v, want %v", reused, tc.recycled)
			}
		})
	}
	it := rangeDataset(t, 8).Batch(4, true).Iterator(context.Background())
	b, err := it.Next()
	if err != nil {
		t.Fatal(err)
	}
	it.Close()
	if got := b[1].Int32s(); !slices.Equal(got, []int32{0, 1, 2, 3}) {
		t.Errorf("after Close, the last batch holds %v, want [0 1 2 3]", got)
	}
}

func BenchmarkBatch(b *testing.B) {
	for _, bc := range []struct {
		name    string
		batch   int
		shuffle bool
	}{{"mlp/100", 100, false}, {"mlp/100/shuffled", 100, true}, {"cnn/50/shuffled", 50, true}} {
		b.Run(bc.name, func(b *testing.B) {
			const n = 10000
			x := tensor.New(tensor.Float32, n, 784)
			y := tensor.New(tensor.Int32, n)
			d, err := FromTensors(x, y)
			if err != nil {
				b.Fatal(err)
			}
			if bc.shuffle {
				d = d.Shuffle(n, 1)
			}
			it := d.Repeat(-1).Batch(bc.batch, true).Iterator(context.Background())
			defer it.Close()
			b.SetBytes(int64(bc.batch * (784 + 1) * 4))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := it.Next(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*bc.batch)/b.Elapsed().Seconds(), "examples/s")
		})
	}
}

// TestShuffleRowsMatchItems checks that the compact buffer of row numbers
// draws the same order as the buffer of general elements: shuffling rows
// and shuffling one-row batches of them give the same labels.
func TestShuffleRowsMatchItems(t *testing.T) {
	const n = 300
	for _, buf := range []int{1, 7, n, 2 * n} {
		rows := labels(t, rangeDataset(t, n).Shuffle(buf, 5).Repeat(2))
		batches := labels(t, rangeDataset(t, n).Batch(1, false).Shuffle(buf, 5).Repeat(2))
		if !slices.Equal(rows, batches) {
			t.Errorf("buffer %d: rows drawn in another order than elements:\n%v\n%v", buf, rows, batches)
		}
	}
}
