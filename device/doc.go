// Package device is the accelerator side of the runtime: a device with a
// memory space of its own, the caching allocator that serves a step's
// tensors from it, the streams that order the work and copies queued on it,
// and the registry of kernels by platform.
//
//	p, err := device.Lookup("sim")             // or "cuda" (package device/cuda)
//	gpus, err := p.Open(device.Options{Count: 2, MemoryLimit: 1 << 30})
//	d := gpus[0]                                // "GPU:0"
//	buf, err := d.Allocator().Alloc(4096)       // device memory, not addressable from Go
//	err = d.Stream().CopyIn(buf.Ptr, hostBytes) // queued: returns at once
//	err = d.Stream().Synchronize(ctx)           // the queued work is done
//	d.Allocator().Free(buf)
//
// # Platforms
//
// A Platform is a kind of accelerator: "cuda" (NVIDIA GPUs through the
// driver library, loaded at run time) or "sim", the simulated accelerator
// that every test run has: a separate memory space reached only through
// explicit copies, an asynchronous stream, and an allocator whose capacity
// runs out, computing with the CPU kernels. Both present their devices to
// placement as the device type "gpu", and both run one conformance suite
// (package device/devicetest). Platforms register themselves at init, as
// database/sql drivers do; a binary that imports neither has no GPU.
//
// # Memory
//
// Memory is a platform's raw allocation (cuMemAlloc); Allocator is the
// caching allocator above it, after TensorFlow's BFC allocator: it reserves
// regions that double in size up to a limit (Options.MemoryLimit or
// MemoryFraction of the card), serves requests from them best-fit, splits
// and coalesces chunks, and never returns memory to the platform while the
// device is open, so that a training step allocates nothing from the
// driver after its first run. A request it cannot serve fails with an
// error wrapping ErrOutOfMemory that names the device, the bytes asked for
// and the bytes free. Its Stats (in use, peak, limit) feed the metrics.
//
// # Streams
//
// A Stream is an ordered queue of device work: copies between host and
// device, and kernel launches. Enqueueing returns at once; an error of
// queued work surfaces at the next Synchronize, which waits for everything
// queued before it (or for its context). Host memory handed to a copy must
// stay live and unchanged until the stream has passed it. Because one
// stream orders all of a device's work, a buffer whose last use has been
// queued may be freed at once: work queued later that reuses its memory
// runs after that use (the stream-ordered reuse of PyTorch's caching
// allocator).
//
// # Kernels
//
// A Kernel enqueues one node's work on a stream. Kernels are registered per
// platform and op (RegisterKernel); the runtime infers every output's shape
// on the host before the launch (with the op's shape function, given the
// inputs' concrete shapes and the values of host-memory inputs) and
// allocates the outputs, so a kernel never waits for the device. Ops is the
// list of ops every GPU platform runs: the conformance suite checks each
// platform's kernels against the CPU kernels on the same inputs. Random
// are the random ops they run, from one counter-based stream (Philox,
// PhiloxUniform) that every platform draws bit for bit; Updates the
// optimizers' update rules, in place, for variables in device memory, and
// SparseUpdates their row-wise rules for an embedding's sparse gradient,
// whose indices the device checks (ErrIndexOutOfRange).
//
// # Variables
//
// Variables is a device's store of variables: buffers of its allocator
// that outlive steps, made by the first run of a Variable node and freed
// only when the store closes, so that a model's weights stay in device
// memory from step to step and a captured step updates them in place at
// every replay. Package device/runner runs a partition's Variable nodes on
// the store, Assign, AssignAdd, AssignSub (VariableOps) and the updates
// take them by ref, and the checkpoint ops reach them through copies to
// and from the host.
package device
