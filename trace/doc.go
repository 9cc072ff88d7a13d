// Package trace turns the timelines of traced steps into Chrome trace
// files: the Trace Event Format JSON that Perfetto (ui.perfetto.dev) and
// chrome://tracing open.
//
//	var b trace.Builder
//	b.Add(stats) // a *distflowpb.StepStats from session.RunTraced, once per step
//	err := trace.WriteFile(filepath.Join(dir, trace.FileName(globalStep)), b.File())
//
// A traced step's timeline is a StepStats: per task, the spans it recorded
// on its own wall clock (every kernel an executor ran, on the executor lane
// that ran it; the RPCs the task made) and the offset that puts that clock
// on the client's. The file has one process (pid) per task, named by the
// task, and one thread (tid) per track of that task (an executor lane, the
// master's calls to one task), named too; kernels and RPCs are complete
// ("X") events with their bytes, peer and rendezvous key in args, and a
// flow arrow joins each Send to the Recv that got its tensor.
//
// Validate checks a file as the tests and the CLI do: the required fields,
// every pid and tid named, no negative duration, events of one thread
// nested, flows paired. Builder and Validate are pure (no I/O); WriteFile
// writes atomically.
package trace
