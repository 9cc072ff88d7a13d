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
#
# The whole run keeps within GPU_CHECK_BUDGET seconds (default 540, under
# the device tool's 600 s a command): each step's limit is cut to what is
# left, a step with under 15 s left is skipped as "SKIP (out of time)", and
# the summary is always printed. The order is the order of importance: the
# conformance suite, the trainings on one GPU, the memory budget and
# CUDA_VISIBLE_DEVICES, the speed against PyTorch, the cluster on logical
# GPUs, then the longer test suites. With $OUT set (the device tool's
# folder of files that come back) or GPU_CHECK_LOGS, the whole output goes
# to gpu_check.log there and the summary to gpu_check_summary.txt as well.
#
#   run: scripts/gpu_check.sh   carry: ["bin/gpu"]   timeout_s: 600
#
# A dry run without a GPU, over the fake CUDA libraries of device/cuda's
# tests (the kernels compiled for the CPU; slow, so a short budget skips
# the later steps, which checks the budget too):
#
#   DISTFLOW_CUDA_KEEP_FAKE=1 go test -v -count=1 -run TestFakeDriverErrors ./device/cuda | grep kept
#   DISTFLOW_CUDA_LIB_PATH=<the directory kept> GPU_CHECK_BUDGET=300 scripts/gpu_check.sh

set -u
cd "$(dirname "$0")/.." || exit 2
BIN=bin/gpu

