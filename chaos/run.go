package chaos

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/distflow/distflow/checkpoint/bundle"
)

// ErrUnsupported is wrapped when the harness cannot run on this system.
var ErrUnsupported = errors.New("unsupported")

// Defaults of Config.
const (
	DefaultDeadline = 2 * time.Minute
	DefaultPauseMin = time.Second
	DefaultPauseMax = 5 * time.Second
	// leftBehindGrace is how long processes get to die after their
	// launcher exits (Pdeathsig is delivered asynchronously) before they
	// count as left behind.
	leftBehindGrace = 3 * time.Second
)

// Config is one run.
type Config struct {
	// Binary is the distflow binary to run; required.
	Binary string
	// Strategy is what to train; required (see Strategies).
	Strategy Strategy
	// Seed draws the fault schedule (see Schedule).
	Seed uint64
	// Faults is how many faults to inject; 0 makes a clean run.
	Faults int
	// Plan, when not nil, is the fault schedule to apply instead of one
	// drawn from Seed (Faults and Window are then ignored): a schedule
	// written by hand, or one the project's tests have not seen.
	Plan []Fault
	// Window is when faults may happen, from the launcher's start;
	// required when Faults > 0.
	Window Window
	// PauseMin and PauseMax bound how long a stopped task stays stopped;
	// 0 means DefaultPauseMin and DefaultPauseMax.
	PauseMin, PauseMax time.Duration
	// Deadline bounds the whole run; past it the run is "hung" and every
	// process of it is killed. 0 means DefaultDeadline.
	Deadline time.Duration
	// TrainSeed is the training's --seed (initial weights, shuffling);
	// 0 means 1, the command's default.
	TrainSeed int
	// Args are more train flags, after the harness's own, e.g.
	// "--steps", "400" or "--step-timeout", "10s".
	Args []string
	// Dir is where the run keeps its checkpoint directory and its output
	// (a subdirectory per run); required.
	Dir string
	// Verbose, if not nil, receives every line of the run's output as it
	// comes, and the harness's own notes.
	Verbose io.Writer
	// HandStarted starts each task of the cluster by itself (TF_CONFIG
	// naming it, the same train flags) under a supervisor that restarts it
	// with the same flags whenever it dies, as Kubernetes would, instead
	// of through the --local-cluster launcher, whose restarts follow the
	// strategy's Recovery (see handStarted).
	HandStarted bool
}

func (c *Config) validate() error {
	switch {
	case c.Binary == "":
		return errors.New("chaos: Config.Binary is empty: build one with go build -o DIR/distflow ./cmd/distflow")
	case c.Strategy.Name == "" || c.Strategy.Cluster == "":
		return fmt.Errorf("chaos: Config.Strategy is not set: want one of %s", strings.Join(StrategyNames(), ", "))
	case c.Dir == "":
		return errors.New("chaos: Config.Dir is empty")
	case c.Plan == nil && c.Faults > 0 && c.Window.To <= 0:
		return errors.New("chaos: Config.Window is empty: faults need a time window (RunMatrix takes it from a clean run)")
	case c.Deadline < 0:
		return fmt.Errorf("chaos: Config.Deadline %v is negative", c.Deadline)
	}
	if _, err := os.Stat(c.Binary); err != nil {
		return fmt.Errorf("chaos: Config.Binary: %w", err)
	}
	c.Deadline = cmp.Or(c.Deadline, DefaultDeadline)
	c.PauseMin = cmp.Or(c.PauseMin, DefaultPauseMin)
	c.PauseMax = cmp.Or(c.PauseMax, DefaultPauseMax)
	c.TrainSeed = cmp.Or(c.TrainSeed, 1)
	return nil
}

// FaultResult is what happened to one planned fault.
type FaultResult struct {
	Fault
	// Applied is false when the target had no live process at the time
	// (it had exited, or had not been restarted): Skipped says why.
	Applied bool   `json:"applied"`
	Pid     int    `json:"pid,omitempty"`
	Skipped string `json:"skipped,omitempty"`
	// Noticed says whether a warning, an error or a launcher line named
	// the task after the fault; NoticeAfter is how long after, NoticeLine
	// the line.
	Noticed     bool          `json:"noticed"`
	NoticeAfter time.Duration `json:"notice_after,omitempty"`
	NoticeLine  string        `json:"notice_line,omitempty"`
}

