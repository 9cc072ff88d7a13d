package localcluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/distflow/distflow/cluster"
)

// The defaults of the Config fields left zero.
const (
	DefaultTailLines     = 50
	DefaultMaxPSRestarts = 3
	DefaultStopGrace     = 5 * time.Second
	DefaultPSExitGrace   = 10 * time.Second
	DefaultEndGrace      = 10 * time.Second
)

// pipeGrace bounds how long Run reads a task's output after the task exited,
// when a process it started still holds its stdout or stderr.
const pipeGrace = time.Second

// ErrInTask is returned by Run in a process that is itself a task of a local
// cluster (IsTask): a task starting a cluster of its own would start the
// program again and again.
var ErrInTask = errors.New("localcluster: Run called in a task of a local cluster")

// Config says what Run starts and how it supervises it. The zero value of
// every field but Jobs is a sensible default.
type Config struct {
	// Jobs are the tasks to start. Run checks them as Parse does, except
	// that any number of ps tasks, none included, is accepted.
	Jobs Jobs

	// Args are the command-line arguments of every task, without the
	// program name; nil means os.Args[1:]. The program is this process's
	// own executable (os.Executable). Leave out the flag that made this
	// process call Run: a task does not start a cluster (see ErrInTask),
	// but it should not be asked to.
	Args []string

	// Env holds "KEY=value" entries added to every task's environment,
	// which is otherwise this process's. TF_CONFIG, EnvTask and EnvListenFD
	// are Run's and cannot be set here; a GOMAXPROCS here wins over Run's.
	Env []string

	// Stdout receives the chief's standard output, unchanged: the chief's
	// results are the run's. Nil means os.Stdout.
	Stdout io.Writer

	// Stderr receives the chief's standard error, each line prefixed with
	// the task ("[worker 0] "), Run's own lines ("local cluster: ..."),
	// and the other tasks' output, prefixed, when Verbose is set or when
	// that task fails. Nil means os.Stderr. Run writes to Stdout and
	// Stderr one line per Write call (lines longer than 1 MiB in pieces),
	// from several goroutines but never two at once.
	Stderr io.Writer

	// Verbose shows every task's output on Stderr, and a line per task
	// started with its process id. Without it, the output of every task
	// but the chief is kept, its last TailLines lines only, and shown
	// when that task fails.
	Verbose bool

	// TailLines is how many lines of a task's output are kept to show
	// when it fails (each cut to 8 KiB); 0 means DefaultTailLines.
	TailLines int

	// RestartPS restarts a ps task that exits with an error while
	// training goes on, on the same listening socket (so at the same
	// address), at most MaxPSRestarts times per task. Run keeps the ps
	// sockets open for that. Without it, a ps that fails ends the run.
	RestartPS bool

	// MaxPSRestarts bounds the restarts of each ps task; 0 means
	// DefaultMaxPSRestarts.
	MaxPSRestarts int

	// TolerateWorkerLoss lets the run go on when a worker other than the
	// chief fails. Without it, any task's failure stops every task.
	TolerateWorkerLoss bool

	// RestartWorkers restarts a worker other than the chief that fails,
	// and RestartChief the chief, on its listening socket (so at its
	// address, with the same task id), at most MaxRestarts times per
	// task, as a supervisor (Kubernetes, systemd) would: the strategies
	// that survive a lost task let the restarted one rejoin, and a
	// restarted chief resumes from the latest checkpoint. Run keeps their
	// sockets open for that. A task out of restarts is handled as without
	// them (TolerateWorkerLoss, or the run ends).
	RestartWorkers bool
	RestartChief   bool

	// MaxRestarts bounds the restarts of each worker and of the chief; 0
	// means DefaultMaxPSRestarts.
	MaxRestarts int

	// StopGrace is how long a task may take to exit after SIGTERM before
	// it is killed; 0 means DefaultStopGrace.
	StopGrace time.Duration

	// PSExitGrace is how long the ps tasks may take to exit by themselves
	// (the chief tells them to) once every training task has exited,
	// before they are stopped; 0 means DefaultPSExitGrace.
	PSExitGrace time.Duration

	// EndGrace is how long the other training tasks may take to exit by
	// themselves once the chief has exited 0 (training is over), before
	// they are stopped: one that was stopped or cut off while the chief
	// ended training may otherwise wait for the ps tasks until its own
	// timeout. 0 means DefaultEndGrace.
	EndGrace time.Duration
}

