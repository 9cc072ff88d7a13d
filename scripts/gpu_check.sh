#!/usr/bin/env bash
# gpu_check.sh: the GPU checks of distflow, in one prepared run.
#
#   scripts/gpu_check.sh --build   # on a machine with Go: build the binaries into bin/gpu
#   scripts/gpu_check.sh           # on the GPU machine (no Go needed), from the repository root
#
# --build compiles, with CGO_ENABLED=0, the test binaries of device/cuda and
# of every package whose tests import it, and cmd/distflow, into bin/gpu,
# gzipped (the GPU machine gets the tree with a size limit). bin/ is
# ignored by git: the device tool takes it with carry: ["bin/gpu"]. Without
# --build it prints the GPU (nvidia-smi) and the CUDA libraries it finds,
# runs the test binaries verbosely (the conformance suite on the GPU: its
# kernels and the optimizers' update kernels against the CPU's, the random
# kernels against the Go Philox stream, variables kept in device memory
# and updated there in place, in replayed CUDA graphs too, once with cuBLAS
# and MatMul and the convolutions once more with the package's own GEMM
# kernel; the products and convolutions with TF32; the convolutions'
# benchmark; device/taskgraph's trainings of the MLP and CNN with their
# variables on the GPU against the CPU's losses and checkpoint, with the
# host<->device copies per step), runs `distflow devices`, trains linreg,
# mlp and cnn on the CPU and on one GPU and compares their results (the cnn
# once more with its dropout drawn on the GPU, DISTFLOW_GPU_RANDOM=1; mlp
# and cnn once more with their variables in GPU memory,
# DISTFLOW_GPU_VARIABLES=1), times BenchmarkTrainStep on the GPU (with the
# variables on the host and on the device) beside bench/torch_gpu.py
# (PyTorch eager on the same card), and ends with one summary block. Every step runs under
# `timeout`; a missing piece prints a line and the script goes on. The exit
# status is 0 when every part that ran passed.

set -u
cd "$(dirname "$0")/.." || exit 2
BIN=bin/gpu

