package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/metrics"
	"github.com/distflow/distflow/placement"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/service"
	"github.com/distflow/distflow/worker"
)

// ErrStopped is returned by Start on a server that was stopped.
var ErrStopped = errors.New("server: stopped")

// stopGrace bounds a graceful stop: RPCs still running after it are cut.
const stopGrace = 5 * time.Second

// Config configures a Server.
type Config struct {
	// Cluster is the cluster the task belongs to; required.
	Cluster *cluster.Spec
	// Task is the task this server runs; it must be in Cluster.
	Task cluster.TaskID
	// Listener, when set, is used instead of listening on the task's
	// address from Cluster (tests pass one on 127.0.0.1:0). The server
	// owns it and closes it when it stops.
	Listener net.Listener
	// RPC configures the transport (security, authentication, size limits,
	// keepalive) of everything the task serves and dials: its services, the
	// tensor channel, and the all-reduce ring's streams. When it names
	// callers (Identify), only the cluster's chief may stop the task
	// (worker.Config.ShutdownFrom).
	RPC rpc.Options
	// Ring, when set, makes the task a rank of an all-reduce ring whose
	// ranks are these tasks of Cluster, in rank order (Task must be one of
	// them). The ring is served on the task's address beside the master
	// and worker services; Server.Ring returns it.
	Ring []cluster.TaskID
	// RingServers, with Ring, are summation servers for the ring's ranks
	// (the ps tasks): the ranks' all-reduces go through them, BytePS's
	// design, as long as they serve (allreduce.Config.Servers). Task may
	// be one of them; it then only sums.
	RingServers []cluster.TaskID
	// Logger receives the server's logs, tagged with the task; nil means
	// slog.Default().
	Logger *slog.Logger
	// FileRoots are the directories under which the graphs run on this
	// task may read and write files (the checkpoint ops): the task's
	// checkpoint and model directories (worker.Config.FileRoots; paths
	// that leave them are refused). With none, file ops are refused.
	FileRoots []string
	// MaxTensorBytes bounds every tensor the task's kernels allocate and
	// every tensor fed to it (worker.Config.MaxTensorBytes), and, unless
	// RPC.MaxTensorBytes says otherwise, every tensor it receives from a
	// peer; 0 means a quarter of the machine's memory, a negative value no
	// bound.
	MaxTensorBytes int64
	// MetricsAddress, when set, is where the task serves its Prometheus
	// metrics over HTTP at /metrics ("127.0.0.1:0": a free port;
	// Server.MetricsAddress and GetStatus tell which), from Start to Stop.
	MetricsAddress string
	// Metrics are the task's metrics, to share them with a training loop
	// in the same process; nil makes new ones when MetricsAddress is set.
	// The transport records its calls and tensor bytes there.
	Metrics *metrics.Task
	// MetricsEndpoint, instead of MetricsAddress, is an endpoint that
	// already serves Metrics and outlives the server (an estimator's,
	// which also serves its evaluation): GetStatus reports its address;
	// the server does not close it.
	MetricsEndpoint *metrics.Endpoint
	// Devices are the task's accelerators (worker.Config.Devices): the
	// task's master may place nodes on them, and its worker runs there
	// what has a kernel. The server does not close them.
	Devices []device.Device
	// DeviceOptions are how Devices run the task's steps
	// (worker.Config.DeviceOptions).
	DeviceOptions taskgraph.Options
	// StrictPlacement refuses nodes placed on an accelerator that cannot
	// run them instead of running them on the CPU
	// (worker.Config.StrictPlacement).
	StrictPlacement bool
}

