package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/distflow/distflow/chaos"
)

// newChaosCommand returns `distflow chaos`: training runs on a local
// cluster with faults injected from a seed, and the table of what happened
// (package chaos).
func newChaosCommand() *cobra.Command {
	var f chaosFlags
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Train on a local cluster while killing and stopping random tasks; report what survived",
		Long: `Train the MLP on the embedded data on a local cluster, once cleanly and then --runs times
with --faults faults each, for each strategy. A fault is SIGKILL or SIGSTOP (then SIGCONT after
--pause-min..--pause-max) sent to a random task (any job) at a random time in the first
--window-fraction of the clean run, all drawn from --seed (run i uses seed+i).

Each run reports: finished or not (or hung past --deadline, with what it waited for, or slow:
finished after --slow-factor times the longest clean run plus --slow-slack plus the pauses of
its stops), the test
accuracy against the clean run, the global step and the steps lost to restores (in all, and the
most one restore undid against the checkpoint interval), for each fault
how long until a warning or a launcher line named the task, how many checkpoints are left and
whether each validates, and the processes left alive after the launcher ended (killed).

--plan applies faults written by hand instead, at times or on events: at a global step
("kill:ps0@step:900") or when a file appears in the checkpoint directory
("stop:worker0@file:*.tmp*+3s", "kill:worker0@file:training_ended").

The exit status is 1 when a fault run did not finish, finished slow, had a restore undo more
than one checkpoint interval, lost more than --tolerance of accuracy, left a corrupt checkpoint
or left a process behind.`,
		Example: `  distflow chaos --strategy sync --runs 3 --faults 3 --seed 1
  distflow chaos --strategy all --runs 20 --faults 3 --json > chaos.json
  distflow chaos --strategy async --train-args "--steps=600" -v
  distflow chaos --strategy async --runs 1 --train-args "--steps=4000" --plan "stop:worker0@step:300+6s,kill:ps0@step:1500"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	f.add(cmd.Flags())
	return cmd
}

// chaosFlags are distflow chaos's flags.
type chaosFlags struct {
	strategies           string
	runs, faults         int
	cleanRuns            int
	seed                 uint64
	deadline             time.Duration
	pauseMin, pauseMax   time.Duration
	windowFrom           time.Duration
	windowFraction       float64
	dir, binary, trainAs string
	asJSON, verbose      bool
	tolerance            float64
	slowFactor           float64
	handStarted          bool
	slowSlack            time.Duration
	fromJSON, plan       string
	clusterShape         string
}

func (c *chaosFlags) add(f *pflag.FlagSet) {
	f.StringVar(&c.strategies, "strategy", "all", "comma-separated strategies, or all: "+strings.Join(chaos.StrategyNames(), ", "))
	f.IntVar(&c.runs, "runs", 3, "fault runs per strategy (after one clean run)")
	f.IntVar(&c.faults, "faults", 3, "faults per run")
	f.IntVar(&c.cleanRuns, "clean-runs", 1, "clean runs per strategy (seeds seed, seed+1, ...): fault runs are compared with their mean accuracy")
	f.Uint64Var(&c.seed, "seed", 1, "seed of the first run's fault schedule (run i uses seed+i)")
	f.DurationVar(&c.deadline, "deadline", chaos.DefaultDeadline, "a run still going after this is reported as hung and killed")
	f.DurationVar(&c.pauseMin, "pause-min", chaos.DefaultPauseMin, "shortest SIGSTOP before SIGCONT")
	f.DurationVar(&c.pauseMax, "pause-max", chaos.DefaultPauseMax, "longest SIGSTOP before SIGCONT")
	f.DurationVar(&c.windowFrom, "window-from", time.Second, "no fault before this time from a run's start (from a quarter of the clean run when it is too short for that)")
	f.Float64Var(&c.windowFraction, "window-fraction", 0.8, "no fault after this fraction of the clean run's time")
	f.StringVar(&c.dir, "dir", "", "directory for the runs' checkpoints and output.log files (default: a new temporary directory)")
	f.StringVar(&c.binary, "binary", "", "distflow binary to run (default: this one)")
	f.StringVar(&c.trainAs, "train-args", "", `more flags for every distflow train run, e.g. "--steps=600"`)
	f.BoolVar(&c.asJSON, "json", false, "print one JSON object (results and summary) instead of tables")
	f.BoolVarP(&c.verbose, "verbose", "v", false, "show every line of every run, and the faults as they are sent")
	f.StringVar(&c.plan, "plan", "", `a fault schedule instead of drawn ones, e.g. "kill:worker1@2s,stop:ps0@3.5s+2s", or on events: "kill:ps0@step:900", "kill:worker0@file:training_ended" (every fault run uses it)`)
	f.StringVar(&c.clusterShape, "cluster", "", `--local-cluster of every run instead of the strategy's own, e.g. "ps=1,worker=3"`)
	f.BoolVar(&c.handStarted, "hand-started", false, "start each task by itself (TF_CONFIG) under a supervisor that restarts it with the same flags whenever it dies, as Kubernetes would, instead of --local-cluster")
	f.StringVar(&c.fromJSON, "from-json", "", "print the tables of a --json output file instead of running anything")
	f.Float64Var(&c.tolerance, "tolerance", 0.01, "accuracy a fault run may lose against the clean run and still count as good")
	f.Float64Var(&c.slowFactor, "slow-factor", chaos.DefaultSlowFactor, "a fault run that takes longer than this many times the longest clean run (plus --slow-slack and its stops' pauses) is slow, and fails; negative: no bound")
	f.DurationVar(&c.slowSlack, "slow-slack", chaos.DefaultSlowSlack, "added to the slow bound (restarts, re-forms and restores take seconds)")
}

