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
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/kernel/linalg"
	"github.com/distflow/distflow/localcluster"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/pki"
	"github.com/distflow/distflow/placement"
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
	verbose   bool
	quiet     bool

	// The cluster, as the original programs took it (or TF_CONFIG).
	psHosts, workerHosts, chiefHosts string
	jobName                          string
	taskIndex                        int
	// localCluster starts a whole cluster of processes ("ps=1,worker=2").
	localCluster string
	// strategyName is --strategy NAME[:ARGS] (estimator.ParseStrategy);
	// inGraph, sync, staleness, allReduce and averageEvery are its older
	// spellings, kept as aliases.
	strategyName string
	inGraph      bool
	psStrategy   string
	compression  string
	pullCompress string
	lrDecay      string
	clipNorm     float64
	weightDecay  float64
	mlpHidden    int
	minSlice     int64
	stepTimeout  time.Duration
	waitTimeout  time.Duration
	// listenFD is an inherited listening socket (tests that start tasks
	// by hand pass one, as a local cluster does).
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
	// export receives the trained model as a new numbered version;
	// exportBest makes the evaluator task export there each model better
	// than the ones before instead.
	export     string
	exportBest bool
	// trace records training steps as a Chrome trace (trace.go).
	trace traceFlags
	// security secures a cluster's connections (--certs-dir,
	// --cluster-token-file, --insecure).
	security pki.Security
	// wideDeep shapes --model widedeep (widedeep.go).
	wideDeep models.WideDeepConfig
	// metricsPort serves Prometheus metrics (metrics.go).
	metricsPort int
	// dash serves the live dashboard (dashboard.go).
	dash dashboardFlags
	// gpu chooses the accelerators (gpus.go).
	gpu gpuFlags
}

// modelDefaults are the reference workloads' settings (SPEC section 6),
// tuned so that the defaults train to a useful accuracy.
var modelDefaults = map[string]trainFlags{
	"linreg": {steps: 2000, batch: 1, optimizer: "sgd", logEvery: 100},
	"mlp":    {epochs: 20, batch: 100, optimizer: "sgd", logEvery: 100},
	"cnn":    {epochs: 1, batch: 50, optimizer: "adam", logEvery: 50},
	// The CTR workload: see widedeep.go.
	"widedeep": wideDeepDefaults,
}

// defaultLRs are each reference model's learning rates by optimizer, the
// default of --lr: an adaptive optimizer at SGD's rate diverges (the mlp
// with Adam at 0.5 ends at 37% accuracy), and SGD at Adam's barely moves.
// Each is the best of a sweep on the model's default data (the mlp for 5
// epochs, the others at their defaults), the lower where two were close:
// docs/BENCHMARKS.md, "Learning rates by optimizer".
var defaultLRs = map[string]map[string]float64{
	"linreg":   {"sgd": 0.01, "momentum": 0.001, "adagrad": 0.3, "rmsprop": 0.01, "adam": 0.03, "ftrl": 0.3},
	"mlp":      {"sgd": 0.5, "momentum": 0.1, "adagrad": 0.5, "rmsprop": 0.003, "adam": 0.003, "ftrl": 0.5},
	"cnn":      {"sgd": 0.05, "momentum": 0.01, "adagrad": 0.01, "rmsprop": 0.001, "adam": 0.001, "ftrl": 0.01},
	"widedeep": {"sgd": 1, "momentum": 0.1, "adagrad": 1, "rmsprop": 0.01, "adam": 0.01, "ftrl": 1},
}

