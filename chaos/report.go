package chaos

import (
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
	Seed       uint64
	// WindowFrom and WindowFraction place faults between WindowFrom and
	// that fraction of the clean run's wall time (0 means 1s and 0.8).
	WindowFrom     time.Duration
	WindowFraction float64
	// Progress, if not nil, is called after each run.
	Progress func(*Result)
}

// RunMatrix runs m and returns every result, clean runs included (Faults
// empty). It stops early, with what it has, when ctx ends or the harness
// itself fails.
func RunMatrix(ctx context.Context, m MatrixConfig) ([]*Result, error) {
	from := orDefault(m.WindowFrom, time.Second)
	frac := orDefault(m.WindowFraction, 0.8)
	var all []*Result
	for _, s := range m.Strategies {
		cfg := m.Base
		cfg.Strategy, cfg.Faults, cfg.Seed, cfg.Plan = s, 0, m.Seed, nil
		clean, err := Run(ctx, cfg)
		if err != nil {
			return all, err
		}
		all = append(all, clean)
		if m.Progress != nil {
			m.Progress(clean)
		}
		to := time.Duration(float64(clean.Wall) * frac)
		if !clean.Finished || to <= from {
			to = from + 5*time.Second // the clean run failed: still try faults
		}
		for i := range m.Runs {
			if ctx.Err() != nil {
				return all, ctx.Err()
			}
			cfg.Seed, cfg.Faults, cfg.Window, cfg.Plan = m.Seed+uint64(i), m.Faults, Window{From: from, To: to}, m.Base.Plan
			res, err := Run(ctx, cfg)
			if err != nil {
				return all, err
			}
			res.CleanAccuracy = clean.Accuracy
			all = append(all, res)
			if m.Progress != nil {
				m.Progress(res)
			}
		}
	}
	return all, nil
}

// outcome is "finished", "hung", or "failed".
func (r *Result) outcome() string {
	switch {
	case r.Hung:
		return "hung"
	case r.Finished:
		return "finished"
	}
	return "failed"
}

// WriteTable writes one line per result: strategy, seed, outcome, accuracy
// against the clean run, steps, faults with the time each was noticed,
// checkpoints, processes left behind, wall time.
func WriteTable(w io.Writer, results []*Result) error { return writeTable(w, results, true) }

// WriteRows is WriteTable without the header line: rows printed one at a
// time, as runs end.
func WriteRows(w io.Writer, results []*Result) error { return writeTable(w, results, false) }

func writeTable(w io.Writer, results []*Result, header bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "strategy\tseed\toutcome\taccuracy\tvs clean\tstep\tlost\tfaults (noticed after)\tckpts\tcorrupt\tleft behind\twall")
	}
	for _, r := range results {
		faults := "clean run"
		if len(r.Faults) > 0 {
			var fs []string
			for _, f := range r.Faults {
				fs = append(fs, fmt.Sprintf("%s %s@%.1fs (%s)", f.Kind, strings.ReplaceAll(f.Target.String(), " ", ""), f.At.Seconds(), f.NoticeString()))
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
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%.1fs\n", r.Strategy, r.Seed, r.outcome(), acc, vs,
			r.GlobalStep, r.LostSteps, faults, r.Checkpoints, len(r.Corrupt), len(r.LeftBehind), r.Wall.Seconds())
	}
	return tw.Flush()
}

// Summary is the per-strategy aggregate of the fault runs of a matrix.
type Summary struct {
	Strategy    string        `json:"strategy"`
	Runs        int           `json:"runs"`
	Finished    int           `json:"finished"`
	Hung        int           `json:"hung"`
	WithinPoint int           `json:"within_1pt"` // finished within 1 point of the clean run
	MeanDeltaPt float64       `json:"mean_delta_pt"`
	LostSteps   int64         `json:"lost_steps"` // total
	Faults      int           `json:"faults_applied"`
	Noticed     int           `json:"faults_noticed"`
	MaxNotice   time.Duration `json:"max_notice"`
	Corrupt     int           `json:"corrupt_checkpoints"`
	LeftBehind  int           `json:"left_behind"`
	CleanAcc    float64       `json:"clean_accuracy"`
}

// Summarize aggregates the fault runs of results (clean runs are skipped)
// per strategy, in the order strategies first appear.
func Summarize(results []*Result) []Summary {
	var out []Summary
	idx := map[string]int{}
	for _, r := range results {
		if len(r.Faults) == 0 {
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
		s.LostSteps += r.LostSteps
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
		if out[i].Finished > 0 {
			out[i].MeanDeltaPt /= float64(out[i].Finished)
		}
	}
	return out
}

// WriteSummary writes Summarize's figures as a table.
func WriteSummary(w io.Writer, sums []Summary) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "strategy\truns\tfinished\thung\twithin 1pt\tmean Δacc\tclean acc\tlost steps\tfaults noticed\tslowest notice\tcorrupt ckpts\tleft behind")
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%+.2f pt\t%.4f\t%d\t%d/%d\t%.1fs\t%d\t%d\n", s.Strategy, s.Runs, s.Finished, s.Hung, s.WithinPoint,
			s.MeanDeltaPt, s.CleanAcc, s.LostSteps, s.Noticed, s.Faults, s.MaxNotice.Seconds(), s.Corrupt, s.LeftBehind)
	}
	return tw.Flush()
}
