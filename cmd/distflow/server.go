package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/distflow/distflow/pki"
	"github.com/distflow/distflow/server"
)

// newServerCommand returns `distflow server`: one task of a cluster, served
// until a Shutdown RPC (the chief declaring training finished) or SIGTERM or
// SIGINT (which cancel the command's context; see main).
func newServerCommand() *cobra.Command {
	var f struct {
		psHosts, workerHosts, chiefHosts, jobName string
		taskIndex                                 int
		security                                  pki.Security
		ckptDir, logdir                           string
		metricsPort                               int
	}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run one task of a cluster (a ps, worker or chief) until it is told to stop",
		Long: `Run one task of a cluster: a gRPC server holding a master and a worker service.

The cluster comes from the flags, as in TensorFlow 1.x programs:

  distflow server --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=ps --task_index=0

or, when no host flag is given, from the TF_CONFIG environment variable
({"cluster": {...}, "task": {"type": "ps", "index": 0}}).

A ps task also serves the all-reduce summation service, so that workers
that train with --allreduce sum their gradients through it (as the ps tasks
of distflow train --local-cluster ps=N,... --allreduce do).

The server exits cleanly (status 0) when a client sends it a Shutdown request
or on SIGTERM or SIGINT. Flags accept underscores and dashes.

Every connection uses mutual TLS with --certs-dir (distflow certs create);
a cluster with an address that is not loopback does not start without it,
--cluster-token-file or --insecure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, self, err := clusterFromFlags(f.psHosts, f.workerHosts, f.chiefHosts, f.jobName, f.taskIndex, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if spec == nil {
				return errors.New("no cluster: give --ps_hosts/--worker_hosts/--chief_hosts with --job_name and --task_index, or set TF_CONFIG")
			}
			base := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			opts, err := f.security.TaskOptions(spec, self, base)
			if err != nil {
				return err
			}
			var roots []string // where the graphs other tasks send may read and write files
			for _, d := range []string{f.ckptDir, f.logdir} {
				if d != "" {
					roots = append(roots, d)
				}
			}
			maddr, err := metricsAddress(f.metricsPort, spec, self)
			if err != nil {
				return err
			}
			// A ps sums for workers that all-reduce through it (--allreduce
			// with ps tasks), as a ps that `distflow train` starts does.
			ring, ringServers := server.SummationRing(spec, self)
			srv, err := server.New(server.Config{Cluster: spec, Task: self, Logger: base, RPC: opts, FileRoots: roots, MetricsAddress: maddr,
				Ring: ring, RingServers: ringServers})
			if err != nil {
				return err
			}
			if err := srv.Start(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "serving %s at %s\n", self, srv.Target())
			return serve(cmd.Context(), srv, base.With("task", self.String()))
		},
	}
	addClusterFlags(cmd.Flags(), &f.psHosts, &f.workerHosts, &f.chiefHosts, &f.jobName, &f.taskIndex)
	addSecurityFlags(cmd.Flags(), &f.security, false)
	cmd.Flags().StringVar(&f.ckptDir, "checkpoint-dir", "", "the directory in which the graphs sent to this task may save and restore checkpoints (none: they may not)")
	cmd.Flags().StringVar(&f.logdir, "logdir", "", "another directory in which they may read and write files")
	addMetricsFlag(cmd.Flags(), &f.metricsPort, false)
	return cmd
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
