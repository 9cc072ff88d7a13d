package summary_test

import (
	"fmt"
	"log"
	"os"

	"github.com/distflow/distflow/summary"
)

func ExampleWriter() {
	logdir, err := os.MkdirTemp("", "logdir")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(logdir)

	w, err := summary.NewWriter(logdir, summary.WriterOptions{Suffix: "worker-0"})
	if err != nil {
		log.Fatal(err)
	}
	for step := int64(0); step < 300; step += 100 {
		w.AddScalar("loss", step, 1/float64(step+1))
	}
	w.AddHistogram("weights", 300, []float64{-0.5, 0.1, 0.2, 0.7})
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	events, err := summary.ReadFile(w.Path())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(events[0].GetFileVersion())
	for _, e := range events[1:] {
		v := e.GetSummary().GetValue()[0]
		if h := v.GetHisto(); h != nil {
			fmt.Printf("%d %s: histogram of %v values\n", e.GetStep(), v.GetTag(), h.GetNum())
			continue
		}
		fmt.Printf("%d %s: %.4f\n", e.GetStep(), v.GetTag(), v.GetSimpleValue())
	}
	// Output:
	// brain.Event:2
	// 0 loss: 1.0000
	// 100 loss: 0.0099
	// 200 loss: 0.0050
	// 300 weights: histogram of 4 values
}
