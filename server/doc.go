// Package server runs one task of a distflow cluster: a master service and
// a worker service on one rpc.Server (gRPC, and the tensor channel for
// tensors, on the task's one address), reaching the other tasks through an
// rpc.WorkerCache.
//
//	spec, self, err := cluster.FromFlags("127.0.0.1:2222", "127.0.0.1:2223", "", "ps", 0)
//	srv, err := server.New(server.Config{Cluster: spec, Task: self})
//	if err := srv.Start(); err != nil { ... } // listens on 127.0.0.1:2222
//	err = srv.Join(ctx) // until a Shutdown RPC, Stop, or ctx ends
//	srv.Stop()
//
// A client opens a session on any task's Target ("grpc://127.0.0.1:2223");
// that task's master plans the steps and runs the partitions on the tasks
// named by the nodes' devices.
//
// Tasks start in any order. Start does not wait for the other tasks; the
// first call to a task (the master registering a partition there, a worker
// fetching a tensor) waits for it with backing-off retries, logging
// "waiting for /job:ps/task:0 at 127.0.0.1:2222" every few seconds, and
// fails with an error naming the task when the step's deadline passes.
//
// A parameter server usually just joins: it serves until the chief sends it
// a Shutdown request (training finished), then Join returns nil; the
// command `distflow server` also stops on SIGTERM and SIGINT. Stop is
// graceful: it waits up to 5 s for calls in progress before cutting them.
package server
