package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/internal/race"
	"github.com/distflow/distflow/internal/stepctx"
	"github.com/distflow/distflow/tensor"
)

func TestKeyRoundTrip(t *testing.T) {
	tests := []struct {
		send, recv, name string
		want             string
	}{
		{"/job:ps/task:0/cpu:0", "/job:worker/task:1/cpu:0", "w:0", "/job:ps/task:0/cpu:0;/job:worker/task:1/cpu:0;w:0"},
		{"/job:a/task:0/cpu:0", "/job:a/task:1/cpu:0", "^scope/init", "/job:a/task:0/cpu:0;/job:a/task:1/cpu:0;^scope/init"},
	}
	for _, tt := range tests {
		k := Key(tt.send, tt.recv, tt.name)
		if k != tt.want {
			t.Errorf("Key = %q, want %q", k, tt.want)
		}
		s, r, n, err := ParseKey(k)
		if err != nil || s != tt.send || r != tt.recv || n != tt.name {
			t.Errorf("ParseKey(%q) = %q, %q, %q, %v", k, s, r, n, err)
		}
	}
}

// TestParseKeyAllocs: a remote Recv parses its key at every step.
func TestParseKeyAllocs(t *testing.T) {
	key := Key("/job:ps/task:0/cpu:0", "/job:worker/task:1/cpu:0", "a;b")
	if n := testing.AllocsPerRun(100, func() {
		if s, _, name, err := ParseKey(key); err != nil || s != "/job:ps/task:0/cpu:0" || name != "a;b" {
			t.Fatal(s, name, err)
		}
	}); n != 0 {
		t.Errorf("ParseKey: %v allocations, want 0", n)
	}
}

func TestParseKeyErrors(t *testing.T) {
	for _, key := range []string{"", "a", "a;b", ";b;c", "a;;c", "a;b;"} {
		_, _, _, err := ParseKey(key)
		if err == nil {
			t.Errorf("ParseKey(%q): no error", key)
			continue
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", key)) {
			t.Errorf("ParseKey(%q): error %q does not name the key", key, err)
		}
	}
}

