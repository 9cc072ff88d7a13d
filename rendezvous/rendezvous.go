package rendezvous

import (
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
