package train_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/testlog"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

var quiet = slog.New(slog.DiscardHandler)

// replica is one worker's own graph and session.
type replica struct {
	model *models.Model
	sess  *session.Session
	ar    *train.AllReduceTrainer
	avg   *train.PeriodicAverager
	local *graph.Node // plain local training step (for averaging)
}

type replicaMode int

const (
	modeAllReduce replicaMode = iota
	modeAveraging
)

func newReplica(t *testing.T, name string, lr float32, mode replicaMode, cfg train.AveragingConfig) *replica {
	t.Helper()
	s := graph.NewScope()
	m, err := models.Build(s, name, models.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{model: m}
	opt := train.NewGradientDescent(lr)
	switch mode {
	case modeAllReduce:
		r.ar, err = train.NewAllReduceTrainer(s, opt, m.Loss, m.Variables)
	case modeAveraging:
		if r.local, err = train.Minimize(s, opt, m.Loss, nil); err == nil {
			r.avg, err = train.NewPeriodicAverager(s, m.Variables, cfg)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if r.sess, err = session.New(s.Graph()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.sess.Close() })
	if _, err := r.sess.Run(t.Context(), nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *replica) params(t *testing.T) (w, b float64) {
	t.Helper()
	vals, err := r.sess.Run(t.Context(), nil, []graph.Output{r.model.Params["W"], r.model.Params["b"]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return vals[0].Float64At(0), vals[1].Float64At(0)
}

// runWorkers runs f for every rank concurrently and fails on any error.
func runWorkers(t *testing.T, n int, f func(rank int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
}

// rows returns rows [lo, hi) of t (cyclically) as a new tensor.
func rows(t *tensor.Tensor, lo, n int) *tensor.Tensor {
	shape := append([]int{n}, t.Shape()[1:]...)
	out := tensor.New(t.DType(), shape...)
	width := tensor.NumElements(t.Shape()[1:])
	total := t.Shape()[0]
	for i := range n {
		r := (lo + i) % total
		switch t.DType() {
		case tensor.Float32:
			copy(out.Float32s()[i*width:(i+1)*width], t.Float32s()[r*width:(r+1)*width])
		case tensor.Int32:
			copy(out.Int32s()[i*width:(i+1)*width], t.Int32s()[r*width:(r+1)*width])
		}
	}
	return out
}

func rings(t *testing.T, n int, delay time.Duration) []*allreduce.Ring {
	rs, err := allreduce.NewInProcess(n, allreduce.InProcessConfig{Logger: quiet, Delay: delay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range rs {
			r.Close()
		}
	})
	return rs
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestAllReduceTrainerLinearRegression(t *testing.T) {
	for _, workers := range []int{2, 3} {
		t.Run(fmt.Sprint(workers, " workers"), func(t *testing.T) {
			ring := rings(t, workers, 0)
			reps := make([]*replica, workers)
			for i := range reps {
				reps[i] = newReplica(t, "linreg", 0.05, modeAllReduce, train.AveragingConfig{})
			}
			ctx := timeout(t)
			const steps, batch = 400, 4
			runWorkers(t, workers, func(rank int) error {
				r := reps[rank]
				x, y := data.Linear(steps*batch, int64(rank+1), 2, 10, 0.33) // each worker its own data
				if err := r.ar.Broadcast(ctx, r.sess, ring[rank], -1); err != nil {
					return err
				}
				for step := range steps {
					feeds := map[graph.Output]*tensor.Tensor{
						r.model.Input: rows(x, step*batch, batch), r.model.Label: rows(y, step*batch, batch),
					}
					if _, err := r.ar.Step(ctx, r.sess, feeds, ring[rank], int64(step)); err != nil {
						return err
					}
				}
				return nil
			})
			w0, b0 := reps[0].params(t)
			if math.Abs(w0-2) > 0.1 || math.Abs(b0-10) > 0.1 {
				t.Errorf("W = %.4f, b = %.4f; want 2 and 10", w0, b0)
			}
			for i, r := range reps[1:] {
				if w, b := r.params(t); w != w0 || b != b0 {
					t.Errorf("worker %d has W = %v, b = %v; worker 0 has %v, %v", i+1, w, b, w0, b0)
				}
			}
		})
	}
}

// trainAveraging trains linreg on every worker with periodic averaging and
// returns the replicas.
func trainAveraging(t *testing.T, workers, steps int, compute, delay time.Duration, cfg train.AveragingConfig) []*replica {
	ring := rings(t, workers, delay)
	reps := make([]*replica, workers)
	for i := range reps {
		reps[i] = newReplica(t, "linreg", 0.02, modeAveraging, cfg)
	}
	ctx := timeout(t)
	const batch = 4
	runWorkers(t, workers, func(rank int) error {
		r := reps[rank]
		x, y := data.Linear(steps*batch, int64(rank+1), 2, 10, 0.33)
		if err := r.avg.Broadcast(ctx, r.sess, ring[rank]); err != nil {
			return err
		}
		for step := range steps {
			feeds := map[graph.Output]*tensor.Tensor{
				r.model.Input: rows(x, step*batch, batch), r.model.Label: rows(y, step*batch, batch),
			}
			if _, err := r.sess.Run(ctx, feeds, nil, []*graph.Node{r.local}); err != nil {
				return err
			}
			if compute > 0 {
				time.Sleep(compute) // a heavier model's step, not synchronisation
			}
			if _, err := r.avg.Step(ctx, r.sess, ring[rank]); err != nil {
				return err
			}
		}
		return r.avg.Average(ctx, r.sess, ring[rank])
	})
	return reps
}

func TestPeriodicAveragingLinearRegression(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		cfg     train.AveragingConfig
	}{
		{"tau=1", 2, train.AveragingConfig{Tau: 1}},
		{"tau=8", 3, train.AveragingConfig{Tau: 8}},
		{"adaptive", 3, train.AveragingConfig{Logger: quiet}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reps := trainAveraging(t, tc.workers, 1000, 0, 0, tc.cfg)
			w0, b0 := reps[0].params(t)
			if math.Abs(w0-2) > 0.1 || math.Abs(b0-10) > 0.1 {
				t.Errorf("W = %.4f, b = %.4f; want 2 and 10", w0, b0)
			}
			for i, r := range reps[1:] {
				if w, b := r.params(t); w != w0 || b != b0 {
					t.Errorf("worker %d ends with W = %v, b = %v; worker 0 with %v, %v", i+1, w, b, w0, b0)
				}
				if r.avg.Tau() != reps[0].avg.Tau() || r.avg.Rounds() != reps[0].avg.Rounds() {
					t.Errorf("worker %d: tau %d after %d rounds, worker 0: %d after %d", i+1,
						r.avg.Tau(), r.avg.Rounds(), reps[0].avg.Tau(), reps[0].avg.Rounds())
				}
			}
			if tc.cfg.Tau > 0 {
				if want := int64(1000/tc.cfg.Tau + 1); reps[0].avg.Rounds() != want {
					t.Errorf("%d averaging rounds, want %d", reps[0].avg.Rounds(), want)
				}
			}
		})
	}
}

func TestAdaptiveTauGrowsWithSlowerCommunication(t *testing.T) {
	// Local steps take at least 2ms (simulated compute); communication
	// is either in-memory (tens of microseconds) or held 5ms per chunk.
	const compute = 2 * time.Millisecond
	var logs testlog.Buffer
	fast := trainAveraging(t, 2, 100, compute, 0, train.AveragingConfig{Tau0: 1, Logger: quiet})
	slow := trainAveraging(t, 2, 100, compute, 5*time.Millisecond,
		train.AveragingConfig{Tau0: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	fastTau, slowTau := fast[0].avg.Tau(), slow[0].avg.Tau()
	t.Logf("tau: %d with fast communication, %d with 5ms per chunk", fastTau, slowTau)
	if slowTau <= fastTau || slowTau < 8 {
		t.Errorf("tau with slow communication = %d, fast = %d: want it to grow past 8", slowTau, fastTau)
	}
	if !strings.Contains(logs.String(), "averaging period changed") {
		t.Errorf("no log of the period's change in:\n%s", logs.String())
	}
}

func TestAllReduceTrainerMLP(t *testing.T) {
	trainSet, _, err := data.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	const workers, steps, batch = 2, 60, 50
	ring := rings(t, workers, 0)
	reps := make([]*replica, workers)
	for i := range reps {
		reps[i] = newReplica(t, "mlp", 0.5, modeAllReduce, train.AveragingConfig{})
	}
	ctx := timeout(t)
	losses := make([][]float64, workers)
	runWorkers(t, workers, func(rank int) error {
		r := reps[rank]
		if err := r.ar.Broadcast(ctx, r.sess, ring[rank], -1); err != nil {
			return err
		}
		for step := range steps {
			lo := (step*workers + rank) * batch // disjoint batches
			feeds := map[graph.Output]*tensor.Tensor{
				r.model.Input: rows(trainSet.Images, lo, batch), r.model.Label: rows(trainSet.Labels, lo, batch),
			}
			loss, err := r.ar.Step(ctx, r.sess, feeds, ring[rank], int64(step))
			if err != nil {
				return err
			}
			losses[rank] = append(losses[rank], loss)
		}
		return nil
	})
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	first, last := mean(losses[0][:10]), mean(losses[0][steps-10:])
	t.Logf("MLP loss: %.3f over the first 10 steps, %.3f over the last 10", first, last)
	if !(last < 0.7*first) {
		t.Errorf("MLP loss went from %.3f to %.3f: not training", first, last)
	}
}

func TestAveragingConfigErrors(t *testing.T) {
	s := graph.NewScope()
	ops.NewVariable(s, "v", tensor.Float32, []int{2}, ops.ZerosInit())
	for _, tc := range []struct {
		cfg  train.AveragingConfig
		want string
	}{
		{train.AveragingConfig{Tau: -1}, "negative period"},
		{train.AveragingConfig{CommFraction: 1}, "outside [0, 1)"},
		{train.AveragingConfig{MinTau: 8, MaxTau: 4}, "bounds [8, 4]"},
	} {
		if _, err := train.NewPeriodicAverager(s, nil, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewPeriodicAverager(%+v) = %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
	d := ops.NewVariable(s, "d", tensor.Float64, []int{2}, ops.ZerosInit())
	if _, err := train.NewPeriodicAverager(s, []*ops.Variable{d}, train.AveragingConfig{}); err == nil || !strings.Contains(err.Error(), "float32") {
		t.Errorf("float64 variable: %v, want ErrNotFloat32", err)
	}
}