// withDefaults checks c and fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	if err := c.Jobs.check(c.Jobs.String()); err != nil {
		return c, err
	}
	switch {
	case c.TailLines < 0:
		return c, fmt.Errorf("localcluster: Config.TailLines %d is negative", c.TailLines)
	case c.MaxPSRestarts < 0:
		return c, fmt.Errorf("localcluster: Config.MaxPSRestarts %d is negative", c.MaxPSRestarts)
	case c.MaxRestarts < 0:
		return c, fmt.Errorf("localcluster: Config.MaxRestarts %d is negative", c.MaxRestarts)
	case c.StopGrace < 0:
		return c, fmt.Errorf("localcluster: Config.StopGrace %v is negative", c.StopGrace)
	case c.PSExitGrace < 0:
		return c, fmt.Errorf("localcluster: Config.PSExitGrace %v is negative", c.PSExitGrace)
	case c.EndGrace < 0:
		return c, fmt.Errorf("localcluster: Config.EndGrace %v is negative", c.EndGrace)
	}
	for _, kv := range c.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return c, fmt.Errorf("localcluster: Config.Env entry %q is not KEY=value", kv)
		}
		if k == cluster.EnvVar || k == EnvTask || k == EnvListenFD {
			return c, fmt.Errorf("localcluster: Config.Env sets %s, which Run sets for each task", k)
		}
	}
	if c.Args == nil {
		c.Args = os.Args[1:]
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	c.TailLines = cmp.Or(c.TailLines, DefaultTailLines)
	c.MaxPSRestarts = cmp.Or(c.MaxPSRestarts, DefaultMaxPSRestarts)
	c.MaxRestarts = cmp.Or(c.MaxRestarts, DefaultMaxPSRestarts)
	c.StopGrace = cmp.Or(c.StopGrace, DefaultStopGrace)
	c.PSExitGrace = cmp.Or(c.PSExitGrace, DefaultPSExitGrace)
	c.EndGrace = cmp.Or(c.EndGrace, DefaultEndGrace)
	return c, nil
}

// TaskError is the error Run returns when a task ends the run: the chief
// failed, or another task failed and its failure is not tolerated.
type TaskError struct {
	Job   string // "ps", "worker" or "chief"
	Index int
	// Err is how the task ended: an *exec.ExitError with its exit status
	// or the signal that killed it.
	Err error
}

func (e *TaskError) Error() string {
	return fmt.Sprintf("localcluster: %s %d failed: %v", e.Job, e.Index, e.Err)
}

func (e *TaskError) Unwrap() error { return e.Err }

// ExitPermanent is the exit status of a task whose training failed in a
// way that running it again would repeat (estimator.Permanent: its own
// input or computation failed): Run restarts no task that exits with it,
// and ends the run with its error even where the loss of a worker is
// tolerated, instead of retrying it or going on without it.
const ExitPermanent = 3

// permanent reports whether a task's exit says that a restart would fail
// the same way.
func permanent(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit) && exit.ExitCode() == ExitPermanent
}

// taskID names a task of the local cluster.
type taskID struct {
	job   string
	index int
}

func (t taskID) String() string { return t.job + " " + strconv.Itoa(t.index) }

// proc is one process of a task; a restarted ps task has several in turn.
type proc struct {
	id   taskID
	cmd  *exec.Cmd
	tail *tail // the output kept to show on failure; nil when shown
	// err is how the process ended; set before done is closed.
	err  error
	done chan struct{}
	// handled: Run's loop has seen it exit (used by Run's goroutine only).
	handled bool
}

// launcher is the state of one Run.
type launcher struct {
	cfg    Config
	exe    string
	env    []string
	addrs  map[string][]string
	files  map[taskID]*os.File // the listening sockets, until closed
	out    *output
	chief  taskID
	exited chan *proc // every process started sends itself here once
}

