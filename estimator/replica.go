package estimator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/localcluster"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/worker"
)

// replica is one call of Train in one process: a training replica of a
// cluster (or the only process), or a task that only serves.
type replica struct {
	e     *Estimator
	cfg   RunConfig
	input InputFn
	stop  Stop
	hooks []Hook
	log   *slog.Logger
	// reps are the cluster's training tasks (the chief first; nil for a
	// single process) and index this one's position among them (-1 for a
	// ps task).
	reps    []cluster.TaskID
	index   int
	started time.Time
}

func (r *replica) chief() bool { return r.index == 0 }

// numReplicas is the number of training processes.
func (r *replica) numReplicas() int { return max(1, len(r.reps)) }

// batchesPerStep is how many batches one global step of a strategy on
// parameter servers consumes: the strategy's, times the towers of each
// replica (RunConfig.Towers: one per accelerator of RunConfig.Devices;
// in-graph, of each worker).
func (r *replica) batchesPerStep() int {
	return r.cfg.Strategy.Update(r.numReplicas()).Batches * r.cfg.towers()
}

// who names this process in progress lines ("" for a single process).
func (r *replica) who() string {
	if r.cfg.Cluster == nil {
		return ""
	}
	return r.cfg.Task.String() + ": "
}

// listener is where this task serves: the configured listener, the one a
// local-cluster launcher handed down, or nil (the task's address).
func (r *replica) listener() (net.Listener, error) {
	if r.cfg.Listener != nil {
		return r.cfg.Listener, nil
	}
	return localcluster.Listener()
}

// startServer starts this task's server (master and worker services).
func (r *replica) startServer() (*server.Server, error) {
	lis, err := r.listener()
	if err != nil {
		return nil, err
	}
	sc := server.Config{Cluster: r.cfg.Cluster, Task: r.cfg.Task, Listener: lis, Logger: r.cfg.Logger, FileRoots: r.cfg.fileRoots(), RPC: r.cfg.rpc,
		Metrics: r.e.Metrics(), MetricsEndpoint: r.e.metricsEndpoint(), Devices: r.cfg.Devices, DeviceOptions: r.cfg.DeviceOptions}
	if servers := r.ringServers(); len(servers) > 0 {
		sc.Ring, sc.RingServers = r.reps, servers // a ps that sums for the workers
	}
	srv, err := server.New(sc)
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	return srv, nil
}

// ringServers are the summation servers of an all-reduce through the ps
// tasks (a strategy whose update sums on them, with ps tasks), nil
// otherwise.
func (r *replica) ringServers() []cluster.TaskID {
	if !r.cfg.update().SumsOnPS || r.cfg.Cluster == nil {
		return nil
	}
	return tasksOf(r.cfg.Cluster, "ps")
}

// serve runs this task's server until the chief ends training (a Shutdown
// RPC) or ctx ends, which is not an error: a ps is stopped by a signal too.
func (r *replica) serve(ctx context.Context) (*Result, error) {
	srv, err := r.startServer()
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	r.log.Info("serving", "target", srv.Target())
	reason := "signal received"
	if err := srv.Join(ctx); err == nil {
		reason = srv.StopReason()
	}
	r.log.Info("exiting", "reason", reason)
	return &Result{Task: r.cfg.Task.String(), Strategy: r.cfg.Strategy.String(), Served: true,
		WallSeconds: time.Since(r.started).Seconds()}, nil
}

// result is what this replica's loop did, as a Result.
func (r *replica) result(st loopStats, batch int) *Result {
	res := &Result{
		Strategy: r.cfg.Strategy.String(), LocalSteps: st.localSteps, GlobalStep: int64(st.lastGlobal),
		Loss: st.loss, BatchSize: batch, ExamplesPerSecond: st.examplesPerSecond(batch * st.towers),
		WallSeconds: time.Since(r.started).Seconds(), Chief: r.chief(),
	}
	if r.cfg.Cluster != nil {
		res.Task = r.cfg.Task.String()
		res.ClusterExamplesPerSecond = st.clusterRate(batch * r.batchesPerStep())
	}
	if n := r.stop.ExamplesPerEpoch; n > 0 {
		res.Epochs = float64(res.GlobalStep*int64(batch*r.batchesPerStep())) / float64(n)
	}
	return res
}

// backoff returns the next polling interval: doubling up to a second.
func backoff(d time.Duration) time.Duration { return min(2*d, time.Second) }

