#!/usr/bin/python3
"""The PyTorch baseline of docs/BENCHMARKS.md "Sparse models".

The same wide-and-deep model as `distflow train --model widedeep`, in one
process: a wide part (nn.EmbeddingBag(sparse=True) of width 1 summing the
26 ids' weights, plus a linear layer of the 13 dense features), a deep part
(nn.Embedding(sparse=True) of width DIM, concatenated with the dense
features, MLP 64-32-1), trained with Adagrad (which takes sparse gradients)
on a click log drawn like data.SyntheticClickLog: ids Zipf(1.1) over a
random permutation of each feature's VOCAB ids, labels from a random
logistic model. It prints examples/s and the process's peak RSS.

Usage: sparse_torch.py VOCAB DIM STEPS BATCH [THREADS] [adagrad|sparseadam]
(sparseadam: SparseAdam for the two tables, Adam for the rest, lr 0.001.)
"""
import resource
import sys
import time

import numpy as np
import torch
from torch import nn

vocab, dim, steps, batch = (int(a) for a in sys.argv[1:5])
threads = int(sys.argv[5]) if len(sys.argv) > 5 else 2
optname = sys.argv[6] if len(sys.argv) > 6 else "adagrad"
torch.set_num_threads(threads)
torch.manual_seed(1)
rng = np.random.default_rng(1)
F, D = 26, 13
rows = F * vocab

# Zipf(1.1) ranks over each feature's vocabulary, by inverse CDF.
ranks = np.arange(1, vocab + 1, dtype=np.float64)
cdf = np.cumsum(ranks ** -1.1)
cdf /= cdf[-1]
perm = np.stack([f * vocab + rng.permutation(vocab) for f in range(F)])
n = min(steps * batch, 2_000_000)
cat = np.empty((n, F), dtype=np.int64)
for f in range(F):
    cat[:, f] = perm[f][np.searchsorted(cdf, rng.random(n))]
dense = rng.normal(size=(n, D)).astype(np.float32)
w = rng.normal(scale=0.35, size=rows)
logit = -1.2 + w[cat].sum(axis=1) + dense @ rng.normal(scale=0.3, size=D)
labels = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
cat_t, dense_t, labels_t = torch.from_numpy(cat), torch.from_numpy(dense), torch.from_numpy(labels)


class WideDeep(nn.Module):
    def __init__(self):
        super().__init__()
        self.wide = nn.EmbeddingBag(rows, 1, mode="sum", sparse=True)
        nn.init.zeros_(self.wide.weight)
        self.wide_dense = nn.Linear(D, 1)
        self.deep = nn.Embedding(rows, dim, sparse=True)
        nn.init.uniform_(self.deep.weight, -0.05, 0.05)
        self.mlp = nn.Sequential(nn.Linear(F * dim + D, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, c, x):
        wide = self.wide(c) + self.wide_dense(x)
        deep = self.mlp(torch.cat([self.deep(c).reshape(c.shape[0], -1), x], dim=1))
        return (wide + deep).squeeze(1)


model = WideDeep()
if optname == "sparseadam":
    sparse = [model.wide.weight, model.deep.weight]
    dense_params = [p for p in model.parameters() if all(p is not q for q in sparse)]
    opts = [torch.optim.SparseAdam(sparse, lr=0.001), torch.optim.Adam(dense_params, lr=0.001)]
else:
    opts = [torch.optim.Adagrad(model.parameters(), lr=1.0, initial_accumulator_value=0.1)]
loss_fn = nn.BCEWithLogitsLoss()
start = None
for step in range(steps):
    if step == 10:  # after warm-up
        start = time.perf_counter()
    lo = (step * batch) % (n - batch)
    for opt in opts:
        opt.zero_grad()
    loss = loss_fn(model(cat_t[lo:lo + batch], dense_t[lo:lo + batch]), labels_t[lo:lo + batch])
    loss.backward()
    for opt in opts:
        opt.step()
elapsed = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"torch {torch.__version__} ({optname}): rows {rows} x {dim}, batch {batch}, {steps - 10} steps in {elapsed:.1f} s: "
      f"{(steps - 10) * batch / elapsed:.0f} examples/s, loss {loss.item():.4f}, peak RSS {rss:.0f} MiB, {threads} threads")
