package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/server"
)

// newServerCommand returns `distflow server`: one task of a cluster, served
// until a Shutdown RPC (the chief declaring training finished) or SIGTERM or
// SIGINT (which cancel the command's context; see main).
func newServerCommand() *cobra.Command {
	var f struct {
		psHosts, workerHosts, chiefHosts, jobName string
		taskIndex                                 int
	}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run one task of a cluster (a ps, worker or chief) until it is told to stop",
		Long: `Run one task of a cluster: a gRPC server holding a master and a worker service.

The cluster comes from the flags, as in TensorFlow 1.x programs:

  distflow server --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=ps --task_index=0

or, when no host flag is given, from the TF_CONFIG environment variable
({"cluster": {...}, "task": {"type": "ps", "index": 0}}).

The server exits cleanly (status 0) when a client sends it a Shutdown request
or on SIGTERM or SIGINT. Flags accept underscores and dashes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			var (
				spec *cluster.Spec
				self cluster.TaskID
				err  error
			)
			if f.psHosts != "" || f.workerHosts != "" || f.chiefHosts != "" {
				spec, self, err = cluster.FromFlags(f.psHosts, f.workerHosts, f.chiefHosts, f.jobName, f.taskIndex)
			} else {
				var ok bool
				spec, self, ok, err = cluster.FromEnv()
				if err == nil && !ok {
					err = errors.New("no cluster: give --ps_hosts/--worker_hosts/--chief_hosts with --job_name and --task_index, or set TF_CONFIG")
				}
			}
			if err != nil {
				return err
			}
			srv, err := server.New(server.Config{Cluster: spec, Task: self, Logger: log})
			if err != nil {
				return err
			}
			if err := srv.Start(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "serving %s at %s\n", self, srv.Target())
			if err := srv.Join(cmd.Context()); err != nil {
				// SIGTERM or SIGINT: a normal way for a task to end.
				log.Info("distflow server: signal received, stopping", "task", self.String())
				srv.Stop()
				log.Info("distflow server: exiting", "task", self.String(), "reason", "signal received")
				return nil
			}
			log.Info("distflow server: exiting", "task", self.String(), "reason", srv.StopReason())
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.psHosts, "ps_hosts", "", "comma-separated host:port list of the ps job")
	fs.StringVar(&f.workerHosts, "worker_hosts", "", "comma-separated host:port list of the worker job")
	fs.StringVar(&f.chiefHosts, "chief_hosts", "", "host:port of the chief (at most one)")
	fs.StringVar(&f.jobName, "job_name", "", "this task's job: ps, worker or chief")
	fs.IntVar(&f.taskIndex, "task_index", 0, "this task's index within its job")
	return cmd
}
