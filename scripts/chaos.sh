#!/bin/sh
# The long chaos matrix (docs/RELIABILITY.md): for each strategy, one clean run and
# RUNS runs with FAULTS random faults each (SIGKILL or SIGSTOP/SIGCONT of
# any task), the MLP on the embedded data on a local cluster. CPU-heavy:
# about 10 s per run on 2 cores, so the default (7 strategies x 21 runs)
# takes 25 minutes or more. The short version runs in the tests:
#   go test ./chaos -run TestChaosShort
#
# Usage: scripts/chaos.sh [OUT_DIR] [extra distflow chaos flags...]
#   RUNS=20 FAULTS=3 SEED=1 STRATEGIES=all DEADLINE=120s scripts/chaos.sh /tmp/chaos
# Writes OUT_DIR/chaos.txt (the tables), OUT_DIR/chaos.json and, per run,
# OUT_DIR/runs/<run>/output.log with the checkpoints.
set -eu
cd "$(dirname "$0")/.."
out=${1:-/tmp/distflow-chaos}
[ $# -gt 0 ] && shift
mkdir -p "$out/runs"
go build -o "$out/distflow" ./cmd/distflow
# The tasks run with the default step deadline (1 min): a shorter one hid
# stalls of a step deadline behind fast runs; the wall-time bound
# (--slow-factor) catches them instead. TRAIN_ARGS adds train flags.
cmd="$out/distflow chaos --strategy ${STRATEGIES:-all} --runs ${RUNS:-20} --faults ${FAULTS:-3} --seed ${SEED:-1} --deadline ${DEADLINE:-120s} --dir $out/runs"
[ -n "${TRAIN_ARGS:-}" ] && cmd="$cmd --train-args=$TRAIN_ARGS"
cmd="$cmd $*"
echo "$ nice -n 10 $cmd" | tee "$out/chaos.txt"
# The exit status says whether every fault run met the bar; keep going to
# print the tables either way.
status=0
nice -n 10 $cmd --json > "$out/chaos.json" || status=$?
# The tables again, from the JSON, without running anything.
"$out/distflow" chaos --from-json "$out/chaos.json" | tee -a "$out/chaos.txt"
exit $status
