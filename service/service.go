// Package service declares the two services a task offers, as interfaces
// apart from their implementations: Master (what a client session asks:
// hold a graph, run steps) and Worker (what a master asks: run graph
// partitions; and what workers ask of each other: move tensors).
//
//	var m service.Master = master.New(cfg)           // in process
//	var w service.Worker = worker.New(worker.Config{}) // in process
//	w, closer, err := rpc.DialWorker(addr, opts)      // over gRPC
//
// The in-process implementations are *master.Master and *worker.Worker;
// package rpc adapts both to gRPC, both ways. The master knows its workers
// only through Workers, so it runs the same over memory (workertest's
// network) and over sockets. Every implementation of Worker passes the
// conformance suite workertest.TestService. Implementations are safe for
// concurrent use.
package service

import (
	"context"
	"errors"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
)

// Sentinel errors wrapped by the services' errors, whatever the transport.
var (
	// ErrNoGraph is wrapped when a graph handle is unknown (never
	// registered, deregistered, or its session was closed).
	ErrNoGraph = errors.New("no such graph")
	// ErrNoWorkers is wrapped when a step needs a tensor from another task
	// and the worker has no Workers to reach it.
	ErrNoWorkers = errors.New("no worker cache to reach other tasks")
	// ErrUnavailable is wrapped by the errors of calls that could not reach
	// a task (connection refused, peer gone). Transports wrap it, so that a
	// master can tell a lost task from a failed computation.
	ErrUnavailable = errors.New("peer unavailable")
)

// Master is what a client session asks of a task: hold a graph, run steps
// on it.
type Master interface {
	CreateSession(ctx context.Context, req *pb.CreateSessionRequest) (*pb.CreateSessionResponse, error)
	ExtendSession(ctx context.Context, req *pb.ExtendSessionRequest) (*pb.ExtendSessionResponse, error)
	RunStep(ctx context.Context, req *pb.RunStepRequest) (*pb.RunStepResponse, error)
	CloseSession(ctx context.Context, req *pb.CloseSessionRequest) (*pb.CloseSessionResponse, error)
	ListDevices(ctx context.Context, req *pb.ListDevicesRequest) (*pb.ListDevicesResponse, error)
}