func TestLocalSendRecv(t *testing.T) {
	ctx := context.Background()
	a, b := tensor.Scalar(float32(1)), tensor.Scalar(float32(2))
	tests := []struct {
		name string
		run  func(l *Local) error
	}{
		{"send then recv", func(l *Local) error {
			if err := l.Send("k", a); err != nil {
				return err
			}
			got, err := l.Recv(ctx, "k")
			if err != nil || got != a {
				return fmt.Errorf("got %v, %v; want the sent tensor itself", got, err)
			}
			return nil
		}},
		{"recv then send", func(l *Local) error {
			ch := make(chan *tensor.Tensor)
			go func() { got, _ := l.Recv(ctx, "k"); ch <- got }()
			// The receiver may or may not wait yet; both orders must work.
			if err := l.Send("k", a); err != nil {
				return err
			}
			if got := <-ch; got != a {
				return fmt.Errorf("got %v", got)
			}
			return nil
		}},
		{"duplicate send", func(l *Local) error {
			if err := l.Send("k", a); err != nil {
				return err
			}
			if err := l.Send("k", b); !errors.Is(err, ErrDuplicateSend) {
				return fmt.Errorf("second send: %v, want ErrDuplicateSend", err)
			}
			return nil
		}},
		{"key reusable after exchange", func(l *Local) error {
			for _, x := range []*tensor.Tensor{a, b} {
				if err := l.Send("k", x); err != nil {
					return err
				}
				if got, err := l.Recv(ctx, "k"); err != nil || got != x {
					return fmt.Errorf("got %v, %v", got, err)
				}
			}
			if l.Pending() != 0 {
				return fmt.Errorf("pending %d, want 0", l.Pending())
			}
			return nil
		}},
		{"keys are independent", func(l *Local) error {
			_ = l.Send("x", a)
			_ = l.Send("y", b)
			gy, _ := l.Recv(ctx, "y")
			gx, _ := l.Recv(ctx, "x")
			if gx != a || gy != b {
				return fmt.Errorf("mixed up keys")
			}
			return nil
		}},
		{"abort then send and recv fail", func(l *Local) error {
			_ = l.Send("k", a)
			reason := errors.New("worker 3 died")
			l.Abort(reason)
			if err := l.Send("j", a); !errors.Is(err, ErrAborted) || !errors.Is(err, reason) {
				return fmt.Errorf("send after abort: %v", err)
			}
			if _, err := l.Recv(ctx, "k"); !errors.Is(err, ErrAborted) || !errors.Is(err, reason) {
				return fmt.Errorf("recv after abort: %v", err)
			}
			l.Abort(errors.New("second")) // ignored
			if !errors.Is(l.Err(), reason) {
				return fmt.Errorf("Err = %v", l.Err())
			}
			return nil
		}},
		{"abort with nil reason", func(l *Local) error {
			l.Abort(nil)
			if _, err := l.Recv(ctx, "k"); !errors.Is(err, ErrAborted) {
				return fmt.Errorf("recv: %v", err)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(NewLocal()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDone: Done is closed by Abort, whether asked for before or after.
func TestDone(t *testing.T) {
	before, after := NewLocal(), NewLocal()
	done := before.Done()
	select {
	case <-done:
		t.Fatal("Done is closed before Abort")
	default:
	}
	before.Abort(nil)
	after.Abort(nil)
	for _, c := range []<-chan struct{}{done, before.Done(), after.Done()} {
		select {
		case <-c:
		default:
			t.Error("Done is not closed after Abort")
		}
	}
}

func TestAbortWakesWaiters(t *testing.T) {
	l := NewLocal()
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := l.Recv(context.Background(), fmt.Sprintf("k%d", i))
			errs <- err
		}()
	}
	waitFor(t, "receivers to wait", func() bool { return l.Pending() == n })
	reason := errors.New("step failed on /job:worker/task:1")
	l.Abort(reason)
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrAborted) || !errors.Is(err, reason) {
				t.Errorf("waiter error %v does not wrap ErrAborted and the reason", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not woken by Abort")
		}
	}
}

func TestRecvDeadline(t *testing.T) {
	l := NewLocal()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := l.Recv(ctx, "never")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Recv returned after %v", d)
	}
	if l.Pending() != 0 {
		t.Errorf("the timed-out receiver left %d entries", l.Pending())
	}
	// The key still works afterwards.
	x := tensor.Scalar(int32(7))
	_ = l.Send("never", x)
	if got, err := l.Recv(context.Background(), "never"); err != nil || got != x {
		t.Errorf("after timeout: %v, %v", got, err)
	}
}

func TestSecondReceiverFails(t *testing.T) {
	l := NewLocal()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _, _ = l.Recv(ctx, "k"); close(done) }()
	waitFor(t, "first receiver", func() bool { return l.Pending() == 1 })
	if _, err := l.Recv(ctx, "k"); err == nil {
		t.Error("second receiver of one key: no error")
	}
	cancel()
	<-done
}

func TestConcurrentSendRecv(t *testing.T) {
	l := NewLocal()
	const n = 200
	var wg sync.WaitGroup
	got := make([]*tensor.Tensor, n)
	want := make([]*tensor.Tensor, n)
	for i := range n {
		want[i] = tensor.Scalar(int32(i))
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := l.Send(fmt.Sprintf("t%d:0", i), want[i]); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			v, err := l.Recv(context.Background(), fmt.Sprintf("t%d:0", i))
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		}()
	}
	wg.Wait()
	for i := range n {
		if got[i] != want[i] {
			t.Fatalf("key %d: got %v, want %v", i, got[i], want[i])
		}
	}
	if l.Pending() != 0 {
		t.Errorf("pending %d after all exchanges", l.Pending())
	}
}

