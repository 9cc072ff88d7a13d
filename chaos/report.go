package chaos

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// MatrixConfig is a series of runs: for each strategy, a clean run, then
// Runs runs with Faults faults each, seeds Seed, Seed+1, ...
type MatrixConfig struct {
	// Base is the configuration of every run; its Strategy, Seed, Faults
	// and Window are set per run.
	Base       Config
	Strategies []Strategy
	Runs       int
	Faults     int
	// CleanRuns is how many clean runs each strategy gets (0 means 1);
	// fault runs are compared with their mean accuracy, and the summary
	// shows their spread: training without faults varies too (async
	// updates race; the scheduler differs run to run).
	CleanRuns int
	Seed      uint64
	// WindowFrom and WindowFraction place faults between WindowFrom and
	// that fraction of the shortest clean run's wall time (0 means 1s and
	// 0.8); between a quarter of it and that fraction when the run is
	// shorter than WindowFrom.
	WindowFrom     time.Duration
	WindowFraction float64
	// Bound bounds each fault run's wall time by the clean runs' (the
	// zero value: 3 times the longest, plus 10 s, plus the stops' pauses).
	Bound TimeBound
	// Progress, if not nil, is called after each run.
	Progress func(*Result)
}

// RunMatrix runs m and returns every result, clean runs included (Faults
// empty). It stops early, with what it has, when ctx ends or the harness
// itself fails.
func RunMatrix(ctx context.Context, m MatrixConfig) ([]*Result, error) {
	from := cmp.Or(m.WindowFrom, time.Second)
	frac := cmp.Or(m.WindowFraction, 0.8)
	var all []*Result
	for _, s := range m.Strategies {
		cfg := m.Base
		cfg.Strategy, cfg.Faults, cfg.Plan = s, 0, nil
		var cleanAcc float64
		var cleanWall, longest time.Duration
		finished := 0
		for i := range max(m.CleanRuns, 1) {
			cfg.Seed = m.Seed + uint64(i)
			clean, err := Run(ctx, cfg)
			if err != nil {
				return all, err
			}
			all = append(all, clean)
			if m.Progress != nil {
				m.Progress(clean)
			}
			if clean.Finished {
				finished++
				cleanAcc += clean.Accuracy
				// The shortest: faults drawn past the end of a run are
				// never applied.
				if cleanWall == 0 || clean.Wall < cleanWall {
					cleanWall = clean.Wall
				}
				longest = max(longest, clean.Wall)
			}
		}
		if finished > 0 {
			cleanAcc /= float64(finished)
		}
		window := faultWindow(from, frac, cleanWall, finished > 0)
		for i := range m.Runs {
			if ctx.Err() != nil {
				return all, ctx.Err()
			}
			cfg.Seed, cfg.Faults, cfg.Window, cfg.Plan = m.Seed+uint64(i), m.Faults, window, m.Base.Plan
			res, err := Run(ctx, cfg)
			if err != nil {
				return all, err
			}
			res.CleanAccuracy = cleanAcc
			res.judge(m.Bound, longest)
			all = append(all, res)
			if m.Progress != nil {
				m.Progress(res)
			}
		}
	}
	return all, nil
}

// faultWindow is when faults land: from from to frac of the shortest clean
// run (cleanWall); from a quarter of it when that run is too short for
// from (averaging on a quiet machine trains in under a second, and no
// fault would land); from + 5 s when no clean run finished.
func faultWindow(from time.Duration, frac float64, cleanWall time.Duration, cleanFinished bool) Window {
	to := time.Duration(float64(cleanWall) * frac)
	switch {
	case !cleanFinished:
		return Window{From: from, To: from + 5*time.Second}
	case to <= from:
		return Window{From: cleanWall / 4, To: to}
	}
	return Window{From: from, To: to}
}

// outcome is "finished", "slow" (finished past its wall-time bound),
// "hung", or "failed".
func (r *Result) outcome() string {
	switch {
	case r.Hung:
		return "hung"
	case r.Slow:
		return "slow"
	case r.Finished:
		return "finished"
	}
	return "failed"
}

// WriteTable writes one line per result: strategy, seed, outcome, accuracy
// against the clean run, steps, faults with the time each was noticed,
// checkpoints, processes left behind, wall time (and its bound, for a
// fault run).
func WriteTable(w io.Writer, results []*Result) error { return writeTable(w, results, true) }

// WriteRows is WriteTable without the header line: rows printed one at a
// time, as runs end.
func WriteRows(w io.Writer, results []*Result) error { return writeTable(w, results, false) }

