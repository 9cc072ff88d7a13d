package train_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// TestSyncReplicasGoOnWithoutALostReplica: 3 replicas in one graph, 3
// gradients per round; replica 2 gives one gradient and stops. The round
// waits for it until SetLive says it is lost: the chief abandons the round,
// releases the 2 live replicas and aggregates theirs from then on; when it
// is back it is given a token and counted again.
func TestSyncReplicasGoOnWithoutALostReplica(t *testing.T) {
	s := graph.NewScope()
	r := syncBuild(t, s, 0, 3, 3, 3, 0.1)
	sess, err := session.New(r.g)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	r.initChief(t, sess)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runner := make(chan error, 1)
	go func() { runner <- r.opt.ChiefQueueRunner(ctx, sess) }()
	rng := rand.New(rand.NewPCG(1, 2))
	var rngMu sync.Mutex
	batchFor := func(i int) map[graph.Output]*tensor.Tensor {
		rngMu.Lock()
		defer rngMu.Unlock()
		x, y := syncBatch(rng, 4)
		return map[graph.Output]*tensor.Tensor{r.xs[i]: x, r.ys[i]: y}
	}
	step := func(i int) <-chan error {
		done := make(chan error, 1)
		feeds := batchFor(i)
		go func() {
			_, err := r.opt.RunStep(ctx, sess, feeds, r.steps[i])
			done <- err
		}()
		return done
	}
	// Round 1: all three.
	a, b, c := step(0), step(1), step(2)
	for _, d := range []<-chan error{a, b, c} {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	// Round 2: replica 2 is gone; the others wait for it...
	a, b = step(0), step(1)
	select {
	case err := <-a:
		t.Fatalf("a round of 3 went on with 2 gradients (%v)", err)
	case <-time.After(100 * time.Millisecond): // a round that must not complete: bounded wait for a negative
	}
	// ...until it is lost.
	r.opt.SetLive(2, false)
	for _, d := range []<-chan error{a, b} {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	if n := r.opt.Live(); n != 2 {
		t.Errorf("Live() = %d; want 2", n)
	}
	// Rounds of 2 from now on.
	for range 3 {
		a, b = step(0), step(1)
		for _, d := range []<-chan error{a, b} {
			if err := <-d; err != nil {
				t.Fatal(err)
			}
		}
	}
	gs, err := r.opt.GlobalStep(ctx, sess)
	if err != nil || gs < 4 {
		t.Errorf("global step %d, %v; want at least 4 (1 round of 3, then rounds of 2)", gs, err)
	}
	// Back. Its local step is from before it was lost, so its first
	// gradient is dropped as stale and the token the chief welcomes it
	// with brings it up to date; how many steps that takes depends on
	// whether the chief's current round began before SetLive (a round of
	// 2) or after (of 3). So the three step as real replicas do, each in
	// a loop, until the global step has gone 3 rounds further.
	r.opt.SetLive(2, true)
	gs, err = r.opt.GlobalStep(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	target := gs + 3
	loops := make(chan error, 3)
	for i := range 3 {
		go func() {
			for {
				local, err := r.opt.RunStep(ctx, sess, batchFor(i), r.steps[i])
				if err != nil || local >= target {
					loops <- err
					return
				}
			}
		}()
	}
	for range 3 {
		if err := <-loops; err != nil {
			t.Fatal(err)
		}
	}
	// Up to date now: a round needs all three again.
	a, b = step(0), step(1)
	select {
	case err := <-a:
		t.Fatalf("a round went on without the replica that came back (%v)", err)
	case <-time.After(100 * time.Millisecond): // a round that must not complete: bounded wait for a negative
	}
	c = step(2)
	for _, d := range []<-chan error{a, b, c} {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-runner; err != nil {
		t.Errorf("ChiefQueueRunner: %v", err)
	}
}
