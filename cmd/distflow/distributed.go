package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/placement"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// addClusterFlags declares the flags of TensorFlow 1.x programs that
// describe the cluster and this task.
func addClusterFlags(fl *pflag.FlagSet, ps, worker, chief, job *string, index *int) {
	fl.StringVar(ps, "ps_hosts", "", "comma-separated host:port list of the ps job")
	fl.StringVar(worker, "worker_hosts", "", "comma-separated host:port list of the worker job")
	fl.StringVar(chief, "chief_hosts", "", "host:port of the chief (at most one; without it worker 0 is the chief)")
	fl.StringVar(job, "job_name", "", "this task's job: ps, worker or chief")
	fl.IntVar(index, "task_index", 0, "this task's index within its job")
}

// clusterFromFlags returns the cluster and this task from the host flags, or
// from TF_CONFIG when no host flag is set. A nil spec means no cluster.
func clusterFromFlags(ps, worker, chief, job string, index int) (*cluster.Spec, cluster.TaskID, error) {
	if ps != "" || worker != "" || chief != "" {
		return cluster.FromFlags(ps, worker, chief, job, index)
	}
	if job != "" {
		return nil, cluster.TaskID{}, fmt.Errorf("--job_name %s given without --ps_hosts/--worker_hosts/--chief_hosts", job)
	}
	spec, self, ok, err := cluster.FromEnv()
	if err != nil || !ok {
		return nil, cluster.TaskID{}, err
	}
	return spec, self, nil
}

// inheritedListener returns the listening socket passed as file descriptor
// fd by --local-cluster, or nil (listen on the task's own address).
func inheritedListener(fd int) (net.Listener, error) {
	if fd == 0 {
		return nil, nil
	}
	l, err := inheritedListenerFromFile(os.NewFile(uintptr(fd), "listener"))
	if err != nil {
		return nil, fmt.Errorf("--listen-fd %d: %w", fd, err)
	}
	return l, nil
}

// inheritedListenerFromFile turns a socket file into a listener and closes
// the file (the listener holds its own descriptor). Connections already
// waiting on the socket are closed (see dropPending).
func inheritedListenerFromFile(f *os.File) (net.Listener, error) {
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	if tl, ok := l.(*net.TCPListener); ok {
		if err := dropPending(tl); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// dropPending closes the connections waiting in l's queue. A task that
// takes over a socket (a ps restarted on its predecessor's) finds there
// the connections made while no one served it, carrying requests of the
// task that died: a tensor request for one of its steps would wait here
// for the whole step timeout for a step this process never runs. Their
// clients see the connection closed and connect again.
func dropPending(l *net.TCPListener) error {
	defer l.SetDeadline(time.Time{})
	for {
		// A deadline in the past would fail Accept before it looked at
		// the queue; a short one ends the loop once the queue is empty.
		if err := l.SetDeadline(time.Now().Add(time.Millisecond)); err != nil {
			return err
		}
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			return err
		}
		c.Close()
	}
}

// serve runs a started server until a Shutdown RPC or a signal.
func serve(ctx context.Context, srv *server.Server, log *slog.Logger) error {
	log.Info("serving", "target", srv.Target())
	if err := srv.Join(ctx); err != nil {
		srv.Stop()
		log.Info("exiting", "reason", "signal received")
		return nil
	}
	log.Info("exiting", "reason", srv.StopReason())
	return nil
}

// replicas lists the tasks that train: the chief (if any) first, then the
// workers. The first one is the chief.
func replicas(spec *cluster.Spec) []cluster.TaskID {
	var out []cluster.TaskID
	for _, job := range []string{"chief", "worker"} {
		for i := 0; i < spec.NumTasks(job); i++ {
			out = append(out, cluster.TaskID{Job: job, Index: i})
		}
	}
	return out
}

// trainInCluster runs this process's task of a distributed run: a ps (or,
// with --in-graph, a non-chief worker) serves until the chief ends training;
// a worker trains between-graph: its own client and graph, the shared
// variables on the ps tasks, asynchronous updates.
func trainInCluster(ctx context.Context, f trainFlags, spec *cluster.Spec, self cluster.TaskID, stdout, stderr io.Writer) error {
	base := slog.New(slog.NewTextHandler(stderr, nil))
	log := base.With("task", self.String())
	lis, err := inheritedListener(f.listenFD)
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{Cluster: spec, Task: self, Listener: lis, Logger: base})
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	defer srv.Stop()
	reps := replicas(spec)
	index := -1
	for i, r := range reps {
		if r == self {
			index = i
		}
	}
	if index < 0 || (f.inGraph && index > 0) {
		return serve(ctx, srv, log)
	}
	if spec.NumTasks("ps") == 0 {
		return errors.New("the cluster has no ps task: give --ps_hosts")
	}
	return runReplica(ctx, f, spec, reps, index, srv, stdout, stderr, log)
}

