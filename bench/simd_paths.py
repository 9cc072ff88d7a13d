#!/usr/bin/python3
"""The SIMD paths of kernel/linalg on whole training steps, A B A B.

Builds the models package's test binary once and runs BenchmarkTrainStep
under DISTFLOW_SIMD=<path> for each path in turn, for --rounds rounds, so
that drift of the shared machine hits every path alike; prints the median
examples/s of each with its range, and the ratio of each path to the last
one listed (avx2 by default). With --procs 1 each run is made twice, at
--steps and at three times as many steps, and the examples per second of CPU
time are taken from the difference of the two runs' CPU times (setup cancels
out): on a loaded machine, time spent descheduled by other processes does
not count against them, and those are the figures to compare. Usage (from
the repository root):

    /usr/bin/python3 bench/simd_paths.py                        # mlp and cnn, avx512 vs avx2
    /usr/bin/python3 bench/simd_paths.py --models mlp --rounds 7 --procs 1 --steps mlp=3000
    /usr/bin/python3 bench/simd_paths.py --paths avx512,avx2,generic

A path the CPU lacks falls back (with a warning) and would measure the
fallback: check `go test ./kernel/linalg -run TestDefault -v` first.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BATCH = {"linreg": 1, "mlp": 100, "cnn": 50}


def bench(binary, model, path, procs, benchtime):
    """Runs one benchmark; returns its examples/s and the CPU seconds it took."""
    env = dict(os.environ, DISTFLOW_SIMD=path)
    if procs:
        env["GOMAXPROCS"] = str(procs)
    pattern = f"TrainStep/{model}/batch={BATCH[model]}$"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([binary, "-test.run", "XXX", "-test.bench", pattern, "-test.benchtime", benchtime],
                         env=env, check=True, capture_output=True, text=True, cwd=os.path.join(ROOT, "models")).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = re.search(r"([\d.]+) examples/s", out)
    if not m:
        raise RuntimeError(f"no examples/s for {pattern}:\n{out}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(m.group(1)), cpu


def run(binary, model, path, procs, steps):
    """Returns (wall examples/s, CPU examples/s or None)."""
    if procs != 1:
        return bench(binary, model, path, procs, f"{steps}x")[0], None
    _, cpu1 = bench(binary, model, path, procs, f"{steps}x")
    rate, cpu3 = bench(binary, model, path, procs, f"{3 * steps}x")
    return rate, 2 * steps * BATCH[model] / (cpu3 - cpu1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--paths", default="avx512,avx2", help="DISTFLOW_SIMD values; ratios are to the last")
    p.add_argument("--procs", type=int, default=0, help="GOMAXPROCS (0: all cores)")
    p.add_argument("--steps", default="", help="steps per run, per model (default mlp=2000,cnn=40)")
    a = p.parse_args()
    binary = os.path.join(tempfile.mkdtemp(), "models.test")
    subprocess.run(["go", "test", "-c", "-o", binary, "./models"], cwd=ROOT, check=True)
    paths, models = a.paths.split(","), a.models.split(",")
    steps = {"linreg": 20000, "mlp": 2000, "cnn": 40}
    for kv in filter(None, a.steps.split(",")):
        k, _, v = kv.partition("=")
        steps[k] = int(v)
    res = {(m, s): [] for m in models for s in paths}
    for r in range(a.rounds):
        for m in models:
            for s in paths:
                res[(m, s)].append(run(binary, m, s, a.procs, steps[m]))
            print(f"round {r + 1} {m}: " + "  ".join(
                f"{s} {res[(m, s)][-1][0]:.0f}" + (f" (cpu {res[(m, s)][-1][1]:.0f})" if res[(m, s)][-1][1] else "")
                for s in paths), flush=True)
    for m in models:
        row = {"model": m, "batch": BATCH[m], "procs": a.procs or os.cpu_count(), "rounds": a.rounds}
        for kind, i in (("wall", 0), ("cpu", 1)):
            vals = {s: [v[i] for v in res[(m, s)]] for s in paths}
            if any(None in v for v in vals.values()):
                continue
            ref = statistics.median(vals[paths[-1]])
            for s in paths:
                med = statistics.median(vals[s])
                row.setdefault(kind, {})[s] = {"examples_per_second": round(med),
                                               "range": [round(min(vals[s])), round(max(vals[s]))],
                                               "ratio": round(med / ref, 3)}
        print(json.dumps(row))


if __name__ == "__main__":
    main()
