package estimator

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/localcluster"
)

// Flags are the command-line flags of a training program, as `distflow
// train` has them; set the fields to give defaults, then Register them:
//
//	f := estimator.Flags{Steps: 1000}
//	f.Register(flag.CommandLine)
//	flag.Parse()
//	res, err := f.TrainAndEvaluate(ctx, model, trainInput, evalInput)
//
// or, for a program that only prints the chief's result, end with Run:
//
//	f.Run(ctx, model, trainInput, evalInput, "accuracy")
type Flags struct {
	Strategy     string // --strategy: see ParseStrategy (default "async")
	LocalCluster string // --local-cluster: run as a local cluster, e.g. "ps=1,worker=2"
	Steps        int64  // --steps: the global step to train to
	ModelDir     string // --model-dir: checkpoints and event files
	Export       string // --export: where the chief exports the model
	Seed         int64  // --seed
	// GPUs are the accelerators each training task computes on: --gpus,
	// --gpu-platform, --logical-gpus, --first-gpu, --gpu-memory-fraction.
	// The program imports the platforms it offers: device/cuda for
	// "cuda", device/sim for "sim".
	GPUs GPUs
	// Strategies are the program's own strategies, chosen by name with
	// --strategy beside those of ParseStrategy.
	Strategies map[string]Strategy
}

// Register adds the flags to fs, with the fields' values as defaults.
func (f *Flags) Register(fs *flag.FlagSet) {
	if f.Strategy == "" {
		f.Strategy = "async"
	}
	fs.StringVar(&f.Strategy, "strategy", f.Strategy, "async, sync[:K], staleness:S, ingraph, allreduce or averaging[:TAU]")
	fs.StringVar(&f.LocalCluster, "local-cluster", f.LocalCluster, `run as a local cluster of processes, e.g. "ps=1,worker=2" ("worker=2" for allreduce and averaging)`)
	fs.Int64Var(&f.Steps, "steps", f.Steps, "the global step to train to")
	fs.StringVar(&f.ModelDir, "model-dir", f.ModelDir, "checkpoints and event files (the chief resumes from the latest checkpoint)")
	fs.StringVar(&f.Export, "export", f.Export, "export the trained model as a new numbered version under this directory")
	fs.Int64Var(&f.Seed, "seed", f.Seed, "seed of initial weights and shuffling")
	g := &f.GPUs
	if g.Platform == "" {
		g.Platform = "cuda"
	}
	fs.IntVar(&g.Count, "gpus", g.Count, "compute on this many GPUs of each worker (0: the CPU); with 2 or more, one tower per GPU, their gradients averaged; CUDA_VISIBLE_DEVICES chooses the cards")
	fs.StringVar(&g.Platform, "gpu-platform", g.Platform, "the GPUs' platform: cuda, or sim (a simulated accelerator)")
	fs.IntVar(&g.Logical, "logical-gpus", max(g.Logical, 1), "split each card into this many logical GPUs, each with its share of the memory")
	fs.Func("first-gpu", "the first of the machine's (logical) GPUs this task computes on (default 0; each training task of --local-cluster its own)", func(v string) error {
		n, err := strconv.Atoi(v)
		g.First, g.FirstSet = n, true
		return err
	})
	fs.Float64Var(&g.MemoryFraction, "gpu-memory-fraction", g.MemoryFraction, "share of each card's memory this process may use, in (0, 1] (default 0.9, shared by the training tasks of --local-cluster that share a GPU)")
}

// TrainAndEvaluate does what the flags ask. With --local-cluster it starts
// this program as a local cluster (LaunchLocalCluster, the flag left out of
// the tasks' arguments) and returns a nil result once the cluster has
// finished: the chief's output is this process's. Otherwise it trains, as
// the task of TF_CONFIG or as a single process, with TrainAndEvaluate.
func (f *Flags) TrainAndEvaluate(ctx context.Context, fn ModelFn, train, eval InputFn) (*Result, error) {
	strategy, ok := f.Strategies[f.Strategy]
	if !ok {
		var err error
		if strategy, err = ParseStrategy(f.Strategy); err != nil {
			return nil, err
		}
	}
	if err := f.GPUs.Check(); err != nil {
		return nil, err
	}
	if f.LocalCluster != "" {
		if j, err := localcluster.Parse(f.LocalCluster, localcluster.AnyPS()); err == nil {
			if err := f.GPUs.CheckLocalCluster(j.Chief + j.Worker); err != nil {
				return nil, err
			}
		}
		return nil, launchLocalCluster(ctx, f.LocalCluster, strategy, "local-cluster", f.ModelDir != "")
	}
	cfg, err := FromEnvironment(strategy)
	if err != nil {
		return nil, err
	}
	cfg.ModelDir, cfg.Seed = f.ModelDir, f.Seed
	switch job := cfg.Task.Job; {
	case job == cluster.EvaluatorJob:
		cfg.Towers = f.GPUs.Count // the trainers'
	case job != "ps":
		devs, closeDevs, err := f.GPUs.Open(cfg.Cluster, cfg.Task)
		if err != nil {
			return nil, err
		}
		defer closeDevs()
		cfg.Devices = devs
	}
	est, err := New(fn, cfg)
	if err != nil {
		return nil, err
	}
	return TrainAndEvaluate(ctx, est, TrainSpec{Input: train, Stop: Stop{MaxSteps: f.Steps}}, EvalSpec{Input: eval, ExportDir: f.Export})
}

// Run ends a training program's main: it does what the flags ask
// (TrainAndEvaluate), and on the chief, or the only process, prints one
// line of JSON to standard output: the "strategy", the "global_step", the
// "export" directory ("" without --export) and each of the named
// evaluation metrics under its name, e.g.
//
//	{"accuracy":0.98,"export":"/tmp/m/1","global_step":1000,"strategy":"sync"}
//
// The launcher of a local cluster, the ps and the other workers print
// nothing. On an error (a metric the evaluation lacks among them) Run
// prints it to standard error, after the program's name, and exits with
// status 1.
func (f *Flags) Run(ctx context.Context, fn ModelFn, train, eval InputFn, metrics ...string) {
	if err := f.run(ctx, os.Stdout, fn, train, eval, metrics); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(1)
	}
}

// run is Run writing the chief's line to w and returning its error.
func (f *Flags) run(ctx context.Context, w io.Writer, fn ModelFn, train, eval InputFn, metrics []string) error {
	res, err := f.TrainAndEvaluate(ctx, fn, train, eval)
	if err != nil || res == nil || !res.Chief {
		return err
	}
	out := map[string]any{"strategy": res.Strategy, "global_step": res.GlobalStep, "export": res.Export}
	for _, name := range metrics {
		v, ok := res.Metrics[name]
		if !ok {
			return fmt.Errorf("estimator: the evaluation has no metric %q (it has %s)", name, quoteNames(sortedNames(res.Metrics)))
		}
		out[name] = v
	}
	return json.NewEncoder(w).Encode(out)
}