# TRAVEL_MIB is what the device tool takes to the GPU machine: the working
# tree (tracked and untracked files git does not ignore) and the carried
# bin/gpu together.
TRAVEL_MIB=64

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
	# Without the symbol table and DWARF (-s -w): a panic's stack trace
	# still names functions and lines (pclntab stays), and the binaries
	# are a quarter smaller, which the size limit of what travels needs.
	for p in $pkgs; do
		rel=${p#github.com/distflow/distflow/}
		name=$(echo "$rel" | tr / _).test
		echo "building $BIN/$name ($rel)"
		CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$BIN/$name" "./$rel"
		printf '%s\t%s\n' "$name" "$rel" >>"$BIN/tests.txt"
	done
	echo "building $BIN/distflow"
	if ! CGO_ENABLED=0 go build -ldflags='-s -w' -o "$BIN/distflow" ./cmd/distflow; then
		echo "gpu_check --build: cmd/distflow did not build; the check will skip 'distflow devices'"
	fi
	for f in "$BIN"/*.test "$BIN"/distflow; do
		[ -f "$f" ] && gzip -9 -f "$f"
	done
	ls -l "$BIN"
	bin=$(du -cb "$BIN" | tail -1 | cut -f1)
	tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
	total=$((bin + tree))
	echo "bin/gpu: $((bin / 1024 / 1024)) MiB; the working tree: $((tree / 1024 / 1024)) MiB; together $((total / 1024 / 1024)) MiB of the ${TRAVEL_MIB} MiB that travel"
	if [ "$total" -gt $(((TRAVEL_MIB - 2) * 1024 * 1024)) ]; then
		echo "gpu_check --build: warning: bin/gpu and the tree are over $((TRAVEL_MIB - 2)) MiB; the device tool may refuse them"
	fi
}

if [ "${1:-}" = "--build" ]; then
	build
	exit 0
fi

START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-540}
RESERVE=20 # seconds kept for the summary and a killed step's grace
LOGDIR=${GPU_CHECK_LOGS:-${OUT:-}}
if [ -n "$LOGDIR" ] && mkdir -p "$LOGDIR"; then
	exec > >(tee -a "$LOGDIR/gpu_check.log") 2>&1
fi
# The packages whose tests run on the simulator by default run on the GPU.
export DISTFLOW_TEST_PLATFORM=cuda
NAMES=()
RESULTS=()
TIMES=()
record() { NAMES+=("$1"); RESULTS+=("$2"); TIMES+=("$3"); }

# left prints the seconds of the budget a step may still use.
left() { echo $((BUDGET - ($(date +%s) - START) - RESERVE)); }

# step NAME SECONDS CMD...: runs CMD under timeout and records the outcome.
# The limit is cut to what is left of the budget; @T@ in CMD's words
# becomes that limit less 10 s (a test binary's -test.timeout, whose panic
# lists the goroutines of a hang before timeout kills it).
step() {
	local name=$1 limit=$2
	shift 2
	local rest
	rest=$(left)
	if [ "$rest" -lt 15 ]; then
		echo
		echo "=== $name: skipped, the ${BUDGET}s budget is spent"
		record "$name" "SKIP (out of time)" 0
		return 125
	fi
	[ "$limit" -gt "$rest" ] && limit=$rest
	local args=("${@//@T@/$((limit - 10))s}")
	local t0 rc
	t0=$(date +%s)
	echo
	echo "=== $name (limit ${limit}s)"
	timeout --kill-after=5 "$limit" "${args[@]}"
	rc=$?
	local el=$(($(date +%s) - t0))
	case $rc in
	0) record "$name" PASS "$el" ;;
	124 | 137) record "$name" "TIMEOUT (${limit}s)" "$el" ;;
	*) record "$name" "FAIL (exit $rc)" "$el" ;;
	esac
	return $rc
}

# needs FILE...: true when every FILE holds something; else it records the
# comparison NAME (the first argument) as skipped.
needs() {
	local name=$1 f
	shift
	for f in "$@"; do
		if [ ! -s "$f" ]; then
			echo
			echo "=== $name: skipped, no $(basename "$f") to compare"
			record "$name" "SKIP (no result)" 0
			return 1
		fi
	done
}

# no_gpu_skip marks the last step a skip when it passed without a driver:
# its GPU tests skipped.
no_gpu_skip() {
	if [ "${RESULTS[-1]}" = PASS ] && [ "$have_driver" = 0 ]; then
		RESULTS[-1]="SKIP (no GPU)"
	fi
}

echo "gpu_check: $(date -u +%FT%TZ) on $(hostname), $(uname -sr), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), budget ${BUDGET}s"
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"

have_smi=0
if command -v nvidia-smi >/dev/null; then
	step nvidia-smi 20 nvidia-smi && have_smi=1
else
	echo "gpu_check: no nvidia-smi"
	record nvidia-smi MISSING 0
fi

# The libraries: the system's, the toolkit's, and the Python environments'
# (pip's nvidia-* wheels: nvidia/cublas/lib and nvidia/cuda_nvrtc/lib for
# CUDA 12, nvidia/cu13/lib for CUDA 13), whose directories go to
# DISTFLOW_CUDA_LIB_PATH. The driver is also looked for where NVIDIA's
# container runtime mounts it and on LD_LIBRARY_PATH.
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
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-<none>}"
missing=""
have_driver=0
for lib in libcuda.so libnvrtc.so libcublas.so; do
	found=$( (ldconfig -p 2>/dev/null | awk -v l="$lib" 'index($1, l) == 1 {print $NF}'
		IFS=:
		for d in ${DISTFLOW_CUDA_LIB_PATH:-} ${LD_LIBRARY_PATH:-} /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
			[ -n "$d" ] && ls "$d"/"$lib"* 2>/dev/null
		done) | sort -u)
	if [ -n "$found" ]; then
		echo "$lib: $(echo "$found" | paste -sd' ' -)"
		[ "$lib" = libcuda.so ] && have_driver=1
	else
		echo "$lib: NOT FOUND"
		# Without cuBLAS MatMul runs the package's own kernel.
		[ "$lib" = libcublas.so ] || missing="$missing ${lib%.so}"
	fi
done
if [ "$have_driver" = 0 ] && [ "$have_smi" = 1 ]; then
	# nvidia-smi reached a driver: libcuda is somewhere the loader finds
	# it (distflow's own search says where, or why not).
	echo "libcuda.so: not seen by name, but nvidia-smi ran: trying the GPU steps"
	have_driver=1
	missing=${missing/ libcuda/}
fi
if [ -n "$missing" ]; then
	record libraries "FAIL (no$missing)" 0
else
	record libraries PASS 0
fi

# The binaries, unpacked to a scratch directory.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for f in "$BIN"/*.gz; do
	[ -f "$f" ] || continue
	b=$(basename "$f" .gz)
	gzip -dc "$f" >"$WORK/$b" && chmod +x "$WORK/$b"
done
have_tests=0
if [ ! -s "$BIN/tests.txt" ]; then
	echo
	echo "gpu_check: no $BIN/tests.txt: run scripts/gpu_check.sh --build on a machine with Go first"
	record "test binaries" MISSING 0
else
	have_tests=1
fi
have_cli=0
if [ -f "$BIN/distflow.gz" ] && [ -x "$WORK/distflow" ]; then
	have_cli=1
else
	echo
	echo "gpu_check: no $BIN/distflow.gz; skipping 'distflow devices' and the trainings"
	record "distflow" MISSING 0
fi

# run_tests NAME LIMIT: test binary NAME of tests.txt, verbose, from its
# package's directory.
run_tests() {
	local name=$1 limit=$2 dir
	dir=$(awk -F'\t' -v n="$name" '$1 == n {print $2}' "$BIN/tests.txt")
	if [ -z "$dir" ] || [ ! -x "$WORK/$name" ]; then
		echo "gpu_check: $name is missing from $BIN"
		record "$name" MISSING 0
		return
	fi
	# -test.short skips the CPU build of the kernels; the GPU runs them.
	step "$name on the GPU" "$limit" bash -c "cd '$dir' && '$WORK/$name' -test.v -test.count=1 -test.short -test.timeout=\$1 2>&1 | tee '$WORK/$name.log'; exit \${PIPESTATUS[0]}" _ @T@
	no_gpu_skip
}

# 1. The conformance suite on the GPU: device/cuda's tests.
if [ "$have_tests" = 1 ]; then
	run_tests device_cuda.test 200
fi

if [ "$have_cli" = 1 ]; then
	step "distflow devices" 60 bash -c "'$WORK/distflow' devices | tee '$WORK/devices.txt'"
	if [ "${RESULTS[-1]}" = PASS ] && [ "$have_driver" = 1 ] && ! grep -q '^/gpu:0 .*cuda' "$WORK/devices.txt" 2>/dev/null; then
		RESULTS[-1]="FAIL (no cuda /gpu:0)"
	fi
fi

if [ "$have_cli" = 1 ] && [ "$have_driver" = 1 ]; then
	# 2. Each reference model on the CPU and on one GPU (the embedded
	# data): the test accuracy (linreg: W and b) within a point of the
	# CPU's.
	for m in "linreg 2000" "mlp 600" "cnn 100"; do
		set -- $m
		step "distflow train $1 on the CPU" 120 bash -c "'$WORK/distflow' train --model $1 --steps $2 --json --quiet | tail -1 >'$WORK/$1.cpu.json'"
		step "distflow train $1 on a GPU" 120 bash -c "'$WORK/distflow' train --model $1 --steps $2 --json --quiet --gpus 1 | tail -1 >'$WORK/$1.gpu.json'"
		needs "$1: the GPU's result is the CPU's" "$WORK/$1.cpu.json" "$WORK/$1.gpu.json" &&
			step "$1: the GPU's result is the CPU's" 20 python3 - "$WORK/$1.cpu.json" "$WORK/$1.gpu.json" <<'PY'
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

	# 3. The memory budget: a CNN in 0.002% of the card (about 3 MB) is
	# refused with an error naming the device, the bytes asked for and
	# free, and nothing crashes.
	step "memory budget: a CNN that does not fit is refused" 60 bash -c "
		'$WORK/distflow' train --model cnn --steps 2 --quiet --gpus 1 --gpu-memory-fraction 0.00002 >'$WORK/oom.txt' 2>&1
		rc=\$?; tail -3 '$WORK/oom.txt'
		[ \$rc -ne 0 ] && grep -q 'out of memory' '$WORK/oom.txt' && grep -q 'GPU:0' '$WORK/oom.txt' &&
			grep -q 'asked for' '$WORK/oom.txt' && ! grep -Eq 'panic|^goroutine ' '$WORK/oom.txt'"
	# CUDA_VISIBLE_DEVICES: empty hides the card, and --gpus is refused
	# naming it; 0 shows the one card.
	step "CUDA_VISIBLE_DEVICES chooses the cards" 60 bash -c "
		CUDA_VISIBLE_DEVICES= '$WORK/distflow' train --model mlp --steps 1 --quiet --gpus 1 >'$WORK/cvd.txt' 2>&1
		rc=\$?; tail -2 '$WORK/cvd.txt'
		[ \$rc -ne 0 ] && grep -q 'CUDA_VISIBLE_DEVICES' '$WORK/cvd.txt' || exit 1
		CUDA_VISIBLE_DEVICES=0 '$WORK/distflow' devices | tee '$WORK/cvd0.txt'
		[ \"\$(grep -c '^/gpu:' '$WORK/cvd0.txt')\" = 1 ]"

	# 4. Speed, side by side on the card: distflow's step (replayed and
	# kernel by kernel; the variables on the host, then on the device)
	# and PyTorch eager at its own best settings, then the ratios against
	# the issue's bars.
	if [ -x "$WORK/device_taskgraph.test" ]; then
		step "BenchmarkTrainStep on the GPU" 150 bash -c "cd device/taskgraph && DISTFLOW_BENCH_PLATFORM=cuda '$WORK/device_taskgraph.test' -test.run '^\$' -test.bench TrainStep -test.benchtime 200x -test.timeout=\$1 | tee '$WORK/bench.host.txt'; exit \${PIPESTATUS[0]}" _ @T@
		step "BenchmarkTrainStep on the GPU, variables on the device" 150 bash -c "cd device/taskgraph && DISTFLOW_GPU_VARIABLES=1 DISTFLOW_BENCH_PLATFORM=cuda '$WORK/device_taskgraph.test' -test.run '^\$' -test.bench TrainStep -test.benchtime 200x -test.timeout=\$1 | tee '$WORK/bench.device.txt'; exit \${PIPESTATUS[0]}" _ @T@
	fi
	if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
		step "PyTorch on the GPU (bench/torch_gpu.py)" 150 bash -c "PYTHONUNBUFFERED=1 python3 bench/torch_gpu.py --steps 300 | tee '$WORK/bench.torch.txt'; exit \${PIPESTATUS[0]}"
	else
		record "PyTorch on the GPU" "SKIP (no torch with CUDA)" 0
	fi
	needs "speed against PyTorch (CNN >= 1.0x, MLP >= 3x, wide MLP >= 0.9x)" "$WORK/bench.torch.txt" "$WORK/bench.host.txt" &&
		step "speed against PyTorch (CNN >= 1.0x, MLP >= 3x, wide MLP >= 0.9x)" 20 python3 - "$WORK/bench.torch.txt" "$WORK/bench.host.txt" "$WORK/bench.device.txt" "$WORK/speed.txt" <<'PY'
import json, os, re, sys
verdicts = open(sys.argv[4], "a")  # the "== " lines, which the summary repeats
torch = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
        torch[r["model"]] = r["examples_per_second"]
ours = {}  # (variables, benchmark) -> examples/s
for path, where in ((sys.argv[2], "host"), (sys.argv[3], "device")):
    if not os.path.exists(path):
        continue
    for line in open(path):
        m = re.match(r"BenchmarkTrainStep/(\S+?)(-\d+)?\s+\d+\s+.*?([\d.e+]+) examples/s", line)
        if m:
            ours[(where, m.group(1))] = float(m.group(3))
# The issue's bars: distflow's best path for each model against PyTorch eager.
bars = [("cnn", 1.0, ["cnn", "cnn/device-random"]), ("mlp", 3.0, ["mlp/replay", "mlp/eager"]), ("mlp4096", 0.9, ["mlp4096"])]
bad = []
for model, bar, names in bars:
    if model not in torch:
        print(f"{model}: no PyTorch result"); bad.append(model); continue
    best = None
    for (where, name), eps in sorted(ours.items()):
        if name in names:
            ratio = eps / torch[model]
            print(f"{model}: distflow {name} (variables on the {where}) {eps:.0f} examples/s, PyTorch {torch[model]:.0f}: {ratio:.2f}x")
            if best is None or ratio > best[0]:
                best = (ratio, name, where)
    if best is None:
        print(f"{model}: no distflow result"); bad.append(model); continue
    verdict = "meets" if best[0] >= bar else "MISSES"
    line = f"== {model}: best {best[0]:.2f}x ({best[1]}, variables on the {best[2]}) {verdict} the bar of {bar}x"
    print(line)
    print(line, file=verdicts)
    if best[0] < bar:
        bad.append(model)
sys.exit(1 if bad else 0)
PY

	# 5. The CNN with its dropout masks (and Glorot initial weights) drawn
	# on the GPU's Philox stream, so that its steps replay whole: other
	# numbers than the CPU's for the same seeds, so its accuracy is within
	# 3 points of the CPU run above, not 1.
	step "distflow train cnn on a GPU, random ops on the device" 120 bash -c "DISTFLOW_GPU_RANDOM=1 '$WORK/distflow' train --model cnn --steps 100 --json --quiet --gpus 1 | tail -1 >'$WORK/cnn.gpurandom.json'"
	needs "cnn with device random ops: near the CPU's result" "$WORK/cnn.cpu.json" "$WORK/cnn.gpurandom.json" "$WORK/cnn.gpu.json" &&
		step "cnn with device random ops: near the CPU's result" 20 python3 - "$WORK/cnn.cpu.json" "$WORK/cnn.gpurandom.json" "$WORK/cnn.gpu.json" <<'PY'
import json, sys
cpu, gpu, host_random = (json.load(open(f)) for f in sys.argv[1:4])
print(f"test_accuracy: cpu {cpu['test_accuracy']:.4f}, gpu with device random {gpu['test_accuracy']:.4f}; "
      f"examples/s: gpu with device random {gpu['examples_per_second']:.0f}, with host random {host_random['examples_per_second']:.0f}")
sys.exit(0 if abs(cpu["test_accuracy"] - gpu["test_accuracy"]) <= 0.03 else 1)
PY
	# The variables (and the optimizer's slots) in GPU memory, updated
	# there: the same numbers as with them on the host, within the GPU's
	# rounding (the accuracy within a point of the CPU's), and the step no
	# longer copies them in and the gradients out.
	for m in mlp cnn; do
		steps=600
		[ "$m" = cnn ] && steps=100
		step "distflow train $m on a GPU, variables on the device" 120 bash -c "DISTFLOW_GPU_VARIABLES=1 '$WORK/distflow' train --model $m --steps $steps --json --quiet --gpus 1 | tail -1 >'$WORK/$m.gpuvars.json'"
		needs "$m with device variables: the CPU's result" "$WORK/$m.cpu.json" "$WORK/$m.gpuvars.json" "$WORK/$m.gpu.json" &&
			step "$m with device variables: the CPU's result" 20 python3 - "$WORK/$m.cpu.json" "$WORK/$m.gpuvars.json" "$WORK/$m.gpu.json" <<'PY'
import json, sys
cpu, gpu, host_vars = (json.load(open(f)) for f in sys.argv[1:4])
print(f"test_accuracy: cpu {cpu['test_accuracy']:.4f}, gpu with device variables {gpu['test_accuracy']:.4f}; "
      f"examples/s: gpu with device variables {gpu['examples_per_second']:.0f}, with host variables {host_vars['examples_per_second']:.0f}")
sys.exit(0 if abs(cpu["test_accuracy"] - gpu["test_accuracy"]) <= 0.01 else 1)
PY
	done

	# 6. A cluster on two logical GPUs of the card: 1 ps on the CPU and 2
	# synchronous workers on a GPU each; 2 towers on 2 GPUs under in-graph
	# replication and under all-reduce; each within a point of the mlp's
	# accuracy on one GPU above.
	for c in "sync ps=1,worker=2 1" "in-graph ps=1,worker=2 2" "allreduce worker=2 2"; do
		set -- $c
		step "distflow train mlp on 2 logical GPUs: $1, $2, $3 GPU(s) a worker" 150 bash -c "'$WORK/distflow' train --model mlp --steps 600 --json --quiet --local-cluster $2 --strategy $1 --gpus $3 --logical-gpus 2 | tail -1 >'$WORK/mlp.$1.json'"
		needs "mlp on 2 logical GPUs, $1: one GPU's result" "$WORK/mlp.gpu.json" "$WORK/mlp.$1.json" &&
			step "mlp on 2 logical GPUs, $1: one GPU's result" 20 python3 - "$WORK/mlp.gpu.json" "$WORK/mlp.$1.json" <<'PY'
import json, sys
one, cl = (json.load(open(f)) for f in sys.argv[1:3])
print(f"test_accuracy: one GPU {one['test_accuracy']:.4f}, cluster {cl['test_accuracy']:.4f}; "
      f"cluster examples/s {cl.get('cluster_examples_per_second', 0):.0f}, devices {cl.get('devices')}")
sys.exit(0 if cl["test_accuracy"] >= one["test_accuracy"] - 0.01 else 1)
PY
	done
elif [ "$have_cli" = 1 ]; then
	echo "gpu_check: no CUDA driver; skipping the trainings on a GPU"
	record "distflow train on a GPU" "SKIP (no GPU)" 0
fi

# 7. The longer suites: the other test binaries (device/taskgraph's
# trainings with their variables on the GPU against the CPU's losses),
# the products and GEMM convolutions once more on the package's own GEMM
# kernel instead of cuBLAS, and the convolutions' speed, FP32 and TF32
# (TestConformanceTF32, in the first run, checks TF32's results).
if [ "$have_tests" = 1 ]; then
	while IFS=$'\t' read -r name dir; do
		[ -n "$name" ] && [ "$name" != device_cuda.test ] && run_tests "$name" 200
	done <"$BIN/tests.txt"
	if [ -x "$WORK/device_cuda.test" ]; then
		step "device_cuda.test (MatMul and Conv2D* on the own GEMM kernel)" 60 bash -c "cd device/cuda && DISTFLOW_CUDA_NO_CUBLAS=1 '$WORK/device_cuda.test' -test.v -test.count=1 -test.short -test.run 'TestConformance/Kernels/(MatMul|Conv2D)' -test.timeout=\$1" _ @T@
		no_gpu_skip
		step "device_cuda.test BenchmarkConv2D" 90 bash -c "cd device/cuda && '$WORK/device_cuda.test' -test.run '^\$' -test.bench Conv2D -test.benchtime 50x -test.timeout=\$1" _ @T@
		no_gpu_skip
	fi
fi

summary() {
	echo
	echo "================ gpu_check summary ================"
	echo "$(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
	fails=0
	for i in "${!NAMES[@]}"; do
		printf '%-66s %-28s %4ss\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}"
		case ${RESULTS[$i]} in PASS | MISSING | SKIP*) ;; *) fails=$((fails + 1)) ;; esac
	done
	for log in "$WORK"/*.log; do
		[ -f "$log" ] || continue
		grep -E '^\s*--- FAIL' "$log" | sed "s|^|$(basename "$log" .log): |" | head -40
		echo "$(basename "$log" .log): $(grep -Ec '^\s*--- PASS' "$log") tests passed, $(grep -Ec '^\s*--- SKIP' "$log") skipped (the log says why)"
	done
	[ -f "$WORK/speed.txt" ] && cat "$WORK/speed.txt"
	echo "elapsed: $(($(date +%s) - START))s of a ${BUDGET}s budget; $fails part(s) failed"
	echo "==================================================="
}
fails=0
summary >"$WORK/summary.txt" # in this shell, which then knows fails
cat "$WORK/summary.txt"
if [ -n "$LOGDIR" ] && [ -d "$LOGDIR" ]; then
	cp "$WORK/summary.txt" "$LOGDIR/gpu_check_summary.txt"
fi
[ "$fails" -eq 0 ]
