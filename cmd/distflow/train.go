package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/summary"
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

	// The cluster, as the original programs took it (or TF_CONFIG).
	psHosts, workerHosts, chiefHosts string
	jobName                          string
	taskIndex                        int
	// localCluster starts a whole cluster of processes ("ps=1,worker=2").
	localCluster string
	inGraph      bool
	psStrategy   string
	stepTimeout  time.Duration
	waitTimeout  time.Duration
	// listenFD is an inherited listening socket (set by --local-cluster).
	listenFD int
	// logdir receives TensorBoard event files (one per process).
	logdir string
	// cpuProfile receives a pprof CPU profile of the run, memProfile
	// its memory profile (allocations and what is in use at the end).
	cpuProfile, memProfile string
	// Checkpoints: where, how often, how many.
	ckptDir   string
	saveSteps int
	saveSecs  int
	keepCkpts int
	// Synchronous training and bounded staleness.
	sync                bool
	replicasToAggregate int
	staleness           int
	stepDelay           time.Duration
	// All-reduce among workers, without parameter servers.
	allReduce    bool
	averageEvery int
	// lrScaling adapts --lr to the batches a synchronous step averages:
	// none, linear or sqrt.
	lrScaling string
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
	addClusterFlags(fl, &f.psHosts, &f.workerHosts, &f.chiefHosts, &f.jobName, &f.taskIndex)
	fl.StringVar(&f.localCluster, "local-cluster", "", `start a whole cluster of local processes and train on it, e.g. "ps=1,worker=2"`)
	fl.BoolVar(&f.inGraph, "in-graph", false, "in-graph replication: the chief builds one tower per worker and averages their gradients (the other workers only serve)")
	fl.StringVar(&f.psStrategy, "ps-strategy", "round-robin", "how variables are spread over ps tasks: round-robin or greedy (balanced by bytes)")
	fl.DurationVar(&f.stepTimeout, "step-timeout", time.Minute, "deadline of one distributed step")
	fl.DurationVar(&f.waitTimeout, "wait-timeout", 2*time.Minute, "how long to wait for peers: the cluster to come up, the chief to initialise the model")
	fl.StringVar(&f.logdir, "logdir", "", "write TensorBoard event files (loss, throughput, weight histograms) to this directory")
	fl.StringVar(&f.ckptDir, "checkpoint-dir", "", "save and restore checkpoints here (default: --logdir); the chief resumes from the latest complete one")
	fl.IntVar(&f.saveSteps, "save-checkpoint-steps", 0, "save a checkpoint every N global steps (0: only at the end)")
	fl.IntVar(&f.saveSecs, "save-checkpoint-secs", 0, "save a checkpoint at least every N seconds (0: off)")
	fl.IntVar(&f.keepCkpts, "keep-checkpoints", 5, "how many recent checkpoints to keep")
	fl.BoolVar(&f.sync, "sync", false, "synchronous training: each update averages the gradients of --replicas-to-aggregate workers")
	fl.IntVar(&f.replicasToAggregate, "replicas-to-aggregate", 0, "gradients per synchronous update (default: every worker; fewer makes the rest backup workers)")
	fl.IntVar(&f.staleness, "staleness", -1, "bounded staleness: a worker runs at most this many steps ahead of the slowest (-1: unbounded)")
	fl.DurationVar(&f.stepDelay, "step-delay", 0, "wait this long before every step (fault injection: a slow worker)")
	_ = fl.MarkHidden("step-delay")
	fl.BoolVar(&f.allReduce, "allreduce", false, "no parameter servers: the workers average their gradients with a ring all-reduce every step")
	fl.IntVar(&f.averageEvery, "average-every", -1, "with --allreduce: train locally and average the variables every N steps instead (0: adapt N to the cost of communication)")
	fl.StringVar(&f.lrScaling, "lr-scaling", "none", "how the learning rate follows the k batches that one synchronous update averages (--sync, --allreduce, --in-graph): "+
		`"none" uses --lr as given, as TensorFlow's SyncReplicasOptimizer and Horovod do (their scripts scale it); "linear" uses k times --lr (Goyal et al. 2017: --lr is then the single-process rate for one batch); "sqrt" uses sqrt(k) times --lr`)
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of this process to the file")
	fl.StringVar(&f.memProfile, "memprofile", "", "write a pprof memory profile of this process to the file at the end (go tool pprof -sample_index=alloc_space for what was allocated)")
	fl.IntVar(&f.listenFD, "listen-fd", 0, "serve on this inherited listening socket (set by --local-cluster)")
	_ = fl.MarkHidden("listen-fd")
	return cmd
}

