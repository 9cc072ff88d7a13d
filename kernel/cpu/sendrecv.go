package cpu

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
)

// The kernels of Send and Recv (op/sendrecv.go): they move tensors between
// the partitions of a step through the step's rendezvous.

func init() {
	kernel.Register("Send", kernel.CPU, partitionSend)
	kernel.Register("Recv", kernel.CPU, partitionRecv)
}

// partitionKey computes the node's rendezvous key once, at build time.
func partitionKey(n *graph.Node) (string, error) {
	send, recv, name := n.AttrString("send_device"), n.AttrString("recv_device"), n.AttrString("tensor_name")
	if send == "" || recv == "" || name == "" {
		return "", fmt.Errorf("kernel: node %s: tensor_name, send_device and recv_device must be set", n)
	}
	return rendezvous.Key(send, recv, name), nil
}

// partitionRendezvous returns the step's rendezvous, or an error for a
// single-device run, which has none.
func partitionRendezvous(c *kernel.Context) (kernel.Rendezvous, error) {
	if c.Step == nil || c.Step.Rendezvous == nil {
		return nil, c.Errorf("no rendezvous in this step: Send and Recv run only in partitioned (distributed) steps")
	}
	return c.Step.Rendezvous, nil
}

// partitionSendKernel hands its input to the rendezvous without a copy:
// kernels never modify their inputs, so the receiver may share it. It
// never blocks. An input that is a variable's buffer is lent under the
// kernel's lease (see kernel.InputLeaser): a peer that writes it to the
// wire releases it then, so the variable is updated in place again
// instead of moving to a copy at its next update.
type partitionSendKernel struct{ key string }

func partitionSend(n *graph.Node) (kernel.Kernel, error) {
	key, err := partitionKey(n)
	if err != nil {
		return nil, err
	}
	return partitionSendKernel{key: key}, nil
}

// LeasesInputs reports that Send takes its input's lease.
func (partitionSendKernel) LeasesInputs() bool { return true }

func (k partitionSendKernel) Compute(c *kernel.Context) error {
	var lease kernel.Lease
	if len(c.InputLeases) > 0 {
		lease = c.InputLeases[0]
	}
	rv, err := partitionRendezvous(c)
	if err != nil {
		lease.Release()
		return err
	}
	if l, ok := rv.(rendezvous.Lender); ok && lease.Valid() {
		err = l.SendLent(k.key, c.Inputs[0], lease.ReleaseFunc())
	} else {
		// A share that cannot be lent is kept for good: the variable
		// copies at its next update.
		err = rv.Send(k.key, c.Inputs[0])
	}
	if err != nil {
		lease.Release() // not handed over
		return c.Wrap(err)
	}
	return nil
}

// partitionRecvKernel waits for its tensor; it may block on another task, so
// it declares MayBlock and the executor runs it on a goroutine of its own.
type partitionRecvKernel struct{ key string }

func partitionRecv(n *graph.Node) (kernel.Kernel, error) {
	key, err := partitionKey(n)
	if err != nil {
		return nil, err
	}
	return partitionRecvKernel{key: key}, nil
}

// MayBlock reports that Recv waits for something outside the step.
func (partitionRecvKernel) MayBlock() bool { return true }

// Compute receives the tensor; it returns when it arrives, the step's
// context ends or the rendezvous is aborted. A tensor decoded off the
// wire is the step's own, which a later kernel may overwrite.
func (k partitionRecvKernel) Compute(c *kernel.Context) error {
	rv, err := partitionRendezvous(c)
	if err != nil {
		return err
	}
	var t *tensor.Tensor
	own := false
	if or, ok := rv.(rendezvous.OwnReceiver); ok {
		t, own, err = or.RecvOwn(c.Ctx, k.key)
	} else {
		t, err = rv.Recv(c.Ctx, k.key)
	}
	switch {
	case err != nil:
		return c.Wrap(err)
	case own:
		c.SetOwnOutput(0, t)
	default:
		c.SetOutput(0, t)
	}
	return nil
}
