package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Strategy is one way of training that the harness runs: a cluster shape
// for --local-cluster and the train flags that select the strategy.
type Strategy struct {
	Name    string   // short name, e.g. "sync-backup"
	Cluster string   // --local-cluster value, e.g. "ps=1,worker=2"
	Args    []string // train flags, e.g. ["--strategy=sync:2"]
}

// Strategies are the training strategies the chaos matrix covers, in the
// order reports list them; each selects its strategy by the name that
// estimator.ParseStrategy (and distflow train --strategy) reads.
var Strategies = []Strategy{
	{Name: "async", Cluster: "ps=1,worker=2", Args: []string{"--strategy=async"}},
	{Name: "sync", Cluster: "ps=1,worker=2", Args: []string{"--strategy=sync"}},
	{Name: "sync-backup", Cluster: "ps=1,worker=3", Args: []string{"--strategy=sync:2"}},
	{Name: "staleness", Cluster: "ps=1,worker=2", Args: []string{"--strategy=staleness:2"}},
	{Name: "in-graph", Cluster: "ps=1,worker=2", Args: []string{"--strategy=ingraph"}},
	{Name: "allreduce", Cluster: "worker=3", Args: []string{"--strategy=allreduce"}},
	{Name: "averaging", Cluster: "worker=3", Args: []string{"--strategy=averaging:10"}},
}

// StrategyNames returns the names of Strategies.
func StrategyNames() []string {
	var names []string
	for _, s := range Strategies {
		names = append(names, s.Name)
	}
	return names
}

// LookupStrategy returns the strategy called name.
func LookupStrategy(name string) (Strategy, error) {
	for _, s := range Strategies {
		if s.Name == name {
			return s, nil
		}
	}
	return Strategy{}, fmt.Errorf("chaos: unknown strategy %q: want one of %s", name, strings.Join(StrategyNames(), ", "))
}

// MustStrategy is LookupStrategy for names known to be right; it panics on
// an unknown name (a programmer error).
func MustStrategy(name string) Strategy {
	s, err := LookupStrategy(name)
	if err != nil {
		panic(err)
	}
	return s
}

// Task names one task of a cluster, as TF_CONFIG does.
type Task struct {
	Job   string `json:"job"`
	Index int    `json:"index"`
}

// String returns "worker 1", the form the launcher's lines use.
func (t Task) String() string { return t.Job + " " + strconv.Itoa(t.Index) }

// tasks lists the tasks of a --local-cluster value ("ps=1,worker=2"), in
// job then index order.
func tasks(cluster string) ([]Task, error) {
	var out []Task
	for _, part := range strings.Split(cluster, ",") {
		job, n, ok := strings.Cut(strings.TrimSpace(part), "=")
		k, err := strconv.Atoi(n)
		if !ok || err != nil || k < 0 || job == "" {
			return nil, fmt.Errorf("chaos: cluster %q: %q is not job=count (e.g. ps=1,worker=2)", cluster, part)
		}
		for i := range k {
			out = append(out, Task{Job: job, Index: i})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("chaos: cluster %q has no tasks", cluster)
	}
	slices.SortStableFunc(out, func(a, b Task) int { return strings.Compare(a.Job, b.Job) })
	return out, nil
}
