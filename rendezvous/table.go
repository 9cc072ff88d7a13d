package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/distflow/distflow/internal/stepctx"
	"github.com/distflow/distflow/placement"

	"github.com/distflow/distflow/tensor"
)

// DefaultCleanedSteps is how many cleaned-up step IDs a Table remembers, so
// that a late request for one of them fails at once instead of waiting.
const DefaultCleanedSteps = 4096

// MaxWaitingSteps bounds the steps that receives wait for before any
// partition of theirs has started on this task (Table.Recv): a peer's
// receive may race ahead of this task's RunGraph, but one that names steps
// that never run here must not make the task keep them.
const MaxWaitingSteps = 4096

// ErrTooManySteps is wrapped by the error of a receive for a step not
// started here when MaxWaitingSteps such steps already have receives
// waiting.
var ErrTooManySteps = errors.New("too many steps that have not started here have receives waiting")

// Table holds the rendezvous of every live step of one worker task. It is
// safe for concurrent use.
//
// A step is started by Get, which a partition of the step that runs here
// calls: its Local is kept until Cleanup. A receive for a step not started
// (Recv, RecvLent, RecvManyLent: a peer's RecvTensor that races ahead of
// this task's RunGraph) waits in the step's Local too, which Get then
// returns; but if the step does not start, the Local is forgotten once its
// last receive ends (its context's deadline), so that requests for steps
// that never run here leave nothing behind, and at most MaxWaitingSteps
// such steps wait at once. The IDs of the last DefaultCleanedSteps cleaned
// steps are remembered: for them, Get and the receives see a Local already
// aborted with ErrStepDone (or the step's abort reason), so a late Recv
// fails at once.
type Table struct {
	mu      sync.Mutex
	steps   map[int64]*Local       // started steps
	waiting map[int64]*waitingStep // steps not started, with receives waiting
	cleaned map[int64]error        // cleaned-up steps: their abort error, nil for a finished one
	ring    []int64                // cleaned IDs in cleanup order; ring[next] is the oldest once full
	next    int
}

// waitingStep is the Local of a step not started here, and the number of
// receives that wait on it.
type waitingStep struct {
	l *Local
	n int
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{steps: map[int64]*Local{}, waiting: map[int64]*waitingStep{}, cleaned: map[int64]error{}}
}

// Get returns the rendezvous of step stepID, which a partition that runs
// here starts: it creates it if needed, and keeps it until Cleanup. For a
// step already cleaned up it returns a rendezvous that fails every Send
// and Recv with the step's abort error, or ErrStepDone for a step that
// finished: a receive that comes late names why the step ended.
func (t *Table) Get(stepID int64) *Local {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l, ok := t.steps[stepID]; ok {
		return l
	}
	if w, ok := t.waiting[stepID]; ok { // receives came first
		delete(t.waiting, stepID)
		t.steps[stepID] = w.l
		return w.l
	}
	if l := t.cleanedLocked(stepID); l != nil {
		return l
	}
	l := NewLocal()
	t.steps[stepID] = l
	return l
}

// cleanedLocked returns an aborted rendezvous for a cleaned-up step, nil
// for another.
func (t *Table) cleanedLocked(stepID int64) *Local {
	abortErr, done := t.cleaned[stepID]
	if !done {
		return nil
	}
	l := NewLocal()
	if named, ok := abortErr.(stepAbort); ok {
		l.Abort(named.error)
	} else if abortErr != nil {
		l.Abort(fmt.Errorf("step %d: %w", stepID, abortErr))
	} else {
		l.abortDone(stepID)
	}
	return l
}

// receiver returns the rendezvous a receive of step stepID waits on, and
// the waiting entry to release (done) after it when the step has not
// started here.
func (t *Table) receiver(stepID int64) (*Local, *waitingStep, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l, ok := t.steps[stepID]; ok {
		return l, nil, nil
	}
	if w, ok := t.waiting[stepID]; ok {
		w.n++
		return w.l, w, nil
	}
	if l := t.cleanedLocked(stepID); l != nil {
		return l, nil, nil
	}
	if len(t.waiting) >= MaxWaitingSteps {
		return nil, nil, fmt.Errorf("rendezvous: step %d: %w (%d)", stepID, ErrTooManySteps, MaxWaitingSteps)
	}
	w := &waitingStep{l: NewLocal(), n: 1}
	t.waiting[stepID] = w
	return w.l, w, nil
}