// Run starts every task of cfg.Jobs as a process of this program and
// supervises them until the run ends. It blocks until every task has exited.
//
// Each task gets this process's environment and cfg.Env, TF_CONFIG naming
// every task's loopback address and its own task (read it with
// cluster.FromEnv), EnvTask=1, and its listening socket, already bound to
// its address, as file descriptor 3 (EnvListenFD=3; see Listener). Unless
// GOMAXPROCS is set, each task gets as GOMAXPROCS the cores this process
// may use divided among the training tasks.
//
// No task outlives the run. When ctx is cancelled, every task gets SIGTERM,
// and SIGKILL if it still runs after cfg.StopGrace, and Run returns
// ctx.Err(). When a task fails (exits non-zero or is killed), every task is
// stopped in the same way and Run returns a *TaskError naming it, unless the
// failure is tolerated: a ps is restarted (cfg.RestartPS), a worker or the
// chief is restarted (cfg.RestartWorkers, cfg.RestartChief), a worker other
// than the chief is let go (cfg.TolerateWorkerLoss). On Linux the tasks also
// die with this process (SIGKILL), however it ends.
//
// The run ends when every training task has exited. The ps tasks are then
// given cfg.PSExitGrace to exit by themselves before they are stopped, and
// Run returns nil: the chief exited 0. A ps task that exits 0 while training
// goes on is not restarted (the chief told it to exit). Once the chief has
// exited 0, training is over: no task is restarted, a task that fails is
// named but does not fail the run, and the training tasks still running
// are stopped after cfg.EndGrace. The socket of a task that exited for
// good is closed at once, so that its peers' connections are refused
// rather than queued for no one.
//
// Run needs a Unix system: the listening sockets are passed as inherited
// file descriptors. It returns ErrInTask in a task of a local cluster.
func Run(ctx context.Context, cfg Config) error {
	if IsTask() {
		return ErrInTask
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("localcluster: finding this program to start its tasks: %w", err)
	}
	env, note := taskEnv(os.Environ(), cfg.Env, cfg.Jobs)
	env = append(env, metricsEnv(env)...) // a free loopback metrics port per task
	l := &launcher{
		cfg:   cfg,
		exe:   exe,
		env:   env,
		addrs: map[string][]string{},
		files: map[taskID]*os.File{},
		out:   &output{stdout: cfg.Stdout, stderr: cfg.Stderr},
		chief: taskID{"worker", 0},
		// Room for every process that can start, so that a process
		// exiting never waits for Run.
		exited: make(chan *proc, cfg.Jobs.PS*(1+cfg.MaxPSRestarts)+cfg.Jobs.training()*(1+cfg.MaxRestarts)+cfg.Jobs.Evaluator),
	}
	if cfg.Jobs.Chief > 0 {
		l.chief = taskID{"chief", 0}
	}
	defer l.closeFiles(func(taskID) bool { return true })
	if err := l.listen(); err != nil {
		return err
	}
	l.out.logf("%s%s", l.describe(), note)

	var procs []*proc
	for _, jc := range []jobCount{{"ps", cfg.Jobs.PS}, {"chief", cfg.Jobs.Chief}, {"worker", cfg.Jobs.Worker}, {cluster.EvaluatorJob, cfg.Jobs.Evaluator}} {
		for i := range jc.n {
			p, err := l.start(taskID{jc.job, i})
			if err != nil {
				l.stopAll(procs)
				return err
			}
			procs = append(procs, p)
		}
	}
	// The tasks hold their sockets now; those of the tasks that are to be
	// restarted when they die stay open here.
	l.closeFiles(func(id taskID) bool { return !l.restartable(id) })
	return l.supervise(ctx, procs)
}

// restartable reports whether task id is restarted when it fails (while it
// has restarts left).
func (l *launcher) restartable(id taskID) bool {
	switch {
	case id.job == "ps":
		return l.cfg.RestartPS
	case id == l.chief:
		return l.cfg.RestartChief
	}
	return l.cfg.RestartWorkers
}

