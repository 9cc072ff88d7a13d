package examples_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/serving"
	"github.com/distflow/distflow/tensor"
)

var update = flag.Bool("update", false, "rewrite examples/regression/testdata from its generator")

// regressionNoise is the standard deviation of the noise on each target of
// the regression data: no model's test MSE can go much below its square.
const regressionNoise = 0.1

// regressionCSV is the regression example's data: rows of eight features
// uniform on [-1, 1) and two targets, piecewise linear functions of them plus
// Gaussian noise of regressionNoise, drawn from seed.
func regressionCSV(rows int, seed int64) []byte {
	r := rand.New(rand.NewSource(seed))
	var b bytes.Buffer
	b.WriteString("x0,x1,x2,x3,x4,x5,x6,x7,y1,y2\n")
	for range rows {
		var x [8]float64
		for j := range x {
			x[j] = math.Round((2*r.Float64()-1)*1e4) / 1e4
			fmt.Fprintf(&b, "%.4f,", x[j])
		}
		y1 := 0.8*x[0] - 0.5*x[1] + 0.5*math.Abs(x[2]-x[3]) + regressionNoise*r.NormFloat64()
		y2 := 0.6*x[4] - 0.4*x[5] + 0.5*max(x[6], x[7]) + regressionNoise*r.NormFloat64()
		fmt.Fprintf(&b, "%.4f,%.4f\n", y1, y2)
	}
	return b.Bytes()
}

// TestRegressionData: the shipped CSV files are the generator's (go test
// -run TestRegressionData -update rewrites them).
func TestRegressionData(t *testing.T) {
	for _, f := range []struct {
		name string
		rows int
		seed int64
	}{{"train.csv", 1000, 1}, {"test.csv", 250, 2}} {
		path, want := filepath.Join("regression", "testdata", f.name), regressionCSV(f.rows, f.seed)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s (%v) is not what regressionCSV(%d, %d) writes: run go test -run TestRegressionData -update", path, err, f.rows, f.seed)
		}
	}
}

// TestRegression trains the multi-output regression in process and on a
// ps=1,worker=2 cluster (async and sync) to a test MSE near the noise's
// variance, checks that the export's predictions give the reported MSE, and
// serves the export over TensorFlow Serving's REST API.
func TestRegression(t *testing.T) {
	testX, testY, err := data.ReadCSVFileWith(filepath.Join("regression", "testdata", "test.csv"),
		data.CSVOptions{Header: true, Labels: tensor.Float32, LabelNames: []string{"y1", "y2"}})
	if err != nil {
		t.Fatal(err)
	}
	noise := regressionNoise * regressionNoise
	dataDir := filepath.Join("regression", "testdata")
	check := func(t *testing.T, r result) {
		if r.MSE == nil || r.GlobalStep < 2000 {
			t.Fatalf("result %+v; want a test MSE after at least 2000 steps", r)
		}
		// Untrained, the MSE is about 0.35; a model that learnt the
		// targets leaves little more than the noise (asynchronous
		// replicas' stale gradients leave a little more: 0.015 to 0.021
		// in runs on a busy machine).
		if *r.MSE > 3*noise || *r.MSE < noise/2 {
			t.Errorf("test MSE %.4f; want it near the noise's variance %.4f (within a factor of 3)", *r.MSE, noise)
		}
		pred := loadExport(t, r, "x", testX)["y"]
		if !slices.Equal(pred.Shape(), testY.Shape()) {
			t.Fatalf("the export predicts shape %v for labels of shape %v", pred.Shape(), testY.Shape())
		}
		var sum float64
		for i, p := range pred.Float32s() {
			d := float64(p) - float64(testY.Float32s()[i])
			sum += d * d
		}
		if mse := sum / float64(pred.NumElements()); math.Abs(mse-*r.MSE) > 1e-4 {
			t.Errorf("the export's test MSE %.6f; the program reported %.6f", mse, *r.MSE)
		}
		regressionServe(t, r, testX, pred)
	}
	check(t, run(t, "regression", "--data", dataDir, "--export", t.TempDir()))
	for _, strategy := range []string{"async", "sync"} {
		t.Run(strategy, func(t *testing.T) {
			check(t, run(t, "regression", "--data", dataDir, "--export", t.TempDir(), "--local-cluster", "ps=1,worker=2", "--strategy", strategy))
		})
	}
}

// regressionServe serves the export of r and checks that its answers to
// the first rows of x have the bits of the loaded export's predictions.
func regressionServe(t *testing.T, r result, x, want *tensor.Tensor) {
	t.Helper()
	srv, err := serving.New(serving.Config{BaseDir: filepath.Dir(r.Export), ModelName: "regression", DisableMetrics: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const rows, features = 8, 8
	instances := make([]string, rows)
	for i := range instances {
		vals := make([]string, features)
		for j, v := range x.Float32s()[i*features : (i+1)*features] {
			vals[j] = fmt.Sprint(v)
		}
		instances[i] = "[" + strings.Join(vals, ",") + "]"
	}
	rec := httptest.NewRecorder()
	body := `{"instances":[` + strings.Join(instances, ",") + `]}`
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/models/regression:predict", strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("predict: status %d: %s", rec.Code, rec.Body)
	}
	var answer struct {
		Predictions [][]float32 `json:"predictions"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || len(answer.Predictions) != rows {
		t.Fatalf("predict: %v, %d predictions for %d instances: %s", err, len(answer.Predictions), rows, rec.Body)
	}
	for i, p := range answer.Predictions {
		if len(p) != 2 || math.Float32bits(p[0]) != math.Float32bits(want.Float32s()[2*i]) || math.Float32bits(p[1]) != math.Float32bits(want.Float32s()[2*i+1]) {
			t.Errorf("row %d: served %v; the loaded export predicted %v", i, p, want.Float32s()[2*i:2*i+2])
		}
	}
}
