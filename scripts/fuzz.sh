#!/usr/bin/env bash
# Runs every native Go fuzz target of the module for DURATION each (default
# 10m), two at a time with one worker each (the machine has 2 cores), and
# prints per target: executions, new interesting inputs, crashes. Exits
# non-zero if any target crashed; a crashing input is written by go test to
# the package's testdata/fuzz/<Target>/ (commit it as a regression seed once
# fixed).
#
#   scripts/fuzz.sh            # 10m per target
#   scripts/fuzz.sh 30s        # quick pass
#   FUZZ_JOBS=1 scripts/fuzz.sh 3m
#
# -fuzzminimizetime is 5s: minimising a new input runs uncounted (60s by
# default), which made slow targets (savedmodel's FuzzLoad) look stalled.
#
# Go 1.26's fuzz coordinator can fail a run at the end of a duration
# -fuzztime with a bare "context deadline exceeded" and no input
# (golang/go#75804, fixed in Go 1.27): such a run is reported as
# "ok (go#75804 stop)", since a real crash always writes its failing input.
set -uo pipefail
cd "$(dirname "$0")/.."

duration=${1:-10m}
jobs=${FUZZ_JOBS:-2}
logdir=$(mktemp -d "${TMPDIR:-/tmp}/distflow-fuzz.XXXXXX")

# "pkg target" per line, found in the test files.
targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  pkg=./$(dirname "${file#./}")
  grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed "s|^func |$pkg |"
done)
n=$(echo "$targets" | grep -c .)
echo "== $n fuzz targets, $duration each, $jobs at a time; logs in $logdir"

logname() {
  local p=${1#./}
  echo "$logdir/${p//\//_}.$2.log"
}

run() {
  local pkg=$1 name=$2 log
  log=$(logname "$1" "$2")
  go test -run '^$' -fuzz "^$name\$" -fuzztime "$duration" -fuzzminimizetime 5s -parallel 1 "$pkg" >"$log" 2>&1
  echo $? >"$log.rc"
}

i=0
while read -r pkg name; do
  run "$pkg" "$name" &
  i=$((i + 1))
  if [ $((i % jobs)) -eq 0 ]; then wait; fi
done <<<"$targets"
wait

failed=0
printf '%-22s %-24s %12s %8s %s\n' PACKAGE TARGET EXECS NEW RESULT
while read -r pkg name; do
  log=$(logname "$pkg" "$name")
  rc=$(cat "$log.rc" 2>/dev/null || echo 1)
  last=$(grep 'fuzz: elapsed' "$log" | tail -1)
  execs=$(sed -n 's/.*execs: \([0-9]*\).*/\1/p' <<<"$last")
  new=$(sed -n 's/.*new interesting: \([0-9]*\).*/\1/p' <<<"$last")
  result=ok
  if [ "$rc" != 0 ] && ! grep -q 'Failing input written to' "$log" &&
    [ "$(grep -c -E 'panic:|fuzz_test.go:[0-9]+:' "$log")" = 0 ] &&
    grep -q -x '    context deadline exceeded' "$log"; then
    rc=0 result="ok (go#75804 stop)"
  fi
  if [ "$rc" != 0 ]; then
    failed=$((failed + 1))
    result="CRASH: $(grep -m1 -E 'Failing input written to|--- FAIL|panic:|FAIL' "$log" | sed 's/^ *//')"
  fi
  printf '%-22s %-24s %12s %8s %s\n' "${pkg#./}" "$name" "${execs:-0}" "${new:-0}" "$result"
done <<<"$targets"

if [ "$failed" -gt 0 ]; then
  echo "== $failed target(s) crashed: see $logdir"
  exit 1
fi
echo "== no crashes"
