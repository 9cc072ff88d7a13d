package rpc_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/worker"
)

// TestRecvTensorForStepsThatNeverRun: RecvTensor requests, over the tensor
// channel and over gRPC, for steps that never run on the task wait for
// them, and leave nothing behind once they end.
func TestRecvTensorForStepsThatNeverRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts rpc.Options
	}{
		{"tensor channel", rpc.Options{}},
		{"gRPC", rpc.Options{NoTensorChannel: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := worker.New(worker.Config{Task: suiteTask, Logger: quiet})
			c := serveWorker(t, w, rpc.Options{Logger: quiet}, tc.opts)
			key := rendezvous.Key(suiteDev, peerDev, "x:0")
			const n = 200
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			for step := range int64(n) {
				wg.Go(func() {
					if _, err := c.RecvTensor(ctx, 1+step, key); !errors.Is(err, context.Canceled) {
						t.Errorf("RecvTensor of step %d that never runs: %v; want it cancelled", 1+step, err)
					}
				})
			}
			waitUntil(t, "every request waits on the task", func() bool { return w.LiveSteps() == n })
			cancel()
			wg.Wait()
			waitUntil(t, "the task forgets the steps", func() bool { return w.LiveSteps() == 0 })
		})
	}
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}