// NoticeString is "1.2s" or "not noticed" (or "-" for a fault not applied).
func (f FaultResult) NoticeString() string {
	switch {
	case !f.Applied:
		return "-"
	case !f.Noticed:
		return "not noticed"
	}
	return fmt.Sprintf("%.1fs", f.NoticeAfter.Seconds())
}

// Result is the report of one run.
type Result struct {
	Strategy string `json:"strategy"`
	Seed     uint64 `json:"seed"`
	// Finished: the launcher exited 0 and the chief printed its result,
	// at TargetSteps or beyond.
	Finished bool `json:"finished"`
	// ExitError is the launcher's exit status when it was not 0.
	ExitError string `json:"exit_error,omitempty"`
	// Hung: the run was still going at its deadline; WaitingFor holds its
	// last lines that said what it waited for.
	Hung       bool     `json:"hung"`
	WaitingFor []string `json:"waiting_for,omitempty"`
	// Accuracy is the test accuracy the chief reported (when Finished);
	// CleanAccuracy is that of the clean run it is compared with (set by
	// RunMatrix; 0 when unknown).
	Accuracy      float64 `json:"accuracy"`
	CleanAccuracy float64 `json:"clean_accuracy,omitempty"`
	// GlobalStep is the final global step (the result's, or the highest
	// the output showed); LostSteps, how many steps restores undid.
	GlobalStep int64 `json:"global_step"`
	LostSteps  int64 `json:"lost_steps"`
	// LostMax is the most steps one restore undid; Interval the run's
	// checkpoint interval (--save-checkpoint-steps). LostTooMuch: a
	// restore undid more than one interval, which checkpoints every
	// Interval steps are there to prevent (a lower bound, as LostSteps).
	LostMax     int64 `json:"lost_max"`
	Interval    int64 `json:"interval"`
	LostTooMuch bool  `json:"lost_too_much,omitempty"`
	// TargetSteps is the global step the tasks said they train to (0 if
	// none said); a run whose result stops short of it did not finish.
	TargetSteps int64 `json:"target_steps"`
	// Faults are the planned faults and what became of them.
	Faults []FaultResult `json:"faults"`
	// Checkpoints counts the complete checkpoints left; Corrupt names
	// those that fail validation and those that retention deleted as
	// corrupt during the run (its warnings).
	Checkpoints int      `json:"checkpoints"`
	Corrupt     []string `json:"corrupt,omitempty"`
	// LeftBehind lists the processes of the run still alive after the
	// launcher ended ("worker 1 (pid 123)"), which Run then killed.
	LeftBehind []string `json:"left_behind,omitempty"`
	// Restarts are the launcher's lines about restarting tasks.
	Restarts []string `json:"restarts,omitempty"`
	// Wall is the run's duration; Dir its directory (output.log and the
	// checkpoints).
	Wall time.Duration `json:"wall"`
	Dir  string        `json:"dir"`
	// CleanWall is the wall time of the longest clean run of the
	// strategy, and WallLimit the bound on this run's (see TimeBound),
	// both set by RunMatrix for a fault run (0 when unknown). Slow: the
	// run finished, but after WallLimit: a stall that the deadline does
	// not catch (a task that waits a whole step deadline for a peer that
	// has exited, members that wait for each other until theirs).
	CleanWall time.Duration `json:"clean_wall,omitempty"`
	WallLimit time.Duration `json:"wall_limit,omitempty"`
	Slow      bool          `json:"slow,omitempty"`
}

// OK reports whether the run met the chaos matrix's bar: finished within its
// wall-time bound (when known), no restore undoing more than one
// checkpoint interval, accuracy within tolerance of the clean run
// (when known), no corrupt checkpoint, nothing left behind.
func (r *Result) OK(tolerance float64) bool {
	return r.Finished && !r.Hung && !r.Slow && !r.LostTooMuch && len(r.Corrupt) == 0 && len(r.LeftBehind) == 0 &&
		(r.CleanAccuracy == 0 || r.Accuracy >= r.CleanAccuracy-tolerance)
}

// TimeBound bounds the wall time of a fault run by that of the clean
// runs: Factor times the longest clean run, plus Slack, plus the pauses
// of the stops applied (a stopped task holds the run up that long by
// design). Recovering from a fault costs a restart, a re-formed ring, a
// checkpoint restored: seconds; a run past the bound waited for something
// that did not come, and counts as failed (Result.Slow), however it ended.
type TimeBound struct {
	// Factor multiplies the clean run's wall time; 0 means
	// DefaultSlowFactor, a negative value turns the bound off.
	Factor float64
	// Slack is added; 0 means DefaultSlowSlack.
	Slack time.Duration
}