// runReplica trains as replica `index` of reps (0 is the chief).
func runReplica(ctx context.Context, f trainFlags, spec *cluster.Spec, reps []cluster.TaskID, index int,
	srv *server.Server, stdout, stderr io.Writer, log *slog.Logger) error {
	started := time.Now()
	self, chief := reps[index], index == 0
	strategy := placement.RoundRobin
	switch f.psStrategy {
	case "round-robin":
	case "greedy":
		strategy = placement.GreedyBySize
	default:
		return fmt.Errorf("--ps-strategy %q: want round-robin or greedy", f.psStrategy)
	}
	s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
		PSTasks: spec.NumTasks("ps"), WorkerDevice: self.String(), Strategy: strategy,
	}))
	towerDevices, filters := []string{""}, []string{"/job:ps", self.String()}
	if f.inGraph {
		towerDevices, filters = nil, nil
		for _, r := range reps {
			towerDevices = append(towerDevices, r.String())
		}
	}
	if f.inGraph && (f.sync || f.staleness >= 0) {
		return errors.New("--in-graph averages the towers itself: drop --sync and --staleness")
	}
	j, err := buildJob(s, f, towerDevices, len(reps), index)
	if err != nil {
		return err
	}
	// One completion flag per replica, on the ps tasks: the chief shuts the
	// cluster down once every replica that is still alive has finished.
	var done []*ops.Variable
	if !f.inGraph {
		ds := s.SubScope("replica_done")
		for _, r := range reps {
			done = append(done, ops.NewVariable(ds, fmt.Sprintf("%s_%d", r.Job, r.Index), tensor.Float32, nil, ops.ZerosInit(), ops.NotTrainable()))
		}
	}
	var markDone, initDone *graph.Node
	if done != nil {
		markDone = ops.Assign(s, done[index].Value(), ops.Scalar(s, tensor.Float32, 1)).Node
		initDone = ops.VariablesInitializer(s, done...)
	}
	if chief {
		if err := j.addSaver(s, done, log); err != nil {
			return err
		}
	}
	initOp := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		return err
	}
	sess, err := session.New(s.Graph(), session.WithMaster(srv.Master(), &pb.SessionConfig{
		DeviceFilters: filters, DefaultDevice: self.String(), StepTimeoutMs: f.stepTimeout.Milliseconds(),
	}))
	if err != nil {
		return err
	}
	defer sess.Close()
	if recoverable(f) {
		j.addClusterWait(srv, spec, self, reps, log)
	}

	ms, err := j.monitor(ctx, sess, chief, initOp, initDone, log)
	if err != nil {
		return err
	}
	stopSync := func() {}
	if j.sync != nil {
		stopSync, err = j.startSync(ctx, sess, chief, log)
		if err != nil {
			return err
		}
		defer stopSync()
	}

	ex, err := loadExamples(f)
	if err != nil {
		return err
	}
	n := ex.trainX.Shape()[0]
	var its []*data.Iterator
	for t := range j.towers {
		shards, shard := len(reps), index
		if f.inGraph {
			shard = t
		}
		it, err := batches(ctx, ex, f, shards, shard)
		if err != nil {
			return err
		}
		defer it.Close()
		its = append(its, it)
	}
	target := f.targetSteps(n, j.batchesPerStep())
	log.Info("training", "model", f.model, "data", ex.source, "replica", index, "replicas", len(reps),
		"global_steps", target, "batch", f.batch, "in_graph", f.inGraph)
	events, err := openEvents(f.logdir, fmt.Sprintf("%s-%d", self.Job, self.Index))
	if err != nil {
		return err
	}
	st, err := j.trainLoop(ctx, ms, its, target, n, self.String(), stderr, events)
	if err := closeEvents(events, err); err != nil {
		return err
	}
	if markDone != nil {
		if _, err := sess.Run(ctx, nil, nil, []*graph.Node{markDone}); err != nil {
			return fmt.Errorf("reporting completion: %w", err)
		}
	}
	var res result
	if chief && j.sync != nil {
		// Release the replicas still waiting for a token: training is over.
		if err := j.sync.Finish(ctx, sess); err != nil {
			log.Warn("finishing synchronous training", "err", err)
		}
		stopSync() // no aggregation after this: the global step is final
	}
	if chief {
		if err := ms.Close(ctx); err != nil { // the final checkpoint
			return err
		}
		res, err = j.finalResult(ctx, sess, ex, st, started)
		if err != nil {
			return err
		}
		if done != nil {
			waitForReplicas(ctx, sess, spec, reps, done, f.waitTimeout, log)
		}
		sess.Close() // while every task still answers
		res.PSVariables = psVariables(ctx, spec, log)
		shutdownCluster(ctx, spec, self, f.inGraph, log)
	} else {
		res = result{Model: f.model, Optimizer: f.optimizer, LearningRate: f.lr, Batch: f.batch,
			LocalSteps: st.localSteps, Loss: st.loss, Data: ex.source, TrainExamples: n,
			ExamplesPerSecond: st.examplesPerSecond(f.batch),
			WallSeconds:       time.Since(started).Seconds()}
		if gs, err := sess.Run(ctx, nil, []graph.Output{j.globalStep.Value()}, nil); err == nil {
			res.GlobalStep = int64(gs[0].Float64At(0))
		}
		sess.Close() // before the chief stops the ps tasks
	}
	res.Task = self.String()
	return report(stdout, res, f.jsonOut)
}

