// Package rpc is distflow's one transport layer: it carries the master and
// worker services, the tensor channel and the all-reduce ring's streams,
// all on a task's one listener, with one Options (TLS, authentication,
// size limits, keepalive) for every listener and dialer, and one codec.
//
// It holds adapters only, one short method per RPC, both ways: RegisterWorker
// and RegisterMaster serve a worker.Service or master.Service on a
// Server, and DialWorker and DialMaster return the same interfaces
// backed by a connection, so masters, workers and tests never see gRPC.
// RegisterRing serves an allreduce.Ring whose allreduce.Transport is gRPC.
// The generated stubs are in rpc/rpcpb, which nothing else imports.
//
//	srv := rpc.NewServer(rpc.Options{})
//	rpc.RegisterWorker(srv, w)            // w: a *worker.Worker; its tensors also go over the tensor channel
//	rpc.RegisterMaster(srv, m)            // m: a *master.Master
//	ring, err := rpc.RegisterRing(srv, c) // c: an allreduce.Config (optional)
//	go srv.Serve(lis)                     // gRPC and the tensor channel on one listener
//
//	ws, conn, err := rpc.DialWorker("127.0.0.1:2222", rpc.Options{})
//	defer conn.Close()
//	st, err := ws.GetStatus(ctx, &pb.GetStatusRequest{}) // waits for the peer until ctx ends
//
// Importing the package registers the "grpc" scheme with session.Open:
//
//	import _ "github.com/distflow/distflow/rpc"
//	sess, err := session.Open(ctx, "grpc://127.0.0.1:2222", g)
//
// # Tensors
//
// RecvTensor, the bulk of a cluster's traffic, goes over the tensor
// channel: plain TCP (TLS when Options.TLS is set) on the task's own
// address, beside gRPC. The Server tells the two apart by a connection's
// first bytes; the sender writes a small header and then the tensor's own
// memory in one writev, and the receiver reads the bytes straight into the
// tensor it allocates, which moves 64 MiB several times faster than a gRPC
// stream (see tensorchan.go for the wire format). Clients keep a pool of
// connections per peer, reused across steps; every request carries the
// step's deadline, is authenticated like a gRPC call, and ends when the
// step's context does; errors unwrap to the same sentinels as over gRPC.
// A peer that does not offer the channel (an older server, or one with
// Options.NoTensorChannel) is served over gRPC, as is a client with
// NoTensorChannel.
//
// The two calls a master makes to every remote task at every step,
// RunGraph and CleanupStep, go over the channel too (version 1.1: their
// serialised request and response), with the same authentication and
// errors as over gRPC, which costs several times the CPU per call; a
// request larger than about 1 MiB, or a peer that speaks version 1.0 of
// the channel, goes over gRPC. A peer that finishes a step itself says so
// in its RunGraph answer, and the step's CleanupStep then makes no call
// (service.StepFinisher). A step's partition asks each peer it receives
// several tensors from for all of them in one request (RecvTensors,
// service.BatchReceiver), answered key by key, those sent together in one
// write (see tensorbatch.go).
//
// Over gRPC, RecvTensor streams a tensor's raw little-endian bytes in
// messages of at most 4 MiB; the first carries dtype and dims, and the
// receiver allocates the tensor once and copies each chunk into place, so
// tensors of any size (1 GiB and more) move without one huge message. The
// messages are protobuf (pb.RecvTensorResponse, byte for byte), but the
// server's codec writes a few header bytes followed by the sender's tensor
// memory itself, without marshalling a copy, and the client's codec for
// RecvTensor parses the header and copies the bytes straight from gRPC's
// receive buffers into the tensor, without unmarshalling one (codec.go).
// Other messages go whole: a server receives at most
// Options.MaxMessageBytes in one (by default DefaultMaxRecvMessageBytes,
// the largest graph a task holds for a session and 64 MiB more) and
// refuses a larger one from its length prefix, before reading or decoding
// it (codes.ResourceExhausted).
//
// # Waiting for peers
//
// Connections are made in the background (grpc.NewClient) and re-tried with
// a backoff of 50 ms doubling to 2 s; calls wait for their peer
// (WaitForReady) until their context ends. A WorkerCache dials the tasks of
// a cluster.Spec lazily and, before the first call to a task, waits for it
// like WaitForTasks: retried, logged every few seconds ("waiting for
// /job:ps/task:0 at 127.0.0.1:2222"), and failing with an error naming the
// task when the caller's deadline passes. Once a task has answered, a call
// to it that finds it unreachable fails at once (ErrUnavailable, naming
// it), as TensorFlow's UnavailableError does: the loss of a task is
// reported to whoever can recover from it, not waited out in silence.
//
// # Errors
//
// A peer's error keeps its message; its status code carries the sentinels
// callers test (context.DeadlineExceeded, context.Canceled,
// graph.ErrNotFound, kernel.ErrUninitialized, rendezvous.ErrAborted), which
// the client's *RemoteError unwraps to, so errors.Is behaves as in process.
// Errors name the peer's address (and task, through a WorkerCache).
//
// # Security
//
// Options is the one place for transport security and limits: TLS
// configures the credentials of servers and clients (gRPC, the ring's
// streams and the tensor channel), Authenticate is called by the server's
// unary and stream interceptors before every call (the ring's streams
// included) and by the tensor channel before every request, Identify then
// names the caller from its verified certificate (PeerCertificate) for the
// services (service.Caller), and PerRPCCredentials attaches a client's
// token to all of them. Refused calls and failed TLS handshakes are logged
// as warnings with the peer's address and the reason.
// MaxMessageBytes, MaxTensorBytes and Keepalive apply to every connection
// likewise. Nothing else in distflow deals with them (allreduce's ring
// runs on the task's own server, not on one of its own), so a change to
// transport security changes this package only.
package rpc
