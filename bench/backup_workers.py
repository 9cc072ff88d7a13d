#!/usr/bin/python3
"""Backup workers: synchronous training throughput with one worker slowed.

Runs the linear regression, 1 ps + 3 workers, --sync --replicas-to-aggregate 2,
alternately without and with worker 2 slowed tenfold (--step-delay), and
prints global steps per second of each and their ratio (the goal: the slowed
run keeps at least 80% of the throughput), with the work wasted: the
stale gradients dropped (the chief's count) and the local steps of the
fast workers beyond one per global step. From the repository root:

    /usr/bin/python3 bench/backup_workers.py --rounds 3
    /usr/bin/python3 bench/backup_workers.py --binary /tmp/old/distflow   # another build
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run(binary, steps, delay):
    ports = free_ports(4)
    hosts = [f"127.0.0.1:{p}" for p in ports]
    common = [binary, "train", "--model", "linreg", "--steps", str(steps), "--log-every", "100000",
              "--ps_hosts", hosts[0], "--worker_hosts", ",".join(hosts[1:]), "--sync",
              "--replicas-to-aggregate", "2", "--json"]
    procs = [subprocess.Popen(common + ["--job_name", "ps"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    start = time.time()
    logs = []
    for i in range(3):
        extra = ["--step-delay", delay] if i == 2 and delay else []
        log = tempfile.TemporaryFile(mode="w+")
        logs.append(log)
        procs.append(subprocess.Popen(common + ["--job_name", "worker", "--task_index", str(i)] + extra,
                                      stdout=subprocess.PIPE, stderr=log, text=True))
    out, _ = procs[1].communicate(timeout=600)
    seconds = time.time() - start
    for p in procs[2:] + procs[:1]:
        p.communicate(timeout=60)
    res = json.loads(out.strip().splitlines()[-1])
    texts = []
    for log in logs:
        log.seek(0)
        texts.append(log.read())
    dropped = re.findall(r"stale_gradients_dropped=(\d+)", texts[0])
    local = [re.findall(r'"local_step":(\d+)', t) for t in [out] + [""] * 2]
    fast_steps = [int(local[0][-1])] if local[0] else []
    gs = res["global_step"]
    return {"rate": gs / seconds, "dropped": int(dropped[-1]) if dropped else None,
            "extra_fast_steps": fast_steps[0] - gs if fast_steps else None}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--delay", default="20ms", help="the slowed worker's extra time per step (a step takes about 2 ms)")
    p.add_argument("--binary", help="a distflow binary to run (default: build ./cmd/distflow)")
    a = p.parse_args()
    binary = a.binary
    if not binary:
        binary = os.path.join(tempfile.mkdtemp(), "distflow")
        subprocess.run(["go", "build", "-o", binary, "./cmd/distflow"], check=True)
    normal, slowed = [], []
    for r in range(a.rounds):
        normal.append(run(binary, a.steps, None))
        slowed.append(run(binary, a.steps, a.delay))
        print(f"round {r + 1}: {normal[-1]['rate']:.0f} vs {slowed[-1]['rate']:.0f} global steps/s; "
              f"dropped {normal[-1]['dropped']} vs {slowed[-1]['dropped']}; chief's local steps beyond the global "
              f"step {normal[-1]['extra_fast_steps']} vs {slowed[-1]['extra_fast_steps']}", file=sys.stderr)
    rate = lambda runs: [x["rate"] for x in runs]
    med = lambda runs, k: statistics.median([x[k] for x in runs if x[k] is not None] or [float("nan")])
    res = {"steps": a.steps, "delay": a.delay,
           "global_steps_per_second": statistics.median(rate(normal)), "range": [min(rate(normal)), max(rate(normal))],
           "slowed_global_steps_per_second": statistics.median(rate(slowed)),
           "slowed_range": [min(rate(slowed)), max(rate(slowed))],
           "dropped": med(normal, "dropped"), "slowed_dropped": med(slowed, "dropped"),
           "extra_chief_steps": med(normal, "extra_fast_steps"), "slowed_extra_chief_steps": med(slowed, "extra_fast_steps")}
    res["ratio"] = res["slowed_global_steps_per_second"] / res["global_steps_per_second"]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
