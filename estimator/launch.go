package estimator

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/localcluster"
	"github.com/distflow/distflow/pki"
)

// LaunchLocalCluster starts this program as a local cluster of processes,
// as `distflow train --local-cluster` does, and returns once the cluster
// has finished: nil when its chief succeeded. jobs describes the cluster
// ("ps=1,worker=2"; "worker=2" for the strategies without parameter
// servers), and is checked against strategy before anything starts. Each
// task runs this program again with its command-line arguments less the
// flag named flagName (the one that asked for the cluster), and with its
// TF_CONFIG, which FromEnvironment reads. The chief's standard output is
// this process's; the other tasks' output is shown when they fail. See
// package localcluster for more control. The tasks' connections use
// mutual TLS with certificates made for the run in a temporary directory
// (pki.Ephemeral, passed as $DISTFLOW_CERTS_DIR) and removed at its end,
// unless $DISTFLOW_CERTS_DIR is already set.
func LaunchLocalCluster(ctx context.Context, jobs string, strategy Strategy, flagName string) error {
	if localcluster.IsTask() {
		return localcluster.ErrInTask
	}
	j, err := localcluster.Parse(jobs, localcluster.AnyPS())
	if err != nil {
		return err
	}
	// The strategy's check of the cluster's shape, on stand-in addresses.
	addrs, port := map[string][]string{}, 1
	for job, n := range map[string]int{"ps": j.PS, "worker": j.Worker, "chief": j.Chief} {
		for range n {
			addrs[job] = append(addrs[job], "127.0.0.1:"+strconv.Itoa(port))
			port++
		}
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		return err
	}
	if strategy == nil {
		strategy = Async{}
	}
	if err := strategy.validate(spec); err != nil {
		return fmt.Errorf("estimator: local cluster %q: %w", jobs, err)
	}
	// The tasks' connections use mutual TLS with a CA made for this run
	// (FromEnvironment reads its directory), unless a certs dir is set.
	var env []string
	if os.Getenv(pki.EnvCertsDir) == "" {
		dir, remove, err := pki.Ephemeral(map[string]int{"ps": j.PS, "worker": j.Worker, "chief": j.Chief})
		if err != nil {
			return err
		}
		defer remove()
		env = append(env, pki.EnvCertsDir+"="+dir)
	}
	return localcluster.Run(ctx, localcluster.Config{Jobs: j, Args: localcluster.WithoutFlag(os.Args[1:], flagName), Env: env})
}