func TestTable(t *testing.T) {
	tab := NewTable()
	ctx := context.Background()
	l1 := tab.Get(1)
	if tab.Get(1) != l1 {
		t.Fatal("Get(1) twice returned different rendezvous")
	}
	if tab.Get(2) == l1 {
		t.Fatal("steps 1 and 2 share a rendezvous")
	}
	x := tensor.Scalar(float32(3))
	if err := l1.Send("k", x); err != nil {
		t.Fatal(err)
	}
	if got, err := tab.Get(1).Recv(ctx, "k"); err != nil || got != x {
		t.Fatalf("Recv = %v, %v", got, err)
	}

	// A waiter of step 2 is woken by a failing cleanup, with the reason.
	errc := make(chan error, 1)
	go func() { _, err := tab.Get(2).Recv(ctx, "k"); errc <- err }()
	waitFor(t, "the receiver", func() bool { return tab.Get(2).Pending() == 1 })
	reason := errors.New("task /job:ps/task:0 unreachable")
	tab.Cleanup(2, reason)
	if err := <-errc; !errors.Is(err, reason) || !errors.Is(err, ErrAborted) {
		t.Errorf("waiter: %v", err)
	}
	// A Recv that comes after the failing cleanup, in a step seen or
	// not, fails at once with the reason too.
	tab.Cleanup(98, reason)
	for _, step := range []int64{2, 98} {
		if _, err := tab.Get(step).Recv(ctx, "late"); !errors.Is(err, reason) || !errors.Is(err, ErrAborted) || errors.Is(err, ErrStepDone) {
			t.Errorf("late recv of failed step %d: %v, want the reason", step, err)
		}
	}

	// A late Recv of a cleaned step fails at once with ErrStepDone.
	tab.Cleanup(1, nil)
	start := time.Now()
	_, err := tab.Get(1).Recv(ctx, "late")
	const want = `rendezvous: recv "late": rendezvous aborted: step 1: step already cleaned up`
	if !errors.Is(err, ErrStepDone) || !errors.Is(err, ErrAborted) || err.Error() != want {
		t.Errorf("late recv: %v, want %s (ErrStepDone, ErrAborted)", err, want)
	}
	if time.Since(start) > time.Second {
		t.Error("late recv waited")
	}
	if tab.Len() != 0 {
		t.Errorf("Len = %d after cleaning every step", tab.Len())
	}
	// Cleaning a step never seen is fine, and remembered.
	tab.Cleanup(99, nil)
	if _, err := tab.Get(99).Recv(ctx, "k"); !errors.Is(err, ErrStepDone) {
		t.Errorf("recv of step cleaned before use: %v", err)
	}
}

// TestTableCleanupIfIdle: a step is cleaned up by CleanupIfIdle only when
// nothing in it is pending; then, as after Cleanup, a late Recv fails.
func TestTableCleanupIfIdle(t *testing.T) {
	tab := NewTable()
	ctx := context.Background()
	if err := tab.Get(1).Send("k", tensor.Scalar(float32(1))); err != nil {
		t.Fatal(err)
	}
	if tab.CleanupIfIdle(1) {
		t.Fatal("CleanupIfIdle cleaned up a step with a tensor not received")
	}
	if _, err := tab.Get(1).Recv(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if !tab.CleanupIfIdle(1) {
		t.Fatal("CleanupIfIdle left an idle step")
	}
	if _, err := tab.Get(1).Recv(ctx, "late"); !errors.Is(err, ErrStepDone) {
		t.Errorf("late recv: %v, want ErrStepDone", err)
	}
	if tab.Len() != 0 {
		t.Errorf("Len = %d, want 0", tab.Len())
	}
}

func TestTableForgetsOldSteps(t *testing.T) {
	tab := NewTable()
	for id := range int64(DefaultCleanedSteps + 10) {
		tab.Cleanup(id, nil)
	}
	if len(tab.cleaned) != DefaultCleanedSteps {
		t.Errorf("remembers %d steps, want %d", len(tab.cleaned), DefaultCleanedSteps)
	}
	if err := tab.Get(0).Err(); err != nil {
		t.Errorf("the oldest step is still remembered: %v", err)
	}
	if err := tab.Get(DefaultCleanedSteps + 9).Err(); !errors.Is(err, ErrStepDone) {
		t.Errorf("the newest cleaned step: %v", err)
	}
}

func TestRouter(t *testing.T) {
	const (
		ps     = "/job:ps/task:0/cpu:0"
		worker = "/job:worker/task:0/cpu:0"
	)
	remote := tensor.Scalar(float32(5))
	type call struct{ task, key string }
	tests := []struct {
		name      string
		key       string
		fetchErr  error
		wantFetch *call
		wantErr   bool
	}{
		{"local key", Key(worker, worker, "a:0"), nil, nil, false},
		{"remote key", Key(ps, worker, "w:0"), nil, &call{"/job:ps/task:0", Key(ps, worker, "w:0")}, false},
		{"long device form", Key("/job:ps/replica:0/task:0/device:CPU:0", worker, "w:0"), nil,
			&call{"/job:ps/task:0", Key("/job:ps/replica:0/task:0/device:CPU:0", worker, "w:0")}, false},
		{"fetch fails", Key(ps, worker, "w:0"), errors.New("connection refused"), &call{"/job:ps/task:0", Key(ps, worker, "w:0")}, true},
		{"malformed key", "nonsense", nil, nil, true},
		{"device without task", Key("/cpu:0", worker, "w:0"), nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			local := NewLocal()
			var got *call
			r := NewRouter(local, "/job:worker/task:0", func(ctx context.Context, task, key string) (*tensor.Tensor, error) {
				got = &call{task, key}
				return remote, tt.fetchErr
			})
			own := tensor.Scalar(float32(1))
			if tt.wantFetch == nil && !tt.wantErr {
				if err := r.Send(tt.key, own); err != nil {
					t.Fatal(err)
				}
			}
			v, err := r.Recv(context.Background(), tt.key)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.wantFetch) {
				t.Errorf("fetch call %v, want %v", got, tt.wantFetch)
			}
			if err == nil && tt.wantFetch == nil && v != own {
				t.Errorf("local recv returned %v", v)
			}
			if err == nil && tt.wantFetch != nil && v != remote {
				t.Errorf("remote recv returned %v", v)
			}
		})
	}
}

