package stepctx

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distflow/distflow/internal/race"
)

// ended waits for c's end, failing the test after a long while.
func ended(t *testing.T, c context.Context) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the context did not end")
	}
}

func TestDeadline(t *testing.T) {
	tests := []struct {
		name    string
		parent  func() (context.Context, context.CancelFunc)
		in      time.Duration // the deadline given to Init, from now
		want    time.Duration // c's deadline, from now
		wantErr error
	}{
		{"own", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, 20 * time.Millisecond, 20 * time.Millisecond, context.DeadlineExceeded},
		{"before the parent's", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Hour)
		}, 20 * time.Millisecond, 20 * time.Millisecond, context.DeadlineExceeded},
		{"after the parent's", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, time.Hour, 20 * time.Millisecond, context.DeadlineExceeded},
		{"after a Context parent's", func() (context.Context, context.CancelFunc) {
			p := New(context.Background(), time.Now().Add(20*time.Millisecond))
			return p, func() { p.Cancel(nil) }
		}, time.Hour, 20 * time.Millisecond, context.DeadlineExceeded},
		{"past", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, -time.Second, -time.Second, context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancel := tc.parent()
			defer cancel()
			now := time.Now()
			c := New(parent, now.Add(tc.in))
			d, ok := c.Deadline()
			// A parent's deadline was set a moment before now: within a
			// second, on a loaded machine (the others are an hour).
			if !ok || d.Sub(now.Add(tc.want)).Abs() > time.Second {
				t.Errorf("Deadline() = %v, %t; want about %v", d.Sub(now), ok, tc.want)
			}
			ended(t, c)
			if err := c.Err(); err != tc.wantErr {
				t.Errorf("Err() = %v, want %v", err, tc.wantErr)
			}
			if err := c.Cause(); err != tc.wantErr {
				t.Errorf("Cause() = %v, want %v", err, tc.wantErr)
			}
			if tc.in > 0 && tc.in < time.Hour && c.timer != nil {
				t.Error("a Context ended keeps its timer")
			}
		})
	}
}

func TestNoDeadline(t *testing.T) {
	c := New(context.Background(), time.Time{})
	if d, ok := c.Deadline(); ok {
		t.Errorf("Deadline() = %v, true; want none", d)
	}
	if c.Err() != nil || c.Cause() != nil {
		t.Errorf("a live Context: Err() = %v, Cause() = %v", c.Err(), c.Cause())
	}
	select {
	case <-c.Done():
		t.Fatal("a live Context is done")
	default:
	}
}

func TestCancel(t *testing.T) {
	cause := errors.New("the step failed")
	for _, tc := range []struct {
		name      string
		cause     error
		wantCause error
	}{
		{"with a cause", cause, cause},
		{"without", nil, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(context.Background(), time.Now().Add(time.Hour))
			c.Cancel(tc.cause)
			c.Cancel(errors.New("later: ignored"))
			ended(t, c)
			if err := c.Err(); err != context.Canceled {
				t.Errorf("Err() = %v, want context.Canceled", err)
			}
			if err := c.Cause(); err != tc.wantCause {
				t.Errorf("Cause() = %v, want %v", err, tc.wantCause)
			}
			if err := context.Cause(c); err != context.Canceled {
				t.Errorf("context.Cause = %v, want its Err", err)
			}
		})
	}
}

