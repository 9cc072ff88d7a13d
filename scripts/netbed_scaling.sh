#!/usr/bin/env bash
# netbed_scaling.sh: the measurements behind docs/SCALING.md. Runs the
# mlp model in a shaped-network bed (scripts/netbed.sh) in synchronous-ps,
# ring all-reduce and all-reduce through the ps tasks (sum) modes at 2, 4
# and 8 tasks and prints one CSV line per run:
# mode,tasks,workers,ps,rate,rtt,steps,examples_per_second.
#
#   sudo scripts/netbed_scaling.sh [--rate 1gbit] [--rtt 0.5ms] [--repeat 2] [--steps 200] [--tasks "2 4 8"] [--modes "ps allreduce sum"] > runs.csv
#   go run ./cmd/scalingfit < runs.csv
#
# Sync ps mode with T tasks is 1 ps and T-1 workers; all-reduce is T workers;
# sum is T/2 workers and T/2 ps (as many ps hosts as workers, BytePS's
# set-up), from 4 tasks (at 2 the one worker would have nothing to sum).
# Each repeat starts with a "local" run (one process, no cluster, outside
# the bed): the compute of one step under the machine's load at the time.
set -euo pipefail
rate=1gbit rtt=0.5ms repeat=2 steps=200 tasks="2 4 8" modes="ps allreduce sum"
while [ $# -gt 0 ]; do
	case $1 in
	--rate) rate=$2; shift 2 ;;
	--rtt) rtt=$2; shift 2 ;;
	--repeat) repeat=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--tasks) tasks=$2; shift 2 ;;
	--modes) modes=$2; shift 2 ;;
	*) echo "netbed_scaling: unknown argument $1" >&2; exit 2 ;;
	esac
done
bed=$(dirname "$0")/netbed.sh
max=0
for t in $tasks; do [ "$t" -gt $max ] && max=$t; done
"$bed" down
"$bed" up "$max" --rate "$rate" --rtt "$rtt" >&2
trap '"$bed" down' EXIT
echo "mode,tasks,workers,ps,rate,rtt,steps,examples_per_second"
for ((r = 0; r < repeat; r++)); do
	out=$("${DISTFLOW:-distflow}" train --model mlp --steps "$steps" --json --quiet | tail -1)
	eps=$(echo "$out" | sed -n 's/.*"examples_per_second":\([0-9.e+]*\).*/\1/p')
	echo "local,1,1,0,-,-,$steps,${eps:-NaN}"
	for t in $tasks; do
		for mode in $modes; do
			[ "$mode" = sum ] && [ "$t" -lt 4 ] && continue
			case $mode in
			ps)
				out=$("$bed" train --ps 1 --workers $((t - 1)) -- --model mlp --steps "$steps" --sync --json --quiet | tail -1)
				w=$((t - 1)) p=1
				;;
			allreduce)
				out=$("$bed" train --workers "$t" -- --model mlp --steps "$steps" --allreduce --json --quiet | tail -1)
				w=$t p=0
				;;
			sum)
				w=$((t / 2)) p=$((t / 2))
				out=$("$bed" train --ps $p --workers $w -- --model mlp --steps "$steps" --allreduce --json --quiet | tail -1)
				;;
			*) echo "netbed_scaling: unknown mode $mode" >&2; exit 2 ;;
			esac
			eps=$(echo "$out" | sed -n 's/.*"cluster_examples_per_second":\([0-9.e+]*\).*/\1/p')
			echo "$mode,$t,$w,$p,$rate,$rtt,$steps,${eps:-NaN}"
		done
	done
done
