#!/usr/bin/python3
"""PyTorch reference for distflow's training throughput (see bench/README.md).

Trains the reference models of SPEC section 6 on Fashion-MNIST and prints one
JSON line per configuration:

  {"framework": "pytorch", "model": "mlp", "batch": 100, "threads": 1,
   "examples_per_second": ..., "test_accuracy": ...}

followed by one line per model with "best": true, the fastest thread count.

Models:
  mlp  784-100-10, sigmoid hidden layer, softmax + cross-entropy, SGD, batch 100.
  cnn  conv5x5x32 SAME+relu+maxpool2, conv5x5x64 SAME+relu+maxpool2,
       dense 3136->1024 relu, dropout 0.5, dense 1024->10; batch 50; Adam or SGD.

The data is read from the IDX .gz files with numpy (no torchvision). As in
distflow's pipeline, the training set is reshuffled every epoch and each
batch gathered from it inside the timed loop (--shuffle once keeps one fixed
order of contiguous batches instead). Timing excludes data loading, warm-up
and evaluation: each configuration runs
--warmup steps, then --steps steps split into --windows equal windows, and
reports the median window rate (the min and max are printed too).

Run with Debian's interpreter: /usr/bin/python3 bench/torch_train.py
"""
import os

# Must precede the torch import: otherwise OpenBLAS starts its own pool of
# threads that fights with PyTorch's, and may pick its generic kernels on a
# CPU it does not recognise (see openblas_env.py).
import openblas_env

openblas_env.setdefault(os.environ)

