#!/bin/sh
# A/B of metrics on a real local cluster: the same training run
# with every task serving Prometheus metrics (the default of --local-cluster)
# and without (--metrics-port 0), alternating, N pairs. Prints one line per
# run: mode, this process's and the cluster's examples/s, wall seconds.
#
#   scripts/metrics_ab.sh [pairs] [steps] [model]     # defaults: 4 2000 mlp
set -eu
pairs=${1:-4}
steps=${2:-2000}
model=${3:-mlp}
bin=$(mktemp -d)/distflow
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/distflow
i=0
while [ $i -lt "$pairs" ]; do
	for mode in on off; do
		extra=""
		[ $mode = off ] && extra="--metrics-port 0"
		# shellcheck disable=SC2086
		"$bin" train --model "$model" --steps "$steps" --local-cluster ps=1,worker=2 --json --quiet $extra 2>/dev/null | tail -1 |
			python3 -c 'import json,sys; r=json.load(sys.stdin); print(sys.argv[1], round(r["examples_per_second"]), round(r["cluster_examples_per_second"]), round(r["wall_seconds"], 2))' $mode
	done
	i=$((i + 1))
done