// Worker is what a master asks of a task that runs graph partitions, and
// what workers ask of each other to move tensors.
type Worker interface {
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

// RunnerInto is implemented by a Worker, or a client of one, that can
// write RunGraph's response into storage its caller keeps from step to
// step (*worker.Worker, the rpc package's client): RunGraphInto is
// RunGraph answering into resp, which it first resets but for the
// entries of its Fetches, which it may reuse, changing their fields. A
// caller that keeps a fetched TensorProto, not its NamedTensor, may give
// resp to the next call once this one returned. A type that embeds a
// RunnerInto and changes its RunGraph must change RunGraphInto as well.
type RunnerInto interface {
	RunGraphInto(ctx context.Context, req *pb.RunGraphRequest, resp *pb.RunGraphResponse) error
}

// RunGraphInto runs req on w into resp: with w's RunGraphInto if it is a
// RunnerInto, else with RunGraph, whose answer it moves into resp.
func RunGraphInto(ctx context.Context, w Worker, req *pb.RunGraphRequest, resp *pb.RunGraphResponse) error {
	if ri, ok := w.(RunnerInto); ok {
		return ri.RunGraphInto(ctx, req, resp)
	}
	out, err := w.RunGraph(ctx, req)
	if err != nil {
		return err
	}
	resp.Reset()
	resp.Fetches, resp.StepStats = out.GetFetches(), out.GetStepStats()
	return nil
}

// ForgetResponse drops what resp, kept for RunGraphInto, refers to (its
// fetched tensors, its timeline) and keeps its fetch entries for the
// next call.
func ForgetResponse(resp *pb.RunGraphResponse) {
	fetches := resp.Fetches
	for _, f := range fetches {
		f.Tensor = nil
	}
	resp.Reset()
	resp.Fetches = fetches[:0]
}

// Lender is implemented by a Worker that can lend the tensors RecvTensor
// returns (*worker.Worker): LendTensor also returns a function that the
// caller calls once it no longer reads the tensor. Without it, a transport
// uses RecvTensor.
type Lender interface {
	LendTensor(ctx context.Context, stepID int64, key string) (*tensor.Tensor, func(), error)
}

// FreshReceiver is implemented by a worker client whose RecvTensor and
// RecvTensors return tensors that no one else holds, decoded off the wire
// (the rpc package's client): the receiving step may overwrite them. A
// Worker in the same process may return the sender's own tensor.
type FreshReceiver interface {
	ReceivesFresh() bool
}

// ReceivesFresh reports whether w is a FreshReceiver that says so.
func ReceivesFresh(w Worker) bool {
	f, ok := w.(FreshReceiver)
	return ok && f.ReceivesFresh()
}

// BatchReceiver is implemented by a worker client that can ask its peer
// for several tensors of one step in one request (the rpc package's
// tensor channel): RecvTensors calls deliver once for each key, by its
// index, as its tensor arrives (or fails), and returns when every key was
// delivered, or with ErrNoBatch, before asking anything, when the peer
// cannot serve it (each key is then asked for with RecvTensor). A
// partition's tensors from one peer then cost one request, and the peer
// writes those ready together at once, instead of a round trip each.
// deliver may be called on another goroutine than the caller's, one call
// at a time.
type BatchReceiver interface {
	RecvTensors(ctx context.Context, stepID int64, keys []string, deliver func(i int, t *tensor.Tensor, err error)) error
}

// BatchLender is implemented by a Worker that can serve a batch of
// tensors with one waiter (*worker.Worker): LendTensors calls got with the
// tensors of keys as they are sent, as Lender.LendTensor would return
// each (a rendezvous.Lent's Release is called once the tensor is
// written), and returns once every key was lent, or with the error that
// ended the wait. Without it, a transport waits for each key with
// LendTensor or RecvTensor.
type BatchLender interface {
	LendTensors(ctx context.Context, stepID int64, keys []string, got func([]rendezvous.Lent)) error
}

// ErrNoBatch is returned by BatchReceiver.RecvTensors when the peer cannot
// serve a batch.
var ErrNoBatch = errors.New("peer cannot serve a batch of tensors")

// StepFinisher is implemented by a Worker that can end a step itself once
// its partition has run (*worker.Worker): FinishStep forgets the step's
// rendezvous when nothing in it is pending (every tensor the task sent
// was received, no Recv waits) and reports whether it did, in which case
// the step's CleanupStep, without an abort reason, would do nothing. A
// transport that carries the answer can spare its caller that call;
// without it, the caller makes the call.
type StepFinisher interface {
	FinishStep(stepID int64) bool
}

// Workers resolves task names to their worker services: a map in tests,
// gRPC clients in a cluster.
type Workers interface {
	// Worker returns the service of a task ("/job:ps/task:0").
	Worker(task string) (Worker, error)
	// Tasks lists every task of the cluster, sorted.
	Tasks() []string
}

// ErrPermissionDenied is wrapped by the error of a call that the caller's
// task may not make (a Shutdown from a task other than the cluster's
// chief).
var ErrPermissionDenied = errors.New("permission denied")

type callerKey struct{}

// WithCaller returns a context that carries the name of the task making a
// call ("/job:worker/task:0"). A transport sets it on the server side from
// the peer's authenticated identity (its certificate), before it calls the
// service; a service reads it with Caller. An in-process caller may set it
// itself.
func WithCaller(ctx context.Context, task string) context.Context {
	return context.WithValue(ctx, callerKey{}, task)
}

// Caller returns the task making the call, as set by WithCaller, and false
// when the transport did not say (the call's origin is unknown).
func Caller(ctx context.Context) (string, bool) {
	task, ok := ctx.Value(callerKey{}).(string)
	return task, ok && task != ""
}
