#!/usr/bin/python3
"""Backup workers: synchronous training throughput with one worker slowed.

Runs the linear regression, 1 ps + 3 workers, --sync --replicas-to-aggregate 2,
alternately without and with worker 2 slowed tenfold (--step-delay), and
prints global steps per second of each and their ratio (issue 5: the slowed
run should keep at least 80% of the throughput). From the repository root:

    /usr/bin/python3 bench/backup_workers.py --rounds 3
"""
import argparse
import json
import os
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
    for i in range(3):
        extra = ["--step-delay", delay] if i == 2 and delay else []
        procs.append(subprocess.Popen(common + ["--job_name", "worker", "--task_index", str(i)] + extra,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    out, _ = procs[1].communicate(timeout=600)
    seconds = time.time() - start
    for p in procs[2:] + procs[:1]:
        p.wait(timeout=60)
    res = json.loads(out.strip().splitlines()[-1])
    return res["global_step"] / seconds


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--delay", default="20ms", help="the slowed worker's extra time per step (a step takes about 2 ms)")
    a = p.parse_args()
    binary = os.path.join(tempfile.mkdtemp(), "distflow")
    subprocess.run(["go", "build", "-o", binary, "./cmd/distflow"], check=True)
    normal, slowed = [], []
    for r in range(a.rounds):
        normal.append(run(binary, a.steps, None))
        slowed.append(run(binary, a.steps, a.delay))
        print(f"round {r + 1}: {normal[-1]:.0f} vs {slowed[-1]:.0f} global steps/s", file=sys.stderr)
    res = {"steps": a.steps, "delay": a.delay,
           "global_steps_per_second": statistics.median(normal), "range": [min(normal), max(normal)],
           "slowed_global_steps_per_second": statistics.median(slowed), "slowed_range": [min(slowed), max(slowed)]}
    res["ratio"] = res["slowed_global_steps_per_second"] / res["global_steps_per_second"]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
