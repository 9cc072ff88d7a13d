package localcluster

// EnvMetricsAddress is where a task serves its Prometheus metrics
// (host:port; port 0 picks a free one). Run sets it to "127.0.0.1:0" for
// every task, unless Config.Env sets it (to "" for none): each task then
// serves /metrics on a free loopback port of its own, which its GetStatus
// reports (metrics_address). estimator.RunConfig and `distflow train` read
// it.
const EnvMetricsAddress = "DISTFLOW_METRICS_ADDR"

// metricsEnv is the entry Run adds to the tasks' environment unless env
// already sets EnvMetricsAddress.
func metricsEnv(env []string) []string {
	for _, kv := range env {
		if len(kv) > len(EnvMetricsAddress) && kv[:len(EnvMetricsAddress)+1] == EnvMetricsAddress+"=" {
			return nil
		}
	}
	return []string{EnvMetricsAddress + "=127.0.0.1:0"}
}