// recoverable reports whether a run survives the loss of a task that its
// supervisor restarts: asynchronous training with checkpoints to restore
// the lost variables from. (The synchronous and bounded-staleness state on
// the ps, queues and counters, is not in checkpoints.)
func recoverable(f trainFlags) bool {
	return f.checkpointDir() != "" && !f.sync && f.staleness < 0 && !f.allReduce
}

// addClusterWait lets j's monitored session recover from a lost task: it
// waits for the tasks the session uses (the ps tasks, and with in-graph
// replication the other replicas) with backing-off checks and a log line
// naming each missing task and its address, on the connections of srv,
// whose master runs the session's steps (see server.Server.Workers).
func (j *job) addClusterWait(srv *server.Server, spec *cluster.Spec, self cluster.TaskID, reps []cluster.TaskID, log *slog.Logger) {
	var tasks []string
	for _, t := range spec.Tasks() {
		if t.Job == "ps" || j.f.inGraph && t != self && slices.Contains(reps, t) {
			tasks = append(tasks, t.String())
		}
	}
	j.waitForCluster = func(ctx context.Context) error {
		return rpc.WaitForTasks(ctx, srv.Workers(), tasks, log)
	}
}

// startSync prepares synchronous training once the model is ready: every
// replica sets its local step; the chief fills the token queue and runs the
// aggregation loop in the background until the returned stop is called.
func (j *job) startSync(ctx context.Context, sess *session.Session, chief bool, log *slog.Logger) (stop func(), err error) {
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{j.sync.LocalStepInit()}); err != nil {
		return nil, fmt.Errorf("synchronous training: setting the local step: %w", err)
	}
	if !chief {
		return func() {}, nil
	}
	if err := j.sync.InitTokens(ctx, sess); err != nil {
		return nil, fmt.Errorf("synchronous training: %w", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := j.sync.ChiefQueueRunner(runCtx, sess); err != nil {
			log.Warn("the chief's aggregation loop stopped", "err", err)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			dropped, _ := j.sync.Dropped(context.Background(), sess)
			log.Info("synchronous training", "aggregations", j.sync.Aggregations(), "stale_gradients_dropped", dropped)
		})
	}, nil
}

