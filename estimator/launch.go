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
	return launchLocalCluster(ctx, jobs, strategy, flagName, false)
}

// launchLocalCluster is LaunchLocalCluster for a program whose tasks keep
// checkpoints, or not.
func launchLocalCluster(ctx context.Context, jobs string, strategy Strategy, flagName string, checkpoints bool) error {
	if localcluster.IsTask() {
		return localcluster.ErrInTask
	}
	j, err := localcluster.Parse(jobs, localcluster.AnyPS())
	if err != nil {
		return err
	}
	if _, err := checkLocalCluster(j, strategy); err != nil {
		return err
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
	cfg := localcluster.Config{Jobs: j, Args: localcluster.WithoutFlag(os.Args[1:], flagName), Env: env}
	return RunLocalCluster(ctx, cfg, strategy, checkpoints)
}

// RunLocalCluster runs cfg's cluster of processes training with strategy
// (nil: Async) and returns once it has finished: nil when its chief
// succeeded. It checks the strategy against the cluster's shape before
// anything starts, and sets cfg's restart policy from the strategy's
// Recovery: checkpoints says that the tasks keep checkpoints, from which a
// restarted chief, or a restarted ps's share of the model, resumes.
func RunLocalCluster(ctx context.Context, cfg localcluster.Config, strategy Strategy, checkpoints bool) error {
	strategy, err := checkLocalCluster(cfg.Jobs, strategy)
	if err != nil {
		return err
	}
	strategy.Recovery().LocalCluster(&cfg, checkpoints)
	return localcluster.Run(ctx, cfg)
}

// checkLocalCluster checks strategy (nil: Async, which it returns) against
// the shape of the cluster of jobs.
func checkLocalCluster(j localcluster.Jobs, strategy Strategy) (Strategy, error) {
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
		return nil, err
	}
	if strategy == nil {
		strategy = Async{}
	}
	if err := strategy.Validate(spec); err != nil {
		return nil, fmt.Errorf("estimator: local cluster %s: %w", j, err)
	}
	return strategy, nil
}
