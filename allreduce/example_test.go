package allreduce_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distflow/distflow/allreduce"
)

func Example() {
	// Three ranks in one process; over the network each task's server
	// serves one (server.Config.Ring, or rpc.RegisterRing).
	rings, err := allreduce.NewInProcess(3, allreduce.InProcessConfig{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	grads := [][]float32{{1, 2}, {3, 4}, {5, 9}}
	var wg sync.WaitGroup
	for rank, r := range rings {
		wg.Go(func() {
			if err := r.AllReduceMean(ctx, "grads", 0, grads[rank]); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	for _, r := range rings {
		r.Close()
	}
	fmt.Println(grads)
	// Output: [[3 5] [3 5] [3 5]]
}
