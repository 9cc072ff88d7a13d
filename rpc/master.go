package rpc

import (
	"context"
	"io"

	"github.com/distflow/distflow/master"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc/rpcpb"
)

// RegisterMaster serves m as the MasterService of s.
func RegisterMaster(s *Server, m master.Service) {
	rpcpb.RegisterMasterServiceServer(s.grpc, &masterServer{m: m})
}

// masterServer adapts a master.Service to the generated server interface.
type masterServer struct {
	rpcpb.UnimplementedMasterServiceServer
	m master.Service
}

func (s *masterServer) CreateSession(ctx context.Context, r *pb.CreateSessionRequest) (*pb.CreateSessionResponse, error) {
	resp, err := s.m.CreateSession(ctx, r)
	return resp, toStatus(err)
}

func (s *masterServer) ExtendSession(ctx context.Context, r *pb.ExtendSessionRequest) (*pb.ExtendSessionResponse, error) {
	resp, err := s.m.ExtendSession(ctx, r)
	return resp, toStatus(err)
}

func (s *masterServer) RunStep(ctx context.Context, r *pb.RunStepRequest) (*pb.RunStepResponse, error) {
	resp, err := s.m.RunStep(ctx, r)
	return resp, toStatus(err)
}

func (s *masterServer) CloseSession(ctx context.Context, r *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	resp, err := s.m.CloseSession(ctx, r)
	return resp, toStatus(err)
}

func (s *masterServer) ListDevices(ctx context.Context, r *pb.ListDevicesRequest) (*pb.ListDevicesResponse, error) {
	resp, err := s.m.ListDevices(ctx, r)
	return resp, toStatus(err)
}

// DialMaster returns a master.Service that calls the task at target
// ("host:port" or "grpc://host:port") and the io.Closer of its connection.
// Like DialWorker it does not wait for the peer; calls wait for it until
// their context ends, and errors name the address.
func DialMaster(target string, opts Options) (master.Service, io.Closer, error) {
	cc, addr, err := dial(target, opts)
	if err != nil {
		return nil, nil, err
	}
	return &masterClient{c: rpcpb.NewMasterServiceClient(cc), peer: addr}, cc, nil
}

// masterClient is a master.Service over a gRPC connection.
type masterClient struct {
	c    rpcpb.MasterServiceClient
	peer string
}

func (c *masterClient) CreateSession(ctx context.Context, r *pb.CreateSessionRequest) (*pb.CreateSessionResponse, error) {
	resp, err := c.c.CreateSession(ctx, r, waitForReady)
	return resp, fromStatus(ctx, c.peer, "CreateSession", err)
}

func (c *masterClient) ExtendSession(ctx context.Context, r *pb.ExtendSessionRequest) (*pb.ExtendSessionResponse, error) {
	resp, err := c.c.ExtendSession(ctx, r, waitForReady)
	return resp, fromStatus(ctx, c.peer, "ExtendSession", err)
}

func (c *masterClient) RunStep(ctx context.Context, r *pb.RunStepRequest) (*pb.RunStepResponse, error) {
	resp, err := c.c.RunStep(ctx, r, waitForReady)
	return resp, fromStatus(ctx, c.peer, "RunStep", err)
}

func (c *masterClient) CloseSession(ctx context.Context, r *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error) {
	resp, err := c.c.CloseSession(ctx, r, waitForReady)
	return resp, fromStatus(ctx, c.peer, "CloseSession", err)
}

func (c *masterClient) ListDevices(ctx context.Context, r *pb.ListDevicesRequest) (*pb.ListDevicesResponse, error) {
	resp, err := c.c.ListDevices(ctx, r, waitForReady)
	return resp, fromStatus(ctx, c.peer, "ListDevices", err)
}
