package estimator

import (
	"fmt"
	"strings"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/summary"
	"github.com/distflow/distflow/tensor"
)

// progress is what every strategy's loop does with each step it has
// trained, in one format whatever the strategy: it counts and times the
// steps (the throughput leaves out the warm-up), observes them in the
// metrics, and at the end of each progress window prints the progress
// line and writes the training events.
type progress struct {
	r *replica
	// target is the global step to train to; batch the examples of a
	// batch, and perStep the batches of the cluster's global step (the
	// epoch in the progress line).
	target  int64
	batch   int
	perStep int
	// events receives the training events (nil: none). logNames name the
	// model's logged tensors, logged; summaries merges the summaries
	// (invalid: no events).
	events    *summary.Writer
	logNames  []string
	logged    []graph.Output
	summaries graph.Output

	st        loopStats
	warmup    int
	timedFrom int
	start     time.Time
	window    progressWindow
}

// newProgress opens this process's event file and starts counting the
// steps of a training to target; spec is the model's, summaries its
// merged summaries (invalid: none).
func newProgress(r *replica, spec *Spec, summaries graph.Output, batch, perStep, towers int, target int64) (*progress, error) {
	events, err := openEvents(r.cfg.ModelDir, r.cfg.eventSuffix())
	if err != nil {
		return nil, err
	}
	p := &progress{r: r, target: target, batch: batch, perStep: perStep, events: events,
		logNames: sortedNames(spec.Log), warmup: warmupSteps(target), st: loopStats{towers: towers}}
	for _, n := range p.logNames {
		p.logged = append(p.logged, spec.Log[n])
	}
	if events != nil {
		p.summaries = summaries
	}
	p.start = time.Now()
	p.window.start = p.start
	return p, nil
}

// due reports whether the next step ends a progress window: it fetches
// the summaries.
func (p *progress) due() bool { return (p.st.localSteps+1)%p.r.cfg.LogEverySteps == 0 }

// fetches is what a step fetches for its progress line: the logged
// tensors, then the summaries when the step ends a window.
func (p *progress) fetches(window bool) []graph.Output {
	if !window || !p.summaries.Valid() {
		return p.logged
	}
	return append(p.logged[:len(p.logged):len(p.logged)], p.summaries)
}

// trained is one step's outcome.
type trained struct {
	// global is the global step after it, loss its loss.
	global int64
	loss   float64
	// took is how long the step took, and examples how many examples this
	// replica trained in it; the progress line's throughput counts shown
	// examples (0: examples), the whole ring's on a ring.
	took     time.Duration
	examples int
	shown    int
	// logged is the values of the step's fetches for the progress line.
	logged []*tensor.Tensor
	// last says that training ends with this step; note ends the progress
	// line (the ranks of a ring, say).
	last bool
	note string
}

// stepped records a step that trained.
func (p *progress) stepped(s trained) {
	st := &p.st
	st.localSteps++
	st.loss = s.loss
	switch st.localSteps {
	case 1:
		st.firstGlobal = int(s.global) - 1
	case p.warmup:
		p.start, p.timedFrom, st.firstGlobal = time.Now(), p.warmup, int(s.global)
	}
	st.lastGlobal = int(s.global)
	p.r.observeStep(s.took, s.examples, s.global, s.loss)
	p.window.steps++
	if s.shown == 0 {
		s.shown = s.examples
	}
	p.window.examples += s.shown
	if st.localSteps%p.r.cfg.LogEverySteps == 0 || s.last {
		p.endWindow(s)
	}
}

// endWindow prints the progress line of the window that ends with step s,
// writes its training events, and starts the next window.
func (p *progress) endWindow(s trained) {
	r, st, w := p.r, p.st, &p.window
	now := time.Now()
	elapsed := now.Sub(w.start)
	rate := float64(w.examples) / elapsed.Seconds()
	var line strings.Builder
	fmt.Fprintf(&line, "%slocal_step %d  global_step %d/%d", r.who(), st.localSteps, s.global, p.target)
	if n := r.stop.ExamplesPerEpoch; n > 0 {
		fmt.Fprintf(&line, "  epoch %.2f", float64(s.global*int64(p.batch*p.perStep))/float64(n))
	}
	fmt.Fprintf(&line, "  loss %.4f  avg_step %s  %.0f examples/s%s", st.loss,
		(elapsed / time.Duration(w.steps)).Round(time.Microsecond), rate, s.note)
	var logged, summaries []*tensor.Tensor
	if len(s.logged) >= len(p.logNames) {
		logged, summaries = s.logged[:len(p.logNames)], s.logged[len(p.logNames):]
		for i, n := range p.logNames {
			fmt.Fprintf(&line, "  %s %.4f", n, logged[i].Float64At(0))
		}
	}
	fmt.Fprintln(r.cfg.Progress, line.String())
	names := p.logNames
	if logged == nil {
		names = nil
	}
	writeWindow(p.events, window{globalStep: s.global, loss: st.loss, examplesPerSec: rate,
		stepsPerSec: float64(w.steps) / elapsed.Seconds(), logNames: names, logged: logged, summaries: summaries})
	*w = progressWindow{start: now}
}

// stats ends the timing and returns what the loop did.
func (p *progress) stats() loopStats {
	st := p.st
	st.seconds = time.Since(p.start).Seconds()
	st.timedSteps = st.localSteps - p.timedFrom
	return st
}

// close closes the event file.
func (p *progress) close() error {
	if p.events == nil {
		return nil
	}
	if err := p.events.Close(); err != nil {
		return fmt.Errorf("estimator: event file: %w", err)
	}
	return nil
}

// progressWindow counts the steps and examples since the last progress
// line.
type progressWindow struct {
	start    time.Time
	steps    int
	examples int
}
