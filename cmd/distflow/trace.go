package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/distflow/distflow/estimator"
)

// traceFlags are the step-trace options of distflow train.
type traceFlags struct {
	steps int   // --trace-steps: how many steps to trace (0: none)
	start int64 // --trace-start: the first local step traced
	file  string
}

// addTraceFlags registers --trace-steps, --trace-start and --trace-file.
func addTraceFlags(fl *pflag.FlagSet, f *traceFlags) {
	fl.IntVar(&f.steps, "trace-steps", 0, "record N training steps of the chief as a Chrome trace (every task's kernels, Send/Recv and RPCs; open it in https://ui.perfetto.dev), "+
		"written to --trace-file or to --logdir as trace-<first traced global step>.json")
	fl.Int64Var(&f.start, "trace-start", 2, "with --trace-steps: the chief's first local step to trace (the first step also builds the plan)")
	fl.StringVar(&f.file, "trace-file", "", "with --trace-steps: write the trace to this file instead of --logdir")
}

// check validates the trace flags; logdir is --logdir.
func (f traceFlags) check(fl *pflag.FlagSet, logdir string) []error {
	var errs []error
	switch {
	case f.steps < 0:
		errs = append(errs, fmt.Errorf("--trace-steps %d: must not be negative", f.steps))
	case f.steps == 0 && (fl.Changed("trace-file") || fl.Changed("trace-start")):
		errs = append(errs, fmt.Errorf("--trace-file and --trace-start go with --trace-steps N"))
	case f.steps > 0 && f.file == "" && logdir == "":
		errs = append(errs, fmt.Errorf("--trace-steps %d: say where the trace goes: --trace-file FILE, or --logdir DIR for DIR/trace-<step>.json", f.steps))
	}
	if f.start < 1 {
		errs = append(errs, fmt.Errorf("--trace-start %d: local steps count from 1", f.start))
	}
	return errs
}

// hooks returns the trace hook of this task: the chief's alone, so that the
// replicas of a cluster sharing --logdir do not write the same file (with
// in-graph replication the chief's steps run on every worker).
func (f traceFlags) hooks(cfg estimator.RunConfig, logdir string, log *slog.Logger) []estimator.Hook {
	if f.steps <= 0 || !cfg.IsChief() {
		return nil
	}
	return []estimator.Hook{&estimator.TraceHook{Steps: f.steps, Start: f.start, File: f.file, Dir: logdir, Logger: log}}
}
