// Package dashboard is the live web page of a training run: the cluster as
// a picture (each task's role, address, state, step rate, heartbeat age,
// CPU and memory, and the memory of its accelerators; stragglers and lost
// tasks highlighted), live curves
// (loss, accuracy, examples/s, per-worker step time), the events of the
// run, the model graph with its placement, and the newest step trace.
//
//	d, err := dashboard.New(dashboard.Config{
//		Tasks:  dashboard.TasksOf(map[string][]string{"ps": {"127.0.0.1:2222"}, "worker": {"127.0.0.1:2223"}}),
//		Prober: dashboard.NewRPCProber(opts), // the cluster's rpc.Options
//	})
//	lis, err := net.Listen("tcp", ":8080")
//	go d.Serve(ctx, lis) // polls every task each second until ctx ends
//	d.SetGraph(dashboard.FromGraph(g, "/job:worker/task:0"))
//
// The dashboard asks every task for its status (the GetStatus RPC) and
// scrapes the Prometheus metrics the task names in its answer
// (metrics_address; see package metrics for the names), so that it costs
// the tasks one small RPC and one scrape per Interval. A task that has not
// answered for Config.LostAfter is lost; a worker stepping at less than
// Config.StragglerRatio of the median rate is a straggler; tasks that stop
// answering after Finished are done. Events (lost, recovered, restarted,
// checkpoint saved, stale gradients dropped) come from these states and
// from the counters.
//
// The page updates itself from server-sent events (/api/events) and needs
// no network: its script, styles and chart library (uPlot, MIT licence, in
// static/) are embedded. /api/cluster lists every task with the URL of its
// /metrics, for scripts and tests.
package dashboard
