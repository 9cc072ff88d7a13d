#!/bin/sh
# The sparse benchmark of docs/BENCHMARKS.md "Sparse models", by hand:
#  1. the wide-and-deep model with a 10M-row x 16 deep table (and a 10M x 1
#     wide table), each split in 2 partitions over 2 ps, trained by 2
#     workers (asynchronous) on a local cluster: examples/s from --json,
#     each ps process's peak resident memory (VmHWM, sampled);
#  2. bytes on the wire per step against distinct ids, on a 10M x 16 table
#     over 2 ps (train's TestSparseStepMovesOnlyTouchedRows at 10M rows);
#  3. the same model in one PyTorch process (scripts/sparse_torch.py:
#     EmbeddingBag/Embedding(sparse=True) + Adagrad), same sizes and batch.
# Usage: scripts/sparse_scale.sh [STEPS] [BATCH]   (defaults 400, 512;
# SPARSE_SCALE_TORCH=0 skips the PyTorch run; SPARSE_SCALE_SYNC=1 trains
# with --sync, each step averaging both workers' gradients in the ps's
# sparse accumulators, and measures the wire per synchronous round;
# SPARSE_SCALE_BIN=path runs that distflow binary instead of building one,
# for A/B runs against another build)
set -eu
cd "$(dirname "$0")/.."
steps=${1:-400}
batch=${2:-512}
vocab=384616 # 26 x 384616 = 10,000,016 rows
out=$(mktemp -d)
bin=${SPARSE_SCALE_BIN:-$out/distflow}
[ -n "${SPARSE_SCALE_BIN:-}" ] || go build -o "$bin" ./cmd/distflow
mode=async sync=
if [ "${SPARSE_SCALE_SYNC:-0}" = 1 ]; then mode=sync sync=--sync; fi
echo "== distflow ($mode): 2 ps + 2 workers, $steps steps of $batch, 10M x 16 (uptime: $(uptime))"
start=$(date +%s)
"$bin" train --model widedeep --vocab $vocab --embedding-dim 16 --local-cluster ps=2,worker=2 $sync \
	--steps "$steps" --batch "$batch" --json --quiet --wait-timeout 10m --step-timeout 10m >"$out/run.json" 2>"$out/run.err" &
launcher=$!
: >"$out/rss"
while kill -0 $launcher 2>/dev/null; do
	for pid in $(pgrep -P $launcher || true); do
		if { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -q '"type":"ps"'; then
			echo "$pid $(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null)" >>"$out/rss"
		fi
	done
	sleep 2
done
wait $launcher || { cat "$out/run.err"; exit 1; }
tail -1 "$out/run.json"
echo "wall $(($(date +%s) - start)) s (uptime: $(uptime))"
echo "ps peak RSS (MiB):"
sort -k1,1 -k2,2n "$out/rss" | awk 'NF == 2 {max[$1] = $2} END {for (p in max) printf "  pid %s: %.0f MiB\n", p, max[p] / 1024}'

if [ $mode = sync ]; then
	echo "== per synchronous round: bytes on the wire and ps accumulator memory, 200k and 10M x 16 over 2 ps (2 replicas x 256 ids, 8 or 256 distinct)"
	go test ./train -count=1 -run TestSyncSparseRoundMovesOnlyTouchedRows -v 2>&1 | grep -E "per round|ok|FAIL"
else
	echo "== bytes per step on the wire, 10M x 16 over 2 ps (256 ids a step, 8 or 256 distinct)"
	SPARSE_WIRE_ROWS=10000000 go test ./train -count=1 -run TestSparseStepMovesOnlyTouchedRows -v 2>&1 | grep -E "bytes per step|ok|FAIL"
fi

if [ "${SPARSE_SCALE_TORCH:-1}" != 0 ]; then
	echo "== PyTorch, one process, the same model and sizes (uptime: $(uptime))"
	/usr/bin/python3 scripts/sparse_torch.py $vocab 16 "$steps" "$batch" 2
fi
rm -rf "$out"
