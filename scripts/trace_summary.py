#!/usr/bin/env python3
"""Summarise a distflow step trace (distflow train --trace-steps): its processes and
threads, the slowest kernels, the Send/Recv pairs (matched by step and rendezvous key,
bytes compared) and the RPCs. Usage: scripts/trace_summary.py trace-10.json"""
import json, sys, collections
f = json.load(open(sys.argv[1]))
ev = f["traceEvents"]
procs = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
xs = [e for e in ev if e["ph"] == "X"]
steps = f.get("otherData", {}).get("step_ids", [])
print(f"{len(ev)} events, {len(xs)} slices, steps {steps}, span {max(e['ts']+e['dur'] for e in xs) - min(e['ts'] for e in xs):.0f} us")
for pid in sorted(procs):
    print(f"pid {pid} {procs[pid]}")
    for (p, tid), name in sorted(threads.items()):
        if p != pid: continue
        ts = [e for e in xs if e["pid"] == p and e["tid"] == tid]
        kinds = collections.Counter(e["cat"] for e in ts)
        print(f"   tid {tid:2} {name:42} {len(ts):4} slices {dict(kinds)}")
ker = [e for e in xs if e["cat"] == "kernel"]
print("slowest kernels:")
for e in sorted(ker, key=lambda e: -e["dur"])[:8]:
    print(f"   {e['dur']:8.1f} us  {procs[e['pid']]:20} {e['args']['op']:22} {e['name']}")
pairs = collections.defaultdict(dict)
for e in ker:
    if e["args"]["op"] in ("Send", "Recv"):
        pairs[(e["args"]["step_id"], e["args"]["rendezvous_key"])][e["args"]["op"]] = e
ok = sum(1 for p in pairs.values() if "Send" in p and "Recv" in p and p["Send"]["args"]["bytes"] == p["Recv"]["args"]["bytes"])
print(f"Send/Recv pairs: {len(pairs)}, matched with equal bytes: {ok}")
for (step, key), p in list(pairs.items())[:4]:
    s, r = p.get("Send"), p.get("Recv")
    print(f"   {key}: send {procs[s['pid']]} {s['args']['bytes']} B at {s['ts']:.1f} -> recv {procs[r['pid']]} {r['args']['bytes']} B ends {r['ts']+r['dur']:.1f}")
rpc = [e for e in xs if e["cat"] == "rpc"]
by = collections.defaultdict(list)
for e in rpc: by[e["name"]].append(e)
for n, es in by.items():
    print(f"RPC {n}: {len(es)} calls, mean {sum(e['dur'] for e in es)/len(es):.1f} us, received {sum(e['args']['received_bytes'] for e in es)} B, sent {sum(e['args']['sent_bytes'] for e in es)} B")
flows = [e for e in ev if e["ph"] in "sf"]
print(f"flow events: {len(flows)}")