// run runs the chaos matrix the flags describe and prints its tables.
func (c *chaosFlags) run(cmd *cobra.Command) error {
	if c.fromJSON != "" {
		return printChaosJSON(cmd.OutOrStdout(), c.fromJSON)
	}
	m, err := c.matrix(cmd)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(cmd.ErrOrStderr(), "chaos: runs under %s\n", c.dir)
	m.Progress = func(r *chaos.Result) { _ = chaos.WriteRows(cmd.ErrOrStderr(), []*chaos.Result{r}) }
	results, runErr := chaos.RunMatrix(cmd.Context(), m)
	sums := chaos.Summarize(results)
	if c.asJSON {
		if err := json.NewEncoder(out).Encode(map[string]any{"dir": c.dir, "results": results, "summary": sums}); err != nil {
			return err
		}
	} else {
		writeChaosTables(out, results, sums)
	}
	if runErr != nil {
		return runErr
	}
	bad := 0
	for _, r := range results {
		if len(r.Faults) > 0 && !r.OK(c.tolerance) {
			bad++
		}
	}
	if bad > 0 {
		return errors.New("chaos: " + fmt.Sprint(bad) + " fault run(s) fell short (see the table)")
	}
	return nil
}

// strategiesOf returns the strategies --strategy names, on --cluster's
// shape when it is given.
func (c *chaosFlags) strategiesOf() ([]chaos.Strategy, error) {
	var ss []chaos.Strategy
	if c.strategies == "all" {
		ss = slices.Clone(chaos.Strategies)
	} else {
		for _, name := range strings.Split(c.strategies, ",") {
			s, err := chaos.LookupStrategy(strings.TrimSpace(name))
			if err != nil {
				return nil, err
			}
			ss = append(ss, s)
		}
	}
	if c.clusterShape != "" {
		for i := range ss {
			ss[i].Cluster = c.clusterShape
		}
	}
	return ss, nil
}

// matrix checks the flags and returns the matrix they describe.
func (c *chaosFlags) matrix(cmd *cobra.Command) (chaos.MatrixConfig, error) {
	ss, err := c.strategiesOf()
	if err != nil {
		return chaos.MatrixConfig{}, err
	}
	switch {
	case c.runs < 0 || c.faults < 0:
		return chaos.MatrixConfig{}, fmt.Errorf("chaos: --runs %d and --faults %d must not be negative", c.runs, c.faults)
	case c.slowSlack < 0:
		return chaos.MatrixConfig{}, fmt.Errorf("chaos: --slow-slack %v must not be negative", c.slowSlack)
	case c.windowFraction <= 0 || c.windowFraction > 1:
		return chaos.MatrixConfig{}, fmt.Errorf("chaos: --window-fraction %v: want a fraction in (0, 1]", c.windowFraction)
	}
	if c.binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return chaos.MatrixConfig{}, fmt.Errorf("chaos: finding this binary (give --binary): %w", err)
		}
		c.binary = exe
	}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "distflow-chaos-")
		if err != nil {
			return chaos.MatrixConfig{}, err
		}
		c.dir = d
	}
	base := chaos.Config{Binary: c.binary, Deadline: c.deadline, PauseMin: c.pauseMin, PauseMax: c.pauseMax,
		Args: strings.Fields(c.trainAs), Dir: c.dir, HandStarted: c.handStarted}
	if c.plan != "" {
		p, err := chaos.ParsePlan(c.plan)
		if err != nil {
			return chaos.MatrixConfig{}, err
		}
		base.Plan = p
	}
	if c.verbose {
		base.Verbose = cmd.ErrOrStderr()
	}
	return chaos.MatrixConfig{Base: base, Strategies: ss, Runs: c.runs, Faults: c.faults, Seed: c.seed, CleanRuns: c.cleanRuns,
		WindowFrom: c.windowFrom, WindowFraction: c.windowFraction, Bound: chaos.TimeBound{Factor: c.slowFactor, Slack: c.slowSlack}}, nil
}

func writeChaosTables(w io.Writer, results []*chaos.Result, sums []chaos.Summary) {
	fmt.Fprintln(w, "runs:")
	_ = chaos.WriteTable(w, results)
	fmt.Fprintln(w, "\nsummary (fault runs):")
	_ = chaos.WriteSummary(w, sums)
}

// printChaosJSON prints the tables of a `distflow chaos --json` output.
func printChaosJSON(w io.Writer, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("chaos: --from-json: %w", err)
	}
	var v struct {
		Results []*chaos.Result `json:"results"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("chaos: --from-json %s: not the output of distflow chaos --json: %w", file, err)
	}
	writeChaosTables(w, v.Results, chaos.Summarize(v.Results))
	return nil
}
