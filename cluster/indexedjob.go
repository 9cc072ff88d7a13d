package cluster

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The environment of a task run as a Kubernetes Indexed Job (one Job per
// job of the cluster, a headless Service as the pods' subdomain; see
// deploy/kubernetes). Kubernetes sets JOB_COMPLETION_INDEX; the manifest
// sets the rest.
const (
	// EnvK8sReplicas lists the tasks of each job, "chief=1,worker=2,ps=1".
	// Its presence turns the others on.
	EnvK8sReplicas = "DISTFLOW_K8S_REPLICAS"
	// EnvK8sName is the prefix of the Jobs' names: job "worker" runs as the
	// Job NAME-worker, whose pod of index i has the host name NAME-worker-i.
	EnvK8sName = "DISTFLOW_K8S_NAME"
	// EnvK8sService is the headless Service every pod names as its
	// subdomain (default: the value of EnvK8sName).
	EnvK8sService = "DISTFLOW_K8S_SERVICE"
	// EnvK8sNamespace, when set, makes the addresses fully qualified
	// (HOST.SERVICE.NAMESPACE.svc.DOMAIN), which the pod's own /etc/hosts
	// resolves before any DNS record exists.
	EnvK8sNamespace = "DISTFLOW_K8S_NAMESPACE"
	// EnvK8sClusterDomain is the cluster's DNS domain (default cluster.local),
	// used with EnvK8sNamespace.
	EnvK8sClusterDomain = "DISTFLOW_K8S_CLUSTER_DOMAIN"
	// EnvK8sPort is the port every task serves on (default 2222).
	EnvK8sPort = "DISTFLOW_K8S_PORT"
	// EnvK8sTask is this pod's job: chief, worker or ps.
	EnvK8sTask = "DISTFLOW_K8S_TASK"
	// EnvJobCompletionIndex is set by Kubernetes in every pod of an Indexed
	// Job: this task's index.
	EnvJobCompletionIndex = "JOB_COMPLETION_INDEX"
)

// IndexedJobs describes a cluster run as Kubernetes Indexed Jobs and this
// process's task in it.
type IndexedJobs struct {
	// Name prefixes the Jobs' names (NAME-worker, NAME-ps, NAME-chief).
	Name string
	// Service is the headless Service named as the pods' subdomain.
	Service string
	// Namespace and ClusterDomain, when Namespace is set, qualify the
	// host names fully.
	Namespace, ClusterDomain string
	// Port is the port of every task.
	Port int
	// Replicas is the number of tasks of each job.
	Replicas map[string]int
	// Task is this process's task.
	Task TaskID
}

// IndexedJobsFromEnv reads an IndexedJobs from the environment through
// lookup (os.LookupEnv). ok is false, and the error nil, when
// EnvK8sReplicas is unset. Errors name the variable at fault.
func IndexedJobsFromEnv(lookup func(string) (string, bool)) (j IndexedJobs, ok bool, err error) {
	reps, set := lookup(EnvK8sReplicas)
	if !set || strings.TrimSpace(reps) == "" {
		return IndexedJobs{}, false, nil
	}
	get := func(k, def string) string {
		if v, ok := lookup(k); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	j = IndexedJobs{Name: get(EnvK8sName, ""), Namespace: get(EnvK8sNamespace, ""),
		ClusterDomain: get(EnvK8sClusterDomain, "cluster.local")}
	j.Service = get(EnvK8sService, j.Name)
	if j.Replicas, err = parseReplicas(reps); err != nil {
		return IndexedJobs{}, false, err
	}
	port := get(EnvK8sPort, "2222")
	if j.Port, err = strconv.Atoi(port); err != nil {
		return IndexedJobs{}, false, fmt.Errorf("cluster: %s=%q: %w: want a port number", EnvK8sPort, port, ErrBadConfig)
	}
	j.Task.Job = get(EnvK8sTask, "")
	idx := get(EnvJobCompletionIndex, "")
	if idx == "" {
		return IndexedJobs{}, false, fmt.Errorf("cluster: %s is unset: %w: run the task as an Indexed Job (completionMode: Indexed)", EnvJobCompletionIndex, ErrBadConfig)
	}
	if j.Task.Index, err = strconv.Atoi(idx); err != nil {
		return IndexedJobs{}, false, fmt.Errorf("cluster: %s=%q: %w: want a number", EnvJobCompletionIndex, idx, ErrBadConfig)
	}
	if err := j.Validate(); err != nil {
		return IndexedJobs{}, false, err
	}
	return j, true, nil
}

// parseReplicas parses "chief=1,worker=2,ps=1".
func parseReplicas(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		job, n, found := strings.Cut(part, "=")
		k, err := strconv.Atoi(strings.TrimSpace(n))
		if !found || err != nil || k < 0 {
			return nil, fmt.Errorf("cluster: %s entry %q: %w: want JOB=COUNT, e.g. chief=1,worker=2,ps=1", EnvK8sReplicas, part, ErrBadConfig)
		}
		job = strings.TrimSpace(job)
		if _, dup := out[job]; dup {
			return nil, fmt.Errorf("cluster: %s: %w: job %q given twice", EnvK8sReplicas, ErrBadConfig, job)
		}
		if k > 0 {
			out[job] = k
		}
	}
	return out, nil
}

// Validate checks that the names make valid host names and that the task is
// one of the cluster's.
func (j IndexedJobs) Validate() error {
	if !dnsLabel(j.Name) {
		return fmt.Errorf("cluster: %s=%q: %w: want a DNS label (lower-case letters, digits, '-')", EnvK8sName, j.Name, ErrBadConfig)
	}
	if !dnsLabel(j.Service) {
		return fmt.Errorf("cluster: %s=%q: %w: want a DNS label (the headless Service's name)", EnvK8sService, j.Service, ErrBadConfig)
	}
	if j.Namespace != "" && !dnsLabel(j.Namespace) {
		return fmt.Errorf("cluster: %s=%q: %w: want a DNS label", EnvK8sNamespace, j.Namespace, ErrBadConfig)
	}
	if j.Port <= 0 || j.Port > 65535 {
		return fmt.Errorf("cluster: %s=%d: %w: want a port in 1-65535", EnvK8sPort, j.Port, ErrBadConfig)
	}
	if len(j.Replicas) == 0 {
		return fmt.Errorf("cluster: %s: %w: no job has a task", EnvK8sReplicas, ErrBadConfig)
	}
	for job, n := range j.Replicas {
		// The pod's host name (NAME-JOB-INDEX) must stay a DNS label;
		// Kubernetes would truncate a longer one and the address would not
		// resolve.
		if h := j.hostLabel(TaskID{job, n - 1}); !dnsLabel(h) {
			return fmt.Errorf("cluster: host name %q of task %s/%d: %w: want a DNS label of at most 63 characters (shorten %s)", h, job, n-1, ErrBadConfig, EnvK8sName)
		}
	}
	n, known := j.Replicas[j.Task.Job]
	switch {
	case j.Task.Job == "":
		return fmt.Errorf("cluster: %s is unset: %w: want this pod's job (%s)", EnvK8sTask, ErrBadConfig, strings.Join(sortedJobs(j.Replicas), ", "))
	case !known:
		return fmt.Errorf("cluster: %s=%q: %w: %s lists jobs %s", EnvK8sTask, j.Task.Job, ErrUnknownJob, EnvK8sReplicas, strings.Join(sortedJobs(j.Replicas), ", "))
	case j.Task.Index < 0 || j.Task.Index >= n:
		return fmt.Errorf("cluster: %s=%d: %w: job %q has %d task(s)", EnvJobCompletionIndex, j.Task.Index, ErrIndexOutOfRange, j.Task.Job, n)
	}
	return nil
}

func (j IndexedJobs) hostLabel(t TaskID) string {
	return fmt.Sprintf("%s-%s-%d", j.Name, t.Job, t.Index)
}

// Address is task t's host:port: its pod's host name under the Service.
func (j IndexedJobs) Address(t TaskID) string {
	h := j.hostLabel(t) + "." + j.Service
	if j.Namespace != "" {
		h += "." + j.Namespace + ".svc"
		if j.ClusterDomain != "" {
			h += "." + j.ClusterDomain
		}
	}
	return h + ":" + strconv.Itoa(j.Port)
}

// TFConfig returns the TF_CONFIG document of the task, in the form
// Kubeflow's TFJob operator writes (with "environment": "cloud").
func (j IndexedJobs) TFConfig() (string, error) {
	if err := j.Validate(); err != nil {
		return "", err
	}
	doc := struct {
		Cluster map[string][]string `json:"cluster"`
		Task    struct {
			Type  string `json:"type"`
			Index int    `json:"index"`
		} `json:"task"`
		Environment string `json:"environment"`
	}{Cluster: map[string][]string{}, Environment: "cloud"}
	for job, n := range j.Replicas {
		for i := range n {
			doc.Cluster[job] = append(doc.Cluster[job], j.Address(TaskID{job, i}))
		}
	}
	doc.Task.Type, doc.Task.Index = j.Task.Job, j.Task.Index
	b, err := json.Marshal(doc)
	return string(b), err
}

func sortedJobs(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// dnsLabel reports whether s is an RFC 1123 label, as Kubernetes requires
// of names that become host names.
func dnsLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
