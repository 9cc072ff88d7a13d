#!/usr/bin/python3
"""PyTorch DistributedDataParallel reference: 2 processes on localhost.

The reference for distflow's distributed throughput (docs/BENCHMARKS.md, the
modes on loopback beside PyTorch DDP): the MLP (or CNN)
trained data-parallel by N processes (default 2) with the gloo backend on
127.0.0.1, one thread each (OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1), each on
its shard of Fashion-MNIST with the per-process batch of the reference
workload; gradients are all-reduced every step. Prints one JSON line with
the aggregate examples/s (all processes) and the test accuracy of rank 0.

    /usr/bin/python3 bench/torch_ddp.py --model mlp --steps 1500

With --rank, this process is one rank of a group whose rendezvous is
--init (tcp://HOST:PORT, rank 0 listens there), as torchrun starts them: the
shaped-network bed runs one rank per network namespace this way
(scripts/netbed_modes.sh). Rank 0 prints the JSON line.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
import openblas_env  # OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE, before torch loads OpenBLAS

openblas_env.setdefault(os.environ)

import argparse
import json
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import torch_train as ref  # the single-process reference: data, models


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, init, args, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    cfg = ref.MODELS[args.model]
    (xtr, ytr), test = ref.load(args.data)
    xtr, ytr = xtr[rank::world].contiguous(), ytr[rank::world].contiguous()  # this rank's shard
    torch.manual_seed(args.seed)
    model = torch.nn.parallel.DistributedDataParallel(cfg["cls"]())
    opt = (torch.optim.Adam(model.parameters(), lr=cfg["lr"]) if cfg["optimizer"] == "adam"
           else torch.optim.SGD(model.parameters(), lr=cfg["lr"]))
    batch, nb = cfg["batch"], len(xtr) // cfg["batch"]

    def steps(n, start):
        for s in range(start, start + n):
            i = (s % nb) * batch
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xtr[i:i + batch]), ytr[i:i + batch])
            loss.backward()
            opt.step()
        return loss.item()

    steps(args.warmup, 0)
    dist.barrier()
    t0 = time.perf_counter()
    loss = steps(args.steps, args.warmup)
    dist.barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        out.put({"framework": "pytorch-ddp-gloo", "model": args.model, "processes": world,
                 "batch_per_process": batch, "steps": args.steps,
                 "examples_per_second": round(world * args.steps * batch / seconds, 1),
                 "final_loss": round(loss, 4), "test_accuracy": round(ref.evaluate(model.module, *test), 4)})
    dist.destroy_process_group()


class Printer:
    """Prints what a rank run alone puts (rank 0's result), as JSON."""

    def put(self, result):
        print(json.dumps(result), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(ref.MODELS), default="mlp")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--data", default=os.environ.get("DISTFLOW_DATA", ref.DEFAULT_DATA))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rank", type=int, help="run only this rank of --processes (with --init)")
    p.add_argument("--init", help="the group's rendezvous with --rank, tcp://HOST:PORT")
    args = p.parse_args()
    if args.rank is not None:
        if not args.init:
            p.error("--rank needs --init tcp://HOST:PORT")
        worker(args.rank, args.processes, args.init, args, Printer())
        return
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.start_processes(worker, args=(args.processes, f"tcp://127.0.0.1:{free_port()}", args, out),
                       nprocs=args.processes, join=True, start_method="spawn")
    print(json.dumps(out.get()))


if __name__ == "__main__":
    main()