// backoff returns the next polling interval: doubling up to a second.
func backoff(d time.Duration) time.Duration { return min(2*d, time.Second) }

// waitForReplicas waits until every replica has set its completion flag or
// is no longer reachable (a crashed worker must not keep the cluster up).
func waitForReplicas(ctx context.Context, sess *session.Session, spec *cluster.Spec, reps []cluster.TaskID, done []*ops.Variable, timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	flags := make([]graph.Output, len(done))
	for i, v := range done {
		flags[i] = v.Value()
	}
	gone := map[int]bool{}
	lastLog := time.Time{}
	for d := 20 * time.Millisecond; ; d = backoff(d) {
		out, err := sess.Run(ctx, nil, flags, nil)
		if err != nil {
			log.Warn("cannot read the replicas' completion flags", "err", err)
			return
		}
		var waiting []string
		for i := range reps {
			if out[i].Float64At(0) == 1 || gone[i] {
				continue
			}
			if !reachable(ctx, spec, reps[i]) {
				log.Warn("replica is gone; not waiting for it", "replica", reps[i].String())
				gone[i] = true
				continue
			}
			waiting = append(waiting, reps[i].String())
		}
		if len(waiting) == 0 {
			return
		}
		if time.Since(lastLog) > 3*time.Second {
			log.Info("waiting for replicas to finish", "replicas", waiting)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			log.Warn("replicas did not finish within --wait-timeout; stopping the cluster anyway", "replicas", waiting)
			return
		case <-time.After(d):
		}
	}
}

// psVariables lists the variables each ps task holds, for the report.
func psVariables(ctx context.Context, spec *cluster.Spec, log *slog.Logger) map[string][]string {
	out := map[string][]string{}
	for i := 0; i < spec.NumTasks("ps"); i++ {
		t := cluster.TaskID{Job: "ps", Index: i}
		addr, _ := spec.Address(t)
		st, err := taskStatus(ctx, addr, 2*time.Second)
		if err != nil {
			log.Warn("cannot read the status of a ps task", "ps", t.String(), "err", err)
			continue
		}
		for _, v := range st.GetVariables() {
			out[t.String()] = append(out[t.String()], v.GetName())
		}
	}
	return out
}

// reachable reports whether task answers a status request within a second.
func reachable(ctx context.Context, spec *cluster.Spec, task cluster.TaskID) bool {
	addr, err := spec.Address(task)
	if err != nil {
		return false
	}
	w, closer, err := rpc.DialWorker(addr, rpc.Options{})
	if err != nil {
		return false
	}
	defer closer.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = w.GetStatus(ctx, &pb.GetStatusRequest{})
	return err == nil
}

// shutdownCluster tells the serving tasks (the ps tasks, and with in-graph
// replication the other workers) that training is finished.
func shutdownCluster(ctx context.Context, spec *cluster.Spec, self cluster.TaskID, inGraph bool, log *slog.Logger) {
	for _, t := range spec.Tasks() {
		if t == self || (t.Job != "ps" && !inGraph) {
			continue
		}
		addr, err := spec.Address(t)
		if err != nil {
			continue
		}
		w, closer, err := rpc.DialWorker(addr, rpc.Options{})
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := w.Shutdown(cctx, &pb.ShutdownRequest{Reason: "training finished (" + self.String() + ")"}); err == nil {
			log.Info("stopped task", "task", t.String())
		}
		cancel()
		closer.Close()
	}
}