import argparse
import gzip
import json
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """Returns the contents of an IDX file (optionally gzip-compressed) as an ndarray."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: bad IDX magic {raw[:4]!r}")
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if raw[2] not in dtypes:
        raise ValueError(f"{path}: unknown IDX element type 0x{raw[2]:02x}")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=dtypes[raw[2]], offset=4 + 4 * ndim)
    want = int(np.prod(dims))
    if data.size != want:
        raise ValueError(f"{path}: {data.size} elements, want {want} for shape {dims}")
    return data.reshape(dims)


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{data_dir}: neither {stem}.gz nor {stem}")


def load(data_dir):
    def split(prefix):
        x = read_idx(find(data_dir, prefix + "-images-idx3-ubyte"))
        y = read_idx(find(data_dir, prefix + "-labels-idx1-ubyte"))
        x = torch.from_numpy(x.reshape(len(x), 784).astype(np.float32) / 255.0)
        y = torch.from_numpy(y.astype(np.int64))
        return x, y

    return split("train"), split("t10k")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(784, 100)
        self.out = nn.Linear(100, 10)

    def forward(self, x):
        return self.out(torch.sigmoid(self.hidden(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)  # SAME for stride 1
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(7 * 7 * 64, 1024)
        self.fc2 = nn.Linear(1024, 10)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        x = x.view(-1, 1, 28, 28)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.drop(F.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


# Per-model defaults; flags override them.
MODELS = {
    "mlp": dict(cls=MLP, batch=100, steps=3000, optimizer="sgd", lr=0.5),
    "cnn": dict(cls=CNN, batch=50, steps=200, optimizer="adam", lr=1e-4),
}


def evaluate(model, x, y, batch=1000):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / len(x)


def run(name, cfg, threads, args, train, test):
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    model = cfg["cls"]()
    if cfg["optimizer"] == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    else:
        opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    xtr, ytr = train
    batch = cfg["batch"]
    nbatches = len(xtr) // batch
    g = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(len(xtr), generator=g)
    if args.shuffle == "once":
        # One fixed shuffle; batches are contiguous views, so feeding costs
        # nothing (a lighter workload than distflow's, which reshuffles).
        xtr, ytr = xtr[perm].contiguous(), ytr[perm].contiguous()
    else:
        # A new order every epoch, as distflow's input pipeline draws it:
        # each batch is gathered into preallocated buffers (index_select
        # with out=, PyTorch's fastest gather, allocating nothing).
        xb_buf = torch.empty((batch, xtr.shape[1]), dtype=xtr.dtype)
        yb_buf = torch.empty((batch,), dtype=ytr.dtype)
    step = 0

    def next_batch():
        nonlocal perm
        e, j = divmod(step, nbatches)
        i = j * batch
        if args.shuffle == "once":
            return xtr[i:i + batch], ytr[i:i + batch]
        if j == 0 and e > 0:
            perm = torch.randperm(len(xtr), generator=g)
        idx = perm[i:i + batch]
        torch.index_select(xtr, 0, idx, out=xb_buf)
        torch.index_select(ytr, 0, idx, out=yb_buf)
        return xb_buf, yb_buf

    def train_steps(n):
        nonlocal step
        for _ in range(n):
            xb, yb = next_batch()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            step += 1
        return loss.item()

    train_steps(args.warmup)
    steps = cfg["steps"]
    per_window = max(1, steps // args.windows)
    rates = []
    for _ in range(args.windows):
        t0 = time.perf_counter()
        loss = train_steps(per_window)
        rates.append(per_window * batch / (time.perf_counter() - t0))
    acc = evaluate(model, *test)
    return {
        "framework": "pytorch",
        "model": name,
        "batch": batch,
        "threads": threads,
        "examples_per_second": round(statistics.median(rates), 1),
        "min_examples_per_second": round(min(rates), 1),
        "max_examples_per_second": round(max(rates), 1),
        "steps": args.warmup + per_window * args.windows,
        "optimizer": cfg["optimizer"],
        "learning_rate": cfg["lr"],
        "shuffle": args.shuffle,
        "final_loss": round(loss, 4),
        "test_accuracy": round(acc, 4),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["mlp", "cnn", "all"], default="all")
    p.add_argument("--steps", type=int, default=0,
                   help="timed training steps per configuration (0: mlp 3000, cnn 200)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps before timing")
    p.add_argument("--windows", type=int, default=5, help="timed windows; the median is reported")
    p.add_argument("--threads", default="1,2", help="comma-separated torch.set_num_threads values")
    p.add_argument("--batch", type=int, default=0, help="batch size (0: the model's reference size)")
    p.add_argument("--optimizer", choices=["sgd", "adam"], help="override the model's optimizer")
    p.add_argument("--lr", type=float, default=0, help="learning rate (0: mlp 0.5, cnn 1e-4)")
    p.add_argument("--data", default=os.environ.get("DISTFLOW_DATA", DEFAULT_DATA),
                   help="directory with the four Fashion-MNIST IDX files")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--shuffle", choices=["epoch", "once"], default="epoch",
                   help="reshuffle the training set every epoch (as distflow does) or only once")
    args = p.parse_args()
    try:
        threads = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        p.error(f"--threads: not a comma-separated list of integers: {args.threads!r}")
    if not threads or min(threads) < 1:
        p.error(f"--threads: want positive integers, got {args.threads!r}")

    train, test = load(args.data)
    names = ["mlp", "cnn"] if args.model == "all" else [args.model]
    for name in names:
        cfg = dict(MODELS[name])
        if args.steps:
            cfg["steps"] = args.steps
        if args.batch:
            cfg["batch"] = args.batch
        if args.optimizer:
            cfg["optimizer"] = args.optimizer
            if not args.lr:
                cfg["lr"] = 0.5 if (name, args.optimizer) == ("mlp", "sgd") else (
                    1e-3 if args.optimizer == "adam" else 0.05)
        if args.lr:
            cfg["lr"] = args.lr
        results = []
        for t in threads:
            r = run(name, cfg, t, args, train, test)
            results.append(r)
            print(json.dumps(r), flush=True)
        best = dict(max(results, key=lambda r: r["examples_per_second"]), best=True)
        print(json.dumps(best), flush=True)


if __name__ == "__main__":
    sys.exit(main())
