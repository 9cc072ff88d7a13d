#!/usr/bin/python3
"""float32 GEMM through kernel/linalg: each SIMD path against OpenBLAS, A B A B.

Builds kernel/linalg's test binary with the openblas tag (cgo, Debian's
libopenblas-dev), then for --rounds rounds runs BenchmarkSgemm for every
backend in turn on the same shapes, one core by default (GOMAXPROCS=1;
OpenBLAS follows GOMAXPROCS), and prints the median GFLOP/s of each with its
range and the ratios to OpenBLAS and to avx2, with the CPU model and its SIMD
flags. On one core the rates are also taken over the process's CPU time
("cpu"), which time spent descheduled by other processes does not inflate:
on a loaded machine those are the figures to compare. OpenBLAS gets its best kernels: OPENBLAS_CORETYPE from the CPU (see
openblas_env.py) and one thread. Usage (from the repository root):

    /usr/bin/python3 bench/sgemm.py                       # n=1024, one core, 5 rounds
    /usr/bin/python3 bench/sgemm.py --shapes 'n=1024,mlp_fwd_100x784x100' --rounds 3
    /usr/bin/python3 bench/sgemm.py --procs 2             # both cores

Backends the CPU lacks (avx512 without avx512f) are left out.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

import openblas_env

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIMD_FLAGS = ("avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16")


def cpu():
    model, flags = "?", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k.strip() == "model name" and model == "?":
                model = v.strip()
            elif k.strip() == "flags" and not flags:
                flags = set(v.split())
    return model, [f for f in SIMD_FLAGS if f in flags]


def run(binary, backend, shape, procs, env):
    # Each "/" starts a level of the pattern, so "shape$" runs shape/1core
    # too: the line of the benchmark asked for is picked by its name.
    suffix = "/1core" if procs == 1 else ""
    pattern = f"Sgemm/{backend}/{re.escape(shape)}{suffix}$"
    out = subprocess.run([binary, "-test.run", "XXX", "-test.bench", pattern, "-test.benchtime", "1s"],
                         env=env, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    line = next((l for l in out.splitlines() if re.match(rf"BenchmarkSgemm/{backend}/{re.escape(shape + suffix)}(-\d+)?\s", l)), "")
    m = re.search(r"([\d.]+) GFLOP/s", line)
    if not m:
        raise RuntimeError(f"no GFLOP/s for {pattern}:\n{out}")
    cpu = re.search(r"([\d.]+) cpu-GFLOP/s", line)
    return float(m.group(1)), float(cpu.group(1)) if cpu else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--shapes", default="n=1024", help="comma-separated BenchmarkSgemm sub-benchmarks")
    p.add_argument("--procs", type=int, default=1, choices=[1, 2])
    p.add_argument("--backends", default="avx512,avx2,openblas")
    a = p.parse_args()
    tmp = tempfile.mkdtemp()
    binary = os.path.join(tmp, "linalg.test")
    subprocess.run(["go", "test", "-c", "-tags", "openblas", "-o", binary, "./kernel/linalg"], cwd=ROOT, check=True)
    env = openblas_env.setdefault(dict(os.environ))
    env["GOMAXPROCS"] = str(a.procs)
    env.pop("DISTFLOW_SIMD", None)
    listing = subprocess.run([binary, "-test.run", "^TestDefault$", "-test.v"], env=env,
                             capture_output=True, text=True).stdout
    backends = [b for b in a.backends.split(",") if f" {b}" in listing or f"[{b}" in listing]
    core = subprocess.run([binary, "-test.run", "XXX", "-test.bench", "Sgemm/openblas/n=256/1core$",
                           "-test.benchtime", "1x"], env=dict(env, OPENBLAS_VERBOSE="2"),
                          capture_output=True, text=True)
    chosen = re.search(r"Core: (\S+)", core.stdout + core.stderr)
    model, flags = cpu()
    print(f"cpu: {model}; flags: {' '.join(flags)}; OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']} "
          f"(OpenBLAS reports core {chosen.group(1) if chosen else '?'}); GOMAXPROCS={a.procs}")
    shapes = a.shapes.split(",")
    res = {(s, b): [] for s in shapes for b in backends}
    for r in range(a.rounds):
        for s in shapes:
            for b in backends:
                res[(s, b)].append(run(binary, b, s, a.procs, env))
            print(f"round {r + 1} {s}: " + "  ".join(
                f"{b} {res[(s, b)][-1][0]:.1f}" + (f" (cpu {res[(s, b)][-1][1]:.1f})" if res[(s, b)][-1][1] else "")
                for b in backends), flush=True)
    for s in shapes:
        row = {"shape": s, "procs": a.procs, "rounds": a.rounds}
        for kind, i in (("wall", 0), ("cpu", 1)):
            vals = {b: [v[i] for v in res[(s, b)]] for b in backends}
            if any(None in v for v in vals.values()):
                continue
            med = {b: statistics.median(v) for b, v in vals.items()}
            for b in backends:
                e = {"gflops": round(med[b], 1), "range": [min(vals[b]), max(vals[b])]}
                if "openblas" in med and b != "openblas":
                    e["vs_openblas"] = round(med[b] / med["openblas"], 3)
                if "avx2" in med and b != "avx2":
                    e["vs_avx2"] = round(med[b] / med["avx2"], 3)
                row.setdefault(kind, {})[b] = e
        print(json.dumps(row))


if __name__ == "__main__":
    main()
