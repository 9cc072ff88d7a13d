package rendezvous

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/distflow/distflow/tensor"
)

// TestTableWaitingSteps: a receive may wait for a step that has not
// started here, and gets its tensor once it does; a receive for a step
// that never starts leaves nothing behind once its context ends.
func TestTableWaitingSteps(t *testing.T) {
	tab := NewTable()
	x := tensor.Scalar(float32(3))

	// The receive races ahead of the step's partition.
	got := make(chan error, 1)
	go func() {
		v, err := tab.Recv(context.Background(), 7, "k")
		if err == nil && v != x {
			err = errors.New("another tensor")
		}
		got <- err
	}()
	waitFor(t, "the receive", func() bool { return tab.Len() == 1 && tab.pendingItems() == 1 })
	if err := tab.Get(7).Send("k", x); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("receive before the step started: %v", err)
	}
	if tab.Len() != 1 {
		t.Fatalf("Len = %d; want the started step", tab.Len())
	}
	tab.Cleanup(7, nil)

	// Requests for steps that never start: nothing stays.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for step := range int64(10_000) {
		if _, err := tab.Recv(ctx, 1000+step, "k"); !errors.Is(err, context.Canceled) {
			t.Fatalf("receive of step %d with a cancelled context: %v", 1000+step, err)
		}
		if _, _, err := tab.RecvLent(ctx, 1000+step, "k"); !errors.Is(err, context.Canceled) {
			t.Fatalf("lend of step %d with a cancelled context: %v", 1000+step, err)
		}
		if err := tab.RecvManyLent(ctx, 1000+step, []string{"k"}, func([]Lent) {}); !errors.Is(err, context.Canceled) {
			t.Fatalf("lend of many of step %d with a cancelled context: %v", 1000+step, err)
		}
	}
	if n := tab.Len(); n != 0 {
		t.Errorf("%d steps kept after receives for steps that never ran", n)
	}
}

// pendingItems sums the pending items of every live step (for tests).
func (t *Table) pendingItems() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, l := range t.steps {
		n += l.Pending()
	}
	for _, w := range t.waiting {
		n += w.l.Pending()
	}
	return n
}

// TestTableWaitingStepsBounded: at most MaxWaitingSteps steps not started
// here have receives waiting; one more is refused at once.
func TestTableWaitingStepsBounded(t *testing.T) {
	tab := NewTable()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for step := range int64(MaxWaitingSteps) {
		wg.Go(func() { tab.Recv(ctx, step, "k") })
	}
	waitFor(t, "the receives", func() bool { return tab.Len() == MaxWaitingSteps })
	if _, err := tab.Recv(context.Background(), MaxWaitingSteps, "k"); !errors.Is(err, ErrTooManySteps) {
		t.Errorf("receive for one more step: %v; want ErrTooManySteps", err)
	}
	// A step that started is not held to the bound.
	if err := tab.Get(1<<40).Send("k", tensor.Scalar(float32(1))); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Recv(context.Background(), 1<<40, "k"); err != nil {
		t.Errorf("receive for a started step: %v", err)
	}
	cancel()
	wg.Wait()
	if n := tab.Len(); n != 1 {
		t.Errorf("Len = %d after the receives ended; want the started step alone", n)
	}
}

// TestTableAbortNotStarted: a step that fails here before it starts wakes
// its receives, fails later ones with the reason, and is not kept; the
// reasons kept are bounded.
func TestTableAbortNotStarted(t *testing.T) {
	tab := NewTable()
	errc := make(chan error, 1)
	go func() { _, err := tab.Recv(context.Background(), 5, "k"); errc <- err }()
	waitFor(t, "the receive", func() bool { return tab.Len() == 1 && tab.pendingItems() == 1 })
	reason := errors.New("graph g not found")
	tab.Abort(5, reason)
	if err := <-errc; !errors.Is(err, reason) || !errors.Is(err, ErrAborted) {
		t.Errorf("waiting receive: %v; want the reason", err)
	}
	if _, err := tab.Recv(context.Background(), 5, "late"); !errors.Is(err, reason) {
		t.Errorf("late receive: %v; want the reason", err)
	}
	if _, err := tab.Get(5).Recv(context.Background(), "late"); !errors.Is(err, reason) {
		t.Errorf("a partition of the failed step: %v; want the reason", err)
	}
	if n := tab.Len(); n != 0 {
		t.Errorf("Len = %d after the abort of a step not started", n)
	}
	for step := range int64(3 * DefaultCleanedSteps) {
		tab.Abort(100+step, reason)
	}
	if n := tab.Len(); n != 0 || len(tab.cleaned) > DefaultCleanedSteps {
		t.Errorf("after aborts of steps never started: %d live steps, %d reasons kept; want 0 and at most %d", n, len(tab.cleaned), DefaultCleanedSteps)
	}
	// A started step keeps its rendezvous, aborted, until Cleanup.
	l := tab.Get(1)
	tab.Abort(1, reason)
	if tab.Get(1) != l || !errors.Is(l.Err(), reason) {
		t.Errorf("abort of a started step: kept %v, err %v", tab.Get(1) == l, l.Err())
	}
}

// BenchmarkTableRecv is a peer's receive of a started step's tensor, the
// worker's RecvTensor: through Table.Recv, and as the worker did it before
// (Get, then Local.Recv), for comparison.
func BenchmarkTableRecv(b *testing.B) {
	x := tensor.Scalar(float32(1))
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		recv func(tab *Table, step int64) error
	}{
		{"Table.Recv", func(tab *Table, step int64) error { _, err := tab.Recv(ctx, step, "k"); return err }},
		{"Get.Recv", func(tab *Table, step int64) error { _, err := tab.Get(step).Recv(ctx, "k"); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tab := NewTable()
			for step := range int64(64) { // a few live steps, as on a ps
				tab.Get(step)
			}
			l := tab.Get(7)
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Send("k", x); err != nil {
					b.Fatal(err)
				}
				if err := bc.recv(tab, 7); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTableAbortReason: a late receive of a step that failed before it
// started gets Abort's error as it is: it names the step already.
func TestTableAbortReason(t *testing.T) {
	tab := NewTable()
	tab.Abort(9, errors.New("worker: step 9: graph g not found"))
	_, err := tab.Recv(context.Background(), 9, "k")
	const want = `rendezvous: recv "k": rendezvous aborted: worker: step 9: graph g not found`
	if err == nil || err.Error() != want {
		t.Errorf("late receive: %v; want %s", err, want)
	}
}
