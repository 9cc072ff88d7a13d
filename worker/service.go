package worker

import (
	"context"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
)

// Service is what a master asks of a task that runs graph partitions, and
// what workers ask of each other to move tensors. The in-process
// implementation is *Worker; the rpc package adapts it to gRPC both ways,
// so the master and the tests use the same interface over memory or sockets.
// Implementations are safe for concurrent use.
type Service interface {
	GetStatus(ctx context.Context, req *pb.GetStatusRequest) (*pb.GetStatusResponse, error)
	RegisterGraph(ctx context.Context, req *pb.RegisterGraphRequest) (*pb.RegisterGraphResponse, error)
	DeregisterGraph(ctx context.Context, req *pb.DeregisterGraphRequest) (*pb.DeregisterGraphResponse, error)
	RunGraph(ctx context.Context, req *pb.RunGraphRequest) (*pb.RunGraphResponse, error)
	// RecvTensor waits until the tensor under key has been sent in step
	// stepID on this worker and returns it (the caller owns the result). It
	// fails when ctx ends or the step is aborted.
	RecvTensor(ctx context.Context, stepID int64, key string) (*tensor.Tensor, error)
	CleanupStep(ctx context.Context, req *pb.CleanupStepRequest) (*pb.CleanupStepResponse, error)
	CloseSession(ctx context.Context, req *pb.WorkerCloseSessionRequest) (*pb.WorkerCloseSessionResponse, error)
	Shutdown(ctx context.Context, req *pb.ShutdownRequest) (*pb.ShutdownResponse, error)
}

// Lender is implemented by a Service that can lend the tensors RecvTensor
// returns (*Worker): LendTensor also returns a function that the caller
// calls once it no longer reads the tensor.
type Lender interface {
	LendTensor(ctx context.Context, stepID int64, key string) (*tensor.Tensor, func(), error)
}

// Cache resolves task names to their worker services: a map in tests, gRPC
// clients in a cluster.
type Cache interface {
	// Worker returns the service of a task ("/job:ps/task:0").
	Worker(task string) (Service, error)
	// Tasks lists every task of the cluster, sorted.
	Tasks() []string
}