func (c *Config) validate() error {
	if c.Cluster == nil {
		return errors.New("server: config has no cluster")
	}
	if _, err := c.Cluster.Address(c.Task); err != nil {
		return fmt.Errorf("server: task %s: %w", c.Task, err)
	}
	if err := c.RPC.Validate(); err != nil {
		return fmt.Errorf("server: task %s: %w", c.Task, err)
	}
	if err := c.checkMetricsAddress(); err != nil {
		return err
	}
	if len(c.Ring) > 0 && !slices.Contains(c.Ring, c.Task) && !slices.Contains(c.RingServers, c.Task) {
		return fmt.Errorf("server: task %s is not one of the ring's ranks %v or its summation servers %v", c.Task, c.Ring, c.RingServers)
	}
	if len(c.RingServers) > 0 && len(c.Ring) == 0 {
		return fmt.Errorf("server: task %s: summation servers %v without a ring", c.Task, c.RingServers)
	}
	return nil
}

// shutdownFrom is who may stop the task: when the transport names callers
// (RPC.Identify: certificates or a cluster token), the cluster's chief
// alone (the chief task, else worker 0); otherwise anyone, as callers
// cannot be told apart.
func (c *Config) shutdownFrom() []string {
	if c.RPC.Identify == nil {
		return nil
	}
	for _, job := range []string{"chief", "worker"} {
		if c.Cluster.NumTasks(job) > 0 {
			return []string{cluster.TaskID{Job: job}.String()}
		}
	}
	return nil
}

// ringConfig is the all-reduce configuration of the ranks c.Ring.
func (c *Config) ringConfig(log *slog.Logger) (allreduce.Config, error) {
	ranks := slices.Concat(c.Ring, c.RingServers)
	rc := allreduce.Config{Rank: slices.Index(ranks, c.Task), Logger: log, Servers: len(c.RingServers)}
	for _, t := range ranks {
		addr, err := c.Cluster.Address(t)
		if err != nil {
			return rc, fmt.Errorf("server: ring rank %s: %w", t, err)
		}
		rc.Peers = append(rc.Peers, addr)
		rc.Names = append(rc.Names, t.String())
	}
	return rc, nil
}

// SummationRing is the all-reduce ring that a ps task of spec serves as
// a summation server, as `distflow train --allreduce` sets it up: the
// ring's ranks are the training tasks (the chief, then the workers, in
// index order) and its summation servers the ps tasks. It returns nils
// when task is not a ps or spec has no training task. A ps started on its
// own (`distflow server --job_name=ps`) does not know the workers'
// strategy, so it serves the ring whenever there are ranks to serve: the
// service only sums what ranks send it, and costs nothing otherwise.
func SummationRing(spec *cluster.Spec, task cluster.TaskID) (ranks, servers []cluster.TaskID) {
	if task.Job != "ps" || !spec.Contains(task) {
		return nil, nil
	}
	for _, job := range []string{"chief", "worker", "ps"} {
		for i := range spec.NumTasks(job) {
			if job == "ps" {
				servers = append(servers, cluster.TaskID{Job: job, Index: i})
			} else {
				ranks = append(ranks, cluster.TaskID{Job: job, Index: i})
			}
		}
	}
	if len(ranks) == 0 {
		return nil, nil
	}
	return ranks, servers
}

// Server runs one task of a cluster: a master service and a worker service
// on one rpc.Server (gRPC, and the tensor channel for tensors, on the
// task's one address). Tasks start in any order: Start does not wait for
// peers; the first step that needs a task waits for it (logged, bounded by
// the step's deadline; see rpc.WorkerCache). Its methods are safe for
// concurrent use.
type Server struct {
	cfg    Config
	task   string
	log    *slog.Logger
	rpc    *rpc.Server
	cache  *rpc.WorkerCache
	worker *worker.Worker
	master *master.Master
	ring   *allreduce.Ring // nil without Config.Ring
	// metrics are the task's (nil: none), served by metricsEP once started.
	metrics   *metrics.Task
	metricsEP *metrics.Endpoint

	mu      sync.Mutex
	lis     net.Listener
	started bool
	stopped bool
	reason  string // why the server stopped

	done     chan struct{} // closed once the server has stopped
	stopOnce sync.Once
}

