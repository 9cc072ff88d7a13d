#!/usr/bin/env bash
# netbed_compression.sh: gradient compression on the shaped test bed. For
# each ROUND, runs every COMPRESSION in turn (alternating, so that
# the machine's load falls on all alike) on a bed that netbed.sh has up,
# with the same epochs, seed and batch, and prints one line per run:
# compression, examples/s of the cluster, test accuracy, the load average.
# MODE is allreduce (2 workers, --allreduce) or syncps (2 workers and 1 ps,
# --sync; 3 hosts). A COMPRESSION is PUSH or PUSH/PULL: the --compression
# of the gradients, and the --pull-compression of the parameters (syncps
# only; none by default).
#
#   scripts/netbed.sh up 3 --rate 1gbit --rtt 0.5ms
#   scripts/netbed_compression.sh allreduce 3 "none fp16 topk" --model mlp --epochs 5
#   scripts/netbed_compression.sh allreduce 3 "none topk:0.05,warmup=100" --model mlp --mlp-hidden 2000 --batch 20 --epochs 5
#   scripts/netbed_compression.sh syncps 3 "none fp16 fp16/fp16 topk:0.05/fp16" --model mlp --epochs 5
#   scripts/netbed.sh down
#
# Arguments after the compressions go to `distflow train` (with --json and
# the mode's flags added). Environment: as netbed.sh (NETBED_PREFIX,
# DISTFLOW).
set -euo pipefail
mode=${1:?mode}; rounds=${2:?rounds}; comps=${3:?compressions}; shift 3
case $mode in
allreduce) bed=(--workers 2); flags=(--allreduce) ;;
syncps) bed=(--ps 1 --workers 2); flags=(--sync) ;;
*) echo "netbed_compression: mode $mode: want allreduce or syncps" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
printf "%-22s %12s %9s %s\n" compression "examples/s" accuracy load
for ((r = 1; r <= rounds; r++)); do
	for c in $comps; do
		push=${c%%/*} pull=none
		[[ $c == */* ]] && pull=${c#*/}
		out=$("$here/netbed.sh" train "${bed[@]}" -- "$@" "${flags[@]}" --compression "$push" --pull-compression "$pull" --json --quiet | tail -1)
		load=$(cut -d' ' -f1 /proc/loadavg)
		python3 -c 'import json, sys
d = json.loads(sys.argv[2])
print("%-22s %12.0f %9.4f %s" % (sys.argv[1], d["cluster_examples_per_second"], d.get("test_accuracy", float("nan")), sys.argv[3]))' "$c" "$out" "$load"
	done
done
