package examples_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/distflow/distflow/serving"
	"github.com/distflow/distflow/tensor"
)

// digitsumTestSet is the test set of examples/digitsum (its Sequences(2,
// 2000)), drawn the same way: ten digits per row, labelled 1 when they
// sum above 45.
func digitsumTestSet() (digits, labels *tensor.Tensor) {
	const n, length = 2000, 10
	r := rand.New(rand.NewSource(2))
	digits, labels = tensor.New(tensor.Int32, n, length), tensor.New(tensor.Int32, n)
	for i := 0; i < n; i++ {
		sum := 0
		for t := 0; t < length; t++ {
			v := r.Intn(10)
			digits.Int32s()[i*length+t] = int32(v)
			sum += v
		}
		if sum > 45 {
			labels.Int32s()[i] = 1
		}
	}
	return digits, labels
}

// digitsumAccuracy is the accuracy the LSTM example must reach on its test
// set, in process and on a cluster, after 1000 steps (it reaches about
// 0.997 in process).
const digitsumAccuracy = 0.98

func TestDigitsum(t *testing.T) {
	testX, testY := digitsumTestSet()
	check := func(t *testing.T, r result) {
		if r.Accuracy == nil || r.GlobalStep < 1000 {
			t.Fatalf("result %+v; want an accuracy after at least 1000 steps", r)
		}
		if *r.Accuracy < digitsumAccuracy {
			t.Errorf("test accuracy %.4f; want at least %.2f", *r.Accuracy, digitsumAccuracy)
		}
		// The export's classes of the test set give the reported accuracy.
		classes := loadExport(t, r, "digits", testX)["class"].Int32s()
		right := 0
		for i, c := range classes {
			if c == testY.Int32s()[i] {
				right++
			}
		}
		if acc := float64(right) / float64(len(classes)); math.Abs(acc-*r.Accuracy) > 1e-9 {
			t.Errorf("the export's test accuracy %.4f; the program reported %.4f", acc, *r.Accuracy)
		}
		digitsumServe(t, r, testX, classes)
	}
	ref := run(t, "digitsum", "--steps", "1000", "--export", t.TempDir())
	check(t, ref)
	for _, strategy := range []string{"sync", "async"} {
		t.Run(strategy, func(t *testing.T) {
			check(t, run(t, "digitsum", "--steps", "1000", "--export", t.TempDir(), "--local-cluster", "ps=1,worker=2", "--strategy", strategy))
		})
	}
	// The LSTM in a graph loop computes what the unrolled one does: in
	// process, the same accuracy; on the cluster, its loop runs on a worker
	// and reads the variables from the ps.
	t.Run("dynamic", func(t *testing.T) {
		r := run(t, "digitsum", "--steps", "1000", "--export", t.TempDir(), "--dynamic")
		check(t, r)
		if math.Abs(*r.Accuracy-*ref.Accuracy) > 0.005 {
			t.Errorf("test accuracy %.4f with the graph loop, %.4f unrolled: want them within half a point", *r.Accuracy, *ref.Accuracy)
		}
	})
	t.Run("sync-dynamic", func(t *testing.T) {
		check(t, run(t, "digitsum", "--steps", "1000", "--export", t.TempDir(), "--local-cluster", "ps=1,worker=2", "--strategy", "sync", "--dynamic"))
	})
}

// digitsumServe serves the export of r over TensorFlow Serving's REST API
// and checks that it answers the first rows of digits with the classes
// the loaded export predicted.
func digitsumServe(t *testing.T, r result, digits *tensor.Tensor, want []int32) {
	t.Helper()
	srv, err := serving.New(serving.Config{BaseDir: filepath.Dir(r.Export), ModelName: "digitsum", DisableMetrics: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const rows, length = 8, 10
	instances := make([][]int32, rows)
	for i := range instances {
		instances[i] = digits.Int32s()[i*length : (i+1)*length]
	}
	body, err := json.Marshal(map[string]any{"instances": instances})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/models/digitsum:predict", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("predict: status %d: %s", rec.Code, rec.Body)
	}
	var answer struct {
		Predictions []struct {
			Class         int32     `json:"class"`
			Probabilities []float64 `json:"probabilities"`
		} `json:"predictions"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
		t.Fatalf("predict: %v: %s", err, rec.Body)
	}
	if len(answer.Predictions) != rows {
		t.Fatalf("predict: %d predictions for %d instances: %s", len(answer.Predictions), rows, rec.Body)
	}
	for i, p := range answer.Predictions {
		if p.Class != want[i] || len(p.Probabilities) != 2 || math.Abs(p.Probabilities[0]+p.Probabilities[1]-1) > 1e-5 {
			t.Errorf("row %d: served %+v; the loaded export predicted class %d", i, p, want[i])
		}
	}
}