// New builds the server of cfg.Task; it does not listen yet (see Start).
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	task := cfg.Task.String()
	// The worker and the master name the task in their own records.
	base := log
	log = log.With("task", task)
	s := &Server{cfg: cfg, task: task, log: log, lis: cfg.Listener, done: make(chan struct{}), metrics: cfg.newMetrics()}
	rpcOpts := cfg.RPC
	if rpcOpts.Metrics == nil {
		rpcOpts.Metrics = s.metrics
	}
	if rpcOpts.Logger == nil {
		rpcOpts.Logger = log
	}
	// One budget for what the task computes and what it receives.
	if rpcOpts.MaxTensorBytes == 0 {
		switch {
		case cfg.MaxTensorBytes > 0:
			rpcOpts.MaxTensorBytes = cfg.MaxTensorBytes
		case cfg.MaxTensorBytes == 0:
			rpcOpts.MaxTensorBytes = worker.DefaultMaxTensorBytes()
		}
	}
	// The worker reaches its peers through the cache, and the cache serves
	// the worker's own task in process: self breaks the cycle.
	self := &selfWorker{}
	s.cache = rpc.NewWorkerCache(cfg.Cluster, task, self, rpcOpts)
	s.worker = worker.New(worker.Config{Task: task, Workers: s.cache, Logger: base, OnShutdown: s.shutdown,
		FileRoots: cfg.FileRoots, MaxTensorBytes: cfg.MaxTensorBytes, ShutdownFrom: cfg.shutdownFrom(),
		Devices: cfg.Devices, DeviceOptions: cfg.DeviceOptions, StrictPlacement: cfg.StrictPlacement})
	self.Service = statusWorker{s.worker, s}
	// The master places on every task's CPU and on the accelerators of the
	// training tasks, taken to have this task's: TensorFlow's clusters are
	// homogeneous, and a task that lacks one runs its nodes on its CPU.
	devices := placement.DevicesOf(cfg.Cluster)
	for _, t := range cfg.Cluster.Tasks() {
		if t.Job == "worker" || t.Job == "chief" || t == cfg.Task {
			for i := range cfg.Devices {
				devices = append(devices, t.String()+"/gpu:"+strconv.Itoa(i))
			}
		}
	}
	s.master = master.New(master.Config{Task: task, Devices: devices, Workers: s.cache, Logger: base})
	s.rpc = rpc.NewServer(rpcOpts)
	rpc.RegisterWorker(s.rpc, self.Service)
	rpc.RegisterMaster(s.rpc, s.master)
	if len(cfg.Ring) > 0 {
		rc, err := cfg.ringConfig(log)
		if err != nil {
			s.cache.Close()
			return nil, err
		}
		if s.ring, err = rpc.RegisterRing(s.rpc, rc); err != nil {
			s.cache.Close()
			return nil, fmt.Errorf("server: task %s: %w", task, err)
		}
	}
	return s, nil
}

// selfWorker forwards to the server's own worker, set after the cache that
// the worker needs is built.
type selfWorker struct{ worker.Service }

// FinishStep is the worker's (service.StepFinisher), so that the master
// ends a step on its own task without a CleanupStep on a goroutine.
func (w *selfWorker) FinishStep(stepID int64) bool {
	f, ok := w.Service.(worker.StepFinisher)
	return ok && f.FinishStep(stepID)
}

// RunGraphInto is the worker's (service.RunnerInto), so that the master
// keeps the responses of its own task's steps.
func (w *selfWorker) RunGraphInto(ctx context.Context, req *pb.RunGraphRequest, resp *pb.RunGraphResponse) error {
	return service.RunGraphInto(ctx, w.Service, req, resp)
}

