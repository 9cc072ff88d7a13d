package stepctx

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Context is a context.Context that ends when its parent does, at its
// deadline, or when Cancel is called, whichever comes first. Its zero
// value is not usable: Init it once. It is then safe for concurrent use,
// and may be kept after it ended (its Err stays set) but not Init again:
// whatever holds it may still read it.
//
// Its Cause method says why it was cancelled: context.Cause, which knows
// only the standard contexts' causes, reports its Err (or the cause of a
// standard ancestor that ended too).
type Context struct {
	parent context.Context
	// deadline is the Context's own, before the parent's; zero when it
	// has none (Deadline is then the parent's).
	deadline time.Time

	mu    sync.Mutex
	done  chan struct{} // made by the first Done, or closedChan
	err   error         // set once, when the Context ends
	cause error
	hooks *Hook      // registered functions and children, a list
	timer *timerSlot // arms the deadline; nil when it has none or it ended

	// How the Context hears of its parent's end: a Context parent calls
	// parentHook; another parent calls the function context.AfterFunc
	// returned stopParent for.
	parentCtx  *Context
	parentHook Hook
	stopParent func() bool
}

// Hook is a function registered with Watch: its storage, which the
// caller provides so that watching allocates nothing. A Hook serves one
// Watch at a time; it may serve another once Unwatch returned true, or
// once its function has returned.
type Hook struct {
	f     func()
	w     Waker    // instead of f: see WatchWaker
	child *Context // instead of f: a child to cancel
	owner *Context // the Context it is registered with; nil when not
	prev  *Hook
	next  *Hook
}

// ctxKey is the key under which a Context gives itself (Value), so that a
// child finds it through the wrappers of context.WithValue.
var ctxKey byte

// closedChan is the Done channel of a Context that ended before anyone
// asked for it.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// New returns a new Context: Init of a new one.
func New(parent context.Context, deadline time.Time) *Context {
	c := new(Context)
	c.Init(parent, deadline)
	return c
}

// Init makes c, unused until now, a child of parent ending at deadline (the
// zero time: no deadline of its own). A deadline at or after the parent's
// needs no timer: the parent's ends c then, with the same error, as
// context.WithDeadline would. A deadline past ends c at once with
// context.DeadlineExceeded.
func (c *Context) Init(parent context.Context, deadline time.Time) {
	if parent == nil {
		panic("stepctx: Init with a nil parent context")
	}
	c.parent = parent
	if !deadline.IsZero() {
		if pd, ok := parent.Deadline(); !ok || deadline.Before(pd) {
			c.deadline = deadline
		}
	}
	c.propagate()
	if c.deadline.IsZero() {
		return
	}
	d := time.Until(c.deadline)
	if d <= 0 {
		c.end(context.DeadlineExceeded, nil)
		return
	}
	c.mu.Lock()
	if c.err == nil {
		c.timer = armTimer(c, d)
	}
	c.mu.Unlock()
}

