#!/usr/bin/env bash
# The remote linreg step (BenchmarkLinearRegressionStep/cluster), base and new
# alternated: per round one run of the base's test binary from the base's tree
# and one of the new from this tree (each binary's TestMain builds the ps
# process from the tree it runs in), with the load average before each round.
#
#   (cd BASE_TREE/cmd/distflow && go test -c -o /tmp/cmdbench_base .)
#   (cd cmd/distflow && go test -c -o /tmp/cmdbench_new .)
#   bench/linreg_step_ab.sh 5 BASE_TREE /tmp/cmdbench_base /tmp/cmdbench_new
#
# Each line: base|new, then the benchmark's line (µs/step, cpu-µs/step: the
# CPU of both processes per step, which holds on a shared machine where the
# time does not; B/op and allocs/op of the benchmark's process).
set -euo pipefail
rounds=$1 base_tree=$2 base_bin=$3 new_bin=$4
here=$(cd "$(dirname "$0")/.." && pwd)
run() { # tree binary label
	(cd "$1/cmd/distflow" && "$2" -test.run XXX -test.bench 'LinearRegressionStep/cluster' \
		-test.benchtime 3s -test.benchmem 2>&1 | grep '^Benchmark' | sed "s/^/$3 /")
}
for r in $(seq 1 "$rounds"); do
	echo "round $r $(uptime)"
	run "$base_tree" "$base_bin" base
	run "$here" "$new_bin" "new "
done
echo "end $(uptime)"
