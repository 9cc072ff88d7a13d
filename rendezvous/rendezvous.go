package rendezvous

import (
	"context"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// Rendezvous is where a Send kernel leaves a tensor and a Recv kernel picks it
// up, within one step: kernel.Rendezvous, which kernels find in
// kernel.Context.Step.Rendezvous. Local and Router implement it.
type Rendezvous = kernel.Rendezvous

// Lender is implemented by a Rendezvous whose senders can lend a tensor:
// see Local.SendLent.
type Lender interface {
	SendLent(key string, t *tensor.Tensor, release func()) error
}

// OwnReceiver is implemented by a Rendezvous that can tell a received
// tensor no one else holds (decoded off the wire) from one that may be
// the sender's: see Router.RecvOwn. The receiving step may overwrite its
// own (kernel.Context.SetOwnOutput).
type OwnReceiver interface {
	RecvOwn(ctx context.Context, key string) (t *tensor.Tensor, own bool, err error)
}
