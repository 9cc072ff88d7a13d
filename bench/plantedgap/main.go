// Command plantedgap measures how far the widedeep model (or a model of
// exactly the planted structure, -model oracle) stays below the planted
// model's AUC on the synthetic click log, at a given strength of the
// planted pairwise term: the experiment behind docs/BENCHMARKS.md's "The
// planted pairwise term at full strength".
//
//	go run ./bench/plantedgap -interaction 1 -model default -steps 3000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

func main() {
	inter := flag.Float64("interaction", 1, "")
	steps := flag.Int("steps", 3000, "")
	batch := flag.Int("batch", 512, "")
	lr := flag.Float64("lr", 1, "")
	kind := flag.String("model", "default", "default|big|oracle")
	dim := flag.Int("dim", 8, "")
	trainN := flag.Int("train", models.ClickTrainExamples, "")
	flag.Parse()
	all, err := data.SyntheticClickLog(data.ClickLogConfig{Examples: *trainN + models.ClickTestExamples, Vocab: 100, Seed: 1, ModelSeed: 17, Interaction: *inter})
	if err != nil {
		panic(err)
	}
	tr, te, _ := all.Split(*trainN)
	ex := models.Data{TrainX: tr.Cat, TrainY: tr.Labels, TestX: te.Cat, TestY: te.Labels, Features: models.WideDeepFeatures,
		TrainExtra: []*tensor.Tensor{tr.Dense}, TestExtra: []*tensor.Tensor{te.Dense}, Clicks: tr, TestClicks: te}
	opt := train.NewAdagrad(float32(*lr), 0.1)
	var fn estimator.ModelFn
	switch *kind {
	case "default":
		fn, err = models.ModelFn("widedeep", models.Config{Seed: 1, WideDeep: models.WideDeepConfig{Dim: *dim}}, opt)
	case "big":
		fn, err = models.ModelFn("widedeep", models.Config{Seed: 1, WideDeep: models.WideDeepConfig{Dim: *dim, Hidden: []int{256, 128, 64}}}, opt)
	case "oracle":
		fn = oracle(opt)
	}
	if err != nil {
		panic(err)
	}
	est, err := estimator.New(fn, estimator.RunConfig{Seed: 1, Progress: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	start := time.Now()
	ctx := context.Background()
	if _, err := est.Train(ctx, ex.TrainInput("cat", *batch), estimator.Stop{MaxSteps: int64(*steps)}); err != nil {
		panic(err)
	}
	m, err := models.EvaluateClicks(ctx, est, te)
	if err != nil {
		panic(err)
	}
	trm, _ := models.EvaluateClicks(ctx, est, firstN(tr, 50000))
	fmt.Printf("model=%s interaction=%v steps=%d batch=%d lr=%v dim=%d train=%d: auc %.4f planted %.4f gap %.4f logloss %.4f | train-subset auc %.4f planted %.4f | %v\n",
		*kind, *inter, *steps, *batch, *lr, *dim, *trainN, m.AUC, m.PlantedAUC, m.PlantedAUC-m.AUC, m.LogLoss, trm.AUC, trm.PlantedAUC, time.Since(start).Round(time.Second))
}

func firstN(l *data.ClickLog, n int) *data.ClickLog { a, _, _ := l.Split(n); return a }

// oracle has exactly the planted model's structure: a weight per id, a
// dim-4 embedding per id whose 13 adjacent pairs are dotted, dense linear
// and tanh terms.
func oracle(opt train.Optimizer) estimator.ModelFn {
	const rows = data.CategoricalFeatures * 100
	return func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
		cat, dense := f["cat"], f["dense"]
		wt, err := ops.NewEmbeddingTable(s, "w", tensor.Float32, rows, 1, func(int) ops.Initializer { return ops.ZerosInit() }, 1)
		if err != nil {
			return nil, err
		}
		et, err := ops.NewEmbeddingTable(s, "e", tensor.Float32, rows, 4, func(i int) ops.Initializer { return ops.RandomUniformInit(-0.3, 0.3, 7) }, 1)
		if err != nil {
			return nil, err
		}
		u := ops.NewVariable(s, "u", tensor.Float32, []int{13, 1}, ops.ZerosInit())
		v := ops.NewVariable(s, "v", tensor.Float32, []int{13, 1}, ops.ZerosInit())
		b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
		wide := ops.Sum(s, ops.ReshapeTo(s, ops.EmbeddingLookup(s, wt, cat, "mod"), -1, 26), []int{1}, false)
		e := ops.ReshapeTo(s, ops.EmbeddingLookup(s, et, cat, "mod"), -1, 13, 2, 4)
		even := ops.ReshapeTo(s, ops.Slice(s, e, []int{0, 0, 0, 0}, []int{-1, 13, 1, 4}), -1, 52)
		odd := ops.ReshapeTo(s, ops.Slice(s, e, []int{0, 0, 1, 0}, []int{-1, 13, 1, 4}), -1, 52)
		pair := ops.Sum(s, ops.Mul(s, even, odd), []int{1}, false)
		dl := ops.ReshapeTo(s, ops.Add(s, ops.MatMul(s, dense, u.Value(), false, false), ops.MatMul(s, ops.Tanh(s, dense), v.Value(), false, false)), -1)
		logit := ops.Add(s, ops.Add(s, ops.Add(s, wide, pair), dl), b.Value())
		spec := &estimator.Spec{Optimizer: opt, Predictions: map[string]graph.Output{"probability": ops.Sigmoid(s, logit)}}
		if mode != estimator.Predict {
			per := ops.Sub(s, ops.Softplus(s, logit), ops.Mul(s, labels, logit))
			spec.Loss = ops.Mean(s, per, nil, false)
		}
		return spec, nil
	}
}
