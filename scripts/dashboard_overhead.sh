#!/usr/bin/env bash
# The cost of the live dashboard to training (issue 16): the same local
# cluster run, with --dashboard and without, alternated (A B A B ...) so that
# the machine's drift falls on both, and the median throughput of each.
#
#   scripts/dashboard_overhead.sh [pairs] [extra train flags...]
#
# Defaults: 5 pairs of `distflow train --model mlp --steps 4000
# --local-cluster ps=1,worker=2 --json`. The dashboard polls every task each
# second (GetStatus and a /metrics scrape); a browser is not needed for its
# cost, which is the polling (the page's events are served by the launcher).
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-5}
shift || true
bin=$(mktemp -d)/distflow
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/distflow
args=(train --model mlp --steps 4000 --local-cluster ps=1,worker=2 --json --quiet "$@")
run() { "$bin" "${args[@]}" "$@" | tail -1 | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r.get("cluster_examples_per_second") or r["examples_per_second"])'; }
off=() on=()
for i in $(seq "$pairs"); do
  a=$(run); b=$(run --dashboard 127.0.0.1:0)
  off+=("$a") on+=("$b")
  printf 'pair %d: off %.0f  on %.0f examples/s\n' "$i" "$a" "$b"
done
python3 - "${off[*]}" "${on[*]}" <<'PY'
import statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
mo, mn = statistics.median(off), statistics.median(on)
print(f"median off {mo:.0f}, on {mn:.0f} examples/s: the dashboard costs {100*(mo-mn)/mo:+.1f}% "
      f"(spread off {min(off):.0f}-{max(off):.0f}, on {min(on):.0f}-{max(on):.0f})")
PY