// done ends a receive on w: the step's Local is forgotten with its last
// receive unless the step started meanwhile (Get) or was cleaned up.
func (t *Table) done(stepID int64, w *waitingStep) {
	if w == nil {
		return
	}
	t.mu.Lock()
	if w.n--; w.n == 0 && t.waiting[stepID] == w {
		delete(t.waiting, stepID)
	}
	t.mu.Unlock()
}

// Recv is Local.Recv on step stepID's rendezvous (see Table for a step not
// started here).
func (t *Table) Recv(ctx context.Context, stepID int64, key string) (*tensor.Tensor, error) {
	l, w, err := t.receiver(stepID)
	if err != nil {
		return nil, err
	}
	defer t.done(stepID, w)
	return l.Recv(ctx, key)
}

// RecvLent is Local.RecvLent on step stepID's rendezvous.
func (t *Table) RecvLent(ctx context.Context, stepID int64, key string) (*tensor.Tensor, func(), error) {
	l, w, err := t.receiver(stepID)
	if err != nil {
		return nil, nil, err
	}
	defer t.done(stepID, w)
	return l.RecvLent(ctx, key)
}

// RecvManyLent is Local.RecvManyLent on step stepID's rendezvous.
func (t *Table) RecvManyLent(ctx context.Context, stepID int64, keys []string, got func([]Lent)) error {
	l, w, err := t.receiver(stepID)
	if err != nil {
		return err
	}
	defer t.done(stepID, w)
	return l.RecvManyLent(ctx, keys, got)
}

// Abort fails step stepID's rendezvous with err (a partition of the step
// failed here): its waiting receives return err, and so do later ones. A
// started step keeps its rendezvous until Cleanup; one not started here
// (a RunGraph that failed before its step began) is cleaned up at once,
// its reason remembered as Cleanup remembers it, so that failed requests
// leave no more behind than DefaultCleanedSteps reasons.
func (t *Table) Abort(stepID int64, err error) {
	t.mu.Lock()
	if l, ok := t.steps[stepID]; ok {
		t.mu.Unlock()
		l.Abort(err)
		return
	}
	w := t.waiting[stepID]
	delete(t.waiting, stepID)
	if _, done := t.cleaned[stepID]; !done {
		t.rememberLocked(stepID, stepAbort{err})
	}
	t.mu.Unlock()
	if w != nil {
		w.l.Abort(err)
	}
}

// stepAbort is the reason Abort remembers for a step, which names the step
// itself (Abort's callers' errors do).
type stepAbort struct{ error }

func (e stepAbort) Unwrap() error { return e.error }

// Cleanup ends step stepID: its rendezvous is aborted with abortErr (a failed
// step), or with ErrStepDone if abortErr is nil (a finished step, where
// nothing should still wait), and forgotten. Waiters return at once.
// Cleaning a step never seen, or twice, is allowed.
func (t *Table) Cleanup(stepID int64, abortErr error) {
	t.mu.Lock()
	l := t.steps[stepID]
	delete(t.steps, stepID)
	if w := t.waiting[stepID]; w != nil {
		l = w.l
		delete(t.waiting, stepID)
	}
	t.rememberLocked(stepID, abortErr)
	t.mu.Unlock()
	if l == nil {
		return
	}
	if abortErr == nil {
		l.abortDone(stepID)
		return
	}
	l.Abort(fmt.Errorf("step %d: %w", stepID, abortErr))
}

// stepDone is the abort error of a finished step's rendezvous ("rendezvous
// aborted: step N: step already cleaned up"), wrapping ErrAborted and
// ErrStepDone. Every step makes one, so it is formatted only when read, and
// kept in its Local (Local.abortDone) as a *stepDone.
type stepDone int64

