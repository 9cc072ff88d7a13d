// Package localcluster starts a program as a whole cluster of local
// processes, as `distflow train --local-cluster ps=1,worker=2` does: one
// process of the same program per task, each on a free loopback port,
// supervised until the run ends. Any program can do it for itself:
//
//	var local = flag.String("local-cluster", "", "run as a local cluster, e.g. ps=1,worker=2")
//
//	func main() {
//		flag.Parse()
//		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//		defer stop()
//		if *local != "" && !localcluster.IsTask() {
//			// The launcher: start the tasks and wait for them.
//			jobs, err := localcluster.Parse(*local)
//			if err != nil {
//				log.Fatal(err) // localcluster: "ps=1,worker=x": invalid jobs: "worker=x" is not job=count ...
//			}
//			err = localcluster.Run(ctx, localcluster.Config{
//				Jobs:      jobs,
//				Args:      localcluster.WithoutFlag(os.Args[1:], "local-cluster"),
//				RestartPS: true,
//			})
//			if err != nil {
//				log.Fatal(err) // e.g. localcluster: worker 0 failed: exit status 1
//			}
//			return
//		}
//		// A task (or a process of a cluster started otherwise): TF_CONFIG
//		// says which, and the task serves on the socket Run made for it.
//		spec, self, ok, err := cluster.FromEnv()
//		lis, err := localcluster.Listener() // nil, nil when not started by Run
//		...
//	}
//
// # Tasks
//
// Run re-executes the program (os.Executable) once per task, with the same
// arguments and environment plus TF_CONFIG, the standard TensorFlow
// description of the cluster and of the task, which cluster.FromEnv reads:
//
//	{"cluster": {"ps": ["127.0.0.1:40001"], "worker": ["127.0.0.1:40002", "127.0.0.1:40003"]},
//	 "task": {"type": "worker", "index": 1}}
//
// EnvTask=1 marks the process as a task (IsTask). Run creates every task's
// listening socket itself and passes it as file descriptor 3 (EnvListenFD=3),
// so that no other process can take a port between Run choosing it and the
// task using it; Listener returns it. Each task gets GOMAXPROCS set to this
// process's cores divided among the training tasks (the chief and the
// workers), unless GOMAXPROCS is set.
//
// The chief is the chief task, or worker 0 when there is none. The run ends
// when every training task has exited; Run returns nil when the chief exited
// 0, and otherwise a *TaskError naming the task that ended the run.
//
// # Supervision
//
// No process outlives the run: on Linux the tasks die with the launcher
// (Pdeathsig), cancelling Run's context stops them (SIGTERM, then SIGKILL
// after Config.StopGrace), and so does any task's failure, except that
// Config.RestartPS restarts a ps task that fails, on its socket, and
// Config.TolerateWorkerLoss lets the others go on without a failed worker
// that is not the chief (RestartWorkers and RestartChief restart those
// too). A task that exits with ExitPermanent, its own input or
// computation having failed, is neither restarted nor let go: the run ends
// with its error. Once the chief has exited 0, training is over: nothing is
// restarted, the sockets of tasks that exited are closed (their peers are
// refused, not queued), training tasks still running are stopped after
// Config.EndGrace, and the ps tasks are given Config.PSExitGrace to exit
// by themselves (the chief tells them to).
//
// # Output
//
// The run is quiet: the chief's stdout is Config.Stdout unchanged (its
// results are the run's), its stderr goes to Config.Stderr with a
// "[worker 0] " prefix, and Run adds a line naming the cluster and one per
// event that matters (a task failed, restarted, did not exit). The other
// tasks' output is shown, prefixed, only with Config.Verbose; otherwise
// each task's last lines are kept and shown when it fails. Lines never
// interleave.
package localcluster