// propagate arranges for c to end when its parent does.
func (c *Context) propagate() {
	parent := c.parent
	if p, ok := parent.(*Context); ok {
		c.parentCtx = p
		p.watchChild(c)
		return
	}
	done := parent.Done()
	if done == nil {
		return // never ends
	}
	select {
	case <-done:
		c.end(parent.Err(), causeOf(parent))
		return
	default:
	}
	if p, ok := parent.Value(&ctxKey).(*Context); ok && p.Done() == done {
		c.parentCtx = p // through values only: p's end is parent's
		p.watchChild(c)
		return
	}
	stop := context.AfterFunc(parent, c.parentEnded)
	c.mu.Lock()
	if c.err == nil {
		c.stopParent = stop
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	stop() // ended meanwhile: its end already let go of the parent
}

// parentEnded ends c with its parent's error and cause.
func (c *Context) parentEnded() {
	if p := c.parentCtx; p != nil {
		err, cause := p.errCause()
		c.end(err, cause)
		return
	}
	c.end(c.parent.Err(), context.Cause(c.parent))
}

// causeOf is context.Cause of ctx, which may be a Context with values.
func causeOf(ctx context.Context) error {
	if c, ok := Of(ctx); ok {
		return c.Cause()
	}
	return context.Cause(ctx)
}

// Cancel ends c, if it has not ended yet, with context.Canceled and
// cause (nil: context.Canceled) as its cause, as a
// context.CancelCauseFunc does. It does not wait for the functions that
// watch c to return if another call is running them.
func (c *Context) Cancel(cause error) { c.end(context.Canceled, cause) }

// end ends c with err, unless it has ended, and then runs its hooks (its
// children's cancellation among them) on this goroutine, one at a time.
func (c *Context) end(err, cause error) {
	if cause == nil {
		cause = err
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err, c.cause = err, cause
	if c.done == nil {
		c.done = closedChan
	} else {
		close(c.done)
	}
	t := c.timer
	c.timer = nil
	stop := c.stopParent
	c.stopParent = nil
	c.mu.Unlock()
	if t != nil {
		t.disarm()
	}
	for {
		c.mu.Lock()
		h := c.hooks
		if h == nil {
			c.mu.Unlock()
			break
		}
		c.unlinkLocked(h)
		f, w, child := h.f, h.w, h.child
		c.mu.Unlock()
		switch {
		case child != nil:
			child.end(err, cause)
		case w != nil:
			w.Wake()
		default:
			f()
		}
	}
	// Let go of the parent, which may outlive c by far.
	if p := c.parentCtx; p != nil {
		p.Unwatch(&c.parentHook)
	}
	if stop != nil {
		stop()
	}
}

// Deadline returns c's deadline: its own, or its parent's.
func (c *Context) Deadline() (time.Time, bool) {
	if !c.deadline.IsZero() {
		return c.deadline, true
	}
	return c.parent.Deadline()
}

// Done returns a channel closed when c ends.
func (c *Context) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

// Err returns nil while c lasts; then context.Canceled (Cancel),
// context.DeadlineExceeded (its deadline) or its parent's Err.
func (c *Context) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Cause returns nil while c lasts; then the cause given to Cancel, or its
// parent's cause (see context.Cause), or else Err.
func (c *Context) Cause() error {
	_, cause := c.errCause()
	return cause
}

func (c *Context) errCause() (error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err, c.cause
}

// Value returns the parent's value for key.
func (c *Context) Value(key any) any {
	if key == &ctxKey {
		return c
	}
	return c.parent.Value(key)
}

// String names c for debugging, as the standard contexts do.
func (c *Context) String() string { return "stepctx.Context" }

// Of returns the Context that ctx is, or that it wraps with values only
// (its end is the Context's), if any.
func Of(ctx context.Context) (*Context, bool) {
	if c, ok := ctx.(*Context); ok {
		return c, true
	}
	c, ok := ctx.Value(&ctxKey).(*Context)
	if !ok || ctx.Done() != c.Done() {
		return nil, false
	}
	return c, true
}

// Watch arranges for f to be called when c ends (at once, on this
// goroutine, if it has), until Unwatch(h) is called: on the goroutine
// that ends c, which must not hold a lock that f takes. It is
// context.AfterFunc without a goroutine or an allocation.
func (c *Context) Watch(h *Hook, f func()) {
	h.f, h.w, h.child = f, nil, nil
	if !c.add(h) {
		f()
	}
}

// Waker is told by WatchWaker that a Context ended. Its Wake runs on the
// goroutine that ends the Context, which may hold locks of its own: it
// must not block, nor take a lock that its watcher holds while it ends
// the Context.
type Waker interface{ Wake() }

// WatchWaker is Watch of w.Wake: a pointer that the caller already has
// becomes a Waker without an allocation, where
// the func value of a method or a closure is one. It is how a waiter that
// blocks on something of its own (a channel, a WaitGroup) also wakes when
// c ends, without selecting on Done, which makes a channel.
func (c *Context) WatchWaker(h *Hook, w Waker) {
	h.f, h.w, h.child = nil, w, nil
	if !c.add(h) {
		w.Wake()
	}
}

// watchChild arranges for child to end when c does, with c's error.
func (c *Context) watchChild(child *Context) {
	h := &child.parentHook
	h.f, h.w, h.child = nil, nil, child
	if !c.add(h) {
		err, cause := c.errCause()
		child.end(err, cause)
	}
}

// add registers h unless c has ended, and reports whether it did.
func (c *Context) add(h *Hook) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	if h.owner != nil {
		panic("stepctx: Watch with a Hook already in use")
	}
	h.owner, h.prev, h.next = c, nil, c.hooks
	if c.hooks != nil {
		c.hooks.prev = h
	}
	c.hooks = h
	return true
}

// Unwatch undoes Watch: it reports whether it stopped h's function from
// being called. False means that it was called, or is being called.
func (c *Context) Unwatch(h *Hook) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.owner != c {
		return false
	}
	c.unlinkLocked(h)
	return true
}

func (c *Context) unlinkLocked(h *Hook) {
	if h.prev != nil {
		h.prev.next = h.next
	} else {
		c.hooks = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	}
	h.owner, h.prev, h.next = nil, nil, nil
}

// AfterFunc arranges for f to be called after c ends, as
// context.AfterFunc does, which calls it (and so do the standard children
// of c, to hear of its end without a goroutine of their own). f runs on
// the goroutine that ends c, or on its own if c had ended already; stop
// reports whether it stopped f from being called.
func (c *Context) AfterFunc(f func()) (stop func() bool) {
	h := &Hook{f: f}
	if !c.add(h) {
		// Its own goroutine: the standard library calls AfterFunc
		// with a lock held that f takes.
		go f()
		return func() bool { return false }
	}
	return func() bool { return c.Unwatch(h) }
}

// timerSlot is a timer that ends a Context at its deadline, kept for
// later Contexts when it did not fire: time.AfterFunc costs two
// allocations (the timer and its function).
type timerSlot struct {
	t   *time.Timer
	ctx atomic.Pointer[Context]
}

var timers sync.Pool // of *timerSlot, stopped before they fired

// armTimer returns a timer that ends c in d.
func armTimer(c *Context, d time.Duration) *timerSlot {
	s, _ := timers.Get().(*timerSlot)
	if s == nil {
		s = new(timerSlot)
		s.ctx.Store(c)
		s.t = time.AfterFunc(d, s.fire)
		return s
	}
	s.ctx.Store(c)
	s.t.Reset(d)
	return s
}

func (s *timerSlot) fire() {
	if c := s.ctx.Load(); c != nil {
		c.end(context.DeadlineExceeded, nil)
	}
}

// disarm stops s, and keeps it for another Context if it had not fired:
// a timer stopped before it fired never runs its function.
func (s *timerSlot) disarm() {
	if s.t.Stop() {
		s.ctx.Store(nil)
		timers.Put(s)
	}
}
