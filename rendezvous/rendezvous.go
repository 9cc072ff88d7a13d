package rendezvous

import (
	"context"

	"github.com/distflow/distflow/tensor"
)

// Rendezvous is where a Send kernel leaves a tensor and a Recv kernel picks it
// up, within one step. Kernels find it in kernel.Context.Step.Rendezvous.
type Rendezvous interface {
	// Send makes t available under key. It never blocks. Sending one key
	// twice in a step is an error.
	Send(key string, t *tensor.Tensor) error
	// Recv waits until key is sent and returns the tensor. It fails when ctx
	// ends or the rendezvous is aborted, so a failed step never hangs.
	Recv(ctx context.Context, key string) (*tensor.Tensor, error)
}

// Lender is implemented by a Rendezvous whose senders can lend a tensor:
// see Local.SendLent.
type Lender interface {
	SendLent(key string, t *tensor.Tensor, release func()) error
}
