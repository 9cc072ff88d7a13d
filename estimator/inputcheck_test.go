package estimator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/losses"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// regression is a multi-output regression model, 8 -> 32 -> 16 -> 2, with
// Adam and a mean squared error, reading feature "x" with Features.Get.
func regression(lr float32) estimator.ModelFn {
	return func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		training := mode == estimator.Train
		h := layers.Dense{Units: 32, Activation: ops.Relu, Name: "h1"}.Apply(s, f.Get(s, "x"), training)
		h = layers.Dense{Units: 16, Activation: ops.Relu, Name: "h2"}.Apply(s, h, training)
		y := layers.Dense{Units: 2, Name: "out"}.Apply(s, h, training)
		spec := &estimator.Spec{Predictions: map[string]graph.Output{"y": y}}
		if mode != estimator.Predict {
			spec.Loss = losses.MeanSquaredError(s, labels, y)
			spec.Optimizer = train.NewAdam(lr, 0.9, 0.999, 1e-7)
		}
		return spec, nil
	}
}

// writeRegressionCSV writes rows examples of 8 features x1..x8 and two
// targets y1, y2 (linear in the features) to dir/name, with row nanRow's
// x3 "NaN" (none if negative), and returns its path.
func writeRegressionCSV(t *testing.T, dir, name string, rows, features, nanRow int) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(rows), 7))
	var b strings.Builder
	for j := range features {
		fmt.Fprintf(&b, "x%d,", j+1)
	}
	b.WriteString("y1,y2\n")
	for i := range rows {
		var y1, y2 float64
		for j := range features {
			v := rng.Float64()*2 - 1
			y1 += v * float64(j+1) / 8
			y2 -= v * float64(j%3) / 2
			if i == nanRow && j == 2 {
				b.WriteString("NaN,")
				continue
			}
			fmt.Fprintf(&b, "%.4f,", v)
		}
		fmt.Fprintf(&b, "%.4f,%.4f\n", y1, y2)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// csvInput reads a CSV file of features then the labels y1 and y2 and
// feeds batches of 32: for ever, shuffled, in training.
func csvInput(t *testing.T, path string, allowNonFinite, training bool) estimator.InputFn {
	t.Helper()
	x, y, err := data.ReadCSVFileWith(path, data.CSVOptions{Header: true, Labels: tensor.Float32, LabelNames: []string{"y1", "y2"}, AllowNonFinite: allowNonFinite})
	if err != nil {
		t.Fatal(err)
	}
	return func(ic estimator.InputContext) (*estimator.Input, error) {
		ds, err := data.FromTensors(x, y)
		if err != nil {
			return nil, err
		}
		if training {
			ds = ds.Shard(ic.NumReplicas, ic.ReplicaIndex).Shuffle(x.Shape()[0], ic.Seed).Repeat(-1)
		}
		return &estimator.Input{Dataset: ds.Batch(32, training), Features: []string{"x"}}, nil
	}
}

// TestMultiOutputRegressionFromCSV: a new user's first model, end to end:
// two label columns read by name give [batch, 2] labels, and the model
// trains to a small evaluation loss.
func TestMultiOutputRegressionFromCSV(t *testing.T) {
	dir := t.TempDir()
	trainCSV := writeRegressionCSV(t, dir, "train.csv", 512, 8, -1)
	testCSV := writeRegressionCSV(t, dir, "test.csv", 128, 8, -1)
	est, err := estimator.New(regression(0.01), estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	res, err := estimator.TrainAndEvaluate(context.Background(), est,
		estimator.TrainSpec{Input: csvInput(t, trainCSV, false, true), Stop: estimator.Stop{MaxSteps: 400}},
		estimator.EvalSpec{Input: csvInput(t, testCSV, false, false)})
	if err != nil {
		t.Fatal(err)
	}
	// The targets' variance is about 0.4; a trained model is far below it.
	t.Logf("evaluation loss %.5f at global step %d", res.Metrics["loss"], res.GlobalStep)
	if loss := res.Metrics["loss"]; !(loss < 0.05) {
		t.Errorf("evaluation loss %v after %d steps; want below 0.05", loss, res.GlobalStep)
	}
	out, err := est.Predict(context.Background(), map[string]*tensor.Tensor{"x": tensor.MustFromSlice(make([]float32, 3*8), 3, 8)})
	if err != nil || fmt.Sprint(out["y"].Shape()) != "[3 2]" {
		t.Errorf("predictions %v, %v; want [3 2]", out["y"], err)
	}
}

// TestNaNInTheDataIsNamed: NaN in a CSV file is refused where it is read;
// let through (AllowNonFinite), the non-finite loss it causes is blamed on
// it, with its place, not only on the learning rate.
func TestNaNInTheDataIsNamed(t *testing.T) {
	dir := t.TempDir()
	path := writeRegressionCSV(t, dir, "train.csv", 256, 8, 40)
	_, _, err := data.ReadCSVFileWith(path, data.CSVOptions{Header: true, Labels: tensor.Float32, LabelNames: []string{"y1", "y2"}})
	if want := path + `: malformed CSV data: line 42, column 3 ("x3"): "NaN" is not a finite number`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("reading NaN: %v; want an error naming %q", err, want)
	}

	est, err := estimator.New(regression(0.01), estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	_, err = est.Train(context.Background(), csvInput(t, path, true, true), estimator.Stop{MaxSteps: 100})
	if !errors.Is(err, train.ErrNaNLoss) || !strings.Contains(err.Error(), `the training input holds non-finite values (NaN in feature "x" at [24 3] of batch 6, counting from 1)`) {
		t.Fatalf("training on NaN: %v; want ErrNaNLoss naming the NaN in feature \"x\"", err)
	}
	t.Log(err)

	// A loss that diverges on finite data is the learning rate's fault,
	// and the error says the data were checked.
	est, err = estimator.New(regression(1e9), estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	finite := writeRegressionCSV(t, dir, "finite.csv", 256, 8, -1)
	_, err = est.Train(context.Background(), csvInput(t, finite, false, true), estimator.Stop{MaxSteps: 200})
	if !errors.Is(err, train.ErrNaNLoss) || !strings.Contains(err.Error(), "lower the learning rate") || !strings.Contains(err.Error(), "the input data are finite: the 200 batches of the training input that training reads hold no NaN or infinity") {
		t.Fatalf("diverging on finite data: %v; want ErrNaNLoss saying the input is finite", err)
	}
	t.Log(err)
}

// TestMisspeltFeatureIsNamed: a model function asking for a feature the
// input lacks fails naming it and the input's features.
func TestMisspeltFeatureIsNamed(t *testing.T) {
	for _, tc := range []struct {
		name string
		read func(s *graph.Scope, f estimator.Features) graph.Output
		want string
	}{
		{"Get", func(s *graph.Scope, f estimator.Features) graph.Output { return f.Get(s, "X") },
			`estimator: the model function asked for feature "X"; the input has "x" ("x" differs only in case)`},
		{"index", func(s *graph.Scope, f estimator.Features) graph.Output { return f["X"] },
			`is a feature name misspelt? the input has "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model := func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
				w := ops.NewVariable(s, "w", tensor.Float32, []int{1, 1}, ops.ZerosInit())
				pred := ops.MatMul(s, tc.read(s, f), w.Value(), false, false)
				return &estimator.Spec{Predictions: map[string]graph.Output{"y": pred},
					Loss: ops.Mean(s, ops.SquaredDifference(s, pred, labels), nil, false), Optimizer: train.NewGradientDescent(0.1)}, nil
			}
			est, err := estimator.New(model, estimator.RunConfig{Progress: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			_, err = est.Train(context.Background(), linearInput(100, true), estimator.Stop{MaxSteps: 1})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want an error naming %q", err, tc.want)
			}
			if tc.name == "Get" && (!errors.Is(err, estimator.ErrUnknownFeature) || err.Error() != tc.want) {
				t.Errorf("%v; want exactly %q, wrapping ErrUnknownFeature", err, tc.want)
			}
		})
	}
}

// TestEvalInputCheckedBeforeTraining: an evaluation input whose features
// differ from the training input's fails TrainAndEvaluate before any step.
func TestEvalInputCheckedBeforeTraining(t *testing.T) {
	dir := t.TempDir()
	trainIn := csvInput(t, writeRegressionCSV(t, dir, "train.csv", 128, 8, -1), false, true)
	narrow := csvInput(t, writeRegressionCSV(t, dir, "test7.csv", 64, 7, -1), false, false)
	renamed := func(ic estimator.InputContext) (*estimator.Input, error) {
		in, err := narrow(ic)
		if in != nil {
			in.Features = []string{"z"}
		}
		return in, err
	}
	noLabels := func(ic estimator.InputContext) (*estimator.Input, error) {
		x := tensor.MustFromSlice(make([]float32, 4*8), 4, 8)
		ds, err := data.FromTensors(x)
		return &estimator.Input{Dataset: ds.Batch(2, false), Features: []string{"x"}}, err
	}
	intLabels := func(ic estimator.InputContext) (*estimator.Input, error) {
		ds, err := data.FromTensors(tensor.MustFromSlice(make([]float32, 4*8), 4, 8), tensor.MustFromSlice(make([]int32, 4), 4))
		return &estimator.Input{Dataset: ds.Batch(2, false), Features: []string{"x"}}, err
	}
	for _, tc := range []struct {
		name string
		eval estimator.InputFn
		want string
	}{
		{"width", narrow, `feature "x": float32 [?,7] in the evaluation input (EvalSpec.Input), float32 [?,8] in the training input`},
		{"name", renamed, `it has no feature "x" (its features: "z"; the training input's: "x")`},
		{"labels", noLabels, "it has no labels"},
		{"label dtype", intLabels, "the labels: int32 [?] in the evaluation input (EvalSpec.Input), float32 [?,2] in the training input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var progress bytes.Buffer
			est, err := estimator.New(regression(0.01), estimator.RunConfig{Seed: 1, Progress: &progress, LogEverySteps: 1})
			if err != nil {
				t.Fatal(err)
			}
			_, err = estimator.TrainAndEvaluate(context.Background(), est,
				estimator.TrainSpec{Input: trainIn, Stop: estimator.Stop{MaxSteps: 5}},
				estimator.EvalSpec{Input: tc.eval})
			if !errors.Is(err, estimator.ErrInputMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want ErrInputMismatch naming %q", err, tc.want)
			}
			if progress.Len() > 0 || len(est.VariableNames()) > 0 {
				t.Errorf("it trained before the check: %q", progress.String())
			}
		})
	}
}

// TestEvaluatorChecksItsInputFirst: an evaluator task checks the
// evaluation input against the training input before it waits for the
// first checkpoint.
func TestEvaluatorChecksItsInputFirst(t *testing.T) {
	spec, err := cluster.NewSpec(map[string][]string{"ps": {"127.0.0.1:1"}, "worker": {"127.0.0.1:2"}})
	if err != nil {
		t.Fatal(err)
	}
	est, err := estimator.New(linearModel, estimator.RunConfig{Cluster: spec, Task: cluster.TaskID{Job: cluster.EvaluatorJob},
		CheckpointDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	wide := csvInput(t, writeRegressionCSV(t, t.TempDir(), "test.csv", 64, 8, -1), false, false)
	_, err = estimator.TrainAndEvaluate(context.Background(), est,
		estimator.TrainSpec{Input: linearInput(100, true), Stop: estimator.Stop{MaxSteps: 10}},
		estimator.EvalSpec{Input: wide, WaitTimeout: time.Minute})
	if want := `feature "x": float32 [?,8] in the evaluation input (EvalSpec.Input), float32 [?,1] in the training input`; !errors.Is(err, estimator.ErrInputMismatch) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%v; want ErrInputMismatch naming %q", err, want)
	}
}

func TestCheckedInputsThatMatch(t *testing.T) {
	// The evaluation input may order its features otherwise, and batch
	// otherwise; it is the names, dtypes and shapes that must agree.
	two := func(batch int, order ...string) estimator.InputFn {
		return func(ic estimator.InputContext) (*estimator.Input, error) {
			a := tensor.MustFromSlice(make([]float32, 8*3), 8, 3)
			b := tensor.MustFromSlice(make([]float32, 8), 8, 1)
			y := tensor.MustFromSlice(make([]float32, 8), 8)
			first, second := a, b
			if order[0] == "b" {
				first, second = b, a
			}
			ds, err := data.FromTensors(first, second, y)
			return &estimator.Input{Dataset: ds.Batch(batch, false).Repeat(-1).Take(2), Features: order}, err
		}
	}
	model := func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		w := ops.NewVariable(s, "w", tensor.Float32, []int{3, 1}, ops.ZerosInit())
		pred := ops.Add(s, ops.MatMul(s, f.Get(s, "a"), w.Value(), false, false), f.Get(s, "b"))
		pred = ops.ReshapeTo(s, pred, -1)
		return &estimator.Spec{Predictions: map[string]graph.Output{"y": pred},
			Loss: ops.Mean(s, ops.SquaredDifference(s, pred, labels), nil, false), Optimizer: train.NewGradientDescent(0.1)}, nil
	}
	est, err := estimator.New(model, estimator.RunConfig{Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	res, err := estimator.TrainAndEvaluate(context.Background(), est,
		estimator.TrainSpec{Input: two(4, "a", "b"), Stop: estimator.Stop{MaxSteps: 2}},
		estimator.EvalSpec{Input: two(2, "b", "a")})
	if err != nil || math.IsNaN(res.Metrics["loss"]) {
		t.Fatalf("%v, %v", res, err)
	}
}

// TestNaNInTheDataOnACluster: on a cluster the parameter server refuses
// the non-finite update that NaN data cause (kernel.ErrNonFiniteWrite)
// before the loss guard sees it; the worker's error still names the data.
func TestNaNInTheDataOnACluster(t *testing.T) {
	input := csvInput(t, writeRegressionCSV(t, t.TempDir(), "train.csv", 256, 8, 40), true, true)
	ps, worker := cluster.TaskID{Job: "ps"}, cluster.TaskID{Job: "worker"}
	spec, lis := loopbackTasks(t, ps, worker)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	errs := make(chan error, 2)
	for _, task := range []cluster.TaskID{ps, worker} {
		est, err := estimator.New(regression(0.01), estimator.RunConfig{Cluster: spec, Task: task, Listener: lis[task], Seed: 1,
			Logger: quiet, Progress: io.Discard, WaitTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := est.Train(ctx, input, estimator.Stop{MaxSteps: 100})
			if task == worker {
				cancel() // the ps serves until the chief ends training
			}
			errs <- err
		}()
	}
	var got error
	for range 2 {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
			got = err
		}
	}
	if got == nil || !strings.Contains(got.Error(), `the training input holds non-finite values (NaN in feature "x" at [24 3] of batch 6`) {
		t.Fatalf("the worker's error: %v; want one naming the NaN in the input", got)
	}
	t.Log(got)
}

// TestTrainingInputEndsEarly: a training input that ends before the step
// limit (a dataset batched but not repeated) fails naming what happened
// and what to do, not with a bare "reading a batch: EOF".
func TestTrainingInputEndsEarly(t *testing.T) {
	est, err := estimator.New(linearModel, estimator.RunConfig{Seed: 1, Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	_, err = est.Train(context.Background(), linearInput(100, false), estimator.Stop{MaxSteps: 50}) // 10 batches of 10
	if !errors.Is(err, estimator.ErrInputEnded) || !errors.Is(err, io.EOF) {
		t.Fatalf("Train over 10 batches for 50 steps: %v; want ErrInputEnded (and io.EOF)", err)
	}
	for _, want := range []string{"after 10 batches", "Repeat"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
