// Package chaos runs a training job on a local cluster, injects faults into
// its task processes from a seed, and reports what happened: the harness
// behind `distflow chaos` and scripts/chaos.sh.
//
//	res, err := chaos.Run(ctx, chaos.Config{
//		Binary:   "/tmp/bin/distflow", // go build -o /tmp/bin/distflow ./cmd/distflow
//		Strategy: chaos.MustStrategy("sync"),
//		Seed:     7,
//		Faults:   3,
//		Window:   chaos.Window{From: time.Second, To: 6 * time.Second},
//		Deadline: 90 * time.Second,
//		Dir:      "/tmp/chaos",
//	})
//	fmt.Print(chaos.Table([]*chaos.Result{res}))
//
// # What a run does
//
// Run starts `distflow train --local-cluster ...` (the launcher) with a
// marker variable in its environment (EnvMarker, a value unique to the run),
// which every task process inherits. At times drawn from the seed it picks a
// task (any job), finds its current process by walking /proc for the marker
// and the task's TF_CONFIG, and sends SIGKILL, or SIGSTOP followed by
// SIGCONT after a pause: a crash, or a straggler or partition. It does not
// restart killed tasks itself: restarting is the launcher's job (the
// supervisor under test), and the report says what the launcher did.
//
// For each run the Result says: whether the job finished (exit 0, a final
// result, the global step reached), the test accuracy against a clean run of
// the same strategy and training seed (RunMatrix makes that run first), the
// steps lost (how far the global step went back on each restore from a
// checkpoint), for each fault how long until a warning, an error or a
// launcher line named the task ("not noticed" if nothing did), whether every
// checkpoint left in the directory validates (and whether retention had to
// delete corrupt ones), and the marked processes still alive after the
// launcher ended, which Run kills. A run still going at its deadline is
// "hung": the Result says what the last lines were waiting for, and Run
// stops every marked process. RunMatrix also bounds each fault run's wall
// time by its clean runs' (TimeBound: 3 times the longest, plus 10 s, plus
// the pauses of its stops): a run that finishes past it is "slow", and
// fails the report as a run that did not finish does, since recovering
// from a fault takes seconds and a stall of a step deadline or more is a
// defect the deadline alone lets pass.
//
// The fault schedule is a pure function of the seed (Schedule), so a run can
// be repeated; what the processes do in between is not deterministic.
//
// Finding processes needs Linux (/proc); elsewhere Run returns
// ErrUnsupported.
package chaos
