package rpc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/rendezvous"
	"google.golang.org/grpc/status"
)

// TestEverySentinelCrossesTheWire: an error that wraps several sentinels
// (a step aborted because a queue closed) keeps them all across gRPC and
// the tensor channel's encoding of the reason.
func TestEverySentinelCrossesTheWire(t *testing.T) {
	err := fmt.Errorf("step 7: %w: %w", rendezvous.ErrAborted, fmt.Errorf("dequeue: %w", cpu.ErrQueueClosed))
	back := fromStatus(context.Background(), "ps", "RecvTensor", toStatus(err))
	for _, want := range []error{rendezvous.ErrAborted, cpu.ErrQueueClosed} {
		if !errors.Is(back, want) {
			t.Errorf("over gRPC: %v does not wrap %v", back, want)
		}
	}
	st, _ := status.FromError(toStatus(err))
	if got := reasonOf(st); got != "ABORTED,QUEUE_CLOSED" {
		t.Errorf("the tensor channel's reason %q; want ABORTED,QUEUE_CLOSED", got)
	}
	if back := fromStatus(context.Background(), "ps", "RunGraph", toStatus(cpu.ErrQueueClosed)); !errors.Is(back, cpu.ErrQueueClosed) || errors.Is(back, rendezvous.ErrAborted) {
		t.Errorf("a closed queue alone: %v", back)
	}
}
