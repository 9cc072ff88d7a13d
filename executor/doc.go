// Package executor runs one graph on one device (the CPU) for a fixed
// signature: the tensors fed, the tensors fetched and the nodes run as
// targets.
//
//	e, err := executor.New(g, graph.Signature{Feeds: []graph.Output{x}, Fetches: []graph.Output{y}}, res)
//	...
//	out, err := e.Run(ctx, []*tensor.Tensor{xv}) // out[0] is y
//
// # Preparation (New)
//
// New prunes the graph to the minimal subgraph: it walks back from the
// fetches and targets through data and control inputs. A fed tensor cuts the
// walk, so its producer runs only if another of its outputs is needed. A ref
// input (an Assign's variable) does not pull in the Variable node, which would
// read the value: the executor resolves it to the variable in the resource
// container once and hands it to the kernel in kernel.Context.Refs. Every
// kernel is built once by its factory. Each node output and each feed gets a
// value slot; New precomputes per node its input slots, its distinct
// successors and its count of pending predecessors, and per slot its number
// of consumers.
//
// # A step (Run)
//
// A step copies the pending counts and runs the nodes whose count is zero.
// When a node finishes, its successors' counts are decremented atomically,
// and those that become ready are classified by the size of their inputs
// (all known by then): cheap (under 16K input elements) or costly. The
// first costly one (else the first cheap one) runs next on the same
// goroutine, so that a chain of real work never waits for a handoff. Other
// cheap nodes go on the worker's own stack, because handing them to another
// goroutine costs more than running them; other costly ones go to a shared
// ready queue served by a bounded pool of at most GOMAXPROCS workers (at
// least 2), started on demand. The calling
// goroutine is a worker itself, so a chain or a web of small ops (a
// batch-1 training step) runs with no goroutine handoff and no lock: a few
// atomic operations per node. Independent branches of real work run in
// parallel.
//
// A slot is released (set to nil, so the tensor can be collected) once its
// last consumer has run; fetched and fed slots are kept.
//
// A Variable node's output is the variable's own buffer, shared without a
// copy (kernel.Variable is copy-on-write; the kernel records its
// kernel.Lease in kernel.OutputBuffer). The executor counts the live slots
// that hold the buffer or alias it (through Identity, Reshape and other
// forwarding kernels) and hands the share back when the last of them is
// released, so that the variable's next update runs in place. A shared
// buffer that a stateful kernel may keep (a queue) is never handed back:
// the variable moves to another buffer on its next update instead. A
// kernel.InputLeaser (Send) gets a share of its own for such an input,
// which it hands back itself (once a peer has written the tensor to the
// wire), so the step's share goes back as usual. A
// fetched one is copied for the caller when the step ends, and then handed
// back. A failed step hands back nothing, which is safe.
//
// A kernel.InputOverwriter (Assign) learns which of its inputs it may
// overwrite: those that are the step's own buffer (allocated in the step,
// or received off the wire: kernel.Context.SetOwnOutput), not a view,
// viewed by no other slot, escaping nowhere, and read by no later node.
// An Assign then swaps storage with its variable instead of copying into
// it (kernel.Variable.Exchange), and the recycled intermediate holds the
// variable's old storage for the next step.
//
// The first error aborts the step: no further node starts, the context
// handed to kernels is cancelled (so blocking kernels return), and Run
// returns that error, which names the node and op. A kernel panic is
// recovered into such an error. Cancelling Run's context aborts the step and
// Run returns at once with an error wrapping ctx.Err(), even if a node that
// ignores its context is still running on another goroutine. Kernels whose
// outputs do not have the dtype, or a shape compatible with the shape,
// inferred at build time are reported as errors rather than propagated.
//
// Kernels that may wait on something outside the step (Recv, queues)
// implement Blocking and run on a goroutine of their own, so that they
// cannot occupy the whole pool while the nodes that would release them wait.
//
// # Control flow
//
// The kernels of the functional control-flow ops If and While (package op;
// built by ops.Cond and ops.WhileLoop) live here, since running a branch
// or a loop body is running a graph: each function gets a nested Executor,
// built on first use for each resource container and kept by the kernel,
// fed its arguments and fetching its results, in the node's step (same
// step ID, rendezvous and resources). Both kernels are Blocking, so a
// long loop runs on a goroutine of its own and its context is cancelled by
// the step's first error; a While checks that context before every
// iteration and fails with an error wrapping its cause, naming how many
// iterations ran. A While keeps each iteration's loop variables (its
// history outputs, stacked) only when some node of the graph consumes
// them: its gradient. They borrow their inputs (kernel.InputBorrower) when
// no node of their functions is of a stateful op.
//
// # Step traces
//
// RunTraced runs a step as RunStep does and records every node it executed
// into a StepTrace: wall-clock start and end, the lane (the worker that ran
// it: lane 0 is the caller's goroutine), input and output bytes. A step run
// without one records nothing and pays a branch on each side of a kernel.
// Workers and local sessions turn the record into a step timeline
// (distflowpb.TaskStepStats) for package trace.
//
// # Concurrency and ownership
//
// An Executor is immutable after New and safe for concurrent Run calls; each
// Run has its own state. Feeds are only read. Fetches belong to the caller:
// a fetched Const value is cloned (the graph keeps the original); other
// tensors are produced for this step only, but a fetched feed, or a view
// of one, is the feed itself. StepOptions.Owned tells which fetches are
// storage of the step's own, which a worker hands on without a copy.
// Stats reports cumulative counters for tests and benchmarks.
package executor
