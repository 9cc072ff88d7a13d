#!/usr/bin/env bash
# Sync ps and all-reduce side by side, alternating builds: for each round,
# each mode and each distflow binary given, one local-cluster run of the
# reference mlp (2 workers, batch 100 each, --lr 0.4) with its cluster's
# examples/s, test accuracy and the CPU time (user + system) of all its
# processes, which holds on a shared machine where the rate does not.
#
#   bench/modes_cpu.sh 3 1500 "/tmp/distflow-base /tmp/distflow-new" "sync sync2 allreduce"
#
# Modes: sync (1 ps), sync2 (2 ps), allreduce, async. Needs GNU time
# (/usr/bin/time).
set -euo pipefail
rounds=$1 steps=$2 bins=$3 modes=$4
err=$(mktemp)
trap 'rm -f "$err"' EXIT
for i in $(seq 1 "$rounds"); do
  for m in $modes; do
    case $m in
      sync) args="--local-cluster ps=1,worker=2 --sync" ;;
      sync2) args="--local-cluster ps=2,worker=2 --sync" ;;
      allreduce) args="--local-cluster worker=2 --allreduce" ;;
      async) args="--local-cluster ps=1,worker=2" ;;
      *) echo "unknown mode $m" >&2; exit 2 ;;
    esac
    for b in $bins; do
      load=$(cut -d' ' -f1 /proc/loadavg)
      # shellcheck disable=SC2086
      out=$(/usr/bin/time -f "TIME %U %S" -o "$err" "$b" train --model mlp --steps "$steps" --lr 0.4 --json \
        --log-every 100000 $args 2>/dev/null)
      cpu=$(awk '/^TIME/ {print $2 + $3}' "$err")
      rate=$(echo "$out" | grep '^{' | tail -1 | /usr/bin/python3 -c \
        'import json, sys; d = json.load(sys.stdin); print(round(d["cluster_examples_per_second"]), d.get("test_accuracy", ""))')
      echo "round $i $m $b load $load: examples/s accuracy $rate cpu_s $cpu"
    done
  done
done
