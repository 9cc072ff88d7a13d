package data

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/distflow/distflow/tensor"
)

// TestClaimedReadsEachRowOncePerEpoch: readers that claim blocks from one
// shared counter, in any interleaving and joining late, read every row of
// each epoch exactly once between them, in blocks that cross epochs.
func TestClaimedReadsEachRowOncePerEpoch(t *testing.T) {
	const n, block = 10, 4
	rows := make([]float32, n)
	for i := range rows {
		rows[i] = float32(i)
	}
	x := tensor.MustFromSlice(rows, n, 1)
	var cursor atomic.Int64
	claim := func(context.Context) (int64, error) { return cursor.Add(block) - block, nil }
	var its []*Iterator
	for range 3 {
		d, err := Claimed(claim, block, 7, x)
		if err != nil {
			t.Fatal(err)
		}
		its = append(its, d.Batch(block, true).Iterator(context.Background()))
	}
	seen := map[int64]map[int]int{} // epoch -> row -> times
	// Reader 2 joins late, reader 1 reads two blocks in a row: 15 blocks,
	// 60 positions, 6 epochs.
	for k, r := range []int{0, 1, 1, 0, 2, 1, 0, 2, 2, 0, 1, 2, 0, 0, 1} {
		b, err := its[r].Next()
		if err != nil {
			t.Fatal(err)
		}
		start := int64(k * block) // claims are handed out in this order
		for i, v := range b[0].Float32s() {
			pos := start + int64(i)
			e := pos / n
			if want := EpochOrder(n, 7, e)[pos%n]; int(v) != want {
				t.Fatalf("block %d element %d: row %v, want %d", k, i, v, want)
			}
			if seen[e] == nil {
				seen[e] = map[int]int{}
			}
			seen[e][int(v)]++
		}
	}
	for e := range int64(6) {
		if len(seen[e]) != n {
			t.Errorf("epoch %d: %d distinct rows of %d", e, len(seen[e]), n)
		}
		for r, c := range seen[e] {
			if c != 1 {
				t.Errorf("epoch %d: row %d read %d times", e, r, c)
			}
		}
	}
	if a, b := EpochOrder(n, 7, 0), EpochOrder(n, 7, 1); equalInts(a, b) {
		t.Errorf("epochs 0 and 1 have the same order %v", a)
	}
}

func equalInts(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// TestClaimedReportsClaimErrors: a failed claim fails the read, naming it;
// bad arguments are refused.
func TestClaimedReportsClaimErrors(t *testing.T) {
	x := tensor.MustFromSlice([]float32{1, 2}, 2)
	boom := errors.New("the ps is gone")
	d, err := Claimed(func(context.Context) (int64, error) { return 0, boom }, 1, 0, x)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Iterator(context.Background()).Next(); !errors.Is(err, boom) {
		t.Errorf("Next: %v, want %v", err, boom)
	}
	d, _ = Claimed(func(context.Context) (int64, error) { return -3, nil }, 1, 0, x)
	if _, err := d.Iterator(context.Background()).Next(); err == nil {
		t.Error("a negative claim was read")
	}
	if _, err := Claimed(nil, 1, 0, x); err == nil {
		t.Error("no claim function accepted")
	}
	if _, err := Claimed(func(context.Context) (int64, error) { return 0, nil }, 0, 0, x); err == nil {
		t.Error("block size 0 accepted")
	}
}
