package data_test

import (
	"context"
	"fmt"
	"io"

	"github.com/distflow/distflow/data"
)

func Example() {
	train, test, err := data.Embedded()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(train.Len(), "training and", test.Len(), "test images")

	ds, err := train.Dataset()
	if err != nil {
		fmt.Println(err)
		return
	}
	// Worker 1 of 4 reads a quarter of the data, reshuffled every epoch.
	it := ds.Shard(4, 1).Shuffle(1000, 42).Repeat(2).Batch(100, true).Prefetch(2).
		Iterator(context.Background())
	defer it.Close()
	batches := 0
	for {
		batch, err := it.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			fmt.Println(err)
			return
		}
		if batches == 0 {
			fmt.Println("images", batch[0].StaticShape(), "labels", batch[1].StaticShape())
		}
		batches++
	}
	fmt.Println(batches, "batches")
	// Output:
	// 8000 training and 2000 test images
	// images [100,784] labels [100]
	// 40 batches
}

func ExampleLinear() {
	x, y := data.Linear(1000, 1, 2, 10, 0.33) // y = 2x + 10 + N(0, 0.33²)
	fmt.Println(x.StaticShape(), y.StaticShape())
	// Output: [1000,1] [1000,1]
}
