#!/usr/bin/env python3
"""PyTorch on the GPU, side by side with distflow's BenchmarkTrainStep.

The same models and steps as device/taskgraph's BenchmarkTrainStep: one SGD
step of the MLP (784-100-10, sigmoid, batch 100), a wide MLP (784-4096-10,
batch 1024) and the reference CNN (batch 256, dropout 0.5), the batch copied
from host memory every step and the loss read back (distflow fetches it),
in PyTorch's eager mode at its own best settings: cudnn.benchmark on, TF32
as its defaults allow (cuDNN convolutions yes, matmuls no), no CUDA graphs.
Prints one JSON line per model with examples/s.

    python3 bench/torch_gpu.py --steps 300
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.hidden = nn.Linear(784, hidden)
        self.out = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.out(torch.sigmoid(self.hidden(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(7 * 7 * 64, 1024)
        self.fc2 = nn.Linear(1024, 10)

    def forward(self, x):
        x = x.view(-1, 1, 28, 28)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.dropout(x, 0.5, self.training)
        return self.fc2(x)


def bench(name, model, batch, steps, warmup, dev):
    model = model.to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.rand(batch, 784)
    y = torch.randint(0, 10, (batch,))

    def step():
        xb, yb = x.to(dev), y.to(dev)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    secs = time.perf_counter() - start
    return {"framework": "pytorch", "model": name, "batch": batch, "steps": steps,
            "examples_per_second": batch * steps / secs, "ms_per_step": 1000 * secs / steps,
            "gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--models", default="mlp,mlp4096,cnn")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    cases = {"mlp": (lambda: MLP(100), 100), "mlp4096": (lambda: MLP(4096), 1024), "cnn": (CNN, 256)}
    for name in args.models.split(","):
        make, batch = cases[name]
        steps = args.steps if name != "cnn" else max(20, args.steps // 5)
        print(json.dumps(bench(name, make(), batch, steps, args.warmup, dev)), flush=True)


if __name__ == "__main__":
    main()
