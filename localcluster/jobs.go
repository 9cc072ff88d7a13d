package localcluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/distflow/distflow/cluster"
)

// ErrInvalidJobs is wrapped by the errors of Parse and Run for a cluster
// description that cannot be started.
var ErrInvalidJobs = errors.New("invalid jobs")

// MaxTasks is the largest number of tasks one job may have.
const MaxTasks = 64

// Jobs is how many tasks of each job a local cluster runs. The chief is the
// chief task when Chief is 1, else worker 0; the chief and the workers are
// the training tasks. An evaluator is outside the cluster: it has no
// address and follows the chief's checkpoints (cluster.EvaluatorJob).
type Jobs struct {
	PS        int // parameter servers, 0 to MaxTasks
	Worker    int // workers, 0 to MaxTasks
	Chief     int // 0 or 1
	Evaluator int // 0 or 1
}

// String returns j in the form Parse reads, e.g. "ps=1,worker=2".
func (j Jobs) String() string {
	var parts []string
	for _, jc := range j.counts() {
		if jc.n != 0 {
			parts = append(parts, jc.job+"="+strconv.Itoa(jc.n))
		}
	}
	if len(parts) == 0 {
		return "worker=0"
	}
	return strings.Join(parts, ",")
}

type jobCount struct {
	job string
	n   int
}

// counts lists the jobs in the order they are described and started.
func (j Jobs) counts() []jobCount {
	return []jobCount{{"ps", j.PS}, {"worker", j.Worker}, {"chief", j.Chief}, {cluster.EvaluatorJob, j.Evaluator}}
}

// training is the number of training tasks: the chief and the workers.
func (j Jobs) training() int { return j.Worker + j.Chief }

// check applies the rules every cluster obeys; desc names the cluster in
// errors.
func (j Jobs) check(desc string) error {
	for _, jc := range j.counts() {
		if jc.n < 0 || jc.n > MaxTasks {
			return fmt.Errorf("localcluster: %s: %w: %s=%d is out of range (0-%d tasks)", desc, ErrInvalidJobs, jc.job, jc.n, MaxTasks)
		}
	}
	switch {
	case j.Chief > 1:
		return fmt.Errorf("localcluster: %s: %w: chief=%d, at most one chief", desc, ErrInvalidJobs, j.Chief)
	case j.Evaluator > 1:
		return fmt.Errorf("localcluster: %s: %w: evaluator=%d, at most one evaluator", desc, ErrInvalidJobs, j.Evaluator)
	case j.Worker == 0:
		return fmt.Errorf("localcluster: %s: %w: no worker (want worker=1 or more)", desc, ErrInvalidJobs)
	}
	return nil
}

// A ParseOption changes what Parse accepts.
type ParseOption func(*parseRules)

type parseRules struct {
	withoutPS, anyPS bool
}

// WithoutPS makes Parse accept only clusters without ps tasks, for training
// in which the workers hold the model (all-reduce). Without it, Parse
// requires at least one ps task.
func WithoutPS() ParseOption {
	return func(r *parseRules) { r.withoutPS = true }
}

// AnyPS makes Parse accept any number of ps tasks, none included: the
// caller checks the cluster against what it trains.
func AnyPS() ParseOption {
	return func(r *parseRules) { r.anyPS = true }
}

// Parse reads a cluster description such as "ps=1,worker=2": comma-separated
// job=count pairs of the jobs ps, worker, chief and evaluator, each given at
// most once, with 0 to MaxTasks tasks each. It requires at least one worker,
// at most one chief and one evaluator, and at least one ps task (none with
// WithoutPS). Errors wrap
// ErrInvalidJobs and quote s and the part at fault.
func Parse(s string, opts ...ParseOption) (Jobs, error) {
	var rules parseRules
	for _, o := range opts {
		o(&rules)
	}
	var j Jobs
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		job, n, ok := strings.Cut(part, "=")
		job = strings.TrimSpace(job)
		k, err := strconv.Atoi(strings.TrimSpace(n))
		if !ok || err != nil || job == "" {
			return Jobs{}, fmt.Errorf("localcluster: %q: %w: %q is not job=count (e.g. ps=1,worker=2)", s, ErrInvalidJobs, strings.TrimSpace(part))
		}
		var count *int
		switch job {
		case "ps":
			count = &j.PS
		case "worker":
			count = &j.Worker
		case "chief":
			count = &j.Chief
		case cluster.EvaluatorJob:
			count = &j.Evaluator
		default:
			return Jobs{}, fmt.Errorf("localcluster: %q: %w: unknown job %q (want ps, worker, chief or evaluator)", s, ErrInvalidJobs, job)
		}
		if seen[job] {
			return Jobs{}, fmt.Errorf("localcluster: %q: %w: job %q given twice", s, ErrInvalidJobs, job)
		}
		seen[job] = true
		if k < 0 || k > MaxTasks {
			return Jobs{}, fmt.Errorf("localcluster: %q: %w: %s=%d is out of range (0-%d tasks)", s, ErrInvalidJobs, job, k, MaxTasks)
		}
		*count = k
	}
	if err := j.check(strconv.Quote(s)); err != nil {
		return Jobs{}, err
	}
	switch {
	case rules.anyPS:
	case j.PS == 0 && !rules.withoutPS:
		return Jobs{}, fmt.Errorf("localcluster: %q: %w: no ps task (want ps=1 or more, e.g. ps=1,worker=2)", s, ErrInvalidJobs)
	case j.PS > 0 && rules.withoutPS:
		return Jobs{}, fmt.Errorf("localcluster: %q: %w: ps=%d, but this cluster trains without ps tasks (drop it, e.g. worker=2)", s, ErrInvalidJobs, j.PS)
	}
	return j, nil
}