build() {
	set -e
	command -v go >/dev/null || { echo "gpu_check --build: no go on PATH"; exit 2; }
	rm -rf "$BIN"
	mkdir -p "$BIN"
	# device/cuda, and every package whose tests import it (but the CLI's,
	# whose tests are a long CPU suite of their own).
	pkgs=$(go list -f '{{.ImportPath}}|{{join .TestImports " "}} {{join .XTestImports " "}}' ./... |
		awk -F'|' '$2 ~ /distflow\/device\/cuda( |$)/ {print $1}' | grep -v '/cmd/' || true)
	pkgs=$(printf '%s\n%s\n' github.com/distflow/distflow/device/cuda "$pkgs" | sed '/^$/d' | sort -u)
	: >"$BIN/tests.txt"
	for p in $pkgs; do
		rel=${p#github.com/distflow/distflow/}
		name=$(echo "$rel" | tr / _).test
		echo "building $BIN/$name ($rel)"
		CGO_ENABLED=0 go test -c -o "$BIN/$name" "./$rel"
		printf '%s\t%s\n' "$name" "$rel" >>"$BIN/tests.txt"
	done
	echo "building $BIN/distflow"
	if ! CGO_ENABLED=0 go build -o "$BIN/distflow" ./cmd/distflow; then
		echo "gpu_check --build: cmd/distflow did not build; the check will skip 'distflow devices'"
	fi
	for f in "$BIN"/*.test "$BIN"/distflow; do
		[ -f "$f" ] && gzip -9 -f "$f"
	done
	ls -l "$BIN"
	total=$(du -cb "$BIN" | tail -1 | cut -f1)
	echo "bin/gpu: $((total / 1024 / 1024)) MiB"
	if [ "$total" -gt $((60 * 1024 * 1024)) ]; then
		echo "gpu_check --build: warning: bin/gpu is over 60 MiB; the GPU machine may not receive it all"
	fi
}

if [ "${1:-}" = "--build" ]; then
	build
	exit 0
fi

START=$(date +%s)
# The packages whose tests run on the simulator by default run on the GPU.
export DISTFLOW_TEST_PLATFORM=cuda
NAMES=()
RESULTS=()
TIMES=()
record() { NAMES+=("$1"); RESULTS+=("$2"); TIMES+=("$3"); }

# step NAME SECONDS CMD...: runs CMD under timeout and records the outcome.
step() {
	local name=$1 limit=$2
	shift 2
	local t0 rc
	t0=$(date +%s)
	echo
	echo "=== $name"
	timeout --kill-after=10 "$limit" "$@"
	rc=$?
	local el=$(($(date +%s) - t0))
	case $rc in
	0) record "$name" PASS "$el" ;;
	124 | 137) record "$name" "TIMEOUT (${limit}s)" "$el" ;;
	*) record "$name" "FAIL (exit $rc)" "$el" ;;
	esac
	return $rc
}

# no_gpu_skip marks the last step a skip when it passed without a driver:
# its GPU tests skipped.
no_gpu_skip() {
	if [ "${RESULTS[-1]}" = PASS ] && [ "$have_driver" = 0 ]; then
		RESULTS[-1]="SKIP (no GPU)"
	fi
}

echo "gpu_check: $(date -u +%FT%TZ) on $(hostname), $(uname -sr)"
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"

if command -v nvidia-smi >/dev/null; then
	step nvidia-smi 20 nvidia-smi
else
	echo "gpu_check: no nvidia-smi"
	record nvidia-smi MISSING 0
fi

# The libraries: the system's, the toolkit's, and the Python environments'
# (pip's nvidia-* wheels), whose directories go to DISTFLOW_CUDA_LIB_PATH.
echo
echo "=== libraries"
libdirs=()
for py in python3 /usr/bin/python3 /usr/local/bin/python3 "${VIRTUAL_ENV:-/nonexistent}/bin/python3" "${CONDA_PREFIX:-/nonexistent}/bin/python3"; do
	command -v "$py" >/dev/null 2>&1 || continue
	while IFS= read -r d; do
		[ -n "$d" ] && libdirs+=("$d")
	done < <(timeout 20 "$py" - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p.endswith("-packages")])
for r in sorted(roots):
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        print(d)
PY
	)
done
for d in /usr/local/cuda/lib64 ${CUDA_HOME:+$CUDA_HOME/lib64}; do
	[ -d "$d" ] && libdirs+=("$d")
done
if [ ${#libdirs[@]} -gt 0 ]; then
	uniq=$(printf '%s\n' "${libdirs[@]}" | awk '!seen[$0]++' | paste -sd: -)
	export DISTFLOW_CUDA_LIB_PATH="${DISTFLOW_CUDA_LIB_PATH:+$DISTFLOW_CUDA_LIB_PATH:}$uniq"
fi
echo "DISTFLOW_CUDA_LIB_PATH=${DISTFLOW_CUDA_LIB_PATH:-<none>}"
missing=""
have_driver=0
for lib in libcuda.so libnvrtc.so libcublas.so; do
	found=$( (ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 ~ "^"l {print $NF}'
		IFS=:
		for d in ${DISTFLOW_CUDA_LIB_PATH:-}; do ls "$d"/"$lib"* 2>/dev/null; done) | sort -u)
	if [ -n "$found" ]; then
		echo "$lib: $(echo "$found" | paste -sd' ' -)"
		[ "$lib" = libcuda.so ] && have_driver=1
	else
		echo "$lib: NOT FOUND"
		# Without cuBLAS MatMul runs the package's own kernel.
		[ "$lib" = libcublas.so ] || missing="$missing ${lib%.so}"
	fi
done
if [ -n "$missing" ]; then
	record libraries "FAIL (no$missing)" 0
else
	record libraries PASS 0
fi

# The binaries, unpacked to a scratch directory.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if [ ! -s "$BIN/tests.txt" ]; then
	echo
	echo "gpu_check: no $BIN/tests.txt: run scripts/gpu_check.sh --build on a machine with Go first"
	record "test binaries" MISSING 0
else
	for f in "$BIN"/*.gz; do
		[ -f "$f" ] || continue
		b=$(basename "$f" .gz)
		gzip -dc "$f" >"$WORK/$b" && chmod +x "$WORK/$b"
	done
	while IFS=$'\t' read -r name dir; do
		[ -n "$name" ] || continue
		if [ ! -x "$WORK/$name" ]; then
			echo "gpu_check: $name is missing from $BIN"
			record "$name" MISSING 0
			continue
		fi
		# -test.short skips the CPU build of the kernels; the GPU runs them.
		step "$name on the GPU" 240 bash -c "cd '$dir' && '$WORK/$name' -test.v -test.count=1 -test.short -test.timeout=230s 2>&1 | tee '$WORK/$name.log'; exit \${PIPESTATUS[0]}"
		no_gpu_skip
		if [ "$name" = device_cuda.test ]; then
			# The products and GEMM convolutions once more on the
			# package's own GEMM kernel instead of cuBLAS.
			step "$name (MatMul and Conv2D* on the own GEMM kernel)" 60 bash -c "cd '$dir' && DISTFLOW_CUDA_NO_CUBLAS=1 '$WORK/$name' -test.v -test.count=1 -test.short -test.run 'TestConformance/Kernels/(MatMul|Conv2D)' -test.timeout=50s"
			no_gpu_skip
			# The im2col convolutions' speed on the card, FP32 and TF32
			# (TestConformanceTF32, in the run above, checks TF32's results).
			step "$name BenchmarkConv2D" 120 bash -c "cd '$dir' && '$WORK/$name' -test.run '^$' -test.bench Conv2D -test.benchtime 50x -test.timeout=110s"
			no_gpu_skip
		fi
	done <"$BIN/tests.txt"
fi

if [ -f "$BIN/distflow.gz" ]; then
	gzip -dc "$BIN/distflow.gz" >"$WORK/distflow" && chmod +x "$WORK/distflow"
	step "distflow devices" 30 "$WORK/distflow" devices
	# The reference models end to end on one GPU (the embedded data).
	if [ "$have_driver" = 1 ]; then
		# Each reference model on the CPU and on one GPU: the test
		# accuracy (linreg: W and b) within a point of the CPU's.
		for m in "linreg 2000" "mlp 600" "cnn 100"; do
			set -- $m
			step "distflow train $1 on the CPU" 240 bash -c "'$WORK/distflow' train --model $1 --steps $2 --json --quiet | tail -1 >'$WORK/$1.cpu.json'"
			step "distflow train $1 on a GPU" 240 bash -c "'$WORK/distflow' train --model $1 --steps $2 --json --quiet --gpus 1 | tail -1 >'$WORK/$1.gpu.json'"
			step "$1: the GPU's result is the CPU's" 10 python3 - "$WORK/$1.cpu.json" "$WORK/$1.gpu.json" <<'PY'
import json, sys
cpu, gpu = (json.load(open(f)) for f in sys.argv[1:3])
keys = [k for k in ("test_accuracy", "W", "b") if k in cpu]
bad = []
for k in keys:
    tol = 0.01 if k == "test_accuracy" else 0.05
    print(f"{k}: cpu {cpu[k]:.4f}, gpu {gpu.get(k, float('nan')):.4f}, examples/s cpu {cpu['examples_per_second']:.0f}, gpu {gpu['examples_per_second']:.0f}, peak {gpu.get('devices')}")
    if not abs(cpu[k] - gpu.get(k, 1e9)) <= tol:
        bad.append(k)
sys.exit(1 if bad else 0)
PY
		done
		# The CNN with its dropout masks (and Glorot initial weights) drawn
		# on the GPU's Philox stream, so that its steps replay whole: other
		# numbers than the CPU's for the same seeds, so its accuracy is
		# within 3 points of the CPU run above, not 1.
		step "distflow train cnn on a GPU, random ops on the device" 240 bash -c "DISTFLOW_GPU_RANDOM=1 '$WORK/distflow' train --model cnn --steps 100 --json --quiet --gpus 1 | tail -1 >'$WORK/cnn.gpurandom.json'"
		step "cnn with device random ops: near the CPU's result" 10 python3 - "$WORK/cnn.cpu.json" "$WORK/cnn.gpurandom.json" "$WORK/cnn.gpu.json" <<'PY'
import json, sys
cpu, gpu, host_random = (json.load(open(f)) for f in sys.argv[1:4])
print(f"test_accuracy: cpu {cpu['test_accuracy']:.4f}, gpu with device random {gpu['test_accuracy']:.4f}; "
      f"examples/s: gpu with device random {gpu['examples_per_second']:.0f}, with host random {host_random['examples_per_second']:.0f}")
sys.exit(0 if abs(cpu["test_accuracy"] - gpu["test_accuracy"]) <= 0.03 else 1)
PY
		# The variables (and the optimizer's slots) in GPU memory, updated
		# there: the same numbers as with them on the host, within the
		# GPU's rounding (the accuracy within a point of the CPU's), and
		# the step no longer copies them in and the gradients out.
		for m in mlp cnn; do
			steps=600
			[ "$m" = cnn ] && steps=100
			step "distflow train $m on a GPU, variables on the device" 240 bash -c "DISTFLOW_GPU_VARIABLES=1 '$WORK/distflow' train --model $m --steps $steps --json --quiet --gpus 1 | tail -1 >'$WORK/$m.gpuvars.json'"
			step "$m with device variables: the CPU's result" 10 python3 - "$WORK/$m.cpu.json" "$WORK/$m.gpuvars.json" "$WORK/$m.gpu.json" <<'PY'
import json, sys
cpu, gpu, host_vars = (json.load(open(f)) for f in sys.argv[1:4])
print(f"test_accuracy: cpu {cpu['test_accuracy']:.4f}, gpu with device variables {gpu['test_accuracy']:.4f}; "
      f"examples/s: gpu with device variables {gpu['examples_per_second']:.0f}, with host variables {host_vars['examples_per_second']:.0f}")
sys.exit(0 if abs(cpu["test_accuracy"] - gpu["test_accuracy"]) <= 0.01 else 1)
PY
		done
		# A cluster on two logical GPUs of the card: 1 ps on the CPU and 2
		# synchronous workers on a GPU each; 2 towers on 2 GPUs under
		# in-graph replication and under all-reduce; each within a point
		# of the mlp's accuracy on one GPU above.
		for c in "sync ps=1,worker=2 1" "in-graph ps=1,worker=2 2" "allreduce worker=2 2"; do
			set -- $c
			step "distflow train mlp on 2 logical GPUs: $1, $2, $3 GPU(s) a worker" 240 bash -c "'$WORK/distflow' train --model mlp --steps 600 --json --quiet --local-cluster $2 --strategy $1 --gpus $3 --logical-gpus 2 | tail -1 >'$WORK/mlp.$1.json'"
			step "mlp on 2 logical GPUs, $1: one GPU's result" 10 python3 - "$WORK/mlp.gpu.json" "$WORK/mlp.$1.json" <<'PY'
import json, sys
one, cl = (json.load(open(f)) for f in sys.argv[1:3])
print(f"test_accuracy: one GPU {one['test_accuracy']:.4f}, cluster {cl['test_accuracy']:.4f}; "
      f"cluster examples/s {cl.get('cluster_examples_per_second', 0):.0f}, devices {cl.get('devices')}")
sys.exit(0 if cl["test_accuracy"] >= one["test_accuracy"] - 0.01 else 1)
PY
		done
		# Speed, side by side on the card: distflow's step (replayed and
		# kernel by kernel; the variables on the host, then on the device)
		# and PyTorch eager at its own best settings.
		if [ -x "$WORK/device_taskgraph.test" ]; then
			step "BenchmarkTrainStep on the GPU" 240 bash -c "cd device/taskgraph && DISTFLOW_BENCH_PLATFORM=cuda '$WORK/device_taskgraph.test' -test.run '^$' -test.bench TrainStep -test.benchtime 200x -test.timeout=230s"
			step "BenchmarkTrainStep on the GPU, variables on the device" 240 bash -c "cd device/taskgraph && DISTFLOW_GPU_VARIABLES=1 DISTFLOW_BENCH_PLATFORM=cuda '$WORK/device_taskgraph.test' -test.run '^$' -test.bench TrainStep -test.benchtime 200x -test.timeout=230s"
		fi
		if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
			step "PyTorch on the GPU (bench/torch_gpu.py)" 240 python3 bench/torch_gpu.py --steps 300
		else
			record "PyTorch on the GPU" "SKIP (no torch with CUDA)" 0
		fi
	else
		echo "gpu_check: no CUDA driver; skipping the trainings on a GPU"
		record "distflow train on a GPU" "SKIP (no GPU)" 0
	fi
else
	echo
	echo "gpu_check: no $BIN/distflow.gz; skipping 'distflow devices'"
	record "distflow devices" MISSING 0
fi

echo
echo "================ gpu_check summary ================"
fails=0
for i in "${!NAMES[@]}"; do
	printf '%-50s %-26s %4ss\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}"
	case ${RESULTS[$i]} in PASS | MISSING | SKIP*) ;; *) fails=$((fails + 1)) ;; esac
done
for log in "$WORK"/*.log; do
	[ -f "$log" ] || continue
	grep -E '^\s*--- (FAIL|SKIP)' "$log" | sed "s|^|$(basename "$log" .log): |" | head -40
done
echo "elapsed: $(($(date +%s) - START))s; $fails part(s) failed"
echo "==================================================="
[ "$fails" -eq 0 ]