// Defaults of TimeBound.
const (
	DefaultSlowFactor = 3
	DefaultSlowSlack  = 10 * time.Second
)

// Limit returns the bound on the wall time of a run with faults after a
// clean run of clean, or 0 (no bound) when the bound is off or clean is
// unknown (0).
func (b TimeBound) Limit(clean time.Duration, faults []FaultResult) time.Duration {
	if b.Factor < 0 || clean <= 0 {
		return 0
	}
	limit := time.Duration(cmp.Or(b.Factor, DefaultSlowFactor)*float64(clean)) + cmp.Or(b.Slack, DefaultSlowSlack)
	for _, f := range faults {
		if f.Applied && f.Kind == Stop {
			limit += f.Pause
		}
	}
	return limit
}

// checkpointInterval returns the last --save-checkpoint-steps of a train
// command line (either form), or 0.
func checkpointInterval(args []string) int64 {
	var n int64
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--save-checkpoint-steps=")
		if !ok && a == "--save-checkpoint-steps" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ok {
			n, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return n
}

// judge sets r's wall-time bound after a clean run of clean, and whether r
// (finished) went past it.
func (r *Result) judge(b TimeBound, clean time.Duration) {
	r.CleanWall, r.WallLimit = clean, b.Limit(clean, r.Faults)
	r.Slow = r.Finished && r.WallLimit > 0 && r.Wall > r.WallLimit
}

// Run runs one job with cfg's faults and reports on it. Its error is for
// the harness's own failures (a bad Config, a binary that does not start);
// whatever the job does is in the Result. Every process of the run is gone
// when Run returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	faults := cfg.Plan
	if faults == nil && cfg.Faults > 0 {
		var err error
		faults, err = Schedule(cfg.Seed, cfg.Strategy.Cluster, cfg.Faults, cfg.Window, cfg.PauseMin, cfg.PauseMax)
		if err != nil {
			return nil, err
		}
	}
	id := fmt.Sprintf("%s-%d-%d-%d", cfg.Strategy.Name, cfg.Seed, os.Getpid(), time.Now().UnixNano())
	dir := filepath.Join(cfg.Dir, id)
	ckptDir := filepath.Join(dir, "ckpt")
	if err := os.MkdirAll(ckptDir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	logFile, err := os.Create(filepath.Join(dir, "output.log"))
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer logFile.Close()

	args := []string{"train", "--model", "mlp", "--data", "embedded", "--checkpoint-dir", ckptDir,
		"--save-checkpoint-steps", "100", "--seed", strconv.Itoa(cfg.TrainSeed), "--json", "--verbose",
		// Progress lines every 20 local steps: the resolution of LostSteps.
		"--log-every", "20",
		// A rate that falls to zero at the last step: the final model is
		// then the sum of many small steps, not the last iterate, which one
		// step more or less moves by up to 6 points at a constant 0.5 (the
		// noise that a fault's shift of the data order showed as a loss;
		// docs/RELIABILITY.md). Args may say otherwise (--lr-decay=none).
		"--lr-decay", "linear"}
	if !cfg.HandStarted { // else each task is started by itself
		args = append(args, "--local-cluster", cfg.Strategy.Cluster)
	}
	args = append(append(args, cfg.Strategy.Args...), cfg.Args...)
	r := &runner{cfg: cfg, id: id, log: logFile, addrs: map[Task]string{}, ckptDir: ckptDir, dir: dir}
	fmt.Fprintf(logFile, "# %s %s\n", cfg.Binary, strings.Join(args, " "))
	r.start = time.Now()
	// kill ends whatever still runs of the launcher (or the supervisor).
	var exited <-chan error
	var kill func()
	if cfg.HandStarted {
		sctx, stop := context.WithCancel(context.Background())
		defer stop()
		if exited, err = r.handStarted(sctx, args); err != nil {
			return nil, err
		}
		kill = stop
	} else {
		if exited, kill, err = r.launch(args); err != nil {
			return nil, err
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()
	injectCtx, stopInjecting := context.WithCancel(runCtx)
	results := make([]FaultResult, len(faults))
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		r.inject(injectCtx, faults, results)
	}()

	res := &Result{Strategy: cfg.Strategy.Name, Seed: cfg.Seed, Dir: dir}
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-runCtx.Done():
		res.Hung = ctx.Err() == nil // else the caller cancelled
		r.notef("deadline %v reached (or cancelled): stopping every process of the run", cfg.Deadline)
		res.WaitingFor = append(waitingFor(r.snapshot(), 5), "alive at the deadline: "+r.describeMarked())
		kill()
		r.killMarked()
		waitErr = <-exited
	}
	stopInjecting()
	<-injected
	res.Wall = time.Since(r.start)
	r.resumeStopped()
	res.LeftBehind = r.leftBehind(ctx)

	lines := r.snapshot()
	if waitErr != nil && !res.Hung {
		res.ExitError = waitErr.Error()
	}
	tr, ok := lastResult(lines)
	maxStep, lost, worst := progress(lines)
	res.GlobalStep, res.LostSteps, res.LostMax = max(maxStep, tr.GlobalStep), lost, worst
	res.Interval = checkpointInterval(args)
	res.LostTooMuch = res.Interval > 0 && res.LostMax > res.Interval
	res.TargetSteps = targetSteps(lines)
	// A chief that exits 0 early (told training ended when it had not) is
	// not a finished run.
	res.Finished = waitErr == nil && !res.Hung && ok && tr.GlobalStep >= res.TargetSteps
	if ok && waitErr == nil && !res.Finished {
		res.ExitError = fmt.Sprintf("exit 0 at global step %d of %d", tr.GlobalStep, res.TargetSteps)
	}
	if ok {
		res.Accuracy = tr.TestAccuracy
	}
	for i, f := range results {
		if f.Applied {
			if l, ok := firstNotice(lines, f.At, f.Target, r.addr(f.Target)); ok {
				results[i].Noticed, results[i].NoticeAfter, results[i].NoticeLine = true, max(0, l.At-f.At), l.Text
			}
		}
	}
	res.Faults = results
	for _, l := range lines {
		for _, who := range []string{"local cluster: ", "supervisor: "} {
			if strings.HasPrefix(l.Text, who) && strings.Contains(l.Text, "restart") {
				res.Restarts = append(res.Restarts, strings.TrimPrefix(l.Text, who))
			}
		}
		if strings.Contains(l.Text, "deleting an invalid checkpoint") {
			res.Corrupt = append(res.Corrupt, "deleted during the run: "+l.Text)
		}
	}
	res.Checkpoints, err = r.checkCheckpoints(ckptDir, res)
	if err != nil {
		return res, err
	}
	return res, nil
}

// launch starts the launcher (distflow train --local-cluster) with args.
func (r *runner) launch(args []string) (exited <-chan error, kill func(), err error) {
	cmd := exec.Command(r.cfg.Binary, args...)
	cmd.Env = append(os.Environ(), EnvMarker+"="+r.id)
	cmd.Dir = r.dir
	cmd.SysProcAttr = launcherAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("chaos: %w", err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("chaos: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("chaos: starting %s: %w", r.cfg.Binary, err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go r.read(stdout, false, &readers)
	go r.read(stderr, true, &readers)
	done := make(chan error, 1)
	go func() {
		readers.Wait() // Wait closes the pipes: read them to the end first
		done <- cmd.Wait()
	}()
	return done, func() { killGroup(cmd.Process.Pid) }, nil
}

// runner is the state of one Run.
type runner struct {
	cfg   Config
	id    string
	start time.Time
	log   io.Writer

	mu      sync.Mutex
	lines   []Line
	addrs   map[Task]string // learnt from TF_CONFIG
	stopped map[int]bool    // pids stopped and not yet continued
	maxStep int64           // the highest global step the output showed
	ckptDir string
	dir     string // the run's directory, where its processes run
}

func (r *runner) read(rd io.Reader, isStderr bool, wg *sync.WaitGroup) {
	r.readPrefixed(rd, isStderr, "", wg)
}

// readPrefixed is read, each line prefixed (a hand-started task's lines
// named as the launcher names its tasks' lines: "[worker 1] ").
func (r *runner) readPrefixed(rd io.Reader, isStderr bool, prefix string, wg *sync.WaitGroup) {
	defer wg.Done()
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		r.addLine(Line{At: time.Since(r.start), Stderr: isStderr, Text: prefix + sc.Text()})
	}
	// A line longer than the buffer ends the scan: drain the rest so the
	// launcher never blocks on a full pipe.
	_, _ = io.Copy(io.Discard, rd)
}

// linef adds a line of the supervisor's to the run's output, as a
// launcher's line would be.
func (r *runner) linef(format string, args ...any) {
	r.addLine(Line{At: time.Since(r.start), Stderr: true, Text: fmt.Sprintf(format, args...)})
}

// addLine records one line of the run's output.
func (r *runner) addLine(l Line) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, l)
	if m := globalStepRe.FindStringSubmatch(l.Text); m != nil {
		if s, err := strconv.ParseInt(m[1]+m[2], 10, 64); err == nil {
			r.maxStep = max(r.maxStep, s)
		}
	}
	fmt.Fprintf(r.log, "%8.3f %s\n", l.At.Seconds(), l.Text)
	if r.cfg.Verbose != nil {
		fmt.Fprintf(r.cfg.Verbose, "[%s %6.2fs] %s\n", r.cfg.Strategy.Name, l.At.Seconds(), l.Text)
	}
}

