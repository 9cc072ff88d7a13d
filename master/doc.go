// Package master defines the master service, what a client session asks of
// a task, and implements it over the cluster's worker services.
//
//	m := master.New(master.Config{Task: "/job:worker/task:0", Devices: devices, Workers: cache})
//	cs, err := m.CreateSession(ctx, &pb.CreateSessionRequest{Graph: g.ToProto()})
//	out, err := m.RunStep(ctx, &pb.RunStepRequest{SessionHandle: cs.SessionHandle,
//		Feeds: feeds, Fetches: []string{"loss:0"}, Targets: []string{"train"}})
//
// # Planning
//
// The first step of a signature (graph.Signature: feeds, fetches, targets;
// cached by its Key) builds its plan with NewPlan, a pure function of the
// graph, the signature and the session's devices: graph.NewSubgraph prunes
// the graph to the step (fed tensors become the step's inputs),
// placement.Place gives every node a full device (explicit devices merged
// with the session's default device, device filters, soft placement), and
// partition.Subgraph cuts it per task with Send/Recv pairs on the crossing
// edges and a Placeholder for each fed tensor in each task that reads it.
// Every partition is then registered on its task. Later steps of the
// signature reuse the registered partitions; CloseSession deregisters them.
// The plans of the reference topologies are golden files in testdata/
// (go test -run TestPlanGolden -update rewrites them).
//
// # Steps
//
// Every step gets a fresh random step ID. Its feeds are checked
// (graph.CheckFeed) before any task runs; each goes to the partitions that
// read it, fetches come from the partition that produces them (a fed fetch
// is answered with the fed value), and RunGraph runs on every partition concurrently under
// the step's context (deadline: the session's step_timeout_ms, else the
// caller's). The first failure cancels the others, and CleanupStep with an
// abort reason goes to every task of the step, so no wait of the step (a
// Recv for a Send that will never come) outlives it. The error returned
// names the task that failed first and, from the worker, the node. Steps of
// one session may run concurrently.
//
// # Lost tasks
//
// A task is lost when a call to it fails because it cannot be reached
// (service.ErrUnavailable) or because it no longer knows a graph registered
// on it (service.ErrNoGraph): it was restarted, as a supervisor restarts a
// crashed ps, and its graphs and variables are gone. Registrations also
// report the worker's incarnation, a number chosen when it started, so a
// restart is noticed by a new plan too. The master then drops every plan
// with a partition registered on that task before the loss (and
// deregisters the plans' other partitions), so that the next step of each
// signature registers it again instead of failing on a stale handle. The
// step that found out fails with an error wrapping the sentinel: the
// client, such as train.MonitoredSession, waits for the task and restores
// the variables before it goes on.
//
// # Limits
//
// One caller (the task or client the transport names, service.Caller)
// holds at most Config.MaxSessions sessions and Config.MaxGraphBytes of
// graphs in them: their graphs and the partitions of their plans, counted
// by the memory they hold (worker.GraphMemory, estimated from a request
// before anything is built from it); past them CreateSession,
// ExtendSession and the first step of a signature fail with
// ErrTooManySessions. A session unused for Config.SessionIdle is closed,
// on its tasks too.
//
// A RunStep with options.trace asks every part for its timeline and
// returns them in RunStepResponse.step_stats, each worker's with the offset
// that puts it on the master's clock (trace.AlignOffset), followed by the
// master's own spans: RunStep and each RunGraph call with its bytes.
package master