// listen creates every task's listening socket on a free loopback port.
func (l *launcher) listen() error {
	for _, jc := range []jobCount{{"chief", l.cfg.Jobs.Chief}, {"ps", l.cfg.Jobs.PS}, {"worker", l.cfg.Jobs.Worker}} {
		for i := range jc.n {
			id := taskID{jc.job, i}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return fmt.Errorf("localcluster: listening on loopback for %s: %w", id, err)
			}
			f, err := ln.(*net.TCPListener).File()
			ln.Close() // f is a duplicate that keeps the socket open
			if err != nil {
				return fmt.Errorf("localcluster: passing the socket of %s: %w", id, err)
			}
			l.addrs[jc.job] = append(l.addrs[jc.job], ln.Addr().String())
			l.files[id] = f
		}
	}
	return nil
}

// closeFiles closes the sockets of the tasks for which which is true.
func (l *launcher) closeFiles(which func(taskID) bool) {
	for id, f := range l.files {
		if which(id) {
			f.Close()
			delete(l.files, id)
		}
	}
}

// describe names the cluster's jobs and addresses: "ps [a], worker [b c]".
func (l *launcher) describe() string {
	var parts []string
	for _, jc := range l.cfg.Jobs.counts() {
		switch {
		case jc.n > 0 && jc.job == cluster.EvaluatorJob: // no address
			parts = append(parts, fmt.Sprintf("%s=%d", jc.job, jc.n))
		case jc.n > 0:
			parts = append(parts, fmt.Sprintf("%s [%s]", jc.job, strings.Join(l.addrs[jc.job], " ")))
		}
	}
	return strings.Join(parts, ", ")
}

// tfConfig is TF_CONFIG for task id.
func (l *launcher) tfConfig(id taskID) string {
	type task struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	b, err := json.Marshal(struct {
		Cluster map[string][]string `json:"cluster"`
		Task    task                `json:"task"`
	}{l.addrs, task{id.job, id.index}})
	if err != nil {
		panic(err) // strings and ints always marshal
	}
	return string(b)
}

// taskEnv is the environment of a local cluster's tasks: environ without
// the variables Run sets per task, then extra, then GOMAXPROCS unless either
// sets it. note says what Run chose.
//
// GOMAXPROCS is the cores this process may use shared among the training
// tasks (as torchrun sets OMP_NUM_THREADS=1). Each task's kernels would
// otherwise split across every core, and their pools' idle workers, which
// poll for the next kernel before they sleep, would take turns with the
// other tasks' work on the same cores.
func taskEnv(environ, extra []string, jobs Jobs) (env []string, note string) {
	ours := []string{cluster.EnvVar, EnvTask, EnvListenFD}
	set := false
	for _, kv := range slices.Concat(environ, extra) {
		k, v, _ := strings.Cut(kv, "=")
		if slices.Contains(ours, k) {
			continue
		}
		if k == "GOMAXPROCS" {
			set = v != ""
		}
		env = append(env, kv)
	}
	if set {
		return env, ""
	}
	// GOMAXPROCS(0): the cores this process may use, CPU quotas included.
	cores := runtime.GOMAXPROCS(0)
	procs := max(1, cores/jobs.training())
	note = fmt.Sprintf("; each task uses %d of %d cores (set GOMAXPROCS to choose)", procs, cores)
	return append(env, "GOMAXPROCS="+strconv.Itoa(procs)), note
}

