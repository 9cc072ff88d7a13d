package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// trainFlags are the options of `distflow train`. Zero values mean "the
// model's default" (see modelDefaults).
type trainFlags struct {
	model     string
	steps     int
	epochs    float64
	batch     int
	lr        float64
	optimizer string
	dataDir   string
	seed      int
	jsonOut   bool
	logEvery  int
}

// modelDefaults are the reference workloads' settings (SPEC section 6),
// tuned so that the defaults train to a useful accuracy.
var modelDefaults = map[string]trainFlags{
	"linreg": {steps: 2000, batch: 1, lr: 0.01, optimizer: "sgd", logEvery: 100},
	"mlp":    {epochs: 20, batch: 100, lr: 0.5, optimizer: "sgd", logEvery: 100},
	"cnn":    {epochs: 1, batch: 50, lr: 0.001, optimizer: "adam", logEvery: 50},
}

func newTrainCommand() *cobra.Command {
	f := &trainFlags{}
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a reference model (linreg, mlp, cnn) and report its accuracy and speed",
		Example: `  distflow train --model mlp                 # embedded Fashion-MNIST subset
  distflow train --model cnn --data /usr/share/datasets/fashion-mnist
  distflow train --model linreg --steps 2000 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTrain(cmd.Context(), *f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "mlp", "model to train: linreg, mlp or cnn")
	fl.IntVar(&f.steps, "steps", 0, "training steps (overrides --epochs)")
	fl.Float64Var(&f.epochs, "epochs", 0, "passes over the training data (default: the model's)")
	fl.IntVar(&f.batch, "batch", 0, "examples per step (default: the model's)")
	fl.Float64Var(&f.lr, "lr", 0, "learning rate (default: the model's)")
	fl.StringVar(&f.optimizer, "optimizer", "", "sgd, momentum, adagrad, rmsprop or adam (default: the model's)")
	fl.StringVar(&f.dataDir, "data", "", "directory with the Fashion-MNIST IDX files (default: $DISTFLOW_DATA, the Debian package, or the embedded subset)")
	fl.IntVar(&f.seed, "seed", 1, "seed of initial weights, shuffling and dropout")
	fl.BoolVar(&f.jsonOut, "json", false, "print one JSON object with the results as the last line of stdout")
	fl.IntVar(&f.logEvery, "log-every", 0, "print a progress line every N steps (default: the model's)")
	return cmd
}

// result is what `train --json` prints.
type result struct {
	Model             string   `json:"model"`
	Optimizer         string   `json:"optimizer"`
	LearningRate      float64  `json:"learning_rate"`
	Batch             int      `json:"batch"`
	GlobalStep        int64    `json:"global_step"`
	Epochs            float64  `json:"epochs"`
	Loss              float64  `json:"loss"`
	TestAccuracy      *float64 `json:"test_accuracy,omitempty"`
	TestLoss          *float64 `json:"test_loss,omitempty"`
	W                 *float64 `json:"W,omitempty"`
	B                 *float64 `json:"b,omitempty"`
	Data              string   `json:"data"`
	TrainExamples     int      `json:"train_examples"`
	TestExamples      int      `json:"test_examples,omitempty"`
	ExamplesPerSecond float64  `json:"examples_per_second"`
	WallSeconds       float64  `json:"wall_seconds"`
}

func (f *trainFlags) applyDefaults() error {
	d, ok := modelDefaults[f.model]
	if !ok {
		return fmt.Errorf("--model %q: want one of %v", f.model, models.Names)
	}
	if f.steps == 0 && f.epochs == 0 {
		f.steps, f.epochs = d.steps, d.epochs
	}
	if f.batch == 0 {
		f.batch = d.batch
	}
	if f.lr == 0 {
		f.lr = d.lr
	}
	if f.optimizer == "" {
		f.optimizer = d.optimizer
	}
	if f.logEvery == 0 {
		f.logEvery = d.logEvery
	}
	switch {
	case f.steps < 0 || f.epochs < 0:
		return fmt.Errorf("--steps and --epochs must not be negative")
	case f.batch <= 0:
		return fmt.Errorf("--batch %d: must be positive", f.batch)
	case f.lr <= 0 || math.IsNaN(f.lr) || math.IsInf(f.lr, 0):
		return fmt.Errorf("--lr %v: must be a positive number", f.lr)
	}
	return nil
}

// examples is a training set and an optional test set.
type examples struct {
	trainX, trainY *tensor.Tensor
	testX, testY   *tensor.Tensor
	source         string
}

func loadExamples(f trainFlags) (examples, error) {
	if f.model == "linreg" {
		// SPEC section 6: y = 2x + 10 + noise(0.33).
		x, y := data.Linear(max(f.steps*f.batch, 1000), int64(f.seed), 2, 10, 0.33)
		return examples{trainX: x, trainY: y, source: "synthetic y=2x+10+N(0,0.33)"}, nil
	}
	tr, te, source, err := data.Load(f.dataDir)
	if err != nil {
		return examples{}, err
	}
	return examples{trainX: tr.Images, trainY: tr.Labels, testX: te.Images, testY: te.Labels, source: source}, nil
}

func runTrain(ctx context.Context, f trainFlags, stdout, stderr io.Writer) error {
	if err := f.applyDefaults(); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	ex, err := loadExamples(f)
	if err != nil {
		return err
	}
	n := ex.trainX.Shape()[0]
	steps := f.steps
	if steps == 0 {
		steps = int(math.Ceil(f.epochs * float64(n) / float64(f.batch)))
	}

	s := graph.NewScope()
	m, err := models.Build(s, f.model, models.Config{Seed: f.seed})
	if err != nil {
		return err
	}
	opt, err := train.NewOptimizer(f.optimizer, float32(f.lr))
	if err != nil {
		return fmt.Errorf("--optimizer: %w", err)
	}
	globalStep := train.CreateGlobalStep(s)
	trainOp, err := train.Minimize(s, opt, m.Loss, globalStep)
	if err != nil {
		return err
	}
	initOp := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		return err
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		return err
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{initOp}); err != nil {
		return fmt.Errorf("initialising variables: %w", err)
	}

	ds, err := data.FromTensors(ex.trainX, ex.trainY)
	if err != nil {
		return err
	}
	it := ds.Shuffle(n, int64(f.seed)).Repeat(-1).Batch(f.batch, true).Prefetch(2).Iterator(ctx)
	defer it.Close()

	log.Info("training", "model", f.model, "data", ex.source, "examples", n, "steps", steps,
		"batch", f.batch, "optimizer", f.optimizer, "lr", f.lr)
	fetches := []graph.Output{m.Loss}
	var loss float64
	start := time.Now()
	window, windowStart := 0, start
	for step := 1; step <= steps; step++ {
		batch, err := it.Next()
		if err != nil {
			return fmt.Errorf("reading batch %d: %w", step, err)
		}
		out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{m.Input: batch[0], m.Label: batch[1]},
			fetches, []*graph.Node{trainOp})
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		loss = out[0].Float64At(0)
		window++
		if step%f.logEvery == 0 || step == steps {
			now := time.Now()
			rate := float64(window*f.batch) / now.Sub(windowStart).Seconds()
			fmt.Fprintf(stderr, "step %d/%d  epoch %.2f  loss %.4f  %.0f examples/s\n",
				step, steps, float64(step*f.batch)/float64(n), loss, rate)
			window, windowStart = 0, now
		}
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return fmt.Errorf("step %d: loss is %v: lower --lr", step, loss)
		}
	}
	trainSeconds := time.Since(start).Seconds()
	// Read after the loop: a fetch in the training step may see the value
	// from before that step's increment.
	gs, err := sess.Run(ctx, nil, []graph.Output{globalStep.Value()}, nil)
	if err != nil {
		return err
	}
	gstep := int64(gs[0].Float64At(0))

	res := result{
		Model: f.model, Optimizer: f.optimizer, LearningRate: f.lr, Batch: f.batch,
		GlobalStep: gstep, Epochs: float64(steps*f.batch) / float64(n), Loss: loss,
		Data: ex.source, TrainExamples: n,
		ExamplesPerSecond: float64(steps*f.batch) / trainSeconds,
	}
	if f.model == "linreg" {
		out, err := sess.Run(ctx, nil, []graph.Output{m.Params["W"], m.Params["b"]}, nil)
		if err != nil {
			return err
		}
		w, b := out[0].Float64At(0), out[1].Float64At(0)
		res.W, res.B = &w, &b
	} else {
		acc, tl, err := evaluate(ctx, sess, m, ex.testX, ex.testY)
		if err != nil {
			return err
		}
		res.TestAccuracy, res.TestLoss, res.TestExamples = &acc, &tl, ex.testX.Shape()[0]
	}
	res.WallSeconds = time.Since(start).Seconds()
	return report(stdout, res, f.jsonOut)
}

// evaluate returns the accuracy and mean loss over a test set, in batches.
func evaluate(ctx context.Context, sess *session.Session, m *models.Model, x, y *tensor.Tensor) (acc, loss float64, err error) {
	ds, err := data.FromTensors(x, y)
	if err != nil {
		return 0, 0, err
	}
	it := ds.Batch(1000, false).Iterator(ctx)
	defer it.Close()
	var correct, lossSum float64
	total := 0
	for {
		b, err := it.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, 0, err
		}
		out, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{m.Input: b[0], m.Label: b[1]},
			[]graph.Output{m.Correct, m.EvalLoss}, nil)
		if err != nil {
			return 0, 0, fmt.Errorf("evaluating: %w", err)
		}
		k := b[0].Shape()[0]
		correct += out[0].Float64At(0)
		lossSum += out[1].Float64At(0) * float64(k)
		total += k
	}
	if total == 0 {
		return 0, 0, fmt.Errorf("evaluating: the test set is empty")
	}
	return correct / float64(total), lossSum / float64(total), nil
}

func report(w io.Writer, r result, asJSON bool) error {
	if r.TestAccuracy != nil {
		fmt.Fprintf(w, "%s: %d steps, loss %.4f, test accuracy %.4f (%d examples), %.0f examples/s, %.1f s\n",
			r.Model, r.GlobalStep, r.Loss, *r.TestAccuracy, r.TestExamples, r.ExamplesPerSecond, r.WallSeconds)
	} else if r.W != nil {
		fmt.Fprintf(w, "%s: %d steps, loss %.4f, W %.4f, b %.4f, %.0f examples/s, %.1f s\n",
			r.Model, r.GlobalStep, r.Loss, *r.W, *r.B, r.ExamplesPerSecond, r.WallSeconds)
	}
	if !asJSON {
		return nil
	}
	enc := json.NewEncoder(w)
	return enc.Encode(r)
}
