package rpc_test

import (
	"context"
	"net"
	"testing"

	"github.com/distflow/distflow/internal/race"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/worker"
	"github.com/distflow/distflow/worker/workertest"
)

const (
	suiteTask = workertest.Task
	suiteDev  = workertest.Device
	peerDev   = workertest.PeerDevice
)

// suite is the conformance suite's worker under test.
type suite = workertest.Suite

// overGRPC serves w on 127.0.0.1:0 and returns a client of it.
func overGRPC(t *testing.T, w *worker.Worker) worker.Service {
	t.Helper()
	return serveWorker(t, w, rpc.Options{}, rpc.Options{})
}

func serveWorker(t testing.TB, w worker.Service, srvOpts, cliOpts rpc.Options) worker.Service {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(srvOpts)
	rpc.RegisterWorker(srv, w)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c, closer, err := rpc.DialWorker(lis.Addr().String(), cliOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })
	return c
}

// TestWorkerServiceGRPC runs the worker service's conformance suite over
// gRPC and the tensor channel (the in-process reference runs in package
// worker).
func TestWorkerServiceGRPC(t *testing.T) {
	workertest.Run(t, func(t *testing.T, w *worker.Worker) worker.Service { return overGRPC(t, w) }, workertest.Options{HugeRecv: !race.Enabled})
}

func ctxT(t testing.TB) context.Context { return workertest.Ctx(t) }
