package main

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/localcluster"
)

// addMetricsFlag declares --metrics-port: where a task serves Prometheus
// metrics (GET http://HOST:PORT/metrics).
func addMetricsFlag(fl *pflag.FlagSet, port *int, local bool) {
	usage := "serve Prometheus metrics at http://HOST:PORT/metrics, HOST being the task's host in the cluster (0: none)"
	if local {
		usage += "; with --local-cluster every task serves them on a free loopback port (distflow status shows them), 0 turns them off"
	}
	fl.IntVar(port, "metrics-port", 0, usage)
}

// metricsAddress is where a task serves its metrics for --metrics-port:
// the host of its own address in spec (127.0.0.1 for a single process)
// and port; "" for port 0.
func metricsAddress(port int, spec *cluster.Spec, self cluster.TaskID) (string, error) {
	if port < 0 || port > 65535 {
		return "", fmt.Errorf("--metrics-port %d: want a port up to 65535, or 0 for no metrics", port)
	}
	if port == 0 {
		return "", nil
	}
	host := "127.0.0.1"
	switch {
	case self.Job == cluster.EvaluatorJob:
		host = "" // it has no address in the cluster: every interface
	case spec != nil:
		addr, err := spec.Address(self)
		if err != nil {
			return "", err
		}
		if host, _, err = net.SplitHostPort(addr); err != nil {
			return "", fmt.Errorf("--metrics-port: the task's address %q: %w", addr, err)
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// trainMetricsAddress is RunConfig.MetricsAddress of `distflow train`:
// metricsAddress, or the host of $DISTFLOW_LISTEN_ADDRESS when it is set. A
// task of a local cluster that is not given the flag serves on the free
// loopback port the launcher chose ($DISTFLOW_METRICS_ADDR, read by the
// estimator); --metrics-port 0 turns that off. A launcher refuses another
// port: its tasks cannot share one.
func trainMetricsAddress(f trainFlags, fl *pflag.FlagSet, spec *cluster.Spec, self cluster.TaskID) (string, error) {
	if !fl.Changed("metrics-port") {
		return "", nil
	}
	if f.localCluster != "" && f.metricsPort != 0 {
		return "", fmt.Errorf("--metrics-port %d with --local-cluster: every task gets a free loopback port of its own; leave the flag out (or 0 for none)", f.metricsPort)
	}
	if f.metricsPort == 0 {
		os.Unsetenv(localcluster.EnvMetricsAddress)
	}
	addr, err := metricsAddress(f.metricsPort, spec, self)
	if addr == "" || err != nil {
		return addr, err
	}
	// Where the task serves gRPC on another address than the cluster's
	// (a pod whose own DNS name may not resolve yet when it starts), its
	// metrics follow: same host, the metrics port.
	if la := os.Getenv(envListenAddress); la != "" {
		host, _, err := net.SplitHostPort(la)
		if err != nil {
			return "", fmt.Errorf("%s=%q: %w", envListenAddress, la, err)
		}
		return net.JoinHostPort(host, strconv.Itoa(f.metricsPort)), nil
	}
	return addr, nil
}
