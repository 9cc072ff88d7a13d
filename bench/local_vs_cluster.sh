#!/usr/bin/env bash
# The single-machine vs cluster comparison of the reference workloads: the
# same linear regression (4000 global steps, batch 1, SGD 0.01), once in one
# process and once on a local cluster of 1 ps + 2 workers (asynchronous,
# between-graph), each run --rounds times alternately. Prints one JSON line
# per run. Usage, from the repository root:  bench/local_vs_cluster.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
bin=$(mktemp -d)/distflow
go build -o "$bin" ./cmd/distflow
for r in $(seq "$rounds"); do
  for mode in local cluster; do
    args=(train --model linreg --steps 4000 --json --log-every 100000)
    [ "$mode" = cluster ] && args+=(--local-cluster ps=1,worker=2)
    start=$(date +%s.%N)
    line=$("$bin" "${args[@]}" 2>/dev/null | tail -n 1)
    end=$(date +%s.%N)
    python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(json.dumps({'mode': sys.argv[2], 'round': int(sys.argv[3]), 'command_seconds': round(float(sys.argv[5])-float(sys.argv[4]), 2), 'global_step': r['global_step'], 'W': round(r['W'], 4), 'b': round(r['b'], 4), 'train_examples_per_second_of_reporting_task': round(r['examples_per_second'])}))" "$line" "$mode" "$r" "$start" "$end"
  done
done
