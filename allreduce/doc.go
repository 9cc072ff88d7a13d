// Package allreduce averages tensors among workers with no parameter
// server: a chunked, pipelined ring all-reduce over a Transport.
//
//	rings, err := allreduce.NewInProcess(3, allreduce.InProcessConfig{}) // or, one per task:
//	srv, err := server.New(server.Config{..., Ring: workers})          // ring = srv.Ring()
//	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
//	defer cancel()
//	err = ring.AllReduceMean(ctx, "grads", step, grads) // grads []float32, in place
//
// The package knows no network: a Ring sends its chunks through a
// Transport and receives them as a Receiver. MemNetwork connects ranks in
// one process (and can delay chunks and cut ranks, for tests); the gRPC
// transport lives with the other gRPC adapters, in package rpc
// (rpc.RegisterRing), where the ring's service shares a task's address,
// TLS, authentication, limits and keepalive with its other services
// (server.Config.Ring does it for a task). Every transport passes the
// conformance suite of package allreducetest.
//
// # Algorithm
//
// With N ranks the tensor is cut into N segments. Reduce-scatter: in N-1
// steps each rank sends one segment to the next rank and adds the segment it
// receives from the previous one, after which rank r holds the complete sum
// of segment r+1. All-gather: in N-1 more steps the complete segments go
// round the ring. Each rank sends and receives 2(N-1)/N of the tensor,
// whatever N. Segments are cut into chunks (Config.ChunkBytes, 1 MiB by
// default) and pipelined: a chunk is forwarded as soon as it has been
// reduced, while the next one is still arriving, so that sending and
// receiving overlap. All ranks end with bit-identical results, since each
// segment is summed once and then copied.
//
// # Summation servers
//
// With Config.Servers the last peers are summation servers (the ps tasks
// of a cluster), BytePS's design: the tensor is cut into one slice per
// server, each rank streams slice j to server j, which sums the chunks of
// every member as they arrive and streams the sums back. Each rank sends
// and receives the tensor once, whatever N. A server holds no state. The
// route of an operation is its view's (View.RingOnly), the same on every
// member: a server that dies fails the operation on every member, with
// ErrServerFailed (it is never run round the ring by some members and
// through the servers by others), and the leader chooses the route of the
// next view (Ring.DownServers). Compressed wires, all-gathers and
// operations of negative rounds always go round the ring (star.go).
//
// # Views
//
// An elastic ring runs its operations among the members of a View, which
// the leader sends (elastic.go). A view is all or nothing: an operation of
// a view that fails on one member fails on the others at once, those
// running and those yet to start (ErrViewFailed), since the member that
// failed waits for the next view.
//
// AllReduceWire sends the values as float16 or bfloat16 (two to a 32-bit
// word, so transports are unchanged), accumulating in float32 at each hop:
// half the bytes. AllGather is the all-gather phase alone, for pieces such
// as sparse (index, value) lists that must not be summed.
//
// # Contracts
//
// Every rank calls the same operations with the same (name, round) and the
// same tensor length; (name, round) keys the chunks, so operations with
// different keys may run concurrently and successive rounds never mix.
// A second concurrent call with a running key fails with ErrBusy; peers
// that disagree on the length fail with ErrMismatch, on every rank: the
// rank (or summation server) that finds a mismatch or a non-finite value
// tells the other members (a failure notice), which would otherwise wait
// for chunks that do not come until their deadline. Every call blocks until
// the operation completes or fails: give it a context with a deadline. A
// dead peer fails the operation within that deadline (at once when a
// stream to or from it breaks, or when it refuses connections after it
// answered once: its process has exited), with an error that names the
// peer's rank and address. After a failure the tensor holds partial sums.
//
// A rank takes an operation's chunks only from the rank that sends them to
// it (its previous rank, or the summation servers): chunks that another
// member sends are refused once the operation runs, and dropped when it
// starts. Chunks of operations that have not started here are kept within
// a share per peer (256 operations, 1 GiB): a peer over its share loses
// its oldest such chunks, and the operation they were for fails when it
// starts here. Those of a view's operations go when the ring re-forms
// (Among a newer view). A malformed chunk (a negative index, offset or
// length, or no other peer as its sender) is refused and leaves nothing
// behind. A transport that authenticates its peers checks the rank a
// chunk names against the sender (rpc.RegisterRing does, against
// Config.Names): a member cannot send chunks, failure notices or views as
// another.
//
// train.AllReduceTrainer and train.PeriodicAverager use a ring to train
// with averaged gradients or averaged models.
package allreduce
