package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"google.golang.org/grpc"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc/rpcpb"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// RegisterWorker serves w as the WorkerService of s, and its RecvTensor on
// the tensor channel too (unless Options.NoTensorChannel). Errors of w
// reach the client with their message and a status code for the sentinels
// callers test (see RemoteError). Register before Serve.
func RegisterWorker(s *Server, w worker.Service) {
	rpcpb.RegisterWorkerServiceServer(s.grpc, &workerServer{w: w})
	s.mu.Lock()
	s.worker = w
	s.mu.Unlock()
}

// workerServer adapts a worker.Service to the generated server interface.
type workerServer struct {
	rpcpb.UnimplementedWorkerServiceServer
	w worker.Service
}

func (s *workerServer) GetStatus(ctx context.Context, r *pb.GetStatusRequest) (*pb.GetStatusResponse, error) {
	resp, err := s.w.GetStatus(ctx, r)
	return resp, toStatus(err)
}

func (s *workerServer) RegisterGraph(ctx context.Context, r *pb.RegisterGraphRequest) (*pb.RegisterGraphResponse, error) {
	resp, err := s.w.RegisterGraph(ctx, r)
	return resp, toStatus(err)
}

func (s *workerServer) DeregisterGraph(ctx context.Context, r *pb.DeregisterGraphRequest) (*pb.DeregisterGraphResponse, error) {
	resp, err := s.w.DeregisterGraph(ctx, r)
	return resp, toStatus(err)
}

func (s *workerServer) RunGraph(ctx context.Context, r *pb.RunGraphRequest) (*pb.RunGraphResponse, error) {
	resp, err := s.w.RunGraph(ctx, r)
	return resp, toStatus(err)
}

// RecvTensor waits for the tensor, then streams its bytes in chunks of at
// most chunkSize straight from the tensor's memory (see tensorChunk); the
// first chunk carries dtype and dims.
func (s *workerServer) RecvTensor(r *pb.RecvTensorRequest, stream rpcpb.WorkerService_RecvTensorServer) error {
	t, err := s.w.RecvTensor(stream.Context(), r.GetStepId(), r.GetRendezvousKey())
	if err != nil {
		return toStatus(err)
	}
	msg := &tensorChunk{first: true, dtype: t.DType(), dims: t.Shape()}
	raw := t.RawBytes()
	for {
		n := min(len(raw), chunkSize)
		msg.data = raw[:n]
		if err := stream.SendMsg(msg); err != nil {
			return err
		}
		raw = raw[n:]
		if len(raw) == 0 {
			return nil
		}
		msg = &tensorChunk{}
	}
}

func (s *workerServer) CleanupStep(ctx context.Context, r *pb.CleanupStepRequest) (*pb.CleanupStepResponse, error) {
	resp, err := s.w.CleanupStep(ctx, r)
	return resp, toStatus(err)
}

func (s *workerServer) CloseSession(ctx context.Context, r *pb.WorkerCloseSessionRequest) (*pb.WorkerCloseSessionResponse, error) {
	resp, err := s.w.CloseSession(ctx, r)
	return resp, toStatus(err)
}

func (s *workerServer) Shutdown(ctx context.Context, r *pb.ShutdownRequest) (*pb.ShutdownResponse, error) {
	resp, err := s.w.Shutdown(ctx, r)
	return resp, toStatus(err)
}

// DialWorker returns a worker.Service that calls the task at target
// ("host:port" or "grpc://host:port") and the io.Closer of its
// connections. It does not wait for the peer: every call waits until the
// peer is reachable or the call's context ends (so give calls a deadline),
// and its errors name the address.
func DialWorker(target string, opts Options) (worker.Service, io.Closer, error) {
	cc, addr, err := dial(target, opts)
	if err != nil {
		return nil, nil, err
	}
	c := newWorkerClient(cc, addr, newTensorPool(addr, addr, opts))
	return c, closerFunc(func() error { c.tensors.close(); return cc.Close() }), nil
}