// start starts a process of task id. Its exit is sent to l.exited.
func (l *launcher) start(id taskID) (*proc, error) {
	cmd := exec.Command(l.exe, l.cfg.Args...)
	cmd.Env = append(slices.Clip(l.env), cluster.EnvVar+"="+l.tfConfig(id), EnvTask+"=1")
	if id.job != cluster.EvaluatorJob { // which serves nothing
		cmd.Env = append(cmd.Env, EnvListenFD+"=3")
		cmd.ExtraFiles = []*os.File{l.files[id]}
	}
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = pipeGrace
	p := &proc{id: id, cmd: cmd, done: make(chan struct{})}
	prefix := "[" + id.String() + "] "
	var stdout, stderr *lineWriter
	switch {
	case id == l.chief:
		stdout, stderr = l.out.passthrough(), l.out.prefixed(prefix)
	case id.job == cluster.EvaluatorJob:
		// Its evaluations, as the chief's progress, and its result go
		// with the log: the chief's result is the run's (the last line
		// of stdout, with --json). One writer, so one pipe: in order.
		stdout = l.out.prefixed(prefix)
		stderr = stdout
	case l.cfg.Verbose:
		stdout, stderr = l.out.prefixed(prefix), l.out.prefixed(prefix)
	default:
		p.tail = newTail(l.cfg.TailLines)
		stdout, stderr = toTail(p.tail), toTail(p.tail)
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("localcluster: starting %s: %w", id, err)
	}
	if l.cfg.Verbose {
		l.out.logf("started %s (pid %d)", id, cmd.Process.Pid)
	}
	go func() {
		err := cmd.Wait()
		if errors.Is(err, exec.ErrWaitDelay) {
			// It exited 0, but a process it started kept its output.
			err = nil
		}
		stdout.flush()
		stderr.flush()
		p.err = err
		close(p.done)
		l.exited <- p
	}()
	return p, nil
}

// supervise waits for the training tasks to end, handling failures, then
// for the ps tasks.
func (l *launcher) supervise(ctx context.Context, procs []*proc) error {
	interrupted := func() error {
		l.out.logf("interrupted; stopping every task")
		l.stopAll(procs)
		return ctx.Err()
	}
	sv := &supervision{restarts: map[taskID]int{}, training: l.cfg.Jobs.training()}
	for sv.training > 0 {
		var p *proc
		select {
		case <-ctx.Done():
			return interrupted()
		case <-sv.endGrace:
			sv.endGrace = nil
			l.stopLeftAfterEnd(procs, sv.ended)
			continue
		case p = <-l.exited:
		}
		p.handled = true
		if ctx.Err() != nil {
			// It may have died of the same Ctrl-C.
			return interrupted()
		}
		if p.id.job != "ps" && p.id.job != cluster.EvaluatorJob {
			sv.training--
		}
		if err := l.exitedDuringTraining(p, procs, sv); err != nil {
			return err
		}
	}
	return l.awaitServers(ctx, procs, interrupted)
}

// supervision is what supervise keeps while the training tasks run.
type supervision struct {
	restarts map[taskID]int
	// training counts the training tasks still running.
	training int
	// ended is when the chief exited 0; endGrace fires EndGrace after.
	ended    time.Time
	endGrace <-chan time.Time
}

// stopLeftAfterEnd stops the training tasks still running EndGrace after
// the chief ended training (their exits arrive in l.exited).
func (l *launcher) stopLeftAfterEnd(procs []*proc, ended time.Time) {
	var left []*proc
	for _, q := range procs {
		if !q.handled && q.id.job != "ps" {
			l.out.logf("%s still runs %v after the chief ended training; stopping it", q.id, time.Since(ended).Round(time.Millisecond))
			left = append(left, q)
		}
	}
	l.stopAll(left)
}

