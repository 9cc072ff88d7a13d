#!/usr/bin/python3
"""Distributed training modes side by side: the MLP, 2 workers.

Runs, alternately for --rounds rounds: distflow asynchronous (1 ps + 2
workers), synchronous (sync replicas, 1 ps + 2 workers), ring all-reduce (2
workers, no ps), the all-reduce through 1 or 2 ps tasks that sum, and PyTorch DistributedDataParallel (gloo, 2 processes, see
torch_ddp.py); each for the same number of steps of batch 100 per worker on
the full Fashion-MNIST. Prints the median aggregate examples/s of each.

    /usr/bin/python3 bench/modes.py --rounds 2 --steps 1500
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

MODES = {
    "async": ["--local-cluster", "ps=1,worker=2"],
    "sync": ["--local-cluster", "ps=1,worker=2", "--sync"],
    "allreduce": ["--local-cluster", "worker=2", "--allreduce"],
    # The all-reduce through ps tasks that sum (BytePS's design).
    "allreduce-ps": ["--local-cluster", "ps=1,worker=2", "--allreduce"],
    "allreduce-ps2": ["--local-cluster", "ps=2,worker=2", "--allreduce"],
}


def last_json(out):
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def distflow(binary, mode, steps):
    cmd = [binary, "train", "--model", "mlp", "--steps", str(steps), "--lr", "0.4", "--json",
           "--log-every", "100000"] + MODES[mode]
    r = last_json(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return r["cluster_examples_per_second"]


def ddp(steps):
    out = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "torch_ddp.py"), "--model", "mlp",
                          "--steps", str(steps)], check=True, capture_output=True, text=True).stdout
    return last_json(out)["examples_per_second"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=1500)
    a = p.parse_args()
    binary = os.path.join(tempfile.mkdtemp(), "distflow")
    subprocess.run(["go", "build", "-o", binary, "./cmd/distflow"], check=True)
    rates = {m: [] for m in list(MODES) + ["pytorch_ddp"]}
    for r in range(a.rounds):
        for m in MODES:
            rates[m].append(distflow(binary, m, a.steps))
        rates["pytorch_ddp"].append(ddp(a.steps))
        print(f"round {r + 1}: " + ", ".join(f"{m} {v[-1]:.0f}" for m, v in rates.items()), file=sys.stderr)
    print(json.dumps({m: {"examples_per_second": statistics.median(v), "range": [min(v), max(v)]}
                      for m, v in rates.items()}))


if __name__ == "__main__":
    main()