// result is what `train --json` prints.
type result struct {
	Model             string   `json:"model"`
	Optimizer         string   `json:"optimizer"`
	LearningRate      float64  `json:"learning_rate"`
	Batch             int      `json:"batch"`
	Task              string   `json:"task,omitempty"`
	GlobalStep        int64    `json:"global_step"`
	LocalSteps        int      `json:"local_step"`
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
	// ClusterExamplesPerSecond is the whole cluster's throughput.
	ClusterExamplesPerSecond float64 `json:"cluster_examples_per_second,omitempty"`
	// PSVariables lists the variables each ps task held (cluster runs).
	PSVariables map[string][]string `json:"ps_variables,omitempty"`
	WallSeconds float64             `json:"wall_seconds"`
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
	switch f.lrScaling {
	case "", "none", "linear", "sqrt":
	default:
		return fmt.Errorf("--lr-scaling %q: want none, linear or sqrt", f.lrScaling)
	}
	return nil
}

// averagedBatches is the number of batches that one update averages with
// reps training tasks (chief and workers): the aggregated replicas of
// --sync, the ranks of --allreduce (each worker's own steps with
// --average-every), the towers of --in-graph; 1 for asynchronous training.
func (f trainFlags) averagedBatches(reps int) int {
	switch {
	case f.allReduce && f.averageEvery < 0, f.inGraph:
		return reps
	case f.sync && f.replicasToAggregate > 0:
		return f.replicasToAggregate
	case f.sync:
		return reps
	}
	return 1
}

// scaledLR is --lr adapted by --lr-scaling to updates that average k
// batches.
func (f trainFlags) scaledLR(k int) float64 {
	switch f.lrScaling {
	case "linear":
		return f.lr * float64(k)
	case "sqrt":
		return f.lr * math.Sqrt(float64(k))
	}
	return f.lr
}

