package estimator

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/pki"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/session"
)

// RunConfig says where and how an estimator trains. The zero value trains
// in this process, asynchronously, with no checkpoints; New checks it.
type RunConfig struct {
	// Cluster is the cluster this process is a task of, and Task the task;
	// a nil Cluster trains in this process. See FromEnvironment for
	// TF_CONFIG, and cluster.FromFlags for the TensorFlow 1.x flags.
	Cluster *cluster.Spec
	Task    cluster.TaskID
	// Strategy is how the replicas share the model: Async{} (nil),
	// Sync{}, Staleness{}, InGraph{}, AllReduce{} or Averaging{}.
	Strategy Strategy

	// ModelDir receives the event files for TensorBoard (one per process)
	// and, unless CheckpointDir is set, the checkpoints; "" writes neither.
	ModelDir string
	// CheckpointDir receives the checkpoints (default ModelDir). The chief
	// resumes from the latest complete one. Every ps task writes its shard
	// there: on several machines it must be a shared filesystem, and every
	// task must be given it, since a task reads and writes files for other
	// tasks only in its own CheckpointDir and ModelDir.
	CheckpointDir string
	// SaveCheckpointsSteps and SaveCheckpointsSecs schedule checkpoints
	// (0: only the final one); KeepCheckpoints is how many are kept (0: 5).
	SaveCheckpointsSteps int64
	SaveCheckpointsSecs  time.Duration
	KeepCheckpoints      int
	// LogEverySteps is the interval of progress lines and summaries, in
	// local steps (0: 100).
	LogEverySteps int
	// Seed makes initial weights, shuffling and dropout reproducible; it is
	// passed to input functions.
	Seed int64
	// StepTimeout is the deadline of one distributed step (0: 1 min).
	StepTimeout time.Duration
	// WaitTimeout bounds every wait for peers: the cluster to come up, the
	// chief to initialise the model, a lost task to come back, the other
	// replicas to finish (0: 2 min).
	WaitTimeout time.Duration
	// LostAfter is how long a peer may leave heartbeats unanswered before
	// it is lost and the cluster goes on without it (sync replicas,
	// all-reduce, staleness); 0: a quarter of StepTimeout, 1 s to 15 s.
	LostAfter time.Duration
	// Compression is how gradients travel between workers (default
	// float32): fp16, bf16 or top-k with error feedback; see Compression.
	Compression Compression
	// PullCompression is the type in which workers read the ps tasks'
	// float32 variables for their forward and backward passes: FP16 or
	// BF16 halve the pull's bytes (the ps keeps and updates the float32
	// values; checkpoints and fetches read them whole); NoCompression
	// (the default) pulls float32. For the ps strategies only.
	PullCompression CompressionKind
	// PSPlacement spreads the variables over the ps tasks (default
	// round-robin).
	PSPlacement placement.Strategy
	// Listener is where this task serves; nil means the listening socket
	// handed down by a local-cluster launcher, or else the task's address.
	Listener net.Listener
	// Logger receives the runtime's records (sessions, checkpoints,
	// recoveries); nil means slog.Default().
	Logger *slog.Logger
	// Progress receives one progress line per LogEverySteps (nil: standard
	// error; io.Discard for none).
	Progress io.Writer
	// StepDelay waits this long before every step: fault injection that
	// makes a slow worker.
	StepDelay time.Duration
	// Security secures the task's connections, as the --certs-dir,
	// --cluster-token-file and --insecure flags do: with CertsDir, mutual
	// TLS with the cluster's CA and a membership check on every call
	// (make the certificates with `distflow certs create`). The zero
	// value runs a cluster whose every address is loopback in plaintext
	// and refuses any other (pki.ErrInsecure) before any network use. See
	// package pki.
	Security pki.Security
	// MetricsAddress is where this task serves its Prometheus metrics at
	// /metrics (host:port, port 0: a free one; Estimator.MetricsAddress
	// tells which). "" serves none, except in a task of a local cluster,
	// which gets a free loopback port ($DISTFLOW_METRICS_ADDR).
	MetricsAddress string

	// Devices are the accelerators this task computes on, GPU:0 onward
	// (open them with device.Lookup and Platform.Open; the estimator does
	// not close them). The model function's ops run there where a kernel
	// exists (the rest on the CPU), its variables stay on the ps tasks, or
	// on the host in one process. With two or more, every step builds one
	// tower per device, each on a batch of its own, and averages their
	// gradients on the CPU: TensorFlow's multi-GPU recipe. A ps task
	// ignores them.
	Devices []device.Device
	// DeviceOptions are how Devices run the steps: kernel by kernel rather
	// than a captured step replayed (Eager), dropout's draws on the device
	// (RandomOnDevice), the variables placed on a device in its memory
	// (VariablesOnDevice; with ps tasks, the variables stay there).
	DeviceOptions taskgraph.Options
	// Towers is how many towers each training replica builds, for an
	// evaluator task, which opens no devices but needs the trainers' count
	// to tell the chief's last step from TrainSpec's Stop.Epochs (a global
	// step consumes a batch per tower). 0 means len(Devices); a training
	// task must leave it 0 or equal to len(Devices).
	Towers int

	// rpc are the task's connection options, from Security (withDefaults).
	rpc rpc.Options
}

