#!/usr/bin/env bash
# The cost of the live dashboard to training: the same local
# cluster run, with --dashboard and without, alternated (A B A B ...) so that
# the machine's drift falls on both, with each run's throughput (wall time)
# and the CPU time of all its processes (the launcher, which polls, and the
# tasks, which answer), and the medians.
#
#   scripts/dashboard_overhead.sh [pairs] [extra train flags...]
#
# Defaults: 5 pairs of `distflow train --model mlp --steps 3000
# --local-cluster ps=1,worker=2 --json`. The dashboard polls every task each
# second (GetStatus and a /metrics scrape); no browser is needed for its
# cost, which is the polling (a page adds one event stream from the
# launcher). On a loaded machine the CPU time is the steadier figure.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-5}
shift || true
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/distflow
go build -o "$bin" ./cmd/distflow
args=(train --model mlp --steps 3000 --local-cluster ps=1,worker=2 --json --quiet "$@")
# run prints "examples/s cpu-seconds" of one run.
run() {
  # This shell's children's CPU time (utime stime cutime cstime), read by
  # a builtin: a command substitution would be another process.
  local st t0 t1
  read -r -a st </proc/$BASHPID/stat
  t0=$((st[13] + st[14] + st[15] + st[16]))
  "$bin" "${args[@]}" "$@" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
  read -r -a st </proc/$BASHPID/stat
  t1=$((st[13] + st[14] + st[15] + st[16]))
  python3 - "$tmp/out" "$((t1 - t0))" "$(getconf CLK_TCK)" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(r.get("cluster_examples_per_second") or r["examples_per_second"], int(sys.argv[2]) / int(sys.argv[3]))
PY
}
: >"$tmp/pairs"
for i in $(seq "$pairs"); do
  a=$(run); b=$(run --dashboard 127.0.0.1:0)
  echo "$a $b" >>"$tmp/pairs"
  read -r ae ac be bc <<<"$a $b"
  printf 'pair %d: off %.0f examples/s %.1f cpu-s   on %.0f examples/s %.1f cpu-s\n' "$i" "$ae" "$ac" "$be" "$bc"
done
python3 - "$tmp/pairs" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
oe, oc, ne, nc = (statistics.median(r[i] for r in rows) for i in range(4))
print(f"median off {oe:.0f} examples/s, {oc:.2f} cpu-s; on {ne:.0f} examples/s, {nc:.2f} cpu-s")
print(f"cost of the dashboard: throughput {100*(oe-ne)/oe:+.1f}%, CPU time {100*(nc-oc)/oc:+.1f}% "
      f"(per-pair CPU cost: {', '.join(f'{100*(r[3]-r[1])/r[1]:+.1f}%' for r in rows)})")
PY
