package allreduce

import (
	"sync"
	"testing"
)

// BenchmarkChunks is an all-reduce of many small chunks among 3 ranks in
// process, where the cost of filing and taking a chunk shows: 48 chunks
// of 64 bytes per rank and operation.
func BenchmarkChunks(b *testing.B) {
	rings, err := NewInProcess(3, InProcessConfig{ChunkBytes: 64})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, r := range rings {
			r.Close()
		}
	}()
	data := make([][]float32, 3)
	for i := range data {
		data[i] = make([]float32, 3*8*16)
	}
	round := int64(0)
	for b.Loop() {
		round++
		var wg sync.WaitGroup
		for i, r := range rings {
			wg.Go(func() {
				if err := r.AllReduce(b.Context(), "g", round, data[i]); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}
