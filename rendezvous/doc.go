// Package rendezvous moves tensors between the partitions of one step: a
// Send kernel leaves a tensor under a key, the matching Recv kernel picks it
// up.
//
//	rv := rendezvous.NewLocal()
//	key := rendezvous.Key("/job:ps/task:0/cpu:0", "/job:worker/task:0/cpu:0", "w:0")
//	_ = rv.Send(key, w)               // never blocks
//	t, err := rv.Recv(ctx, key)       // blocks until sent, ctx ends or Abort
//
// # Keys
//
// A key names the sending device, the receiving device and the tensor
// ("node:index", or "^node" for a control edge); Key builds it and ParseKey
// splits it. Keys are unique within a step, so one step's transfers never
// mix with another's: every step has its own Local.
//
// # Implementations
//
// Local is one step's table within one process. Table keeps the Locals of a
// worker's live steps by step ID and remembers recently cleaned steps, so a
// late request fails at once with ErrStepDone; a step that receives wait
// for but no partition has started is kept only while they wait, and at
// most MaxWaitingSteps of them. A Router (NewRouter, or
// Router.Init in a worker's own step state) wraps a step's Local for a
// worker: Sends stay local (peers fetch them with RecvTensor), Recvs of
// tensors sent by another task go through a Fetcher (the worker's RPC
// client).
//
// # Failure
//
// A failed or cancelled step calls Abort (through Table.Cleanup on every
// task): every waiting Recv returns at once with an error wrapping ErrAborted
// and the reason, and later Sends and Recvs fail the same way. Recv also
// honours its context's deadline. Nothing waits forever.
package rendezvous
