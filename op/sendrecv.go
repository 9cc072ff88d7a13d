package op

import (
	"fmt"

	"github.com/distflow/distflow/tensor"
)

// Send and Recv move one tensor between the partitions of a step through the
// step's rendezvous (package rendezvous). Only the partitioner creates them:
// a pair replaces every data edge that crosses tasks. Both sides compute the
// rendezvous key from the same three attributes.

func init() {
	Register(Def{
		Name:   "Send",
		Remote: true,
		Inputs: []Arg{{Name: "tensor"}},
		Attrs: []Attr{
			{Name: "tensor_name", Type: AttrString},
			{Name: "send_device", Type: AttrString},
			{Name: "recv_device", Type: AttrString},
		},
		Stateful: true,
		Summary:  "Sends its input to recv_device under tensor_name; no outputs.",
		Infer: func(c *InferContext) error {
			return partitionCheckSendRecv(c)
		},
	})
	Register(Def{
		Name:   "Recv",
		Remote: true,
		Attrs: []Attr{
			{Name: "tensor_name", Type: AttrString},
			{Name: "send_device", Type: AttrString},
			{Name: "recv_device", Type: AttrString},
			{Name: "dtype", Type: AttrDType},
			{Name: "shape", Type: AttrShape, Default: tensor.UnknownShape()},
		},
		Stateful: true,
		Summary:  "Receives the tensor sent from send_device under tensor_name.",
		Infer: func(c *InferContext) error {
			if err := partitionCheckSendRecv(c); err != nil {
				return err
			}
			if !c.DType("dtype").Valid() {
				return fmt.Errorf("invalid dtype %v", c.DType("dtype"))
			}
			c.SetOutput(0, c.DType("dtype"), c.Shape("shape"))
			return nil
		},
	})
}

// partitionCheckSendRecv rejects empty key attributes: a key with an empty
// part could not be routed.
func partitionCheckSendRecv(c *InferContext) error {
	for _, a := range []string{"tensor_name", "send_device", "recv_device"} {
		if c.String(a) == "" {
			return fmt.Errorf("attribute %s is empty", a)
		}
	}
	return nil
}