// towers is how many towers each training replica builds: Towers, or
// one per device, at least one.
func (c RunConfig) towers() int {
	if c.Towers > 0 {
		return c.Towers
	}
	return max(len(c.Devices), 1)
}

// gpuDevices returns the device names of the towers on Devices:
// "/gpu:0", ... (nil without Devices).
func (c RunConfig) gpuDevices() []string {
	var out []string
	for i := range c.Devices {
		out = append(out, "/gpu:"+strconv.Itoa(i))
	}
	return out
}

// sessionOptions are the options of a local session of this task: its
// devices, if any.
func (c RunConfig) sessionOptions() []session.Option {
	if len(c.Devices) == 0 {
		return nil
	}
	return []session.Option{session.WithDevices(taskgraph.Config{Devices: c.Devices, SoftPlacement: true, Logger: c.Logger}.With(c.DeviceOptions))}
}

// Default deadlines and intervals.
const (
	DefaultStepTimeout   = time.Minute
	DefaultWaitTimeout   = 2 * time.Minute
	DefaultLogEverySteps = 100
)

// FromEnvironment returns a RunConfig for the cluster and task described by
// the TF_CONFIG environment variable (none: a single process), with the
// given strategy. Unknown TF_CONFIG fields are logged as warnings.
// Security.CertsDir is $DISTFLOW_CERTS_DIR (pki.EnvCertsDir), which
// LaunchLocalCluster sets for its tasks.
func FromEnvironment(strategy Strategy) (RunConfig, error) {
	spec, self, ok, warnings, err := cluster.FromEnvWarn()
	if err != nil {
		return RunConfig{}, err
	}
	for _, w := range warnings {
		slog.Warn(w)
	}
	cfg := RunConfig{Strategy: strategy, Security: pki.Security{CertsDir: os.Getenv(pki.EnvCertsDir)}}
	if ok {
		cfg.Cluster, cfg.Task = spec, self
	}
	return cfg, nil
}