// DialKnownWorker is DialWorker for a task that has answered before (a
// heartbeat's peer): its calls do not wait for a task that refuses
// connections but fail at once, with an error wrapping ErrUnavailable
// that Exited tells apart, so that a task whose process has exited is
// known as soon as it is asked. A connection still being made (a stopped
// process accepts it) is waited for until the call's deadline, as
// DialWorker's are.
func DialKnownWorker(target string, opts Options) (worker.Service, io.Closer, error) {
	w, closer, err := DialWorker(target, opts)
	if err != nil {
		return nil, nil, err
	}
	answered := new(atomic.Bool)
	answered.Store(true)
	w.(*workerClient).answered = answered
	return w, closer, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func newWorkerClient(cc *grpc.ClientConn, peer string, tensors *tensorPool) *workerClient {
	return &workerClient{c: rpcpb.NewWorkerServiceClient(cc), cc: cc, peer: peer, tensors: tensors}
}

// workerClient is a worker.Service over a gRPC connection.
type workerClient struct {
	c       rpcpb.WorkerServiceClient
	cc      grpc.ClientConnInterface // for RecvTensor, which bypasses c
	peer    string                   // named in errors
	tensors *tensorPool              // the tensor channel, nil when off
	// ready, when set, runs before every call: a WorkerCache waits there
	// for a task that has not answered yet (see WaitForTasks).
	ready func(ctx context.Context) error
	// answered, when set, says that the task has answered once (see
	// waitOpt).
	answered *atomic.Bool
}

func (c *workerClient) wait(ctx context.Context) error {
	if c.ready == nil {
		return nil
	}
	return c.ready(ctx)
}

// waitForReady makes a call wait out a peer's transient unavailability
// (a task still starting) until the call's deadline. The cleanup calls
// (DeregisterGraph, CleanupStep, CloseSession) go without it: they are best
// effort, and a peer that is gone must not hold a closing session until
// its deadline.
var waitForReady = grpc.WaitForReady(true)

// waitOpt is the wait option of a call: waitForReady, except that once a
// WorkerCache's task has answered, a call to it fails at once with
// ErrUnavailable while it cannot be reached (a refused connection), so
// that the loss of a task is reported, and recovered from (see
// train.MonitoredSession), instead of waited out in silence until the
// step's deadline. A connection still being made is waited for either way.
func (c *workerClient) waitOpt() grpc.CallOption {
	if c.answered != nil && c.answered.Load() {
		return grpc.WaitForReady(false)
	}
	return waitForReady
}

func (c *workerClient) GetStatus(ctx context.Context, r *pb.GetStatusRequest) (*pb.GetStatusResponse, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	resp, err := c.c.GetStatus(ctx, r, c.waitOpt())
	return resp, fromStatus(ctx, c.peer, "GetStatus", err)
}

func (c *workerClient) RegisterGraph(ctx context.Context, r *pb.RegisterGraphRequest) (*pb.RegisterGraphResponse, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	resp, err := c.c.RegisterGraph(ctx, r, c.waitOpt())
	return resp, fromStatus(ctx, c.peer, "RegisterGraph", err)
}

func (c *workerClient) DeregisterGraph(ctx context.Context, r *pb.DeregisterGraphRequest) (*pb.DeregisterGraphResponse, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	resp, err := c.c.DeregisterGraph(ctx, r)
	return resp, fromStatus(ctx, c.peer, "DeregisterGraph", err)
}

func (c *workerClient) RunGraph(ctx context.Context, r *pb.RunGraphRequest) (*pb.RunGraphResponse, error) {
	resp := new(pb.RunGraphResponse)
	if err := c.RunGraphInto(ctx, r, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// RunGraphInto is RunGraph into the caller's resp (service.RunnerInto).
func (c *workerClient) RunGraphInto(ctx context.Context, r *pb.RunGraphRequest, resp *pb.RunGraphResponse) error {
	if err := c.wait(ctx); err != nil {
		return err
	}
	if c.tensors != nil {
		if err := c.tensors.call(ctx, methodRunGraph, r.GetStepId(), r, resp); !errors.Is(err, errFallback) {
			return err
		}
	}
	out, err := c.c.RunGraph(ctx, r, c.waitOpt())
	if err != nil {
		return fromStatus(ctx, c.peer, "RunGraph", err)
	}
	resp.Reset()
	resp.Fetches, resp.StepStats = out.GetFetches(), out.GetStepStats()
	return nil
}

// ReceivesFresh reports that the tensors RecvTensor and RecvTensors
// return are decoded off the wire, the caller's alone
// (service.FreshReceiver).
func (c *workerClient) ReceivesFresh() bool { return true }

// RecvTensor receives the tensor over the tensor channel when the peer
// offers it, else over gRPC (recvTensorGRPC).
func (c *workerClient) RecvTensor(ctx context.Context, stepID int64, key string) (*tensor.Tensor, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	if c.tensors != nil {
		t, err := c.tensors.recv(ctx, stepID, key)
		if !errors.Is(err, errFallback) {
			return t, err
		}
	}
	return c.recvTensorGRPC(ctx, stepID, key)
}

// recvTensorGRPC allocates the tensor from the first chunk of the
// RecvTensor stream and copies each chunk's bytes into it straight from
// gRPC's receive buffers (see tensorReceiver), checking that they add up
// to the tensor's size.
func (c *workerClient) recvTensorGRPC(ctx context.Context, stepID int64, key string) (*tensor.Tensor, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if we stop reading early
	stream, err := c.cc.NewStream(ctx, recvTensorDesc, rpcpb.WorkerService_RecvTensor_FullMethodName, c.waitOpt(), forceTensorCodec)
	if err != nil {
		return nil, fromStatus(ctx, c.peer, "RecvTensor", err)
	}
	if err := stream.SendMsg(&pb.RecvTensorRequest{StepId: stepID, RendezvousKey: key}); err != nil && !errors.Is(err, io.EOF) {
		return nil, fromStatus(ctx, c.peer, "RecvTensor", err)
	}
	if err := stream.CloseSend(); err != nil {
		return nil, fromStatus(ctx, c.peer, "RecvTensor", err)
	}
	var r tensorReceiver
	for {
		err := stream.RecvMsg(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if r.err != nil { // gRPC keeps only the message of a codec's error
				return nil, fmt.Errorf("rpc: RecvTensor %q on %s: %w", key, c.peer, r.err)
			}
			return nil, fromStatus(ctx, c.peer, "RecvTensor", err)
		}
	}
	if r.t == nil {
		return nil, fmt.Errorf("rpc: RecvTensor %q on %s: %w: empty stream", key, c.peer, tensor.ErrCorrupt)
	}
	if r.off != len(r.raw) {
		return nil, fmt.Errorf("rpc: RecvTensor %q on %s: %w: got %d of the %d bytes of %v%v", key, c.peer, tensor.ErrCorrupt, r.off, len(r.raw), r.t.DType(), r.t.Shape())
	}
	return r.t, nil
}

var (
	recvTensorDesc   = &rpcpb.WorkerService_ServiceDesc.Streams[0]
	forceTensorCodec = grpc.ForceCodecV2(tensorCodec)
)

// FinishStep reports whether the peer ended step itself (its RunGraph
// answer over the tensor channel said so), and forgets it: the step's
// CleanupStep without an abort reason would make no call (see
// worker.StepFinisher). A caller that sees false makes the call.
func (c *workerClient) FinishStep(step int64) bool {
	return c.tensors != nil && c.tensors.takeFinished(step)
}

var (
	_ worker.StepFinisher = (*workerClient)(nil)
	_ worker.RunnerInto   = (*workerClient)(nil)
)

func (c *workerClient) CleanupStep(ctx context.Context, r *pb.CleanupStepRequest) (*pb.CleanupStepResponse, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	if c.tensors != nil {
		if r.GetAbortReason() == "" && c.tensors.takeFinished(r.GetStepId()) {
			return &pb.CleanupStepResponse{}, nil // the peer cleaned the step up itself
		}
		resp := new(pb.CleanupStepResponse)
		if err := c.tensors.call(ctx, methodCleanupStep, r.GetStepId(), r, resp); !errors.Is(err, errFallback) {
			if err != nil {
				return nil, err
			}
			return resp, nil
		}
	}
	resp, err := c.c.CleanupStep(ctx, r)
	return resp, fromStatus(ctx, c.peer, "CleanupStep", err)
}

func (c *workerClient) CloseSession(ctx context.Context, r *pb.WorkerCloseSessionRequest) (*pb.WorkerCloseSessionResponse, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	resp, err := c.c.CloseSession(ctx, r)
	return resp, fromStatus(ctx, c.peer, "CloseSession", err)
}

func (c *workerClient) Shutdown(ctx context.Context, r *pb.ShutdownRequest) (*pb.ShutdownResponse, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	resp, err := c.c.Shutdown(ctx, r, c.waitOpt())
	return resp, fromStatus(ctx, c.peer, "Shutdown", err)
}