// Start listens (on the task's address unless Config.Listener is set) and
// serves in the background. It returns once the server accepts connections;
// it does not wait for the other tasks.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	if s.started {
		return nil
	}
	if s.lis == nil {
		addr, _ := s.cfg.Cluster.Address(s.cfg.Task) // checked by New
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("server: task %s: listening on %s: %w", s.task, addr, err)
		}
		s.lis = lis
	}
	if err := s.startMetrics(); err != nil {
		return err
	}
	s.started = true
	lis := s.lis
	go func() {
		if err := s.rpc.Serve(lis); err != nil {
			s.log.Error("server: serving failed", "addr", lis.Addr().String(), "err", err)
			s.stop("serving failed: " + err.Error())
		}
	}()
	s.log.Info("server: started", "addr", lis.Addr().String(), "cluster", s.cfg.Cluster.String())
	return nil
}

// Target returns the address clients open sessions on,
// "grpc://127.0.0.1:2222" (the listener's address once started).
func (s *Server) Target() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis != nil {
		return "grpc://" + s.lis.Addr().String()
	}
	addr, _ := s.cfg.Cluster.Address(s.cfg.Task)
	return "grpc://" + addr
}

// Task returns the name of the server's task ("/job:ps/task:0").
func (s *Server) Task() string { return s.task }

// Master returns the server's master service (in process).
func (s *Server) Master() master.Service { return s.master }

// Worker returns the server's worker service (in process).
func (s *Server) Worker() worker.Service { return s.worker }

// Ring returns the task's rank of the all-reduce ring (nil without
// Config.Ring). Its operations may start once the server is started; peers
// that are not serving yet are waited for until an operation's deadline.
// Stop closes it.
func (s *Server) Ring() *allreduce.Ring { return s.ring }

// Workers returns the cache through which the server's master and worker
// reach the cluster's tasks. A wait for tasks that steps will call next
// (rpc.WaitForTasks) belongs on it: a task that is back is then back on
// the connection those steps use, which may otherwise still be backing off
// from the refused attempts of the task's absence.
func (s *Server) Workers() worker.Cache { return s.cache }

// Join blocks until the server stops (a Shutdown RPC, Stop, or a serving
// error), returning nil, or until ctx ends, returning ctx.Err() (the server
// keeps running: call Stop).
func (s *Server) Join(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StopReason returns why the server stopped ("" while it runs).
func (s *Server) StopReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// Stop stops the server gracefully: it stops accepting calls and waits up
// to 5 s for the calls in progress before cutting them, then closes the
// connections to the other tasks. Stop is idempotent and returns when the
// server has stopped.
func (s *Server) Stop() { s.stop("stopped") }

// shutdown is the worker's OnShutdown: it runs inside the Shutdown RPC,
// which a graceful stop would wait for, so the stop runs on its own.
func (s *Server) shutdown(reason string) {
	if reason == "" {
		reason = "no reason given"
	}
	go s.stop("shutdown requested: " + reason)
}

func (s *Server) stop(reason string) {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped, s.reason = true, reason
		started := s.started
		lis := s.lis
		s.mu.Unlock()
		s.log.Info("server: stopping", "reason", reason)
		if s.ring != nil {
			// First, so that the peers' probes hear that this rank left
			// while the graceful stop lets their last streams finish.
			s.ring.Close()
		}
		if started {
			graceful := make(chan struct{})
			go func() {
				s.rpc.GracefulStop()
				close(graceful)
			}()
			t := time.NewTimer(stopGrace)
			select {
			case <-graceful:
				t.Stop()
			case <-t.C:
				s.log.Warn("server: calls still running after the grace period; cutting them", "grace", stopGrace)
				s.rpc.Stop()
				<-graceful
			}
		} else if lis != nil {
			lis.Close()
		}
		if err := s.cache.Close(); err != nil {
			s.log.Debug("server: closing connections", "err", err)
		}
		s.stopMetrics()
		s.log.Info("server: stopped", "reason", reason)
		close(s.done)
	})
	<-s.done
}

// String describes the server for logs.
func (s *Server) String() string {
	return fmt.Sprintf("server %s at %s", s.task, strings.TrimPrefix(s.Target(), "grpc://"))
}