func (e *stepDone) Error() string {
	return ErrAborted.Error() + ": step " + strconv.FormatInt(int64(*e), 10) + ": " + ErrStepDone.Error()
}

func (e *stepDone) Unwrap() []error { return []error{ErrAborted, ErrStepDone} }

// Is answers errors.Is without Unwrap's allocation.
func (e *stepDone) Is(target error) bool { return target == ErrAborted || target == ErrStepDone }

// CleanupIfIdle cleans up step stepID, as Cleanup without an error does,
// if its rendezvous holds nothing (every tensor sent was received, no
// Recv waits), and reports whether the step is now cleaned up. A step
// whose every partition here has finished is then over on this task.
func (t *Table) CleanupIfIdle(stepID int64) bool {
	t.mu.Lock()
	l := t.steps[stepID]
	if l != nil && l.Pending() > 0 {
		t.mu.Unlock()
		return false
	}
	delete(t.steps, stepID)
	t.rememberLocked(stepID, nil)
	t.mu.Unlock()
	if l != nil {
		l.abortDone(stepID)
	}
	return true
}

// rememberLocked records that step stepID was cleaned up, with its abort
// error (nil: finished); the first cleanup's counts.
func (t *Table) rememberLocked(stepID int64, abortErr error) {
	if _, ok := t.cleaned[stepID]; ok {
		return
	}
	t.cleaned[stepID] = abortErr
	if len(t.ring) < DefaultCleanedSteps {
		t.ring = append(t.ring, stepID)
		return
	}
	delete(t.cleaned, t.ring[t.next])
	t.ring[t.next] = stepID
	t.next = (t.next + 1) % len(t.ring)
}

// Len returns the number of live steps: those started here, and those
// that receives wait for.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.steps) + len(t.waiting)
}

// Fetcher receives, for a Router, the tensors other tasks send.
type Fetcher interface {
	// Fetch receives key from sendTask ("/job:ps/task:0"). ctx ends when
	// the Recv's does or the step's rendezvous is aborted. own reports
	// that no one else holds t (it was decoded off the wire), so that the
	// receiving step may overwrite it (see OwnReceiver).
	Fetch(ctx context.Context, sendTask, key string) (t *tensor.Tensor, own bool, err error)
}

// fetchFunc is the Fetcher of NewRouter's fetch function, whose tensors
// are not known to be the receiver's own.
type fetchFunc func(ctx context.Context, sendTask, key string) (*tensor.Tensor, error)

func (f fetchFunc) Fetch(ctx context.Context, sendTask, key string) (*tensor.Tensor, bool, error) {
	t, err := f(ctx, sendTask, key)
	return t, false, err
}

// Router is the Rendezvous of NewRouter, as a type, so that a worker can
// keep it in its step's state rather than allocate it apart. Its zero
// value is not usable: Init it.
type Router struct {
	local *Local
	task  string
	fetch Fetcher // nil: every Recv is local

	// The step's Recvs share one context for their fetches, a child of
	// the first one's (the step's) also ended when local is aborted: one
	// context and abort function per step, not per Recv, kept here.
	mu       sync.Mutex
	parent   context.Context // ctx of the first remote Recv; nil before
	fetchCtx stepctx.Context // parent's child, also ended by local's abort
	cancel   abortFunc       // ends fetchCtx, registered with local
}

var (
	_ Lender      = (*Router)(nil)
	_ OwnReceiver = (*Router)(nil)
)

// NewRouter returns the rendezvous a worker hands to one step's kernels.
// Send leaves the tensor in local, where a peer's RecvTensor finds it. Recv
// takes the tensor from local when the key's send device is on task (this
// worker, "/job:worker/task:1"), and otherwise calls fetch with the sending
// task's name. A fetch is cancelled when local is aborted, so an aborted step
// stops waiting for peers too. A nil fetch makes every Recv local (all tasks
// in one process).
func NewRouter(local *Local, task string, fetch func(ctx context.Context, sendTask, key string) (*tensor.Tensor, error)) Rendezvous {
	r := &Router{}
	if fetch != nil {
		r.Init(local, task, fetchFunc(fetch))
	} else {
		r.Init(local, task, nil)
	}
	return r
}

