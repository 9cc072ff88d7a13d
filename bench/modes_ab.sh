#!/usr/bin/env bash
# The MLP's throughput in each training mode, two builds alternated (A B A
# B): a change to the training loop or a strategy must leave every mode's
# throughput within noise. Each run: distflow train --model mlp --data
# embedded on a local cluster (1 ps + 2 workers, or 2 workers for the ring
# modes), its cluster examples/s from --json, with the load average before
# each round.
#
#   git worktree add /tmp/base BASE && (cd /tmp/base && go build -o /tmp/distflow_base ./cmd/distflow)
#   go build -o /tmp/distflow_new ./cmd/distflow
#   bench/modes_ab.sh 2 /tmp/distflow_base /tmp/distflow_new
#
# Each line: mode, build, examples/s of the cluster.
set -euo pipefail
rounds=$1 base=$2 new=$3
modes=(
	"async:--local-cluster=ps=1,worker=2"
	"sync:--local-cluster=ps=1,worker=2 --sync"
	"in-graph:--local-cluster=ps=1,worker=2 --in-graph"
	"allreduce:--local-cluster=worker=2 --allreduce"
	"averaging:--local-cluster=worker=2 --allreduce --average-every=10"
)
rate() { # binary flags...
	"$@" --model mlp --data embedded --steps 1500 --json --quiet 2>/dev/null | tail -1 |
		python3 -c 'import json,sys; r=json.load(sys.stdin); print(round(r.get("cluster_examples_per_second") or r["examples_per_second"]))'
}
for r in $(seq 1 "$rounds"); do
	echo "round $r $(uptime)"
	for m in "${modes[@]}"; do
		name=${m%%:*} flags=${m#*:}
		# shellcheck disable=SC2086
		echo "$name base $(rate "$base" train $flags)"
		# shellcheck disable=SC2086
		echo "$name new  $(rate "$new" train $flags)"
	done
done
echo "end $(uptime)"
