package master

import (
	"context"

	pb "github.com/distflow/distflow/proto/distflowpb"
)

// Service is what a client session asks of a task: hold a graph, run steps
// on it. The in-process implementation is *Master; the rpc package adapts it
// to gRPC both ways. Implementations are safe for concurrent use.
type Service interface {
	CreateSession(ctx context.Context, req *pb.CreateSessionRequest) (*pb.CreateSessionResponse, error)
	ExtendSession(ctx context.Context, req *pb.ExtendSessionRequest) (*pb.ExtendSessionResponse, error)
	RunStep(ctx context.Context, req *pb.RunStepRequest) (*pb.RunStepResponse, error)
	CloseSession(ctx context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error)
	ListDevices(ctx context.Context, req *pb.ListDevicesRequest) (*pb.ListDevicesResponse, error)
}
