#!/usr/bin/python3
"""The bf16 GEMM against the float32 one, A B A B: kernel/linalg's
BenchmarkBF16 (float32 then bf16 for each shape, on all cores and on one)
run --rounds times from one test binary; prints for each shape the median
GFLOP/s of both with their ranges and the ratio, over wall time and, on
one core, over the process's CPU time (the figure to compare on a loaded
machine), with the CPU model and its SIMD flags. Usage (from the
repository root):

    /usr/bin/python3 bench/bf16.py --rounds 4

Needs a CPU with AVX512_BF16 (the benchmark skips itself elsewhere).
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import tempfile

from threads import cpu_info

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--benchtime", default="300ms")
    a = p.parse_args()
    model, flags = cpu_info()
    print(f"cpu: {model}, {os.cpu_count()} CPUs, {' '.join(flags)}", flush=True)
    binary = os.path.join(tempfile.mkdtemp(), "linalg.test")
    subprocess.run(["go", "test", "-c", "-o", binary, "./kernel/linalg"], cwd=ROOT, check=True)
    res = collections.defaultdict(list)  # (shape, precision, metric) -> values
    line = re.compile(r"^BenchmarkBF16/(\S+)/(float32|bf16)-\d+\s.*?([\d.]+) GFLOP/s(?:\s+([\d.]+) cpu-GFLOP/s)?")
    for r in range(a.rounds):
        out = subprocess.run([binary, "-test.run", "^$", "-test.bench", "BF16", "-test.benchtime", a.benchtime],
                             check=True, capture_output=True, text=True, cwd=os.path.join(ROOT, "kernel/linalg")).stdout
        if "no AVX512_BF16" in out or "SKIP" in out:
            print(out)
            return
        for l in out.splitlines():
            m = line.match(l)
            if m:
                res[(m[1], m[2], "wall")].append(float(m[3]))
                if m[4]:
                    res[(m[1], m[2], "cpu")].append(float(m[4]))
        print(f"round {r + 1} done", flush=True)
    shapes = list(dict.fromkeys(k[0] for k in res))
    for s in shapes:
        row = {"shape": s, "rounds": a.rounds}
        for metric in ("wall", "cpu"):
            f, b = res.get((s, "float32", metric)), res.get((s, "bf16", metric))
            if not f or not b:
                continue
            row[metric] = {"float32_gflops": round(statistics.median(f), 1), "float32_range": [min(f), max(f)],
                           "bf16_gflops": round(statistics.median(b), 1), "bf16_range": [min(b), max(b)],
                           "ratio": round(statistics.median(b) / statistics.median(f), 2)}
        print(json.dumps(row))


if __name__ == "__main__":
    main()
