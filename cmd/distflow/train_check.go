package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/localcluster"
	"github.com/distflow/distflow/models"
	"github.com/distflow/distflow/train"
)

// check validates every flag before anything is loaded or started, and
// fills in the model's defaults. Errors name the flag and what is allowed;
// every bad flag is told at once.
func (f *trainFlags) check(fl *pflag.FlagSet) error {
	d, ok := modelDefaults[f.model]
	if !ok {
		return fmt.Errorf("--model %q: want one of %v", f.model, models.Names)
	}
	set := fl.Changed
	var errs badFlags
	strategy, err := f.parseStrategy()
	errs.add(err)
	f.checkRun(fl, &errs)
	f.checkLearning(set, &errs)
	f.checkCheckpoints(&errs)
	f.checkStrategyFlags(set, &errs)
	f.checkCompression(strategy, &errs)
	f.checkModelFlags(set, &errs)
	f.checkCluster(strategy, &errs)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	f.fillDefaults(set, d)
	return nil
}

// badFlags collects the errors of the flags checked, so that one run
// tells them all.
type badFlags []error

// add collects errs, leaving out nils.
func (e *badFlags) add(errs ...error) {
	for _, err := range errs {
		if err != nil {
			*e = append(*e, err)
		}
	}
}

// bad collects the error that format and args tell when cond holds.
func (e *badFlags) bad(cond bool, format string, args ...any) {
	if cond {
		*e = append(*e, fmt.Errorf(format, args...))
	}
}

// finitePositive reports whether x is a finite number above 0, and
// finiteNonNegative whether it is a finite number of at least 0 (neither
// holds for NaN).
func finitePositive(x float64) bool    { return x > 0 && !math.IsInf(x, 0) }
func finiteNonNegative(x float64) bool { return x >= 0 && !math.IsInf(x, 0) }

// checkRun checks how long the run is and what it prints: steps, epochs,
// batch, timeouts, logging, the trace and the accelerators.
func (f *trainFlags) checkRun(fl *pflag.FlagSet, errs *badFlags) {
	set := fl.Changed
	errs.bad(set("steps") && f.steps <= 0, "--steps %d: must be positive", f.steps)
	errs.add(f.trace.check(fl, f.logdir)...)
	errs.add(f.gpu.check(fl)...)
	errs.bad(set("epochs") && !finitePositive(f.epochs), "--epochs %v: must be a positive number", f.epochs)
	errs.bad(set("batch") && f.batch <= 0, "--batch %d: must be positive", f.batch)
	errs.bad(set("log-every") && f.logEvery <= 0, "--log-every %d: must be positive", f.logEvery)
	errs.bad(f.stepTimeout <= 0, "--step-timeout %v: must be positive (a step without a deadline could wait for ever)", f.stepTimeout)
	errs.bad(f.waitTimeout <= 0, "--wait-timeout %v: must be positive", f.waitTimeout)
	errs.bad(f.verbose && f.quiet, "--verbose and --quiet: choose one")
}

// checkLearning checks the optimizer and its learning rate: --lr, its
// schedule and scaling, weight decay and gradient clipping.
func (f *trainFlags) checkLearning(set func(string) bool, errs *badFlags) {
	errs.bad(set("lr") && !finitePositive(f.lr), "--lr %v: must be a positive number", f.lr)
	errs.bad(set("weight-decay") && !finiteNonNegative(f.weightDecay), "--weight-decay %v: must be a positive number (0: none)", f.weightDecay)
	errs.bad(set("clip-global-norm") && !finiteNonNegative(f.clipNorm), "--clip-global-norm %v: must be a positive number (0: no clipping)", f.clipNorm)
	if _, err := train.ParseSchedule(f.lrDecay); err != nil {
		errs.add(fmt.Errorf("--lr-decay: %w", err))
	}
	if f.optimizer != "" {
		if _, err := train.NewOptimizer(f.optimizer, 0.1); err != nil {
			errs.add(fmt.Errorf("--optimizer %q: want sgd, momentum, adagrad, rmsprop, adam or ftrl", f.optimizer))
		}
	}
	switch f.lrScaling {
	case "none", "linear", "sqrt":
	default:
		errs.add(fmt.Errorf("--lr-scaling %q: want none, linear or sqrt", f.lrScaling))
	}
}

// checkCheckpoints checks how checkpoints are saved and kept, and the
// export.
func (f *trainFlags) checkCheckpoints(errs *badFlags) {
	errs.bad(f.saveSteps < 0, "--save-checkpoint-steps %d: must not be negative (0: only at the end)", f.saveSteps)
	errs.bad(f.saveSecs < 0, "--save-checkpoint-secs %d: must not be negative (0: off)", f.saveSecs)
	errs.bad(f.keepCkpts < 1, "--keep-checkpoints %d: must be at least 1", f.keepCkpts)
	errs.bad(f.exportBest && f.export == "", "--export-best exports to --export: give it")
}

