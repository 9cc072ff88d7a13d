#!/usr/bin/env bash
# netbed_scaling.sh: the measurements behind docs/SCALING.md. Runs the
# mlp model in a shaped-network bed (scripts/netbed.sh) with the strategies
# sync and allreduce (round a ring, and through summation ps tasks) at 2, 4
# and 8 tasks and prints one CSV line per run:
# strategy,tasks,workers,ps,rate,rtt,steps,examples_per_second.
#
#   sudo scripts/netbed_scaling.sh [--rate 1gbit] [--rtt 0.5ms] [--repeat 2] [--steps 200] [--tasks "2 4 8"] [--strategies "sync allreduce"] [--allreduce-ps "none half"] > runs.csv
#   go run ./cmd/scalingfit < runs.csv
#
# The strategies are spelt as distflow train --strategy spells them, and
# passed to it so. sync with T tasks is 1 ps and T-1 workers. allreduce is
# run with the ps tasks --allreduce-ps names: none (the ring, T workers),
# half (T/2 workers and T/2 ps, which sum the gradients: as many ps hosts
# as workers, BytePS's set-up; from 4 tasks, as at 2 the one worker would
# have nothing to sum), or both. The CSV's ps column tells the two apart.
# Each repeat starts with a "local" run (one process, no cluster, outside
# the bed): the compute of one step under the machine's load at the time.
set -euo pipefail
rate=1gbit rtt=0.5ms repeat=2 steps=200 tasks="2 4 8" strategies="sync allreduce" allreduce_ps="none half"
while [ $# -gt 0 ]; do
	case $1 in
	--rate) rate=$2; shift 2 ;;
	--rtt) rtt=$2; shift 2 ;;
	--repeat) repeat=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--tasks) tasks=$2; shift 2 ;;
	--strategies) strategies=$2; shift 2 ;;
	--allreduce-ps) allreduce_ps=$2; shift 2 ;;
	--modes) echo "netbed_scaling: --modes is --strategies now, spelt as distflow train --strategy spells them: ps is sync, sum is allreduce with --allreduce-ps half" >&2; exit 2 ;;
	*) echo "netbed_scaling: unknown argument $1" >&2; exit 2 ;;
	esac
done
# The runs, as strategy/ps: ps 1 for sync; for allreduce, 0 (the ring) or
# half (summation servers).
configs=
for s in $strategies; do
	case $s in
	sync) configs+=" sync/1" ;;
	allreduce)
		for p in $allreduce_ps; do
			case $p in
			none) configs+=" allreduce/0" ;;
			half) configs+=" allreduce/half" ;;
			*) echo "netbed_scaling: --allreduce-ps $p: want none or half" >&2; exit 2 ;;
			esac
		done
		;;
	*) echo "netbed_scaling: strategy $s: want sync or allreduce (the ones internal/scaling models)" >&2; exit 2 ;;
	esac
done
bed=$(dirname "$0")/netbed.sh
max=0
for t in $tasks; do [ "$t" -gt $max ] && max=$t; done
"$bed" down
"$bed" up "$max" --rate "$rate" --rtt "$rtt" >&2
trap '"$bed" down' EXIT
echo "strategy,tasks,workers,ps,rate,rtt,steps,examples_per_second"
for ((r = 0; r < repeat; r++)); do
	out=$("${DISTFLOW:-distflow}" train --model mlp --steps "$steps" --json --quiet | tail -1)
	eps=$(echo "$out" | sed -n 's/.*"examples_per_second":\([0-9.e+]*\).*/\1/p')
	echo "local,1,1,0,-,-,$steps,${eps:-NaN}"
	for t in $tasks; do
		for config in $configs; do
			s=${config%/*} p=${config#*/}
			if [ "$p" = half ]; then
				[ "$t" -lt 4 ] && continue
				w=$((t / 2)) p=$((t / 2))
			else
				w=$((t - p))
			fi
			out=$("$bed" train --ps "$p" --workers "$w" -- --model mlp --steps "$steps" --strategy "$s" --json --quiet | tail -1)
			eps=$(echo "$out" | sed -n 's/.*"cluster_examples_per_second":\([0-9.e+]*\).*/\1/p')
			echo "$s,$t,$w,$p,$rate,$rtt,$steps,${eps:-NaN}"
		done
	done
done