// withDefaults fills the zero fields and checks the others.
func (c RunConfig) withDefaults() (RunConfig, error) {
	if c.Strategy == nil {
		c.Strategy = Async{}
	}
	if c.CheckpointDir == "" {
		c.CheckpointDir = c.ModelDir
	}
	if c.KeepCheckpoints == 0 {
		c.KeepCheckpoints = 5
	}
	if c.LogEverySteps == 0 {
		c.LogEverySteps = DefaultLogEverySteps
	}
	if c.StepTimeout == 0 {
		c.StepTimeout = DefaultStepTimeout
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Progress == nil {
		c.Progress = os.Stderr
	}
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf("estimator: RunConfig."+format, args...))
		}
	}
	check(c.SaveCheckpointsSteps < 0, "SaveCheckpointsSteps %d: must not be negative", c.SaveCheckpointsSteps)
	check(c.SaveCheckpointsSecs < 0, "SaveCheckpointsSecs %v: must not be negative", c.SaveCheckpointsSecs)
	check(c.LogEverySteps < 0, "LogEverySteps %d: must be positive", c.LogEverySteps)
	check(c.StepTimeout < 0, "StepTimeout %v: must be positive", c.StepTimeout)
	check(c.WaitTimeout < 0, "WaitTimeout %v: must be positive", c.WaitTimeout)
	check(c.LostAfter < 0, "LostAfter %v: must be positive", c.LostAfter)
	check(c.StepDelay < 0, "StepDelay %v: must not be negative", c.StepDelay)
	check(c.Towers < 0, "Towers %d: must not be negative", c.Towers)
	check(c.Towers > 0 && len(c.Devices) > 0 && c.Towers != len(c.Devices),
		"Towers %d with %d Devices: a training task builds a tower per device; leave Towers 0", c.Towers, len(c.Devices))
	evaluator := c.IsEvaluator()
	if c.Cluster != nil {
		if evaluator {
			// Outside the cluster: it reads checkpoints, and dials no one.
			check(c.Task.Index < 0, "Task %s: the index must not be negative", c.Task)
		} else if !c.Cluster.Contains(c.Task) {
			errs = append(errs, fmt.Errorf("estimator: RunConfig.Task %s is not in the cluster (%s)", c.Task, c.Cluster))
		} else if c.Task.Job != "ps" && c.Task.Job != "worker" && c.Task.Job != "chief" {
			errs = append(errs, fmt.Errorf("estimator: RunConfig.Task %s: distflow runs jobs ps, worker and chief", c.Task))
		}
		if c.Cluster.NumTasks("chief") > 1 {
			errs = append(errs, fmt.Errorf("estimator: the cluster has %d chief tasks; want at most one", c.Cluster.NumTasks("chief")))
		}
		if len(replicas(c.Cluster)) == 0 {
			errs = append(errs, errors.New("estimator: the cluster has no worker or chief task to train"))
		}
	}
	if err := c.Strategy.Validate(c.Cluster); err != nil {
		errs = append(errs, err)
	}
	if err := c.Compression.validateFor(c.Strategy); err != nil {
		errs = append(errs, err)
	}
	if err := validatePull(c.PullCompression, c.Strategy); err != nil {
		errs = append(errs, err)
	}
	if c.CheckpointDir != "" {
		abs, err := filepath.Abs(c.CheckpointDir)
		if err != nil {
			errs = append(errs, fmt.Errorf("estimator: RunConfig.CheckpointDir %q: %w", c.CheckpointDir, err))
		}
		c.CheckpointDir = abs
	}
	if len(errs) == 0 && c.Cluster != nil && !evaluator {
		// Certificates are read, and an insecure cluster refused, before
		// anything listens or dials.
		opts, err := c.Security.TaskOptions(c.Cluster, c.Task, c.Logger)
		if err != nil {
			errs = append(errs, fmt.Errorf("estimator: RunConfig.Security: %w", err))
		}
		c.rpc = opts
	}
	return c, errors.Join(errs...)
}

// fileRoots are the directories in which the graphs that other tasks send
// this one may read and write files (checkpoints): none but those
// configured, and none at all without them.
func (c RunConfig) fileRoots() []string {
	roots := []string{}
	for _, d := range []string{c.CheckpointDir, c.ModelDir} {
		if d != "" {
			roots = append(roots, d)
		}
	}
	return roots
}

// replicas lists the tasks that train: the chief (if any) first, then the
// workers. The first one is the chief.
func replicas(spec *cluster.Spec) []cluster.TaskID { return tasksOf(spec, "chief", "worker") }

// tasksOf lists the tasks of jobs, job by job, in index order.
func tasksOf(spec *cluster.Spec, jobs ...string) []cluster.TaskID {
	var out []cluster.TaskID
	for _, job := range jobs {
		for i := range spec.NumTasks(job) {
			out = append(out, cluster.TaskID{Job: job, Index: i})
		}
	}
	return out
}

// replicaIndex is the position of task among the replicas, or -1 for a
// task that does not train (a ps).
func replicaIndex(spec *cluster.Spec, task cluster.TaskID) int {
	for i, r := range replicas(spec) {
		if r == task {
			return i
		}
	}
	return -1
}

// IsChief reports whether the configured task is the chief: the chief
// task, or worker 0 when there is none, or the only process.
func (c RunConfig) IsChief() bool {
	return c.Cluster == nil || replicaIndex(c.Cluster, c.Task) == 0
}