func (r *runner) snapshot() []Line {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// notef records a line of the harness's own in the log.
func (r *runner) notef(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(r.log, "%8.3f chaos: %s\n", time.Since(r.start).Seconds(), msg)
	if r.cfg.Verbose != nil {
		fmt.Fprintf(r.cfg.Verbose, "[%s %6.2fs] chaos: %s\n", r.cfg.Strategy.Name, time.Since(r.start).Seconds(), msg)
	}
}

func (r *runner) addr(t Task) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addrs[t]
}

// inject applies the faults at their times, until ctx ends.
func (r *runner) inject(ctx context.Context, faults []Fault, results []FaultResult) {
	var pauses sync.WaitGroup
	defer pauses.Wait()
	for i, f := range faults {
		results[i].Fault = f
		// For a file event the target is looked up beforehand and kept
		// up to date while waiting: walking /proc after the event takes
		// longer than a chief takes to exit after marking the end.
		var tr *tracker
		wctx, stopLooking := context.WithCancel(ctx)
		if f.OnFile != "" {
			tr = &tracker{}
			go tr.run(wctx, r, f.Target)
		}
		err := r.await(ctx, f)
		stopLooking()
		if err != nil {
			results[i].Skipped = "the run ended first"
			if ctx.Err() == nil {
				results[i].Skipped = err.Error()
				r.notef("%s: skipped: %v", f, err)
			}
			continue
		}
		if f.AtStep > 0 || f.OnFile != "" {
			// When it fired, for the time to notice.
			f.At = time.Since(r.start)
			results[i].At = f.At
		}
		var p proc
		if tr != nil {
			p = tr.last()
		}
		if p.pid == 0 || !stillRuns(p) {
			p, err = r.find(f.Target)
		}
		if err != nil {
			results[i].Skipped = err.Error()
			r.notef("%s: skipped: %v", f, err)
			continue
		}
		results[i].Pid = p.pid
		sig := syscall.SIGKILL
		if f.Kind == Stop {
			sig = sigStop
		}
		if err := signal(p.pid, sig); err != nil {
			results[i].Skipped = err.Error()
			r.notef("%s: pid %d: %v", f, p.pid, err)
			continue
		}
		results[i].Applied = true
		r.notef("%s: sent %v to pid %d", f, sig, p.pid)
		if f.Kind == Stop {
			r.mu.Lock()
			if r.stopped == nil {
				r.stopped = map[int]bool{}
			}
			r.stopped[p.pid] = true
			r.mu.Unlock()
			pauses.Add(1)
			go func() {
				defer pauses.Done()
				t := time.NewTimer(f.Pause)
				defer t.Stop()
				select {
				case <-ctx.Done(): // resumeStopped continues it
					return
				case <-t.C:
				}
				r.mu.Lock()
				delete(r.stopped, p.pid)
				r.mu.Unlock()
				_ = signal(p.pid, sigCont)
				r.notef("%s: sent SIGCONT to pid %d", f, p.pid)
			}()
		}
	}
}

