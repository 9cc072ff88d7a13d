#!/usr/bin/python3
"""Parameter transfer between two distflow processes beside iperf3, A B A B.

Alternates iperf3 (one TCP stream over loopback) and distflow's
BenchmarkParameterTransfer (pull and push of float32 variables between a ps
process and a worker over gRPC) for --rounds rounds, and prints the medians and
the ratio of distflow's 64 MiB transfers to iperf3. Usage, from the repository
root (needs Debian's iperf3 and Go):

    /usr/bin/python3 bench/network.py --rounds 3
"""
import argparse
import json
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
    port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-p", str(port), "-B", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:  # wait until the server accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("iperf3 server did not start")
                time.sleep(0.05)
        r = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"],
                           capture_output=True, text=True, check=True)
        return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 8 / 1e6  # MB/s
    finally:
        server.kill()
        server.wait()


def distflow():
    out = subprocess.run(["go", "test", "-run", "XXX", "-bench", "ParameterTransfer", "-benchtime", "2s",
                          "./cmd/distflow/"], capture_output=True, text=True, check=True).stdout
    res = {}
    for m in re.finditer(r"BenchmarkParameterTransfer/(\w+)/(\w+)-\d+\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) MB/s", out):
        res[f"{m.group(1)}/{m.group(2)}"] = float(m.group(3))
    if not res:
        raise RuntimeError("no benchmark lines:\n" + out)
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iperf-seconds", type=int, default=5)
    a = p.parse_args()
    ip, ours = [], []
    for r in range(a.rounds):
        ip.append(iperf3(a.iperf_seconds))
        ours.append(distflow())
        print(f"round {r + 1}: iperf3 {ip[-1]:.0f} MB/s, distflow {ours[-1]}", file=sys.stderr)
    res = {"iperf3_MBps": statistics.median(ip), "iperf3_range": [min(ip), max(ip)]}
    for k in ours[0]:
        vals = [o[k] for o in ours if k in o]
        res[k + "_MBps"] = statistics.median(vals)
        res[k + "_range"] = [min(vals), max(vals)]
    for k in ("pull/64MiB", "push/64MiB"):
        res[k + "_vs_iperf3"] = res[k + "_MBps"] / res["iperf3_MBps"]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