// TestRouterAbortCancelsFetch: aborting a step ends its waiting fetches
// at once, with errors naming the key, the task and the reason, whether
// they share the step's fetch context (the step's ctx, after an earlier
// Recv made it) or have their own (another ctx).
func TestRouterAbortCancelsFetch(t *testing.T) {
	const (
		worker = "/job:worker/task:0/cpu:0"
		ps     = "/job:ps/task:0/cpu:0"
	)
	stepCtx, cancelStep := context.WithCancel(context.Background())
	defer cancelStep()
	local := NewLocal()
	started := make(chan struct{}, 3)
	r := NewRouter(local, "/job:worker/task:0", func(ctx context.Context, task, key string) (*tensor.Tensor, error) {
		if strings.HasSuffix(key, "early:0") {
			return tensor.Scalar(float32(1)), nil
		}
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if _, err := r.Recv(stepCtx, Key(ps, worker, "early:0")); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 3)
	for _, c := range []struct {
		ctx  context.Context
		name string
	}{{stepCtx, "a:0"}, {stepCtx, "b:0"}, {context.Background(), "c:0"}} {
		go func() {
			_, err := r.Recv(c.ctx, Key(ps, worker, c.name))
			if err != nil && !strings.Contains(err.Error(), c.name) {
				err = fmt.Errorf("the error does not name the key: %w", err)
			}
			errc <- err
		}()
	}
	for range 3 {
		<-started
	}
	reason := errors.New("step cancelled")
	local.Abort(reason)
	for range 3 {
		select {
		case err := <-errc:
			if !errors.Is(err, reason) || !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "/job:ps/task:0") {
				t.Errorf("err = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("abort did not cancel the remote fetches")
		}
	}
	if stepCtx.Err() != nil {
		t.Error("the step's abort cancelled the caller's context")
	}
}

// TestRouterAbortWatch: remote Recvs watch the step's abort without a
// goroutine of their own: those with the step's ctx share one watch, made
// once, which the abort ends; another ctx's watch ends with its Recv.
// A watch made on an aborted rendezvous fires at once.
func TestRouterAbortWatch(t *testing.T) {
	local := NewLocal()
	var fetchCtx context.Context
	x := tensor.Scalar(float32(1))
	r := NewRouter(local, "/job:worker/task:0", func(ctx context.Context, task, key string) (*tensor.Tensor, error) {
		fetchCtx = ctx
		return x, nil
	})
	key := Key("/job:ps/task:0/cpu:0", "/job:worker/task:0/cpu:0", "w:0")
	watches := func() int {
		local.mu.Lock()
		defer local.mu.Unlock()
		return len(local.onAbort)
	}
	for range 100 {
		if _, err := r.Recv(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
	if n := watches(); n != 0 {
		t.Errorf("%d abort watches left after the Recvs of another ctx, want 0", n)
	}
	stepCtx, cancelStep := context.WithCancel(context.Background())
	defer cancelStep()
	for range 100 {
		if _, err := r.Recv(stepCtx, key); err != nil {
			t.Fatal(err)
		}
	}
	if n := watches(); n != 1 {
		t.Errorf("%d abort watches after the Recvs of the step's ctx, want 1", n)
	}
	if fetchCtx.Err() != nil {
		t.Fatal("the step's fetch context ended with a Recv")
	}
	if n := testing.AllocsPerRun(100, func() { r.Recv(stepCtx, key) }); n != 0 {
		t.Errorf("a remote Recv with the step's ctx: %v allocations, want 0", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := local.afterAbort(cancel)
	local.Abort(errors.New("step cancelled"))
	if ctx.Err() == nil || fetchCtx.Err() == nil {
		t.Error("Abort did not call the watches")
	}
	local.stopAbort(a) // after the fact: harmless
	fired := false
	local.afterAbort(func() { fired = true })
	if !fired {
		t.Error("a watch made on an aborted rendezvous did not fire at once")
	}
}

// BenchmarkSendRecv measures one exchange on one goroutine (the tensor is
// sent first) and between two goroutines (the handoff latency, including the
// goroutine wake-ups).
func BenchmarkSendRecv(b *testing.B) {
	x := tensor.Scalar(float32(1))
	key := Key("/job:ps/task:0/cpu:0", "/job:worker/task:0/cpu:0", "w:0")
	ctx := context.Background()
	b.Run("sent-first", func(b *testing.B) {
		l := NewLocal()
		for b.Loop() {
			_ = l.Send(key, x)
			_, _ = l.Recv(ctx, key)
		}
	})
	b.Run("cross-goroutine", func(b *testing.B) {
		l := NewLocal()
		ready := make(chan struct{})
		done := make(chan struct{})
		go func() {
			for range ready {
				_, _ = l.Recv(ctx, key)
				done <- struct{}{}
			}
		}()
		for b.Loop() {
			ready <- struct{}{}
			_ = l.Send(key, x)
			<-done
		}
		close(ready)
	})
}

// TestTableConcurrentSteps runs many steps at once: senders and receivers of
// each step race with each other and with the cleanup of earlier steps.
func TestTableConcurrentSteps(t *testing.T) {
	tab := NewTable()
	const steps, keys = 16, 50
	var wg sync.WaitGroup
	for step := range int64(steps) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inner sync.WaitGroup
			for k := range keys {
				key := Key("/job:ps/task:0/cpu:0", "/job:worker/task:0/cpu:0", fmt.Sprintf("t%d:0", k))
				x := tensor.Scalar(int32(k))
				inner.Add(2)
				go func() {
					defer inner.Done()
					if err := tab.Get(step).Send(key, x); err != nil {
						t.Error(err)
					}
				}()
				go func() {
					defer inner.Done()
					got, err := tab.Get(step).Recv(context.Background(), key)
					if err != nil || got != x {
						t.Errorf("step %d key %s: %v, %v", step, key, got, err)
					}
				}()
			}
			inner.Wait()
			tab.Cleanup(step, nil)
			if _, err := tab.Get(step).Recv(context.Background(), "late"); !errors.Is(err, ErrStepDone) {
				t.Errorf("step %d: late recv: %v", step, err)
			}
		}()
	}
	wg.Wait()
	if tab.Len() != 0 {
		t.Errorf("%d steps left", tab.Len())
	}
}

// TestSendLent: the release function of a lent tensor reaches a receiver
// that takes it with RecvLent, whether it waited or not, and only that one;
// a tensor sent with Send comes with a release that does nothing.
func TestSendLent(t *testing.T) {
	ctx := context.Background()
	l := NewLocal()
	released := 0
	x := tensor.Scalar(float32(1))

	if err := l.SendLent("a", x, func() { released++ }); err != nil {
		t.Fatal(err)
	}
	got, release, err := l.RecvLent(ctx, "a")
	if err != nil || got != x {
		t.Fatalf("RecvLent = %v, %v; want the sent tensor", got, err)
	}
	if released != 0 {
		t.Fatal("released before the receiver said so")
	}
	release()
	if released != 1 {
		t.Fatalf("release ran %d times, want 1", released)
	}

	done := make(chan func())
	go func() {
		_, release, err := l.RecvLent(ctx, "b") // before or after the send
		if err != nil {
			t.Error(err)
		}
		done <- release
	}()
	if err := l.SendLent("b", x, func() { released += 10 }); err != nil {
		t.Fatal(err)
	}
	(<-done)()
	if released != 11 {
		t.Fatalf("released = %d after the second receiver's release, want 11", released)
	}

	// Recv does not hand the release over: the lender's share is kept.
	if err := l.SendLent("c", x, func() { t.Error("released through Recv") }); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Recv(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	// Send's tensors come with a release that does nothing.
	if err := l.Send("d", x); err != nil {
		t.Fatal(err)
	}
	_, release, err = l.RecvLent(ctx, "d")
	if err != nil || release == nil {
		t.Fatalf("RecvLent of a sent tensor: err %v, or no release function", err)
	}
	release()
}

// TestRecvManyLent: one waiter receives several keys, those sent before
// it at once and the others as they come, each once with its index; an
// abort ends it with the keys not received.
func TestRecvManyLent(t *testing.T) {
	l := NewLocal()
	ctx := context.Background()
	if err := l.Send("a", tensor.Scalar(float32(1))); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		l.Send("c", tensor.Scalar(float32(3)))
		time.Sleep(10 * time.Millisecond)
		l.Send("b", tensor.Scalar(float32(2)))
	}()
	got := map[int]float32{}
	calls := 0
	if err := l.RecvManyLent(ctx, []string{"a", "b", "c"}, func(ready []Lent) {
		calls++
		for _, r := range ready {
			if _, dup := got[r.Index]; dup {
				t.Errorf("key %d delivered twice", r.Index)
			}
			got[r.Index] = r.T.Float32s()[0]
			r.Release()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if got[0] != 1 || got[1] != 2 || got[2] != 3 || calls < 2 {
		t.Errorf("got %v in %d calls, want a=1 b=2 c=3 in 2 or 3", got, calls)
	}
	if l.Pending() != 0 {
		t.Errorf("%d pending after the batch", l.Pending())
	}
	go func() { time.Sleep(10 * time.Millisecond); l.Abort(errors.New("peer lost")) }()
	err := l.RecvManyLent(ctx, []string{"x", "y"}, func([]Lent) { t.Error("nothing was sent") })
	if !errors.Is(err, ErrAborted) {
		t.Errorf("aborted batch: %v, want ErrAborted", err)
	}
}

// TestRecvManyLentContext: a batch ends when its context does, a
// stepctx.Context (watched, not selected on) as a standard one, with the
// keys received until then delivered and the others not waited for any
// more.
func TestRecvManyLentContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, func())
		want error
	}{
		{"stepctx cancelled", func() (context.Context, func()) {
			c := stepctx.New(context.Background(), time.Time{})
			return c, func() { c.Cancel(nil) }
		}, context.Canceled},
		{"stepctx deadline", func() (context.Context, func()) {
			c := stepctx.New(context.Background(), time.Now().Add(20*time.Millisecond))
			return c, func() {}
		}, context.DeadlineExceeded},
		{"stepctx parent cancelled", func() (context.Context, func()) {
			p, cancel := context.WithCancel(context.Background())
			return stepctx.New(p, time.Time{}), cancel
		}, context.Canceled},
		{"standard cancelled", func() (context.Context, func()) {
			return context.WithCancel(context.Background())
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLocal()
			ctx, end := tc.ctx()
			defer end()
			if err := l.Send("a", tensor.Scalar(float32(1))); err != nil {
				t.Fatal(err)
			}
			var got []int
			errc := make(chan error, 1)
			go func() {
				errc <- l.RecvManyLent(ctx, []string{"a", "b"}, func(ready []Lent) {
					for _, r := range ready {
						got = append(got, r.Index)
					}
				})
			}()
			// End the context once b waits, unless a deadline ended it
			// first (a slow machine): either way the batch must give up.
			var err error
			for wait := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				if l.Pending() >= 1 {
					end()
					err = <-errc
					break
				}
				select {
				case err = <-errc:
				default:
					if time.Now().After(wait) {
						t.Fatal("RecvManyLent neither waited for b nor returned")
					}
					continue
				}
				break
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("RecvManyLent = %v, want %v", err, tc.want)
			}
			if len(got) != 1 || got[0] != 0 {
				t.Errorf("delivered %v, want [0]", got)
			}
			if l.Pending() != 0 {
				t.Errorf("%d pending after the batch gave up", l.Pending())
			}
			if err := l.Send("b", tensor.Scalar(float32(2))); err != nil {
				t.Errorf("a Send after the batch gave up: %v", err)
			}
		})
	}
}

// TestRecvManyLentAllocs: a batch of a few keys takes one allocation for
// its buffers, and its waiter is woken by Abort through its own channel,
// without the Local's abort channel.
func TestRecvManyLentAllocs(t *testing.T) {
	l := NewLocal()
	ctx := context.Background()
	x := tensor.Scalar(float32(1))
	keys := []string{"a", "b"}
	got := func([]Lent) {}
	n := testing.AllocsPerRun(100, func() {
		l.Send("a", x)
		l.Send("b", x)
		if err := l.RecvManyLent(ctx, keys, got); err != nil {
			t.Fatal(err)
		}
	})
	if n > 3 && !race.Enabled {
		t.Errorf("%v allocations for two Sends and a RecvManyLent of them, want 3 (the two sent items, the batch's buffers)", n)
	}
	errc := make(chan error, 1)
	go func() { errc <- l.RecvManyLent(ctx, keys, got) }()
	for wait := time.Now().Add(10 * time.Second); l.Pending() < len(keys); time.Sleep(time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("RecvManyLent registered %d of %d receivers in 10 s", l.Pending(), len(keys))
		}
	}
	l.mu.Lock()
	made := l.aborted != nil
	l.mu.Unlock()
	if made {
		t.Error("a waiting RecvManyLent made the Local's abort channel")
	}
	reason := errors.New("peer lost")
	l.Abort(reason)
	select {
	case err := <-errc:
		if !errors.Is(err, ErrAborted) || !errors.Is(err, reason) {
			t.Errorf("aborted batch: %v, want ErrAborted and the reason", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Abort did not wake RecvManyLent")
	}
}

// TestItemTable: the table agrees with a map through puts and deletes,
// within its array (4 keys) and after it spills out of it (13).
func TestItemTable(t *testing.T) {
	for _, keys := range []int{4, 13} {
		var tab itemTable
		want := map[string]*localItem{}
		for i := range 200 {
			key := fmt.Sprint(i * 7 % keys)
			if _, ok := want[key]; ok && i%3 != 0 {
				tab.delete(key)
				delete(want, key)
			} else if !ok {
				it := &localItem{}
				tab.put(key, it)
				want[key] = it
			}
			if tab.len() != len(want) {
				t.Fatalf("%d keys, step %d: len %d, want %d", keys, i, tab.len(), len(want))
			}
			for k := range keys {
				key := fmt.Sprint(k)
				got, ok := tab.get(key)
				if w, wok := want[key]; got != w || ok != wok {
					t.Fatalf("%d keys, step %d: get(%q) = %p, %v; want %p, %v", keys, i, key, got, ok, w, wok)
				}
			}
		}
		if spilled := tab.big != nil; spilled != (keys > len(tab.small)) {
			t.Errorf("%d keys: spilled %v", keys, spilled)
		}
	}
}