// TestParent checks that a Context ends with its parent, whatever the
// parent, with the parent's error and cause.
func TestParent(t *testing.T) {
	cause := errors.New("the parent's cause")
	tests := []struct {
		name      string
		parent    func() (context.Context, func())
		wantCause error
	}{
		{"standard", func() (context.Context, func()) {
			p, cancel := context.WithCancelCause(context.Background())
			return p, func() { cancel(cause) }
		}, cause},
		{"Context", func() (context.Context, func()) {
			p := New(context.Background(), time.Time{})
			return p, func() { p.Cancel(cause) }
		}, cause},
		{"Context with values", func() (context.Context, func()) {
			p := New(context.Background(), time.Time{})
			return context.WithValue(context.WithValue(p, "a", 1), "b", 2), func() { p.Cancel(cause) }
		}, cause},
		{"other", func() (context.Context, func()) {
			p := &otherCtx{Context: context.Background(), done: make(chan struct{})}
			return p, func() { p.cancel(cause) }
		}, context.Canceled}, // no cause that context.Cause knows
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, already := range []bool{false, true} {
				parent, cancel := tc.parent()
				if already {
					cancel()
				}
				c := New(parent, time.Time{})
				grand := New(c, time.Time{})
				if !already {
					if c.Err() != nil {
						t.Fatal("a Context ended with a live parent")
					}
					cancel()
				}
				ended(t, c)
				ended(t, grand)
				if err := c.Err(); err != context.Canceled {
					t.Errorf("already %t: Err() = %v, want context.Canceled", already, err)
				}
				if err := c.Cause(); err != tc.wantCause {
					t.Errorf("already %t: Cause() = %v, want %v", already, err, tc.wantCause)
				}
				if err := grand.Cause(); err != tc.wantCause {
					t.Errorf("already %t: a grandchild's Cause() = %v, want %v", already, err, tc.wantCause)
				}
			}
		})
	}
}

// otherCtx is a cancellable context of neither kind.
type otherCtx struct {
	context.Context
	once  sync.Once
	done  chan struct{}
	err   atomic.Value
	cause error
}

func (c *otherCtx) cancel(cause error) {
	c.once.Do(func() { c.cause = cause; c.err.Store(context.Canceled); close(c.done) })
}
func (c *otherCtx) Done() <-chan struct{} { return c.done }
func (c *otherCtx) Err() error {
	err, _ := c.err.Load().(error)
	return err
}

func TestValue(t *testing.T) {
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	c := New(parent, time.Time{})
	if got := c.Value(key{}); got != "v" {
		t.Errorf("Value = %v, want the parent's", got)
	}
	if got, ok := Of(context.WithValue(c, "k", 1)); !ok || got != c {
		t.Errorf("Of(a value over c) = %v, %t; want c", got, ok)
	}
	std, cancel := context.WithCancel(c)
	defer cancel()
	if _, ok := Of(context.WithValue(std, "k", 1)); ok {
		t.Error("Of found a Context under a standard cancellable one")
	}
}

// TestChildLetsGo checks that a child that ends before its parent is no
// longer held by it: a connection's Context outlives its requests' by far.
func TestChildLetsGo(t *testing.T) {
	p := New(context.Background(), time.Time{})
	for range 3 {
		c := New(context.WithValue(p, "k", 1), time.Now().Add(time.Hour))
		c.Cancel(nil)
	}
	c := New(p, time.Time{})
	var h Hook
	p.Watch(&h, func() {})
	if !p.Unwatch(&h) {
		t.Error("Unwatch of a live watch = false")
	}
	c.Cancel(nil)
	std, cancel := context.WithCancel(p)
	cancel()
	_ = std
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hooks != nil {
		t.Error("a parent holds children that ended")
	}
}

func TestWatch(t *testing.T) {
	c := New(context.Background(), time.Time{})
	var stopped, called Hook
	var n atomic.Int32
	c.Watch(&stopped, func() { t.Error("an unwatched function was called") })
	c.Watch(&called, func() { n.Add(1) })
	if !c.Unwatch(&stopped) {
		t.Error("Unwatch before the end = false")
	}
	c.Cancel(nil)
	if n.Load() != 1 {
		t.Errorf("the watching function ran %d times by the end of Cancel, want 1", n.Load())
	}
	if c.Unwatch(&called) {
		t.Error("Unwatch after the function ran = true")
	}
	// Reused, on an ended Context: called at once.
	c.Watch(&called, func() { n.Add(1) })
	if n.Load() != 2 {
		t.Error("Watch of an ended Context did not call its function at once")
	}
}

// counter is a Waker that counts its wakes.
type counter struct{ n atomic.Int32 }

func (c *counter) Wake() { c.n.Add(1) }

