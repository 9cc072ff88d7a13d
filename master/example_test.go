package master_test

import (
	"context"
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker/workertest"
)

// A variable on the ps, read and doubled on a worker: the master partitions
// the step between the two tasks, which exchange the value through a
// Send/Recv pair.
func Example() {
	net := workertest.NewCluster("/job:ps/task:0", "/job:worker/task:0")
	m := master.New(master.Config{Task: "/job:worker/task:0", Workers: net.From("/job:worker/task:0"), Logger: quiet})

	s := graph.NewScope()
	v := ops.NewVariable(s.WithDevice("/job:ps"), "v", tensor.Float32, []int{2}, ops.OnesInit())
	ops.Identity(s.SubScope("double"), ops.Mul(s, v.Value(), ops.Const(s, float32(2))))

	ctx := context.Background()
	cs, err := m.CreateSession(ctx, &pb.CreateSessionRequest{Graph: s.Graph().ToProto()})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := cs.GetSessionHandle()
	if _, err := m.RunStep(ctx, &pb.RunStepRequest{SessionHandle: h, Targets: []string{"v/Assign"}}); err != nil {
		fmt.Println(err)
		return
	}
	out, err := m.RunStep(ctx, &pb.RunStepRequest{SessionHandle: h, Fetches: []string{"double/Identity:0"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	t, _ := graph.TensorFromProto(out.GetTensors()[0].GetTensor())
	fmt.Println(t.Float32s())
	// Output: [2 2]
}