// exitedDuringTraining acts on the exit of p while training tasks run: an
// evaluator that failed is left out, a task that exited 0 is done, one
// that failed is restarted (within its restarts), left out (a worker the
// others go on without), or ends the run with its error, as one whose
// failure a restart would repeat (ExitPermanent) always does.
func (l *launcher) exitedDuringTraining(p *proc, procs []*proc, sv *supervision) error {
	switch {
	case p.id.job == cluster.EvaluatorJob && p.err != nil:
		l.out.logf("%s failed (%v); training goes on without it", p.id, p.err)
		l.showTail(p)
	case p.err == nil:
		// A ps exiting 0 was told to by the chief; no task that exits
		// 0 is restarted: refuse its peers' connections from now on.
		l.closeFiles(func(id taskID) bool { return id == p.id })
		if p.id == l.chief {
			sv.ended, sv.endGrace = time.Now(), time.After(l.cfg.EndGrace)
		}
	case !sv.ended.IsZero():
		l.out.logf("%s exited after the chief ended training (%v); not restarting it", p.id, p.err)
		l.showTail(p)
		l.closeFiles(func(id taskID) bool { return id == p.id })
	case permanent(p.err):
		l.out.logf("%s failed (%v) in its own input or computation, which a restart would repeat; stopping every task", p.id, p.err)
		l.showTail(p)
		l.stopAll(procs)
		return &TaskError{Job: p.id.job, Index: p.id.index, Err: p.err}
	case l.restartable(p.id) && sv.restarts[p.id] < l.maxRestarts(p.id):
		sv.restarts[p.id]++
		l.out.logf("%s died (%v); restarting it on its address (%d of %d)", p.id, p.err, sv.restarts[p.id], l.maxRestarts(p.id))
		l.showTail(p)
		np, err := l.start(p.id)
		if err != nil {
			l.stopAll(procs)
			return err
		}
		procs[slices.Index(procs, p)] = np
		if p.id.job != "ps" {
			sv.training++
		}
	case p.id != l.chief && p.id.job == "worker" && l.cfg.TolerateWorkerLoss:
		l.out.logf("%s failed (%v); the others go on", p.id, p.err)
		l.showTail(p)
		// Nothing will serve its address again: its peers' connections
		// are refused from now on rather than queued unanswered.
		l.closeFiles(func(id taskID) bool { return id == p.id })
	default:
		l.out.logf("%s failed (%v); stopping every task", p.id, p.err)
		l.showTail(p)
		l.stopAll(procs)
		return &TaskError{Job: p.id.job, Index: p.id.index, Err: p.err}
	}
	return nil
}

// awaitServers waits, once every training task has exited (the chief
// with 0), for the ps tasks, which exit when the chief tells them, and the
// evaluator, after the final checkpoint: a moment, then they are stopped.
func (l *launcher) awaitServers(ctx context.Context, procs []*proc, interrupted func() error) error {
	waiting, wait := 0, l.cfg.PSExitGrace
	for _, p := range procs {
		if !p.handled {
			waiting++
			if p.id.job == cluster.EvaluatorJob {
				wait = max(wait, l.cfg.EndGrace)
			}
		}
	}
	if waiting == 0 {
		return nil
	}
	grace := time.NewTimer(wait)
	defer grace.Stop()
	for waiting > 0 {
		select {
		case <-ctx.Done():
			return interrupted()
		case p := <-l.exited:
			p.handled = true
			waiting--
			if p.err != nil {
				l.out.logf("%s failed after training (%v)", p.id, p.err)
				l.showTail(p)
			}
		case <-grace.C:
			for _, p := range procs {
				if !p.handled {
					l.out.logf("%s did not exit within %v of the end of training; stopping it", p.id, wait)
				}
			}
			l.stopAll(procs)
			return nil
		}
	}
	return nil
}

// maxRestarts is how many times task id may be restarted.
func (l *launcher) maxRestarts(id taskID) int {
	if id.job == "ps" {
		return l.cfg.MaxPSRestarts
	}
	return l.cfg.MaxRestarts
}

// showTail shows the output kept of a process that failed.
func (l *launcher) showTail(p *proc) {
	if p.tail != nil {
		l.out.dumpTail(p.tail, "["+p.id.String()+"] ")
	}
}

// stopAll stops the processes still running: SIGTERM, then SIGKILL after
// the stop grace period. It returns when all have exited.
func (l *launcher) stopAll(procs []*proc) {
	var running []*proc
	for _, p := range procs {
		select {
		case <-p.done:
		default:
			running = append(running, p)
			if p.cmd.Process.Signal(syscall.SIGTERM) != nil {
				_ = p.cmd.Process.Kill() // no SIGTERM here (Windows)
			}
		}
	}
	grace := time.NewTimer(l.cfg.StopGrace)
	defer grace.Stop()
	for i, p := range running {
		select {
		case <-p.done:
		case <-grace.C:
			for _, q := range running[i:] {
				_ = q.cmd.Process.Kill()
			}
			for _, q := range running[i:] {
				<-q.done
			}
			return
		}
	}
}
