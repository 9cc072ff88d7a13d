package estimator_test

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/tensor"
)

// TestExportPredictsAsTheEstimator trains, exports twice (versions 1 and 2),
// loads the export without the model function, and checks that its
// predictions have the same bits as the estimator's.
func TestExportPredictsAsTheEstimator(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	est, err := estimator.New(linearModel, estimator.RunConfig{Seed: 1, Progress: io.Discard, ModelDir: filepath.Join(dir, "model")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := est.Export(ctx, filepath.Join(dir, "export")); err == nil {
		t.Error("Export before any training: no error")
	}
	if _, err := est.Train(ctx, linearInput(1000, true), estimator.Stop{MaxSteps: 300}); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, "export")
	first, err := est.Export(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	second, err := est.Export(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(first) != "1" || filepath.Base(second) != "2" {
		t.Errorf("exported %s then %s; want versions 1 and 2", first, second)
	}
	p, version, err := savedmodel.LoadLatest(base)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if version != 2 || p.GlobalStep() != 300 {
		t.Errorf("loaded version %d at global step %d; want 2 at 300", version, p.GlobalStep())
	}
	x := tensor.MustFromSlice([]float32{0, 0.5, -3.25, 7, 1e-3}, 5, 1)
	want, err := est.Predict(ctx, map[string]*tensor.Tensor{"x": x})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Predict(ctx, map[string]*tensor.Tensor{"x": x})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want["y"].Float32s() {
		if g := got["y"].Float32s()[i]; math.Float32bits(g) != math.Float32bits(w) {
			t.Errorf("row %d: export predicts %v, the estimator %v", i, g, w)
		}
	}

	// A new estimator of the same model finds the trained model in the
	// checkpoints and exports the same values.
	fresh, err := estimator.New(linearModel, estimator.RunConfig{Seed: 1, Progress: io.Discard, ModelDir: filepath.Join(dir, "model")})
	if err != nil {
		t.Fatal(err)
	}
	again, err := fresh.Predict(ctx, map[string]*tensor.Tensor{"x": x})
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(again["y"], want["y"]) {
		t.Errorf("from the checkpoint: %v; trained: %v", again["y"], want["y"])
	}

	// Without a trained model or checkpoints, prediction names the problem.
	empty, err := estimator.New(linearModel, estimator.RunConfig{ModelDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := empty.Predict(ctx, map[string]*tensor.Tensor{"x": x}); !errors.Is(err, estimator.ErrNotTrained) {
		t.Errorf("Predict without a trained model: %v; want ErrNotTrained", err)
	}
	if _, err := est.Predict(ctx, map[string]*tensor.Tensor{"z": x}); err == nil {
		t.Error("Predict with an unknown feature: no error")
	}
	if _, err := estimator.Load(filepath.Join(dir, "nonexistent")); err == nil || !os.IsNotExist(errors.Unwrap(err)) && !errors.Is(err, savedmodel.ErrNotFound) {
		t.Errorf("Load of a missing directory: %v", err)
	}
}
