#!/usr/bin/python3
"""Parameter transfer between two distflow processes beside iperf3, A B A B.

Alternates iperf3 (one TCP stream over loopback) and distflow's
BenchmarkParameterTransfer for --rounds rounds, and prints the medians, ranges
and the ratio of distflow's 64 MiB transfers to iperf3, in bandwidth and in CPU
time (iperf3's CPU time per 64 MiB over distflow's, both processes counted
each side: a figure that holds when the cores are shared). The benchmark moves
float32 variables of 4 KiB, 1 MiB and 64 MiB between a ps process and a worker
as training does: pull (the worker reads the ps's variable) and push (the ps
assigns it a value computed on the worker), both through RecvTensor, which goes
over the tensor channel (raw TCP beside gRPC, see rpc/doc.go); fetch and feed
(64 MiB) are the same transfers made by a client's session, with the copies of
fetching the tensor from the step or feeding it in. --grpc-only measures with
DISTFLOW_BENCH_GRPC_ONLY=1: the worker receives over gRPC, as before the
channel. --tls alternates, instead of iperf3, plaintext and mutual TLS
(DISTFLOW_BENCH_TLS=1: both tasks with certificates from distflow certs) on the
64 MiB pull and push, with crypto/tls alone over loopback (rpc's
BenchmarkLoopbackStream: plain TCP, TLS over 1, 2 and 4 connections) as the
bound, and prints mTLS over plaintext. Usage, from the repository root (needs
Debian's iperf3 and Go):

    /usr/bin/python3 bench/network.py --rounds 3
    /usr/bin/python3 bench/network.py --tls --rounds 3
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iperf3(seconds):
    """One iperf3 measurement: bandwidth in MB/s, and the CPU time of sender and
    receiver together per 64 MiB in ms, as the benchmark reports it."""
    port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-p", str(port), "-B", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # No probe connection: iperf3's server takes any connection for a
        # test's control connection. The client is retried until the server
        # listens.
        deadline = time.time() + 10
        while True:
            r = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"],
                               capture_output=True, text=True)
            out = json.loads(r.stdout)
            if "error" not in out:
                break
            if "refused" not in out["error"] or time.time() > deadline or server.poll() is not None:
                raise RuntimeError("iperf3: " + out["error"])
            time.sleep(0.05)
        end = out["end"]
        recv, cpu = end["sum_received"], end["cpu_utilization_percent"]
        cpu_s = (cpu["host_total"] + cpu["remote_total"]) / 100 * recv["seconds"]
        return recv["bits_per_second"] / 8 / 1e6, cpu_s / recv["bytes"] * (64 << 20) * 1e3
    finally:
        server.kill()
        server.wait()


def go_bench(pkg, pattern, env=None):
    """Runs benchmarks and returns {name: MB/s} and {name: cpu-ms/op}."""
    out = subprocess.run(["go", "test", "-run", "XXX", "-bench", pattern, "-benchtime", "2s", pkg],
                         capture_output=True, text=True, check=True, env=env).stdout
    res, cpu = {}, {}
    for m in re.finditer(r"Benchmark\w+/([\w/]+)-\d+\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) MB/s(?:\s+([\d.]+) cpu-ms/op)?", out):
        res[m.group(1)] = float(m.group(2))
        if m.group(3):
            cpu[m.group(1)] = float(m.group(3))
    if not res:
        raise RuntimeError("no benchmark lines:\n" + out)
    return res, cpu


def distflow(grpc_only, tls=False, pattern="ParameterTransfer"):
    env = dict(os.environ, DISTFLOW_BENCH_GRPC_ONLY="1" if grpc_only else "", DISTFLOW_BENCH_TLS="1" if tls else "")
    return go_bench("./cmd/distflow/", pattern, env)


def median_range(runs, key):
    vals = [r[key] for r in runs if key in r]
    return statistics.median(vals), [min(vals), max(vals)]


def tls_main(a):
    """Plaintext and mTLS alternated, with crypto/tls's own bound."""
    runs = {"plain": ([], []), "mtls": ([], []), "stream": ([], [])}
    for r in range(a.rounds):
        for name, tls in (("plain", False), ("mtls", True)):
            bw, cpu = distflow(False, tls, "ParameterTransfer/(pull|push)/64MiB")
            runs[name][0].append(bw)
            runs[name][1].append(cpu)
        bw, cpu = go_bench("./rpc/", "LoopbackStream")
        runs["stream"][0].append(bw)
        runs["stream"][1].append(cpu)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[0][-1]}" for k, v in runs.items()), file=sys.stderr)
    res = {"load_average": os.getloadavg()}
    for name, (bws, cpus) in runs.items():
        for k in bws[0]:
            res[f"{name}:{k}_MBps"], res[f"{name}:{k}_range"] = median_range(bws, k)
            if any(k in c for c in cpus):
                res[f"{name}:{k}_cpu_ms"], _ = median_range(cpus, k)
    for k in ("pull/64MiB", "push/64MiB"):
        res[k + "_mtls_vs_plain"] = res[f"mtls:{k}_MBps"] / res[f"plain:{k}_MBps"]
    for k in ("tls/1", "tls/2", "tls/4"):
        res[k + "_vs_tcp"] = res[f"stream:{k}_MBps"] / res["stream:tcp/1_MBps"]
    print(json.dumps(res))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iperf-seconds", type=int, default=5)
    p.add_argument("--grpc-only", action="store_true", help="receive over gRPC, not the tensor channel")
    p.add_argument("--tls", action="store_true", help="plaintext against mutual TLS, and crypto/tls's bound")
    a = p.parse_args()
    if a.tls:
        return tls_main(a)
    ip, ip_cpu, ours, ours_cpu = [], [], [], []
    for r in range(a.rounds):
        bw, cpu = iperf3(a.iperf_seconds)
        ip.append(bw)
        ip_cpu.append(cpu)
        bw, cpu = distflow(a.grpc_only)
        ours.append(bw)
        ours_cpu.append(cpu)
        print(f"round {r + 1}: iperf3 {ip[-1]:.0f} MB/s ({ip_cpu[-1]:.1f} CPU ms per 64 MiB), distflow {ours[-1]} "
              f"CPU ms per transfer {ours_cpu[-1]}", file=sys.stderr)
    res = {"iperf3_MBps": statistics.median(ip), "iperf3_range": [min(ip), max(ip)],
           "iperf3_cpu_ms_per_64MiB": statistics.median(ip_cpu)}
    for k in ours[0]:
        vals = [o[k] for o in ours if k in o]
        res[k + "_MBps"] = statistics.median(vals)
        res[k + "_range"] = [min(vals), max(vals)]
        cpus = [o[k] for o in ours_cpu if k in o]
        if cpus:
            res[k + "_cpu_ms"] = statistics.median(cpus)
    # Bandwidth against iperf3's; and CPU cost, iperf3's over distflow's (which
    # holds when other work shares the cores and bandwidths swing).
    for k in ("pull/64MiB", "push/64MiB", "fetch/64MiB", "feed/64MiB"):
        if k + "_MBps" in res:
            res[k + "_vs_iperf3"] = res[k + "_MBps"] / res["iperf3_MBps"]
        if k + "_cpu_ms" in res:
            res[k + "_cpu_vs_iperf3"] = res["iperf3_cpu_ms_per_64MiB"] / res[k + "_cpu_ms"]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
