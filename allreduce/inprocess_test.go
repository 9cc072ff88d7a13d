package allreduce

import (
	"testing"
)

func inProcess(t testing.TB, n, chunkBytes int) []*Ring {
	rings, err := NewInProcess(n, InProcessConfig{ChunkBytes: chunkBytes, Logger: quiet, Names: taskNames(n)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range rings {
			r.Close()
		}
	})
	return rings
}

func TestInProcess(t *testing.T) { runConformance(t, inProcess, []int{2, 3}) }
