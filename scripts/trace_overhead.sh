#!/bin/sh
# The cost of step tracing when it is off, in instructions (callgrind's Ir, which the
# machine's load does not move, unlike wall time on a shared machine): the executor
# step of 20 tiny nodes (executor BenchmarkChain, per-node overhead dominates) and a
# local Session.Run of the linear-regression step (session BenchmarkLinearRegressionStep),
# built from BASE (default 6a53611, a build without step tracing) and
# from the work tree; plus executor BenchmarkTrace off/on. Per step: (Ir(8000 steps) -
# Ir(4000 steps)) / 4000. Needs valgrind. docs/BENCHMARKS.md, "Traces, metrics and dashboard".
#
#   scripts/trace_overhead.sh [BASE]
set -eu
base=${1:-6a53611}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/base"
git -C "$root" archive "$base" | tar -x -C "$tmp/base"
(cd "$tmp/base" && go test -c -o "$tmp/exec_base.test" ./executor && go test -c -o "$tmp/session_base.test" ./session)
(cd "$root" && go test -c -o "$tmp/exec_new.test" ./executor && go test -c -o "$tmp/session_new.test" ./session)

# ir BINARY BENCH N: instructions of N iterations (and the setup). Callgrind asserts on
# the Go runtime's preemption signals: asyncpreemptoff, and a retry for the odd crash.
ir() {
	for _ in 1 2 3 4 5 6; do
		v=$(GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
			"$1" -test.run '^$' -test.bench "$2" -test.benchtime "$3"x 2>&1 | sed -n 's/.*Collected : //p')
		if [ -n "$v" ]; then echo "$v"; return; fi
	done
	echo "valgrind failed: $1 $2" >&2
	exit 1
}
per_step() {
	a=$(ir "$tmp/$1" "$2" 4000)
	b=$(ir "$tmp/$1" "$2" 8000)
	printf '%-20s %-36s %7d instructions/step\n' "$1" "$2" $(((b - a) / 4000))
}
cd "$root/executor"
per_step exec_base.test '^BenchmarkChain$'
per_step exec_new.test '^BenchmarkChain$'
per_step exec_new.test '^BenchmarkTrace$/^off$'
per_step exec_new.test '^BenchmarkTrace$/^on$'
cd "$root/session"
per_step session_base.test '^BenchmarkLinearRegressionStep$'
per_step session_new.test '^BenchmarkLinearRegressionStep$'