// waitForReplicas waits until every replica has set its completion flag or
// is no longer reachable (a crashed worker must not keep the cluster up),
// for at most WaitTimeout.
func waitForReplicas(ctx context.Context, sess *session.Session, r *replica, done []*ops.Variable) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.WaitTimeout)
	defer cancel()
	flags := make([]graph.Output, len(done))
	for i, v := range done {
		flags[i] = v.Value()
	}
	gone := map[int]bool{} // or finished since the flags were read
	lastLog := time.Time{}
	for d := 20 * time.Millisecond; ; d = backoff(d) {
		out, err := sess.Run(ctx, nil, flags, nil)
		if err != nil {
			r.log.Warn("cannot read the replicas' completion flags", "err", err)
			return
		}
		var waiting []string
		for i, t := range r.reps {
			if out[i].Float64At(0) == 1 || gone[i] {
				continue
			}
			if !reachable(ctx, r.cfg, t) {
				gone[i] = true
				// A replica sets its flag and exits: it may have done both
				// since the flags were read.
				if again, err := sess.Run(ctx, nil, flags[i:i+1], nil); err != nil || again[0].Float64At(0) != 1 {
					r.log.Warn("replica is gone; not waiting for it", "replica", t.String())
				}
				continue
			}
			waiting = append(waiting, t.String())
		}
		if len(waiting) == 0 {
			return
		}
		if time.Since(lastLog) > 3*time.Second {
			r.log.Info("waiting for replicas to finish", "replicas", waiting)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			r.log.Warn("replicas did not finish within the wait timeout; stopping the cluster anyway", "replicas", waiting, "wait_timeout", r.cfg.WaitTimeout)
			return
		case <-time.After(d):
		}
	}
}

// TaskStatus asks the task at addr what it holds, waiting at most timeout,
// over a connection with opts (a task's, or a tool's:
// pki.Security.ClientOptions).
func TaskStatus(ctx context.Context, addr string, timeout time.Duration, opts rpc.Options) (*pb.GetStatusResponse, error) {
	return taskStatus(ctx, rpc.DialWorker, addr, timeout, opts)
}

// taskStatus is TaskStatus over a connection that dial makes.
func taskStatus(ctx context.Context, dial func(string, rpc.Options) (worker.Service, io.Closer, error), addr string, timeout time.Duration, opts rpc.Options) (*pb.GetStatusResponse, error) {
	w, closer, err := dial(addr, opts)
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return w.GetStatus(ctx, &pb.GetStatusRequest{})
}

// pauseMargin is how far past its deadline a failed call must have run
// for this process to have been paused during it: a timer fires late by
// the scheduler's latency, milliseconds.
const pauseMargin = 250 * time.Millisecond

// statusAcrossPauses is TaskStatus, asked again once when the call failed
// after running past its timeout by more than pauseMargin: its deadline
// passed while this process was not running (stopped, or starved of CPU),
// which says nothing of the peer. A chief stopped during the call warned
// that it could not read the status of a ps task that was answering.
func statusAcrossPauses(ctx context.Context, addr string, timeout time.Duration, opts rpc.Options) (*pb.GetStatusResponse, error) {
	start := time.Now()
	st, err := TaskStatus(ctx, addr, timeout, opts)
	if err != nil && ctx.Err() == nil && time.Since(start) > timeout+pauseMargin {
		return TaskStatus(ctx, addr, timeout, opts)
	}
	return st, err
}

// psVariables lists the variables each ps task holds, for the result.
func psVariables(ctx context.Context, r *replica) map[string][]string {
	out := map[string][]string{}
	for _, t := range tasksOf(r.cfg.Cluster, "ps") {
		addr, _ := r.cfg.Cluster.Address(t)
		st, err := statusAcrossPauses(ctx, addr, 2*time.Second, r.cfg.rpc)
		if err != nil {
			r.log.Warn("cannot read the status of a ps task", "ps", t.String(), "err", err)
			continue
		}
		for _, v := range st.GetVariables() {
			out[t.String()] = append(out[t.String()], v.GetName())
		}
	}
	return out
}

// reachable reports whether task answers a status request within a second
// (of this process's running time: see statusAcrossPauses).
func reachable(ctx context.Context, cfg RunConfig, task cluster.TaskID) bool {
	addr, err := cfg.Cluster.Address(task)
	if err != nil {
		return false
	}
	_, err = statusAcrossPauses(ctx, addr, time.Second, cfg.rpc)
	return err == nil
}

// shutdownCluster tells the serving tasks (the ps tasks, and with in-graph
// replication the other workers) that training is finished.
func shutdownCluster(ctx context.Context, r *replica, inGraph bool) {
	self := r.cfg.Task
	for _, t := range r.cfg.Cluster.Tasks() {
		if t == self || (t.Job != "ps" && !inGraph) {
			continue
		}
		addr, err := r.cfg.Cluster.Address(t)
		if err != nil {
			continue
		}
		w, closer, err := rpc.DialWorker(addr, r.cfg.rpc)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := w.Shutdown(cctx, &pb.ShutdownRequest{Reason: fmt.Sprintf("training finished (%s)", self)}); err == nil {
			r.log.Info("stopped task", "stopped", t.String())
		}
		cancel()
		closer.Close()
	}
}
