package models

import (
	"context"
	"fmt"
	"math"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// The CTR workload's data: the synthetic click log by default, or the
// Criteo TSV files of a directory.
const (
	// ClickTrainExamples and ClickTestExamples size the synthetic log.
	ClickTrainExamples = 500_000
	ClickTestExamples  = 50_000
	// criteoLimit bounds the examples read from a Criteo directory (the
	// full logs do not fit in memory).
	criteoLimit = 5_000_000
)

// LoadClicks is LoadData("widedeep") for the model's config c (its
// vocabulary).
func LoadClicks(dir string, seed int64, c WideDeepConfig) (Data, error) {
	return loadClicks(dir, seed, c.withDefaults().Vocab)
}

// loadClicks returns the CTR examples: from the Criteo TSV files of dir
// (the last tenth for evaluation), or, if dir is empty, a synthetic log
// whose planted model is fixed (the seed changes only the examples'
// order of generation, not the ground truth).
func loadClicks(dir string, seed int64, vocab int) (Data, error) {
	var all *data.ClickLog
	var err error
	var source string
	var nTrain int
	if dir != "" {
		if all, err = data.LoadCriteoDir(dir, vocab, criteoLimit); err != nil {
			return Data{}, err
		}
		nTrain = all.Len() - all.Len()/10
		source = fmt.Sprintf("Criteo TSV %s (%d examples, ids hashed into %d per feature)", dir, all.Len(), vocab)
	} else {
		all, err = data.SyntheticClickLog(data.ClickLogConfig{Examples: ClickTrainExamples + ClickTestExamples,
			Vocab: vocab, Seed: seed, ModelSeed: 17})
		if err != nil {
			return Data{}, err
		}
		nTrain = ClickTrainExamples
		source = fmt.Sprintf("synthetic click log (%d ids per feature, Zipf 1.1, planted wide-and-deep model)", vocab)
	}
	tr, te, err := all.Split(nTrain)
	if err != nil {
		return Data{}, err
	}
	return Data{
		TrainX: tr.Cat, TrainY: tr.Labels, TestX: te.Cat, TestY: te.Labels, Source: source,
		Features: WideDeepFeatures, TrainExtra: []*tensor.Tensor{tr.Dense}, TestExtra: []*tensor.Tensor{te.Dense},
		Clicks: tr, TestClicks: te,
	}, nil
}

// ClickMetrics are the CTR model's evaluation: its AUC and log loss on a
// click log, and the planted model's AUC on the same examples (NaN for
// real data, which has no planted model).
type ClickMetrics struct {
	AUC, LogLoss, PlantedAUC float64
}

// EvaluateClicks predicts every example of l with the trained estimator
// (in batches of 4096) and scores the predictions.
func EvaluateClicks(ctx context.Context, est *estimator.Estimator, l *data.ClickLog) (ClickMetrics, error) {
	return scoreClicks(l, func(part *data.ClickLog) (*tensor.Tensor, error) {
		out, err := est.Predict(ctx, map[string]*tensor.Tensor{"cat": part.Cat, "dense": part.Dense})
		if err != nil {
			return nil, err
		}
		p, ok := out["probability"]
		if !ok {
			return nil, fmt.Errorf("the model predicts no \"probability\"")
		}
		return p, nil
	})
}

// scoreClicks predicts every example of l with predict, in batches of
// 4096, and scores the predictions.
func scoreClicks(l *data.ClickLog, predict func(part *data.ClickLog) (*tensor.Tensor, error)) (ClickMetrics, error) {
	n := l.Len()
	probs := make([]float64, 0, n)
	const batch = 4096
	for lo := 0; lo < n; lo += batch {
		part, _, err := l.Split(min(lo+batch, n))
		if err != nil {
			return ClickMetrics{}, err
		}
		_, part, err = part.Split(lo)
		if err != nil {
			return ClickMetrics{}, err
		}
		p, err := predict(part)
		if err != nil {
			return ClickMetrics{}, fmt.Errorf("models: predicting clicks: %w", err)
		}
		if p.NumElements() != part.Len() {
			return ClickMetrics{}, fmt.Errorf("models: predicting clicks: %d probabilities for %d examples", p.NumElements(), part.Len())
		}
		for i := range p.NumElements() {
			probs = append(probs, p.Float64At(i))
		}
	}
	labels := l.Labels.Float32s()
	m := ClickMetrics{AUC: data.AUC(probs, labels), LogLoss: data.LogLoss(probs, labels), PlantedAUC: math.NaN()}
	if l.Planted != nil {
		m.PlantedAUC = data.AUC(l.Planted, labels)
	}
	return m, nil
}

// ClickEvalHook evaluates the CTR model on a click log at the end of
// training, on the chief, in the training session: a model with hash
// embeddings (WideDeepConfig.HashEmbedding) must be, since its rows live
// in the tasks holding the tables, not in the variables the estimator
// keeps for Predict. Begin adds the model in Predict mode (reusing the
// variables and tables) to the training graph; End, called once after the
// last step, fills Metrics and sets Done.
type ClickEvalHook struct {
	estimator.BaseHook
	// Model is the model function being trained; Log the examples to
	// score.
	Model estimator.ModelFn
	Log   *data.ClickLog

	Metrics ClickMetrics
	Done    bool

	cat, dense, prob graph.Output
}

// Begin implements estimator.Hook.
func (h *ClickEvalHook) Begin(s *graph.Scope) error {
	if h.Model == nil || h.Log == nil {
		return fmt.Errorf("models: ClickEvalHook needs a model function and a click log")
	}
	es := s.NameScope("click_eval").ReuseVariables()
	h.cat = ops.Placeholder(es, "cat", tensor.Int64, tensor.MakeShape(-1, data.CategoricalFeatures))
	h.dense = ops.Placeholder(es, "dense", tensor.Float32, tensor.MakeShape(-1, data.DenseFeatures))
	spec, err := h.Model(es, estimator.Features{"cat": h.cat, "dense": h.dense}, graph.Output{}, estimator.Predict)
	if err == nil {
		err = es.Err()
	}
	if err != nil {
		return fmt.Errorf("models: building the click evaluation: %w", err)
	}
	p, ok := spec.Predictions["probability"]
	if !ok {
		return fmt.Errorf("models: the model predicts no \"probability\"")
	}
	h.prob = p
	return nil
}

// End implements train.Hook: it scores the log with the trained model.
func (h *ClickEvalHook) End(ctx context.Context, ms *train.MonitoredSession) error {
	m, err := scoreClicks(h.Log, func(part *data.ClickLog) (*tensor.Tensor, error) {
		out, err := ms.Session().Run(ctx, map[graph.Output]*tensor.Tensor{h.cat: part.Cat, h.dense: part.Dense}, []graph.Output{h.prob}, nil)
		if err != nil {
			return nil, err
		}
		return out[0], nil
	})
	if err != nil {
		return err
	}
	h.Metrics, h.Done = m, true
	return nil
}
