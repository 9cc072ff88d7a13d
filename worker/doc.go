// Package worker defines the worker service, what a master asks of the
// tasks that run graph partitions and what workers ask of each other to
// move tensors, and implements it in process.
//
//	w := worker.New(worker.Config{Task: "/job:ps/task:0", Workers: cache})
//	resp, err := w.RegisterGraph(ctx, &pb.RegisterGraphRequest{SessionHandle: "s1", Graph: partition.ToProto()})
//	...
//	out, err := w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s1", GraphHandle: resp.GraphHandle,
//		StepId: 42, Fetches: []string{"w/read:0"}})
//
// # State
//
// A Worker is one task. Its kernel.Resources (the variables) are shared by
// every session and outlive them, as on a TensorFlow parameter server:
// between-graph replicas that name the same variable share it. Graphs
// belong to their session: RegisterGraph returns a handle, DeregisterGraph
// and CloseSession drop them. Each registered graph caches one executor per
// signature (feeds, fetches, targets), built by the first step that uses it.
// A Worker also has an incarnation, a random number chosen when it is made
// and reported by GetStatus and RegisterGraph: a master that sees it change
// knows the task was restarted and lost its graphs and variables.
//
// # Steps
//
// All partitions of a step share its step_id. The worker keeps one
// rendezvous per step in a rendezvous.Table: Send nodes leave tensors in it;
// a Recv node whose tensor is produced on this task takes it from there, any
// other Recv calls RecvTensor on the sending task (through Config.Workers).
// A failed RunGraph aborts the step's rendezvous on this task, which fails
// the RecvTensor calls other tasks made to it; CleanupStep (which the master
// sends to every task of a step) forgets the step, with an abort reason when
// the step failed, so every wait of the step ends and a late RecvTensor
// fails at once. A RecvTensor for a step that no partition has started
// here waits for it, but the step is forgotten when its last such request
// ends, and at most rendezvous.MaxWaitingSteps of them wait at once; a
// RunGraph that fails before its step starts leaves only its reason, among
// the last few thousand: requests for steps that never run here cost the
// task no memory.
//
// # Confinement
//
// A worker runs graphs that other processes send it, so it bounds what they
// can make the task do (Config; a session's own graphs, run by
// session.New, are not confined):
//
//   - File ops (SaveVariables, RestoreVariables) read and write only under
//     Config.FileRoots, the task's checkpoint and model directories; paths
//     are made absolute, cleaned and their symlinks resolved first, so
//     "..", other absolute paths and links that leave the roots are
//     refused (kernel.ErrFileAccess). With no roots every file op is
//     refused, unless Config.UnconfinedFiles (what server.Config does for
//     now when it is given no directories).
//   - RegisterGraph refuses a node of an op not allowed remotely
//     (op.Def.Remote; ErrRemoteOp), and a node whose declared output is
//     over the tensor budget.
//   - Every tensor a kernel allocates, and every fed tensor, is checked
//     against Config.MaxTensorBytes (default a quarter of the machine's
//     memory) before it is allocated (kernel.ErrOverBudget), so a request
//     of a few bytes cannot make the task fill terabytes.
//   - A session holds at most Config.MaxGraphs graphs and
//     Config.MaxGraphBytes of them, and one caller (service.Caller) graphs
//     in at most Config.MaxCallerSessions sessions and
//     Config.MaxCallerGraphBytes in all (ErrTooManyGraphs), whatever the
//     session names it chooses; bytes are those a graph holds once
//     decoded, as GraphMemory estimates them from the request before
//     anything is built. A session's graphs go with CloseSession, or after
//     Config.SessionIdle without use; only the caller that made it may add
//     graphs to it.
//   - A write that would leave a NaN or an infinity in a variable is
//     refused by the kernel that writes it (Assign, AssignAdd, AssignSub,
//     the Apply* and SparseApply* updates), whatever the graph's shape,
//     naming the variable; the variable keeps its value
//     (kernel.Policy.RefuseNonFiniteWrites, kernel.ErrNonFiniteWrite).
//   - Shutdown obeys only the tasks of Config.ShutdownFrom when it is set,
//     as named by the transport (service.Caller), and the task logs who
//     asked.
//
// Errors name the task ("worker: task /job:ps/task:0: step 7: ...") and,
// for kernel failures, the node and op.
//
// A RunGraphRequest with trace set runs the step with executor.RunTraced
// and returns the task's timeline in RunGraphResponse.step_stats: the
// RunGraph span on lane 0, every kernel on its executor lane (a Send or
// Recv with its rendezvous key, peer and bytes), and each RecvTensor call
// to another task on the lane of the Recv that made it, on this task's
// wall clock.
//
// The subpackage workertest connects workers in memory, with fault
// injection, for tests of distributed logic without sockets.
package worker