func runTrain(ctx context.Context, f trainFlags, stdout, stderr io.Writer) error {
	if err := f.applyDefaults(); err != nil {
		return err
	}
	if f.cpuProfile != "" {
		out, err := os.Create(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer out.Close()
		if err := pprof.StartCPUProfile(out); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if f.memProfile != "" {
		out, err := os.Create(f.memProfile)
		if err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
		defer func() {
			if err := pprof.Lookup("allocs").WriteTo(out, 0); err != nil {
				fmt.Fprintf(stderr, "--memprofile: %v\n", err)
			}
			out.Close()
		}()
	}
	if f.localCluster != "" {
		counts, err := parseLocalCluster(f.localCluster, f.allReduce)
		if err != nil {
			return err
		}
		// The tasks are given the scaled rate as their --lr.
		f.lr = f.scaledLR(f.averagedBatches(counts["chief"] + counts["worker"]))
		return runLocalCluster(ctx, f, stdout, stderr)
	}
	spec, self, err := clusterFromFlags(f.psHosts, f.workerHosts, f.chiefHosts, f.jobName, f.taskIndex)
	if err != nil {
		return err
	}
	if spec != nil {
		f.lr = f.scaledLR(f.averagedBatches(len(replicas(spec))))
	}
	if spec == nil {
		if f.allReduce {
			return errors.New("--allreduce needs workers: add --local-cluster worker=2 or --worker_hosts")
		}
		return trainLocal(ctx, f, stdout, stderr)
	}
	if f.allReduce {
		if f.sync || f.inGraph || f.staleness >= 0 {
			return errors.New("--allreduce is its own kind of synchronous training: drop --sync, --in-graph and --staleness")
		}
		return trainAllReduce(ctx, f, spec, self, stdout, stderr)
	}
	if f.averageEvery >= 0 {
		return errors.New("--average-every goes with --allreduce")
	}
	return trainInCluster(ctx, f, spec, self, stdout, stderr)
}

// trainLocal trains in this process with a local session.
func trainLocal(ctx context.Context, f trainFlags, stdout, stderr io.Writer) error {
	started := time.Now()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	ex, err := loadExamples(f)
	if err != nil {
		return err
	}
	s := graph.NewScope()
	if f.sync || f.staleness >= 0 {
		return errors.New("--sync and --staleness coordinate the workers of a cluster: add --local-cluster or the cluster flags")
	}
	j, err := buildJob(s, f, []string{""}, 1, 0)
	if err != nil {
		return err
	}
	if err := j.addSaver(s, nil, log); err != nil {
		return err
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		return err
	}
	defer sess.Close()
	ms, err := j.monitor(ctx, sess, true, j.initOp, nil, log)
	if err != nil {
		return err
	}
	it, err := batches(ctx, ex, f, 1, 0)
	if err != nil {
		return err
	}
	defer it.Close()
	n := ex.trainX.Shape()[0]
	target := f.targetSteps(n, j.batchesPerStep())
	log.Info("training", "model", f.model, "data", ex.source, "examples", n, "steps", target,
		"batch", f.batch, "optimizer", f.optimizer, "lr", f.lr)
	events, err := openEvents(f.logdir, "local")
	if err != nil {
		return err
	}
	st, err := j.trainLoop(ctx, ms, []*data.Iterator{it}, target, n, "", stderr, events)
	if err := closeEvents(events, err); err != nil {
		return err
	}
	if err := ms.Close(ctx); err != nil { // the final checkpoint
		return err
	}
	res, err := j.finalResult(ctx, sess, ex, st, started)
	if err != nil {
		return err
	}
	return report(stdout, res, f.jsonOut)
}

// openEvents opens the event file of this process in logdir ("" means no
// events: a nil writer).
func openEvents(logdir, suffix string) (*summary.Writer, error) {
	if logdir == "" {
		return nil, nil
	}
	w, err := summary.NewWriter(logdir, summary.WriterOptions{Suffix: suffix})
	if err != nil {
		return nil, fmt.Errorf("--logdir: %w", err)
	}
	return w, nil
}

// closeEvents closes the event writer and returns the training error, or
// else the writer's.
func closeEvents(w *summary.Writer, trainErr error) error {
	if w == nil {
		return trainErr
	}
	if err := w.Close(); err != nil && trainErr == nil {
		return fmt.Errorf("--logdir: %w", err)
	}
	return trainErr
}

func report(w io.Writer, r result, asJSON bool) error {
	who := r.Model
	if r.Task != "" {
		who = r.Task + " " + r.Model
	}
	switch {
	case r.TestAccuracy != nil:
		fmt.Fprintf(w, "%s: global step %d, loss %.4f, test accuracy %.4f (%d examples), %.0f examples/s, %.1f s\n",
			who, r.GlobalStep, r.Loss, *r.TestAccuracy, r.TestExamples, r.ExamplesPerSecond, r.WallSeconds)
	case r.W != nil:
		fmt.Fprintf(w, "%s: global step %d, loss %.4f, W %.4f, b %.4f, %.0f examples/s, %.1f s\n",
			who, r.GlobalStep, r.Loss, *r.W, *r.B, r.ExamplesPerSecond, r.WallSeconds)
	default:
		fmt.Fprintf(w, "%s: global step %d, loss %.4f, %.0f examples/s, %.1f s\n",
			who, r.GlobalStep, r.Loss, r.ExamplesPerSecond, r.WallSeconds)
	}
	if !asJSON {
		return nil
	}
	return json.NewEncoder(w).Encode(r)
}