func newTrainCommand() *cobra.Command {
	f := &trainFlags{}
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a reference model (linreg, mlp, cnn) and report its accuracy and speed",
		Example: `  distflow train --model mlp                 # embedded Fashion-MNIST subset
  distflow train --model cnn --data /usr/share/datasets/fashion-mnist
  distflow train --model mlp --local-cluster ps=1,worker=2 --export /tmp/models/mlp
  distflow train --model linreg --steps 2000 --json
  distflow train --model mlp --ps_hosts=h0:2222 --worker_hosts=h1:2222 --job_name=ps --certs-dir certs`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd.Flags()); err != nil {
				return err
			}
			return runTrain(cmd.Context(), *f, cmd.Flags(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "mlp", "model to train: linreg, mlp, cnn or widedeep")
	f.gpu.register(fl)
	fl.IntVar(&f.steps, "steps", 0, "global steps to train to (overrides --epochs)")
	fl.Float64Var(&f.epochs, "epochs", 0, "passes over the training data (default: the model's)")
	fl.IntVar(&f.batch, "batch", 0, "examples per step (default: the model's)")
	fl.Float64Var(&f.lr, "lr", 0, "learning rate (default: the model's for the optimizer, e.g. the mlp's 0.5 with sgd and 0.003 with adam)")
	fl.StringVar(&f.lrDecay, "lr-decay", "none", "learning-rate schedule: none; linear or cosine, to 0 at the last step (,end=SHARE: to SHARE of --lr; ,steps=N: at step N, then held); exponential,rate=R,every=N (times R every N steps) or step,rate=R,every=N (at once at each multiple of N); each with ,warmup=W to rise linearly to --lr over the first W steps")
	fl.StringVar(&f.optimizer, "optimizer", "", "sgd, momentum, adagrad, rmsprop, adam or ftrl (default: the model's)")
	fl.Float64Var(&f.weightDecay, "weight-decay", 0, "shrink each variable by --lr times this of itself before every update: decoupled weight decay, as AdamW (PyTorch's and Keras'); with sgd the same as PyTorch's weight_decay (0: none; not for embedding rows)")
	fl.Float64Var(&f.clipNorm, "clip-global-norm", 0, "scale each step's gradients down so that their global L2 norm is at most this (tf.clip_by_global_norm, torch.nn.utils.clip_grad_norm_); each replica clips its own before they are pushed or averaged (0: no clipping)")
	fl.StringVar(&f.dataDir, "data", "", "directory with the Fashion-MNIST IDX files (default: $DISTFLOW_DATA, the Debian package, or the embedded subset)")
	fl.IntVar(&f.seed, "seed", 1, "seed of initial weights, shuffling and dropout")
	fl.BoolVar(&f.jsonOut, "json", false, "print one JSON object with the results as the last line of stdout")
	fl.IntVar(&f.logEvery, "log-every", 0, "print a progress line every N steps (default: the model's)")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log what the runtime does (sessions, checkpoints, recoveries), and every task's output with --local-cluster")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print only the result and errors")
	addClusterFlags(fl, &f.psHosts, &f.workerHosts, &f.chiefHosts, &f.jobName, &f.taskIndex)
	fl.StringVar(&f.localCluster, "local-cluster", "", `start a whole cluster of local processes and train on it, e.g. "ps=1,worker=2"`)
	fl.StringVar(&f.strategyName, "strategy", "", "how the replicas share the model: async (the default), sync[:K] (K gradients per update; default every worker), staleness:S, ingraph, allreduce or averaging[:TAU] "+
		"(--sync, --replicas-to-aggregate, --staleness, --in-graph, --allreduce and --average-every say the same)")
	fl.BoolVar(&f.inGraph, "in-graph", false, "in-graph replication: the chief builds one tower per worker and averages their gradients (the other workers only serve)")
	fl.StringVar(&f.psStrategy, "ps-strategy", "round-robin", "how variables are spread over ps tasks: round-robin or greedy (balanced by bytes)")
	fl.DurationVar(&f.stepTimeout, "step-timeout", estimator.DefaultStepTimeout, "deadline of one distributed step")
	fl.DurationVar(&f.waitTimeout, "wait-timeout", estimator.DefaultWaitTimeout, "how long to wait for peers: the cluster to come up, the chief to initialise the model, a lost task to come back")
	fl.StringVar(&f.logdir, "logdir", "", "write TensorBoard event files (loss, throughput, weight histograms) to this directory")
	fl.StringVar(&f.ckptDir, "checkpoint-dir", "", "save and restore checkpoints here (default: --logdir); the chief resumes from the latest complete one")
	fl.IntVar(&f.saveSteps, "save-checkpoint-steps", 0, "save a checkpoint every N global steps (0: only at the end)")
	fl.IntVar(&f.saveSecs, "save-checkpoint-secs", 0, "save a checkpoint at least every N seconds (0: off)")
	fl.IntVar(&f.keepCkpts, "keep-checkpoints", 5, "how many recent checkpoints to keep (at least 1)")
	fl.BoolVar(&f.sync, "sync", false, "synchronous training: each update averages the gradients of --replicas-to-aggregate workers")
	fl.IntVar(&f.replicasToAggregate, "replicas-to-aggregate", 0, "gradients per synchronous update (default: every worker; fewer makes the rest backup workers)")
	fl.IntVar(&f.staleness, "staleness", -1, "bounded staleness: a worker runs at most this many steps ahead of the slowest (default: unbounded)")
	fl.DurationVar(&f.stepDelay, "step-delay", 0, "wait this long before every step (fault injection: a slow worker)")
	_ = fl.MarkHidden("step-delay")
	fl.BoolVar(&f.allReduce, "allreduce", false, "every worker holds the model and the workers average their gradients every step: round a ring all-reduce, or, when the cluster has ps tasks, through them (BytePS: each ps sums a slice; a lost ps sends the workers round the ring up to the next thousandth step)")
	fl.StringVar(&f.compression, "compression", "none", "how gradients travel, on the all-reduce ring or on the push to the ps: none (float32), fp16, bf16 (half the bytes), topk, topk:RATIO or topk:RATIO,warmup=STEPS (the largest RATIO of the elements, 0.01 by default, the rest kept for the next step; during the first STEPS steps the share falls from all to RATIO)")
	fl.StringVar(&f.pullCompress, "pull-compression", "none", "how workers read the ps tasks' parameters for their forward and backward passes: none (float32), fp16 or bf16 (half the bytes; the ps keeps and updates float32, and checkpoints hold float32); with the ps modes")
	fl.Int64Var(&f.minSlice, "ps-min-slice-bytes", 0, "split each weight matrix of the mlp or cnn by rows over the ps tasks, in slices of at least this many bytes (TensorFlow's min_max_variable_partitioner, at most one slice per ps task): each ps then serves its share of a large layer; 0 keeps every variable whole")
	fl.IntVar(&f.mlpHidden, "mlp-hidden", 100, "width of the mlp's hidden layer (wider: more bytes of gradient per example, for measuring communication)")
	fl.IntVar(&f.averageEvery, "average-every", -1, "with --allreduce: train locally and average the variables every N steps instead (0: adapt N to the cost of communication)")
	fl.StringVar(&f.lrScaling, "lr-scaling", "none", "how the learning rate follows the k batches that one synchronous update averages (--sync, --allreduce, --in-graph): "+
		`"none" uses --lr as given, as TensorFlow's SyncReplicasOptimizer and Horovod do (their scripts scale it); "linear" uses k times --lr (Goyal et al. 2017: --lr is then the single-process rate for one batch); "sqrt" uses sqrt(k) times --lr`)
	fl.StringVar(&f.export, "export", "", "export the trained model into a new numbered version under this directory (the chief alone), for distflow serve")
	fl.BoolVar(&f.exportBest, "export-best", false, "with --export and an evaluator task: the evaluator exports each checkpoint whose test loss is lower than every one before (TensorFlow's BestExporter), and the chief exports nothing")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of this process to the file")
	fl.StringVar(&f.memProfile, "memprofile", "", "write a pprof memory profile of this process to the file at the end (go tool pprof -sample_index=alloc_space for what was allocated)")
	addTraceFlags(fl, &f.trace)
	addSecurityFlags(fl, &f.security, false)
	addWideDeepFlags(fl, f)
	addHashFlags(fl, f)
	addMetricsFlag(fl, &f.metricsPort, true)
	addDashboardFlags(fl, &f.dash)
	addPrecisionFlag(fl)
	fl.IntVar(&f.listenFD, "listen-fd", 0, "serve on this inherited listening socket")
	_ = fl.MarkHidden("listen-fd")
	return cmd
}