// Init makes r, unused until now, the router NewRouter would return, with
// fetch (nil: every Recv is local) receiving from other tasks. A Router
// serves one step: the rendezvous of a later step needs a new one.
func (r *Router) Init(local *Local, task string, fetch Fetcher) {
	r.local, r.task, r.fetch = local, task, fetch
}

// Close ends r's step once its kernels have returned: its Local no longer
// ends r's fetch context when aborted. It reports whether the Local is
// done with r, so that r's storage may serve another step (as a zero
// Router, Init again); false means that the Local's abort is calling
// into r, or has.
func (r *Router) Close() bool {
	r.mu.Lock()
	watched := r.parent != nil
	r.mu.Unlock()
	return !watched || r.local.stopAbort(&r.cancel)
}

func (r *Router) Send(key string, t *tensor.Tensor) error { return r.local.Send(key, t) }

func (r *Router) SendLent(key string, t *tensor.Tensor, release func()) error {
	return r.local.SendLent(key, t, release)
}

func (r *Router) Recv(ctx context.Context, key string) (*tensor.Tensor, error) {
	t, _, err := r.RecvOwn(ctx, key)
	return t, err
}

// RecvOwn is Recv that also reports whether the tensor is the step's own
// (OwnReceiver): one its Fetcher says it decoded off the wire. A tensor
// sent on this task is the sender's.
func (r *Router) RecvOwn(ctx context.Context, key string) (*tensor.Tensor, bool, error) {
	sendDev, _, _, err := ParseKey(key)
	if err != nil {
		return nil, false, err
	}
	dev, err := placement.ParseDevice(sendDev)
	if err != nil {
		return nil, false, fmt.Errorf("rendezvous: recv %q: %w", key, err)
	}
	sendTask := dev.TaskNameFrom(sendDev)
	if sendTask == "" {
		return nil, false, fmt.Errorf("rendezvous: recv %q: device %q names no job and task", key, sendDev)
	}
	if sendTask == r.task || r.fetch == nil {
		t, err := r.local.Recv(ctx, key)
		return t, false, err
	}
	if err := r.local.Err(); err != nil {
		return nil, false, fmt.Errorf("rendezvous: recv %q from %s: %w", key, sendTask, err)
	}
	ctx, done := r.fetchContext(ctx)
	if done != nil {
		defer done()
	}
	t, own, err := r.fetch.Fetch(ctx, sendTask, key)
	if err != nil {
		if aerr := r.local.Err(); aerr != nil {
			return nil, false, fmt.Errorf("rendezvous: recv %q from %s: %w", key, sendTask, aerr)
		}
		return nil, false, fmt.Errorf("rendezvous: recv %q from %s: %w", key, sendTask, err)
	}
	return t, own, nil
}

// fetchContext returns ctx, ended also by the step's abort, for a fetch,
// and the function to call after the fetch, if any. The step's context
// (the first one seen, whose type must be a pointer so that comparing it
// cannot panic) gets one shared derived context, cancelled when the step
// ends: by local's abort, or as ctx's child when ctx is cancelled. Any
// other ctx gets its own, for the fetch only.
func (r *Router) fetchContext(ctx context.Context) (context.Context, func()) {
	r.mu.Lock()
	if r.parent == nil && ctx != nil && reflect.TypeOf(ctx).Kind() == reflect.Pointer {
		r.parent = ctx
		r.fetchCtx.Init(ctx, time.Time{})
		r.cancel.ctx = &r.fetchCtx
		r.local.addAbort(&r.cancel)
	}
	if r.parent != nil && ctx == r.parent {
		r.mu.Unlock()
		return &r.fetchCtx, nil
	}
	r.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	a := r.local.afterAbort(cancel)
	return ctx, func() {
		r.local.stopAbort(a)
		cancel()
	}
}