// checkStrategyFlags checks the arguments of the strategies' older
// spellings (parseStrategy checks the spellings themselves) and how
// variables are placed on the ps tasks.
func (f *trainFlags) checkStrategyFlags(set func(string) bool, errs *badFlags) {
	errs.bad(set("staleness") && f.staleness < 0, "--staleness %d: must not be negative (leave it out for unbounded)", f.staleness)
	errs.bad(f.replicasToAggregate < 0, "--replicas-to-aggregate %d: must not be negative", f.replicasToAggregate)
	errs.bad(f.replicasToAggregate > 0 && !f.sync, "--replicas-to-aggregate goes with --sync")
	errs.bad(set("average-every") && f.averageEvery < 0, "--average-every %d: must not be negative (0 adapts it)", f.averageEvery)
	errs.bad(f.averageEvery >= 0 && !f.allReduce, "--average-every goes with --allreduce")
	switch f.psStrategy {
	case "round-robin", "greedy":
	default:
		errs.add(fmt.Errorf("--ps-strategy %q: want round-robin or greedy", f.psStrategy))
	}
}

// checkCompression checks --compression and --pull-compression, and that
// the strategy (nil when --strategy is bad) moves what they compress.
func (f *trainFlags) checkCompression(strategy estimator.Strategy, errs *badFlags) {
	if c, err := estimator.ParseCompression(f.compression); err != nil {
		errs.add(fmt.Errorf("--%w", err))
	} else {
		errs.bad(c.Kind != estimator.NoCompression && strategy != nil && !strategy.Update(1).Compresses,
			"--compression %s: the %s strategy does not compress gradients", f.compression, strategy)
	}
	if k, err := estimator.ParsePullCompression(f.pullCompress); err != nil {
		errs.add(fmt.Errorf("--%w", err))
	} else {
		errs.bad(k != estimator.NoCompression && strategy != nil && !strategy.Update(1).PullsFromPS,
			"--pull-compression %s: under the %s strategy the workers hold the variables and pull nothing: drop it, or train through the ps tasks", f.pullCompress, strategy)
	}
}

// checkModelFlags checks the flags that shape one model: they go with it
// alone.
func (f *trainFlags) checkModelFlags(set func(string) bool, errs *badFlags) {
	errs.bad(f.weightDecay > 0 && f.model == "widedeep", "--weight-decay: the wide-and-deep model's embeddings train by rows, which weight decay does not apply to")
	errs.bad(f.mlpHidden < 1 || f.mlpHidden > 1<<16, "--mlp-hidden %d: want 1 to 65536", f.mlpHidden)
	errs.bad(set("mlp-hidden") && f.model != "mlp", "--mlp-hidden goes with --model mlp")
	errs.bad(f.minSlice < 0, "--ps-min-slice-bytes %d: want 0 (whole variables) or more", f.minSlice)
	errs.bad(f.minSlice > 0 && f.model != "mlp" && f.model != "cnn", "--ps-min-slice-bytes goes with --model mlp or cnn (widedeep partitions its tables with --embedding-shards)")
	errs.add(f.checkHashFlags(set)...)
}

// checkCluster checks the cluster: --local-cluster or the cluster flags
// (not both), and, for one process, that the strategy (nil when --strategy
// is bad) needs no cluster.
func (f *trainFlags) checkCluster(strategy estimator.Strategy, errs *badFlags) {
	errs.bad(f.localCluster != "" && f.metricsPort != 0, "--metrics-port %d with --local-cluster: every task gets a free loopback port of its own; leave the flag out (or 0 for none)", f.metricsPort)
	hosts := f.psHosts != "" || f.workerHosts != "" || f.chiefHosts != "" || f.jobName != ""
	errs.bad(f.localCluster != "" && hosts, "--local-cluster chooses the cluster itself: drop --ps_hosts/--worker_hosts/--chief_hosts/--job_name")
	if f.localCluster != "" {
		if _, err := localcluster.Parse(f.localCluster, f.psRule()...); err != nil {
			errs.add(fmt.Errorf("--local-cluster: %w", err))
		}
	} else if !hosts && os.Getenv(cluster.EnvVar) == "" && strategy != nil {
		// One process: the strategy says whether it needs a cluster.
		if err := strategy.Validate(nil); err != nil {
			errs.add(fmt.Errorf("--strategy %s: %w: add --local-cluster (e.g. worker=2) or the cluster flags", strategy, err))
		}
		// Nor does it move gradients or parameters between tasks, which
		// the compressions would make smaller.
		for _, c := range []struct{ flag, value string }{{"compression", f.compression}, {"pull-compression", f.pullCompress}} {
			errs.bad(c.value != "" && c.value != "none", "--%s %s: one process sends nothing between tasks to compress: drop it, or add --local-cluster (e.g. ps=1,worker=2) or the cluster flags", c.flag, c.value)
		}
	}
}

// fillDefaults sets what the flags left unset to the model's defaults d
// (the learning rate: the model's for the optimizer).
func (f *trainFlags) fillDefaults(set func(string) bool, d trainFlags) {
	if !set("steps") && !set("epochs") {
		f.steps, f.epochs = d.steps, d.epochs
		f.wideDeepSteps()
	}
	if !set("batch") {
		f.batch = d.batch
	}
	if f.optimizer == "" {
		f.optimizer = d.optimizer
	}
	f.optimizer = strings.ToLower(strings.TrimSpace(f.optimizer))
	if !set("lr") {
		f.lr = defaultLRs[f.model][f.optimizer]
	}
	if !set("log-every") {
		f.logEvery = d.logEvery
	}
}