// result is what `train --json` prints.
type result struct {
	Model             string   `json:"model"`
	Strategy          string   `json:"strategy"`
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
	Evaluations       int      `json:"evaluations,omitempty"` // checkpoints an evaluator task evaluated
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
	// Export is the exported model version (--export).
	Export      string  `json:"export,omitempty"`
	WallSeconds float64 `json:"wall_seconds"`
	// The CTR model's evaluation (widedeep.go).
	AUC        *float64 `json:"auc,omitempty"`
	LogLoss    *float64 `json:"logloss,omitempty"`
	PlantedAUC *float64 `json:"planted_auc,omitempty"`
	// Devices are this task's accelerators and the memory they held.
	Devices []deviceResult `json:"devices,omitempty"`
	// SIMD is the CPU kernels' path (linalg.Path: avx512, avx2, generic).
	SIMD string `json:"simd"`
}

// strategy is the estimator strategy the flags choose (check has
// refused flags that choose none).
func (f trainFlags) strategy() estimator.Strategy {
	s, err := f.parseStrategy()
	if err != nil {
		return estimator.Async{}
	}
	return s
}

// parseStrategy reads --strategy, or its older spellings, through
// estimator.ParseStrategy.
func (f trainFlags) parseStrategy() (estimator.Strategy, error) {
	var aliases []string
	if f.sync {
		aliases = append(aliases, fmt.Sprintf("sync:%d", f.replicasToAggregate))
	}
	if f.staleness >= 0 {
		aliases = append(aliases, fmt.Sprintf("staleness:%d", f.staleness))
	}
	if f.inGraph {
		aliases = append(aliases, "ingraph")
	}
	switch {
	case f.allReduce && f.averageEvery >= 0:
		aliases = append(aliases, fmt.Sprintf("averaging:%d", f.averageEvery))
	case f.allReduce:
		aliases = append(aliases, "allreduce")
	}
	switch {
	case f.strategyName != "" && len(aliases) > 0:
		return nil, fmt.Errorf("--strategy %s and --sync, --staleness, --in-graph or --allreduce say the strategy twice: keep --strategy", f.strategyName)
	case len(aliases) > 1:
		return nil, errors.New("--sync, --staleness, --in-graph and --allreduce are different strategies: choose one")
	case f.strategyName != "":
		s, err := estimator.ParseStrategy(f.strategyName)
		if err != nil {
			return nil, fmt.Errorf("--strategy: %w", err)
		}
		return s, nil
	case len(aliases) == 1:
		return estimator.ParseStrategy(aliases[0])
	}
	return estimator.Async{}, nil
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

// logger is the runtime's log of this process: warnings and errors, every
// record with --verbose, none with --quiet.
func (f trainFlags) logger(stderr io.Writer) *slog.Logger {
	level := slog.LevelWarn
	switch {
	case f.verbose:
		level = slog.LevelInfo
	case f.quiet:
		level = slog.LevelError + 1
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

// runTrain trains as the flags say: a local cluster of processes, or this
// process as one task (or the whole of a one-process run), and prints the
// result.
func runTrain(ctx context.Context, f trainFlags, fl *pflag.FlagSet, stdout, stderr io.Writer) error {
	stopProfiles, err := startProfiles(f.cpuProfile, f.memProfile, stderr)
	if err != nil {
		return err
	}
	defer stopProfiles()
	if f.localCluster != "" {
		return runLocalCluster(ctx, f, fl, stdout, stderr)
	}
	spec, self, err := clusterFromFlags(f.psHosts, f.workerHosts, f.chiefHosts, f.jobName, f.taskIndex, stderr)
	if err != nil {
		return err
	}
	if err := f.checkEvaluatorTask(self); err != nil {
		return err
	}
	if f.listenFD != 0 { // a socket handed down, as a local cluster does
		os.Setenv(localcluster.EnvListenFD, strconv.Itoa(f.listenFD))
	}
	cfg, closeDevs, err := f.runConfig(fl, spec, self, stderr)
	if err != nil {
		return err
	}
	defer closeDevs()
	f.lr = f.scaledLR(cfg.AveragedBatches())
	opt, err := f.newOptimizer()
	if err != nil {
		return err
	}
	fn, err := f.modelFn(spec, opt)
	if err != nil {
		return err
	}
	est, err := estimator.New(fn, cfg)
	if err != nil {
		return err
	}
	s, err := f.specs(cfg, fn)
	if err != nil {
		return err
	}
	dashHooks, stopDash, err := f.dash.taskHooks(ctx, f, spec, self, cfg, stderr)
	if err != nil {
		return err
	}
	defer stopDash()
	s.train.Hooks = append(s.train.Hooks, dashHooks...)
	res, err := estimator.TrainAndEvaluate(ctx, est, s.train, s.eval)
	if err != nil {
		return err
	}
	if res.Served {
		return nil
	}
	r, err := f.resultOf(ctx, est, cfg, s, res)
	if err != nil {
		return err
	}
	return report(stdout, r, f.jsonOut)
}

// checkEvaluatorTask refuses an evaluator task that could not evaluate:
// without the chief's checkpoint directory, or with the hash embeddings.
func (f trainFlags) checkEvaluatorTask(self cluster.TaskID) error {
	if self.Job != cluster.EvaluatorJob {
		return nil
	}
	switch {
	case f.ckptDir == "" && f.logdir == "":
		return errors.New("an evaluator task evaluates the chief's checkpoints: give --checkpoint-dir, the directory the chief saves them in (or --logdir, if it saves them there)")
	case f.wideDeep.HashEmbedding:
		return errors.New("--hash-embedding: the tables live on the ps tasks, which an evaluator task does not reach; the chief evaluates the model at the end")
	}
	return nil
}

// runConfig is the estimator's configuration of task self of spec (nil:
// one process). A training task's accelerators are opened: the returned
// function closes them.
func (f trainFlags) runConfig(fl *pflag.FlagSet, spec *cluster.Spec, self cluster.TaskID, stderr io.Writer) (estimator.RunConfig, func(), error) {
	progress := progressOutput(stderr) // a bar on a terminal (progress.go)
	if f.quiet {
		progress = io.Discard
	}
	cfg := estimator.RunConfig{
		Cluster: spec, Task: self, Strategy: f.strategy(),
		ModelDir: f.logdir, CheckpointDir: f.ckptDir, KeepCheckpoints: f.keepCkpts,
		SaveCheckpointsSteps: int64(f.saveSteps), SaveCheckpointsSecs: time.Duration(f.saveSecs) * time.Second,
		LogEverySteps: f.logEvery, Seed: int64(f.seed), StepTimeout: f.stepTimeout, WaitTimeout: f.waitTimeout,
		Logger: f.logger(stderr), Progress: progress, StepDelay: f.stepDelay, Security: f.security,
	}
	closeDevs := func() {}
	if self.Job != "ps" && self.Job != cluster.EvaluatorJob {
		devs, closeOpened, err := f.gpu.open(spec, self)
		if err != nil {
			return cfg, nil, err
		}
		cfg.Devices, closeDevs = devs, closeOpened
		logDevices(cfg.Logger, devs)
	} else if self.Job == cluster.EvaluatorJob {
		cfg.Towers = f.gpu.Count // the trainers' towers, for the last step of --epochs
	}
	var err error
	if cfg.Compression, err = estimator.ParseCompression(f.compression); err != nil {
		closeDevs()
		return cfg, nil, fmt.Errorf("--%w", err)
	}
	if cfg.PullCompression, err = estimator.ParsePullCompression(f.pullCompress); err != nil {
		closeDevs()
		return cfg, nil, fmt.Errorf("--%w", err)
	}
	if f.psStrategy == "greedy" {
		cfg.PSPlacement = placement.GreedyBySize
	}
	if cfg.MetricsAddress, err = trainMetricsAddress(f, fl, spec, self); err != nil {
		closeDevs()
		return cfg, nil, err
	}
	return cfg, closeDevs, nil
}

// newOptimizer is the optimizer the flags choose, at --lr (already
// scaled), with its schedule, weight decay and clipping.
func (f trainFlags) newOptimizer() (train.Optimizer, error) {
	opt, err := train.NewOptimizer(f.optimizer, float32(f.lr))
	if err != nil {
		return nil, fmt.Errorf("--optimizer: %w", err)
	}
	schedule, err := train.ParseSchedule(f.lrDecay)
	if err == nil {
		err = train.SetSchedule(opt, schedule)
	}
	if err != nil {
		return nil, fmt.Errorf("--lr-decay: %w", err)
	}
	if err := train.SetWeightDecay(opt, float32(f.weightDecay)); err != nil {
		return nil, fmt.Errorf("--weight-decay: %w", err)
	}
	if f.clipNorm > 0 {
		opt = train.ClipByGlobalNorm{Optimizer: opt, MaxNorm: float32(f.clipNorm)}
	}
	return opt, nil
}

// modelFn is the model function of --model trained with opt, its
// variables sliced over the ps tasks of spec (nil: one process) as the
// flags say. It readies the hash embeddings' placement in f first.
func (f *trainFlags) modelFn(spec *cluster.Spec, opt train.Optimizer) (estimator.ModelFn, error) {
	f.hashSetup(spec)
	mc := models.Config{Seed: f.seed, WideDeep: f.wideDeep, MLPHidden: f.mlpHidden, MinShardBytes: f.minSlice}
	if spec != nil { // nil: one process, no ps to slice over
		mc.MaxShards = spec.NumTasks("ps")
	}
	return models.ModelFn(f.model, mc, opt)
}

// taskSpecs are what a task trains and evaluates.
type taskSpecs struct {
	data  models.Data // none for a task that only serves
	train estimator.TrainSpec
	eval  estimator.EvalSpec
	// click evaluates the hash embedding model in the training session
	// (nil for other models).
	click *models.ClickEvalHook
}

// specs loads the data and makes the training and evaluation specs of the
// task of cfg. A task that only serves (a ps; the other workers of
// in-graph replication) needs no data: its training input is never read.
func (f trainFlags) specs(cfg estimator.RunConfig, fn estimator.ModelFn) (taskSpecs, error) {
	var s taskSpecs
	if cfg.Task.Job == "ps" || (cfg.Strategy.Update(1).ChiefOnly && !cfg.IsChief() && !cfg.IsEvaluator()) {
		s.train = estimator.TrainSpec{Input: func(estimator.InputContext) (*estimator.Input, error) {
			return nil, errors.New("a serving task reads no input")
		}, Stop: estimator.Stop{MaxSteps: 1}}
		return s, nil
	}
	var err error
	if s.data, err = loadData(f); err != nil {
		return s, err
	}
	feature := models.Feature(f.model)
	s.train = estimator.TrainSpec{Input: s.data.TrainInput(feature, f.batch),
		Stop: estimator.Stop{MaxSteps: int64(f.steps), Epochs: f.epochs, ExamplesPerEpoch: s.data.Examples()}}
	s.train.Hooks = append(s.train.Hooks, f.trace.hooks(cfg, f.logdir, cfg.Logger)...)
	s.eval = estimator.EvalSpec{Input: s.data.TestInput(feature, 1000), ExportDir: f.export, ExportBest: f.exportBest}
	if f.exportBest && !cfg.IsEvaluator() {
		s.eval.ExportDir = "" // the evaluator exports
	}
	if s.click = f.clickEvalHook(fn, s.data); s.click != nil {
		s.train.Hooks = append(s.train.Hooks, s.click)
		s.eval.Input = nil // the hook evaluates, where the tables are
	}
	return s, nil
}

// resultOf is what runTrain reports of res, the training (or evaluation) of
// the task of cfg with specs s: the model's own figures for linreg's and
// widedeep's chief.
func (f trainFlags) resultOf(ctx context.Context, est *estimator.Estimator, cfg estimator.RunConfig, s taskSpecs, res *estimator.Result) (result, error) {
	r := result{
		Model: f.model, Strategy: res.Strategy, Optimizer: f.optimizer, LearningRate: f.lr, Batch: f.batch,
		Task: res.Task, GlobalStep: res.GlobalStep, LocalSteps: res.LocalSteps, Epochs: res.Epochs, Loss: res.Loss,
		Data: s.data.Source, TrainExamples: s.data.Examples(), ExamplesPerSecond: res.ExamplesPerSecond,
		ClusterExamplesPerSecond: res.ClusterExamplesPerSecond, PSVariables: res.PSVariables, Export: res.Export,
		Evaluations: res.Evaluations,
	}
	if acc, ok := res.Metrics["accuracy"]; ok {
		loss := res.Metrics["loss"]
		r.TestAccuracy, r.TestLoss, r.TestExamples = &acc, &loss, s.data.TestX.Shape()[0]
	} else if loss, ok := res.Metrics["loss"]; ok && cfg.IsEvaluator() {
		r.TestLoss = &loss
	}
	if f.model == "linreg" && res.Chief {
		if err := linearResult(est, &r); err != nil {
			return r, err
		}
	}
	if f.model == "widedeep" && res.Chief {
		if err := clickResult(ctx, est, s.data, s.click, &r); err != nil {
			return r, err
		}
	}
	r.WallSeconds = res.WallSeconds
	r.Devices = deviceResults(cfg.Devices)
	r.SIMD = linalg.Path()
	return r, nil
}

// linearResult records the trained linreg model's weight and bias in r.
func linearResult(est *estimator.Estimator, r *result) error {
	w, err := est.VariableValue("linear/W")
	if err != nil {
		return err
	}
	b, err := est.VariableValue("linear/b")
	if err != nil {
		return err
	}
	wv, bv := w.Float64At(0), b.Float64At(0)
	r.W, r.B = &wv, &bv
	return nil
}

// startProfiles starts the CPU profile and returns what writes the profiles
// at the end.
func startProfiles(cpu, mem string, stderr io.Writer) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if cpu != "" {
		out, err := os.Create(cpu)
		if err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			out.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); out.Close() })
	}
	if mem != "" {
		out, err := os.Create(mem)
		if err != nil {
			stop()
			return nil, fmt.Errorf("--memprofile: %w", err)
		}
		stops = append(stops, func() {
			if err := pprof.Lookup("allocs").WriteTo(out, 0); err != nil {
				fmt.Fprintf(stderr, "--memprofile: %v\n", err)
			}
			out.Close()
		})
	}
	return stop, nil
}