func TestWatchWaker(t *testing.T) {
	c := New(context.Background(), time.Time{})
	var stopped, called, woken Hook
	var w, w2 counter
	c.WatchWaker(&stopped, &w)
	c.WatchWaker(&called, &w)
	c.WatchWaker(&woken, &w2)
	if !c.Unwatch(&stopped) {
		t.Error("Unwatch before the end = false")
	}
	c.Cancel(nil)
	if w.n.Load() != 1 || w2.n.Load() != 1 {
		t.Errorf("the Wakers were woken %d and %d times by the end of Cancel, want 1 each", w.n.Load(), w2.n.Load())
	}
	// Reused, on an ended Context: woken at once.
	c.WatchWaker(&called, &w)
	if w.n.Load() != 2 {
		t.Error("WatchWaker of an ended Context did not wake at once")
	}
	// A Hook that served a Waker serves a function as well.
	ran := false
	c.Watch(&called, func() { ran = true })
	if !ran || w.n.Load() != 2 {
		t.Error("Watch of a Hook that served WatchWaker did not call its function alone")
	}
}

// TestAfterFunc checks the standard library's use of the AfterFunc
// method: context.AfterFunc and standard children.
func TestAfterFunc(t *testing.T) {
	c := New(context.Background(), time.Time{})
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	stop := context.AfterFunc(c, func() { t.Error("a stopped function ran") })
	if !stop() {
		t.Error("stop before the end = false")
	}
	child, cancel := context.WithCancel(c)
	defer cancel()
	timed, cancelTimed := context.WithTimeout(c, time.Hour)
	defer cancelTimed()
	c.Cancel(errors.New("done"))
	<-ran
	ended(t, child)
	ended(t, timed)
	if child.Err() != context.Canceled {
		t.Errorf("a standard child's Err() = %v, want context.Canceled", child.Err())
	}
	if stop() {
		t.Error("stop after the end = true")
	}
	late := make(chan struct{})
	if stop := c.AfterFunc(func() { close(late) }); stop() {
		t.Error("stop of a function registered after the end = true")
	}
	<-late
}

func TestAllocations(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts do not hold under the race detector")
	}
	conn := New(context.Background(), time.Time{})
	parent := context.WithValue(conn, "k", 1)
	_ = parent.Done() // made once, as a connection's is
	const runs = 100
	states := make([]struct{ req, step, fetch Context }, runs+1)
	var h Hook
	f := func() {}
	var wake counter
	i := 0
	n := testing.AllocsPerRun(runs, func() {
		s := &states[i]
		i++
		s.req.Init(parent, time.Now().Add(time.Minute)) // a request's, under a connection's
		s.step.Init(&s.req, time.Time{})
		s.fetch.Init(&s.step, time.Time{})
		s.step.Watch(&h, f)
		s.step.Unwatch(&h)
		s.fetch.WatchWaker(&h, &wake)
		s.fetch.Unwatch(&h)
		s.req.Cancel(nil)
	})
	if n != 0 {
		t.Errorf("a request's, a step's and a fetch's Contexts made %.1f allocations, want 0", n)
	}
	for i := range states {
		if states[i].fetch.Err() != context.Canceled {
			t.Fatal("a grandchild did not end with its grandparent")
		}
	}
}

// TestConcurrent ends Contexts from several sides at once, for the race
// detector.
func TestConcurrent(t *testing.T) {
	for range 200 {
		parent := New(context.Background(), time.Time{})
		c := New(parent, time.Now().Add(time.Duration(1+len(t.Name())%3)*time.Millisecond))
		child, cancel := context.WithCancel(c)
		var wg sync.WaitGroup
		var hooks [4]Hook
		var woken counter
		for i := range hooks {
			wg.Go(func() {
				if i%2 == 0 {
					c.Watch(&hooks[i], func() {})
				} else {
					c.WatchWaker(&hooks[i], &woken)
				}
				c.Unwatch(&hooks[i])
			})
		}
		wg.Go(func() { c.Cancel(errors.New("a")) })
		wg.Go(func() { parent.Cancel(errors.New("b")) })
		wg.Go(func() { _ = c.Err(); _ = c.Cause(); <-c.Done() })
		wg.Go(cancel)
		wg.Wait()
		ended(t, c)
		ended(t, child)
		if err := c.Err(); err != context.Canceled && err != context.DeadlineExceeded {
			t.Fatalf("Err() = %v", err)
		}
	}
}
