#!/usr/bin/python3
"""Side-by-side training throughput: distflow against PyTorch, A B A B.

Runs the same model, batch, optimizer, learning rate and data (reshuffled
every epoch, each batch gathered inside the timed loop) with both
frameworks, alternating them for --rounds rounds so that drift of the shared
machine hits both alike, and prints the median examples/s of each and their
ratio. Usage (from the repository root):

    /usr/bin/python3 bench/compare.py --model mlp --rounds 3
    /usr/bin/python3 bench/compare.py --model cnn --rounds 3

With --baseline DIR (a copy of an earlier version of the repository, e.g.
made with `git archive HEAD | tar -x -C DIR`), that version's distflow is
built and run in every round too, so that a change is measured A B A B
against it and against PyTorch in one run.

Needs Debian's python3-torch, libopenblas0-pthread and dataset-fashion-mnist
(see bench/README.md) and Go.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import openblas_env

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The reference workloads, identical on both sides.
WORKLOADS = {
    "mlp": {"batch": 100, "optimizer": "sgd", "lr": 0.5, "steps": 1500},
    "cnn": {"batch": 50, "optimizer": "adam", "lr": 1e-4, "steps": 200},
}


def last_json(out):
    for line in reversed(out.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line in output:\n" + out)


def run_torch(model, w, threads, shuffle):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    openblas_env.setdefault(env)
    cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_train.py"), "--model", model,
           "--steps", str(w["steps"]), "--batch", str(w["batch"]), "--optimizer", w["optimizer"],
           "--lr", str(w["lr"]), "--threads", threads, "--windows", "3", "--shuffle", shuffle]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    best = [json.loads(l) for l in out.splitlines() if l.startswith("{") and '"best": true' in l]
    return (best[-1] if best else last_json(out))["examples_per_second"]


def run_distflow(binary, model, w, precision=""):
    cmd = [binary, "train", "--model", model, "--steps", str(w["steps"]), "--batch", str(w["batch"]),
           "--optimizer", w["optimizer"], "--lr", str(w["lr"]), "--json", "--log-every", "1000000"]
    if precision:
        cmd += ["--precision", precision]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return last_json(out)["examples_per_second"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(WORKLOADS), default="mlp")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2", help="torch thread counts to try; the best is kept")
    p.add_argument("--steps", type=int, default=0, help="override the workload's step count")
    p.add_argument("--baseline", help="source tree of an earlier distflow to run alternately")
    p.add_argument("--torch-shuffle", choices=["epoch", "once"], default="epoch",
                   help="PyTorch reshuffles every epoch, as distflow does (default), or keeps one order")
    p.add_argument("--precision", default="", help="distflow's --precision (float32 or bf16; default its own)")
    a = p.parse_args()
    w = dict(WORKLOADS[a.model])
    if a.steps:
        w["steps"] = a.steps
    tmp = tempfile.mkdtemp()
    binary = os.path.join(tmp, "distflow")
    subprocess.run(["go", "build", "-o", binary, "./cmd/distflow"], cwd=ROOT, check=True)
    base_binary = None
    if a.baseline:
        base_binary = os.path.join(tmp, "distflow-baseline")
        subprocess.run(["go", "build", "-o", base_binary, "./cmd/distflow"], cwd=a.baseline, check=True)
    torch, ours, base = [], [], []
    for r in range(a.rounds):
        torch.append(run_torch(a.model, w, a.threads, a.torch_shuffle))
        ours.append(run_distflow(binary, a.model, w, a.precision))
        line = f"round {r + 1}: pytorch {torch[-1]:.0f}  distflow {ours[-1]:.0f}"
        if base_binary:
            base.append(run_distflow(base_binary, a.model, w))
            line += f"  baseline {base[-1]:.0f}"
        print(line + " examples/s", file=sys.stderr)
    res = {
        "model": a.model, **w, "rounds": a.rounds, "torch_shuffle": a.torch_shuffle,
        "distflow_precision": a.precision or "float32",
        "pytorch_examples_per_second": statistics.median(torch),
        "pytorch_range": [min(torch), max(torch)],
        "distflow_examples_per_second": statistics.median(ours),
        "distflow_range": [min(ours), max(ours)],
    }
    res["ratio"] = res["distflow_examples_per_second"] / res["pytorch_examples_per_second"]
    if base:
        res["baseline_examples_per_second"] = statistics.median(base)
        res["baseline_range"] = [min(base), max(base)]
        res["baseline_ratio"] = res["baseline_examples_per_second"] / res["pytorch_examples_per_second"]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