// psRule is what --local-cluster may say of ps tasks: the ps strategies
// need one at least; the others take any number (the strategy refuses
// what it cannot use; all-reduce takes none for the ring, some as
// summation servers).
func (f trainFlags) psRule() []localcluster.ParseOption {
	if !f.strategy().Update(1).PullsFromPS {
		return []localcluster.ParseOption{localcluster.AnyPS()}
	}
	return nil
}

// runLocalCluster runs the same command as a local cluster of processes:
// each task gets this command's flags, without --local-cluster and the
// profiles, and its place in TF_CONFIG. The chief's output is the run's.
func runLocalCluster(ctx context.Context, f trainFlags, fl *pflag.FlagSet, stdout, stderr io.Writer) error {
	jobs, err := localcluster.Parse(f.localCluster, f.psRule()...)
	if err != nil {
		return fmt.Errorf("--local-cluster: %w", err)
	}
	if f.exportBest && jobs.Evaluator == 0 {
		return fmt.Errorf("--export-best: the evaluator task exports the best model: add evaluator=1 to --local-cluster %s", f.localCluster)
	}
	if jobs.Evaluator > 0 && f.ckptDir == "" && f.logdir == "" {
		return fmt.Errorf("--local-cluster %s: the evaluator evaluates the chief's checkpoints: give --checkpoint-dir (or --logdir), and --save-checkpoint-steps or --save-checkpoint-secs for checkpoints before the last", f.localCluster)
	}
	if err := f.gpu.checkLocalCluster(jobs.Chief + jobs.Worker); err != nil {
		return err
	}
	args := []string{"train"}
	fl.Visit(func(fv *pflag.Flag) {
		switch fv.Name {
		case "local-cluster", "cpuprofile", "memprofile", "dashboard":
			return
		}
		args = append(args, "--"+fv.Name+"="+fv.Value.String())
	})
	sec := f.security
	if f.security == (pki.Security{}) {
		// The tasks' connections use mutual TLS with a CA made for this
		// run alone, removed at its end.
		dir, remove, err := pki.Ephemeral(map[string]int{"ps": jobs.PS, "worker": jobs.Worker, "chief": jobs.Chief})
		if err != nil {
			return err
		}
		defer remove()
		args = append(args, "--certs-dir="+dir)
		sec.CertsDir = dir
	}
	dashEnv, stopDash, err := f.dash.launch(ctx, f, sec, stderr)
	if err != nil {
		return err
	}
	defer stopDash()
	cfg := localcluster.Config{Jobs: jobs, Args: args, Env: dashEnv, Stdout: stdout, Stderr: progressOutput(stderr), Verbose: f.verbose}
	return estimator.RunLocalCluster(ctx, cfg, f.strategy(), f.ckptDir != "" || f.logdir != "")
}

func report(w io.Writer, r result, asJSON bool) error {
	who := r.Model
	if r.Task != "" {
		who = r.Task + " " + r.Model
	}
	switch {
	case r.Evaluations > 0: // an evaluator task
		what := ""
		switch {
		case r.TestAccuracy != nil:
			what = fmt.Sprintf("test accuracy %.4f, test loss %.4f (%d examples)", *r.TestAccuracy, *r.TestLoss, r.TestExamples)
		case r.TestLoss != nil:
			what = fmt.Sprintf("test loss %.4f", *r.TestLoss)
		}
		checkpoints := "checkpoints, the last"
		if r.Evaluations == 1 {
			checkpoints = "checkpoint,"
		}
		fmt.Fprintf(w, "%s: evaluated %d %s at global step %d: %s, %.1f s\n", who, r.Evaluations, checkpoints, r.GlobalStep, what, r.WallSeconds)
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
	if r.AUC != nil {
		fmt.Fprintln(w, clickLine(r))
	}
	if r.Export != "" {
		fmt.Fprintf(w, "exported the model to %s\n", r.Export)
	}
	if !asJSON {
		return nil
	}
	return json.NewEncoder(w).Encode(r)
}