// stepPoll is how often a fault waiting for a global step looks at the
// output.
const stepPoll = 5 * time.Millisecond

// await returns when fault f is due: at its time, at its global step, or
// when its file appears; or with ctx's error.
func (r *runner) await(ctx context.Context, f Fault) error {
	switch {
	case f.OnFile != "":
		name, err := awaitFile(ctx, r.ckptDir, f.OnFile)
		if err == nil {
			r.notef("%s appeared in the checkpoint directory", name)
		}
		return err
	case f.AtStep > 0:
		tick := time.NewTicker(stepPoll)
		defer tick.Stop()
		for {
			r.mu.Lock()
			at := r.maxStep
			r.mu.Unlock()
			if at >= f.AtStep {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
	}
	t := time.NewTimer(time.Until(r.start.Add(f.At)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// tracker keeps the newest live process of a task found so far, so that a
// fault on an event signals it without walking /proc after the event.
type tracker struct {
	mu sync.Mutex
	p  proc
}

// run looks up task t every trackPoll until ctx ends.
func (tr *tracker) run(ctx context.Context, r *runner, t Task) {
	tick := time.NewTicker(trackPoll)
	defer tick.Stop()
	for {
		if p, err := r.find(t); err == nil {
			tr.mu.Lock()
			tr.p = p
			tr.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// last returns the process found last (none: pid 0); it may have exited
// since (see stillRuns).
func (tr *tracker) last() proc {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.p
}

// trackPoll is how often track looks the target up.
const trackPoll = 50 * time.Millisecond

// find returns the newest live process of task t.
func (r *runner) find(t Task) (proc, error) {
	ps, err := marked(r.id)
	if err != nil {
		return proc{}, err
	}
	var best proc
	stopped := false
	for _, p := range ps {
		if p.task != nil {
			r.mu.Lock()
			for k, v := range p.addrs {
				r.addrs[k] = v
			}
			r.mu.Unlock()
		}
		if p.task != nil && *p.task == t {
			if p.state == 'T' {
				stopped = true
			} else if p.start >= best.start {
				best = p
			}
		}
	}
	if best.pid == 0 && stopped {
		return proc{}, fmt.Errorf("%s is stopped already", t)
	}
	if best.pid == 0 {
		return proc{}, fmt.Errorf("%s has no running process (exited, or not restarted)", t)
	}
	return best, nil
}

// resumeStopped continues the processes still stopped, so none is left
// stopped (a stopped process may not even die of its parent's death).
func (r *runner) resumeStopped() {
	r.mu.Lock()
	pids := r.stopped
	r.stopped = nil
	r.mu.Unlock()
	for pid := range pids {
		_ = signal(pid, sigCont)
	}
}

// describeMarked names the run's live processes and their states.
func (r *runner) describeMarked() string {
	ps, err := marked(r.id)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range ps {
		name := "launcher"
		if p.task != nil {
			name = p.task.String()
		}
		out = append(out, fmt.Sprintf("%s (pid %d, state %c)", name, p.pid, p.state))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// killMarked kills every process of the run.
func (r *runner) killMarked() {
	ps, _ := marked(r.id)
	for _, p := range ps {
		_ = signal(p.pid, syscall.SIGKILL)
	}
	r.awaitGone()
}

// killGrace bounds how long awaitGone waits for killed processes to go:
// a SIGKILL is delivered when the process is next scheduled, not at once.
const killGrace = 5 * time.Second

// awaitGone waits until no process of the run is alive, or killGrace.
func (r *runner) awaitGone() {
	deadline := time.Now().Add(killGrace)
	for time.Now().Before(deadline) {
		if ps, err := marked(r.id); err != nil || len(ps) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leftBehind waits up to leftBehindGrace for the run's processes to go,
// then kills and names those still alive.
func (r *runner) leftBehind(ctx context.Context) []string {
	deadline := time.Now().Add(leftBehindGrace)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ps, err := marked(r.id)
		if err != nil || len(ps) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var out []string
			for _, p := range ps {
				name := "launcher"
				if p.task != nil {
					name = p.task.String()
				}
				out = append(out, fmt.Sprintf("%s (pid %d, state %c)", name, p.pid, p.state))
				_ = signal(p.pid, syscall.SIGKILL)
			}
			r.notef("left behind after the launcher ended, killed: %s", strings.Join(out, ", "))
			r.awaitGone()
			return out
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// checkCheckpoints validates every complete checkpoint of dir, adding the
// bad ones to res.Corrupt, and returns how many there are.
func (r *runner) checkCheckpoints(dir string, res *Result) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("chaos: checking checkpoints: %w", err)
	}
	n := 0
	for _, e := range ents {
		if e.IsDir() {
			// A directory of another saver's checkpoints (an async
			// replica standing in for the chief): checked as well.
			k, err := r.checkCheckpoints(filepath.Join(dir, e.Name()), res)
			if err != nil {
				return 0, err
			}
			n += k
			continue
		}
		prefix, ok := strings.CutSuffix(e.Name(), ".index")
		if !ok {
			continue
		}
		n++
		if err := bundle.Verify(dir, prefix); err != nil {
			res.Corrupt = append(res.Corrupt, err.Error())
		}
	}
	return n, nil
}
