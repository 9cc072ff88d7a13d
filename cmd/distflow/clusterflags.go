package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/pki"
)

// addSecurityFlags declares the flags that secure a task's or a tool's
// connections (see package pki). --certs-dir defaults to
// $DISTFLOW_CERTS_DIR, which a local-cluster launcher may set.
func addSecurityFlags(fl *pflag.FlagSet, s *pki.Security, tool bool) {
	who := "this task's certificate (JOB.INDEX.crt, .key)"
	if tool {
		who = "the client certificate (client.crt, client.key)"
	}
	fl.StringVar(&s.CertsDir, "certs-dir", os.Getenv(pki.EnvCertsDir), "directory with the cluster's CA (ca.crt) and "+who+", made by distflow certs create: mutual TLS on every connection")
	fl.StringVar(&s.TokenFile, "cluster-token-file", "", "file holding the cluster's shared token, sent and checked on every call (without --certs-dir it encrypts nothing)")
	if !tool {
		fl.BoolVar(&s.Insecure, "insecure", false, "run a cluster with non-loopback addresses in plaintext, without certificates or token")
	}
}

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
// from TF_CONFIG when no host flag is set (its unknown fields are warned of
// on warn). A nil spec means no cluster.
func clusterFromFlags(ps, worker, chief, job string, index int, warn io.Writer) (*cluster.Spec, cluster.TaskID, error) {
	if ps != "" || worker != "" || chief != "" {
		return cluster.FromFlags(ps, worker, chief, job, index)
	}
	if job != "" {
		return nil, cluster.TaskID{}, fmt.Errorf("--job_name %s given without --ps_hosts/--worker_hosts/--chief_hosts", job)
	}
	spec, self, ok, warnings, err := cluster.FromEnvWarn()
	for _, w := range warnings {
		fmt.Fprintln(warn, "warning:", w)
	}
	if err != nil || !ok {
		return nil, cluster.TaskID{}, err
	}
	return spec, self, nil
}
