package estimator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
)

// TestRingDoesNotWaitOutTheStepDeadlineForAMemberThatLeft: ranks 0 and 1
// of an all-reduce ring of 3 (real servers on loopback) are killed and,
// once rank 2 has found them down (their ports refused), started again on
// their addresses: rank 0 leads again and sends its first view. Rank 2's
// connections to them keep the refusal for the backoff that follows (a
// second or more), so its exchange of steps in that view failed at once,
// and its notice that the view failed, sent once, failed the same way:
// ranks 0 and 1 waited for its part until their step deadline (30 s
// here), every time. The ring must go on at once instead: the steps
// after each restart follow well within the step deadline.
func TestRingDoesNotWaitOutTheStepDeadlineForAMemberThatLeft(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts two ranks of a ring of 3, twice")
	}
	const stepTimeout = 30 * time.Second
	c := newElasticCluster(t, map[string]int{"worker": 3}, estimator.RunConfig{
		Strategy: estimator.AllReduce{}, StepTimeout: stepTimeout, WaitTimeout: 40 * time.Second, LostAfter: time.Second,
		LogEverySteps: 10, StepDelay: 5 * time.Millisecond,
	})
	rank := func(i int) cluster.TaskID { return cluster.TaskID{Job: "worker", Index: i} }
	const steps, rounds = 5000, 2
	at := make(chan int64, 1)
	survivor := &stepTimes{onStep: func(gs int64) {
		select {
		case at <- gs:
		default:
		}
	}}
	for i := range 2 {
		c.start(rank(i), steps)
	}
	c.start(rank(2), steps, survivor)
	// waitStep waits for rank 2 to train past step gs, within d.
	waitStep := func(gs int64, d time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		timeout := time.NewTimer(d)
		defer timeout.Stop()
		for {
			select {
			case s := <-at:
				if s > gs {
					return time.Since(start)
				}
			case <-timeout.C:
				t.Fatalf("rank 2 did not train past step %d within %v (step deadline %v):\n%s", gs, d, stepTimeout, c.logs.String())
			}
		}
	}
	waitStep(50, stepTimeout)
	off := 0
	for k := range rounds {
		c.killAndWait(rank(0))
		c.killAndWait(rank(1))
		// Rank 2 found both down: its connections to them refused. It
		// says so when a step it leads fails on them; when its
		// heartbeats lose both at once, it leads alone at once instead.
		off = c.waitLog(off, "are down", "every lower rank is lost: this rank leads the ring")
		c.start(rank(0), steps)
		c.start(rank(1), steps)
		// The new rank 0 takes rank 2's model in its first view (or the
		// others wait for rank 2 until their step deadline).
		off = waitLogWithin(t, c, off, "took the model of the member furthest on", stepTimeout/3)
		var gs int64
		survivor.mu.Lock()
		for s := range survivor.at {
			gs = max(gs, s)
		}
		survivor.mu.Unlock()
		if d := waitStep(gs+50, stepTimeout/3); d > stepTimeout/3 {
			t.Errorf("restart %d: 50 steps took %v; want well within the step deadline %v", k+1, d, stepTimeout)
		}
	}
	c.cancel() // the rest of training is not the test's
	c.wait()
	if t.Failed() || testing.Verbose() {
		t.Logf("%s", c.logs.String())
	}
}

// waitLogWithin waits until c's logs after offset from hold s, within d,
// and returns the offset after it.
func waitLogWithin(t *testing.T, c *elasticCluster, from int, s string, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		logs := c.logs.String()
		if i := strings.Index(logs[from:], s); i >= 0 {
			return from + i + len(s)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the logs within %v:\n%s", s, d, logs[from:])
		}
		time.Sleep(5 * time.Millisecond) // polling the logs, not synchronising
	}
}