func writeTable(w io.Writer, results []*Result, header bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "strategy\tseed\toutcome\taccuracy\tvs clean\tstep\tlost (max/interval)\tfaults (noticed after)\tckpts\tcorrupt\tleft behind\twall")
	}
	for _, r := range results {
		faults := "clean run"
		if len(r.Faults) > 0 {
			var fs []string
			for _, f := range r.Faults {
				at := fmt.Sprintf("%.1fs", f.At.Seconds())
				if f.OnFile != "" {
					at = "file:" + f.OnFile + "=" + at
				} else if f.AtStep > 0 {
					at = fmt.Sprintf("step:%d=%s", f.AtStep, at)
				}
				fs = append(fs, fmt.Sprintf("%s %s@%s (%s)", f.Kind, strings.ReplaceAll(f.Target.String(), " ", ""), at, f.NoticeString()))
			}
			faults = strings.Join(fs, ", ")
		}
		vs := "-"
		if r.CleanAccuracy > 0 && r.Finished {
			vs = fmt.Sprintf("%+.1f pt", 100*(r.Accuracy-r.CleanAccuracy))
		}
		acc := "-"
		if r.Finished {
			acc = fmt.Sprintf("%.4f", r.Accuracy)
		}
		wall := fmt.Sprintf("%.1fs", r.Wall.Seconds())
		if r.WallLimit > 0 {
			wall += fmt.Sprintf(" (limit %.1fs)", r.WallLimit.Seconds())
		}
		lost := fmt.Sprint(r.LostSteps)
		if r.Interval > 0 {
			lost += fmt.Sprintf(" (%d/%d)", r.LostMax, r.Interval)
		}
		if r.LostTooMuch {
			lost += " over"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t%s\n", r.Strategy, r.Seed, r.outcome(), acc, vs,
			r.GlobalStep, lost, faults, r.Checkpoints, len(r.Corrupt), len(r.LeftBehind), wall)
	}
	return tw.Flush()
}

// Summary is the per-strategy aggregate of the fault runs of a matrix.
type Summary struct {
	Strategy    string  `json:"strategy"`
	Runs        int     `json:"runs"`
	Finished    int     `json:"finished"`
	Slow        int     `json:"slow"` // finished past the wall-time bound
	Hung        int     `json:"hung"`
	WithinPoint int     `json:"within_1pt"` // finished within 1 point of the clean run
	MeanDeltaPt float64 `json:"mean_delta_pt"`
	LostSteps   int64   `json:"lost_steps"` // total
	// LostMax is the most steps one restore undid; LostOver counts the
	// runs where that was more than their checkpoint interval.
	LostMax    int64         `json:"lost_max"`
	LostOver   int           `json:"lost_over"`
	Faults     int           `json:"faults_applied"`
	Noticed    int           `json:"faults_noticed"`
	MaxNotice  time.Duration `json:"max_notice"`
	Corrupt    int           `json:"corrupt_checkpoints"`
	LeftBehind int           `json:"left_behind"`
	CleanAcc   float64       `json:"clean_accuracy"` // mean of the clean runs
	CleanRuns  int           `json:"clean_runs"`
	CleanMin   float64       `json:"clean_min"`
	CleanMax   float64       `json:"clean_max"`
}

// Summarize aggregates the fault runs of results (clean runs are skipped)
// per strategy, in the order strategies first appear.
func Summarize(results []*Result) []Summary {
	var out []Summary
	idx := map[string]int{}
	type spread struct {
		n        int
		min, max float64
	}
	clean := map[string]*spread{}
	for _, r := range results {
		if len(r.Faults) == 0 {
			if r.Finished {
				c := clean[r.Strategy]
				if c == nil {
					c = &spread{min: r.Accuracy, max: r.Accuracy}
					clean[r.Strategy] = c
				}
				c.n++
				c.min, c.max = min(c.min, r.Accuracy), max(c.max, r.Accuracy)
			}
			continue
		}
		i, ok := idx[r.Strategy]
		if !ok {
			i = len(out)
			idx[r.Strategy] = i
			out = append(out, Summary{Strategy: r.Strategy, CleanAcc: r.CleanAccuracy})
		}
		s := &out[i]
		s.Runs++
		if r.Finished {
			s.Finished++
			d := 100 * (r.Accuracy - r.CleanAccuracy)
			s.MeanDeltaPt += d
			if d >= -1 {
				s.WithinPoint++
			}
		}
		if r.Hung {
			s.Hung++
		}
		if r.Slow {
			s.Slow++
		}
		s.LostSteps += r.LostSteps
		s.LostMax = max(s.LostMax, r.LostMax)
		if r.LostTooMuch {
			s.LostOver++
		}
		for _, f := range r.Faults {
			if f.Applied {
				s.Faults++
				if f.Noticed {
					s.Noticed++
					s.MaxNotice = max(s.MaxNotice, f.NoticeAfter)
				}
			}
		}
		s.Corrupt += len(r.Corrupt)
		s.LeftBehind += len(r.LeftBehind)
	}
	for i := range out {
		if c := clean[out[i].Strategy]; c != nil {
			out[i].CleanRuns, out[i].CleanMin, out[i].CleanMax = c.n, c.min, c.max
		}
		if out[i].Finished > 0 {
			out[i].MeanDeltaPt /= float64(out[i].Finished)
		}
	}
	return out
}

// WriteSummary writes Summarize's figures as a table.
func WriteSummary(w io.Writer, sums []Summary) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "strategy\truns\tfinished\tslow\thung\twithin 1pt\tmean Δacc\tclean acc (runs: min-max)\tlost steps (max, runs over)\tfaults noticed\tslowest notice\tcorrupt ckpts\tleft behind")
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%+.2f pt\t%.4f (%d: %.4f-%.4f)\t%d (%d, %d)\t%d/%d\t%.1fs\t%d\t%d\n", s.Strategy, s.Runs, s.Finished, s.Slow, s.Hung, s.WithinPoint,
			s.MeanDeltaPt, s.CleanAcc, s.CleanRuns, s.CleanMin, s.CleanMax, s.LostSteps, s.LostMax, s.LostOver, s.Noticed, s.Faults, s.MaxNotice.Seconds(), s.Corrupt, s.LeftBehind)
	}
	return tw.Flush()
}
