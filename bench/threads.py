#!/usr/bin/python3
"""Thread scaling of the training step: models' BenchmarkTrainStep at
GOMAXPROCS 1, 2, 4, 8 and 16 (those up to the machine's CPU count), A B A B.

Builds the models package's test binary once, then for --rounds rounds runs
each model at each GOMAXPROCS in turn, so that drift of a shared machine
hits every setting alike; prints the median examples/s of each with its
range and its speed-up over GOMAXPROCS=1, with the CPU model and its SIMD
flags. Usage (from the repository root):

    /usr/bin/python3 bench/threads.py                         # mlp and cnn, 5 rounds
    /usr/bin/python3 bench/threads.py --models cnn --procs 1,2,4,8,16 --steps cnn=60

--procs may name more than the machine has (oversubscription, marked so).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BATCH = {"linreg": 1, "mlp": 100, "cnn": 50}


def cpu_info():
    """The CPU model and the SIMD flags that matter to the kernels."""
    model, flags = "unknown", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k.strip() == "model name" and model == "unknown":
                    model = v.strip()
                elif k.strip() == "flags" and not flags:
                    flags = [x for x in v.split() if x.startswith(("avx", "fma"))]
    except OSError:
        pass
    return model, flags


def bench(binary, model, procs, steps):
    env = dict(os.environ, GOMAXPROCS=str(procs))
    pattern = f"TrainStep/{model}/batch={BATCH[model]}$"
    out = subprocess.run([binary, "-test.run", "XXX", "-test.bench", pattern, "-test.benchtime", f"{steps}x"],
                         env=env, check=True, capture_output=True, text=True, cwd=os.path.join(ROOT, "models")).stdout
    m = re.search(r"([\d.]+) examples/s", out)
    if not m:
        raise RuntimeError(f"no examples/s for {pattern}:\n{out}")
    return float(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--procs", default="", help="GOMAXPROCS values (default: 1,2,4,8,16 up to the CPU count)")
    p.add_argument("--steps", default="", help="steps per run, per model (default mlp=2000,cnn=40)")
    a = p.parse_args()
    ncpu = os.cpu_count() or 1
    procs = [int(x) for x in a.procs.split(",")] if a.procs else [x for x in (1, 2, 4, 8, 16) if x <= ncpu]
    model_name, flags = cpu_info()
    print(f"cpu: {model_name}, {ncpu} CPUs, {' '.join(flags)}", flush=True)
    binary = os.path.join(tempfile.mkdtemp(), "models.test")
    subprocess.run(["go", "test", "-c", "-o", binary, "./models"], cwd=ROOT, check=True)
    models = a.models.split(",")
    steps = {"linreg": 20000, "mlp": 2000, "cnn": 40}
    for kv in filter(None, a.steps.split(",")):
        k, _, v = kv.partition("=")
        steps[k] = int(v)
    res = {(m, n): [] for m in models for n in procs}
    for r in range(a.rounds):
        for m in models:
            for n in procs:
                res[(m, n)].append(bench(binary, m, n, steps[m]))
            print(f"round {r + 1} {m}: " + "  ".join(f"P={n} {res[(m, n)][-1]:.0f}" for n in procs), flush=True)
    for m in models:
        base = statistics.median(res[(m, procs[0])])
        row = {"model": m, "batch": BATCH[m], "cpu": model_name, "cpus": ncpu, "rounds": a.rounds, "gomaxprocs": {}}
        for n in procs:
            v = res[(m, n)]
            med = statistics.median(v)
            row["gomaxprocs"][str(n)] = {"examples_per_second": round(med), "range": [round(min(v)), round(max(v))],
                                         f"speedup_over_{procs[0]}": round(med / base, 3),
                                         **({"oversubscribed": True} if n > ncpu else {})}
        print(json.dumps(row))


if __name__ == "__main__":
    main()
