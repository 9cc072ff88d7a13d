#!/usr/bin/env bash
# netbed_modes.sh: synchronous ps, ring all-reduce and PyTorch DDP side by
# side on the shaped-network bed (scripts/netbed.sh), the reference mlp with
# 2 workers of batch 100. Prints one CSV line per run:
# round,mode,hosts,examples_per_second,test_accuracy.
#
#   sudo scripts/netbed_modes.sh [--rate 1gbit] [--rtt 0.5ms] [--rounds 2] [--steps 600] [--modes "sync sync2 allreduce ddp"]
#
# Modes: sync (1 ps and 2 workers, 3 hosts), sync2 (2 ps, 4 hosts),
# sync2-sliced (2 ps, the hidden layer's weights split over both:
# --ps-min-slice-bytes 65536),
# allreduce (2 hosts), allreduce-ps and allreduce-ps2 (the all-reduce
# through 1 or 2 ps tasks that sum, BytePS's design: 3 or 4 hosts), ddp (bench/torch_ddp.py, one rank per host, gloo;
# needs Debian's python3-torch). The modes alternate within each round.
# Every TCP connection between the bed's hosts, gloo's as well as
# distflow's, gets the same bandwidth limit and the same added latency.
set -euo pipefail
rate=1gbit rtt=0.5ms rounds=2 steps=600 modes="sync sync2 allreduce ddp"
while [ $# -gt 0 ]; do
	case $1 in
	--rate) rate=$2; shift 2 ;;
	--rtt) rtt=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--modes) modes=$2; shift 2 ;;
	*) echo "netbed_modes: unknown argument $1" >&2; exit 2 ;;
	esac
done
here=$(cd "$(dirname "$0")/.." && pwd)
bed=$here/scripts/netbed.sh
"$bed" down
"$bed" up 4 --rate "$rate" --rtt "$rtt" >&2
tmp=$(mktemp -d)
trap '"$bed" down; rm -rf "$tmp"' EXIT
field() { sed -n "s/.*\"$1\": *\([0-9.e+]*\).*/\1/p"; }
flags=(--model mlp --steps "$steps" --lr 0.4 --json --quiet)
echo "round,mode,hosts,examples_per_second,test_accuracy"
for ((r = 1; r <= rounds; r++)); do
	for m in $modes; do
		case $m in
		sync) hosts=3 out=$("$bed" train --ps 1 --workers 2 -- "${flags[@]}" --sync | tail -1) ;;
		sync2) hosts=4 out=$("$bed" train --ps 2 --workers 2 -- "${flags[@]}" --sync | tail -1) ;;
		sync2-sliced) hosts=4 out=$("$bed" train --ps 2 --workers 2 -- "${flags[@]}" --sync --ps-min-slice-bytes 65536 | tail -1) ;;
		allreduce) hosts=2 out=$("$bed" train --workers 2 -- "${flags[@]}" --allreduce | tail -1) ;;
		allreduce-ps) hosts=3 out=$("$bed" train --ps 1 --workers 2 -- "${flags[@]}" --allreduce | tail -1) ;;
		allreduce-ps2) hosts=4 out=$("$bed" train --ps 2 --workers 2 -- "${flags[@]}" --allreduce | tail -1) ;;
		ddp)
			hosts=2
			init="tcp://$("$bed" addr 0):29500"
			run_rank() {
				"$bed" exec "$1" env GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 "$here/bench/torch_ddp.py" \
					--processes 2 --rank "$1" --init "$init" --steps "$steps"
			}
			# Rank 0 listens first: through the bed's delay proxy a
			# connection to a port nobody listens on yet is reset rather
			# than refused, which PyTorch's store does not retry.
			run_rank 0 >"$tmp/ddp0" &
			for ((k = 0; k < 600; k++)); do
				[ -n "$("$bed" exec 0 ss -Hltn "sport = :29500")" ] && break
				sleep 0.1
			done
			run_rank 1 >/dev/null
			wait
			out=$(tail -1 "$tmp/ddp0" | sed 's/"examples_per_second"/"cluster_examples_per_second"/')
			;;
		*) echo "netbed_modes: unknown mode $m" >&2; exit 2 ;;
		esac
		echo "$r,$m,$hosts,$(echo "$out" | field cluster_examples_per_second),$(echo "$out" | field test_accuracy)"
	done
done
